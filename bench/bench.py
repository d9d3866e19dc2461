#!/usr/bin/env python3
"""The benchmark of issue 5: flashsale next to the approaches teams use today, in one run, on this
machine, against the same local PostgreSQL.

  scripts/bench [--quick] [--clients N] [--only S1..S14] [--no-flashsale] [--s5-seconds N]
                [--out DIR]
  scripts/bench report [--rows FILE] [--out DIR] [--check]

Installs what is missing (scripts/setup), starts the local services when they are down
(scripts/services up), builds, then runs every scenario: the peers (build/bench/flashsale-peers,
one approach per run, 32 clients each) and the flashsale worker's own runs (bench/runs.py and
bench/open_loop.py). Prints one line per run, and writes docs/BENCHMARKS.md (a markdown
table, every figure also as a ratio against the best correct per-request peer of this
invocation), docs/benchmarks.png and docs/latency-curve.png (gnuplot) and the rows they come
from, docs/benchmarks.jsonl; --out DIR writes those four into DIR instead (the test suite's
smoke run does, so that it leaves the committed ones alone). `scripts/bench report` writes the
page and the charts again
from a rows file, running nothing (scripts/bench report --help).

  S1 hot SKU       100,000 buyers, 500 units      (--quick: 10,000 buyers)
  S2 all winners    20,000 buyers, 20,000 units   (--quick: 2,000 buyers)
  S3 1,000,000 intents over 20 SKUs, 80% on 2, 4 partitions, 2 workers, memory over time
                                                  (--quick: 100,000)     flashsale only
  S4 500,000 intents after the sell-out (--quick: 50,000)            flashsale only
  S5 open loop at half of S1's rate for 15 s (--quick: 5 s; --s5-seconds N): latency
     after an untimed first second (a fresh worker warms up), from the broker's append
     and from the publish call                                       flashsale only
     S5's floors: the same open loop answered by build/bench/flashsale-echo, which decides
     and stores nothing (the broker's, the clients' and the machine's part of the latency),
     then again with each batch written to a file and fdatasync'd first (the flush's part);
     then the disk alone: an 8 KiB write and fdatasync every 5 ms for as long as S5 is
     timed, the services up and idle, nothing else running
  S6 an S1-sized run, then its log replayed into an empty database:
     the replay's rate against the fresh one                          flashsale only
  S7 a web tier with another partitioner: S1's sale on a 4-partition topic, published once
     by the rule (murmur2) and once with librdkafka's default (CRC32), which puts every buy
     on a partition the rule does not name: each is forwarded. The rate from the first
     publish to the last answer, and the latency from the publish call, against the routed
     run of the same invocation                                    flashsale only
  S8 HTTP end to end: S1's sale through flashsale-gateway, each buyer POSTing its buy and
     long-polling its result (build/bench/flashsale-httpload: libcurl, 64 connections);
     buyers/s from the first request to the last result, against the HTTP floor (the same
     buyers against build/bench/flashsale-http-floor: libmicrohttpd answering constants) and
     against S1
  S9 after the sell-out: as many buys again, POST only, answered by the edge flag, against
     the POST-only floor; nothing may be published
  S10 10,000 long-polls waiting at once (--quick: 2,000): the gateway's memory per waiting
     connection; every one answered once a worker runs                flashsale only
  S11 what the metrics cost: S1's flashsale run with the worker's metrics endpoint on and
     scraped every 100 ms, against the same run with it off, alternated (off, scraped, off,
     scraped); the medians and their ratio                           flashsale only
  S12 carts (issue 31): the seed's table (8 customers x 15 carts of 3 lines over 8 SKUs),
     then 100,000 carts of 3 lines over 20 SKUs of 2,000 units (--quick: 10,000 carts, 200
     units), each by the lock-based peers cart-for-update (cart order) and cart-sorted, and
     by flashsale on 1 partition (one step) and on 4 (the reservation protocol); carts/s,
     deadlocks, units, against cart-sorted (bench/cart_runs.py); not run with --no-flashsale
  S13 the latency curve (issue 32): the worker's sustained capacity (an open loop whose rate
     goes up while the last answer comes within 250 ms of the last publish; 5 s probes,
     --quick: 2 s), then p50/p99/p99.9 at 10, 25, 50, 75 and 90% of it, each beside S5's
     plain and durable floors at the same rate (10 s each; --quick: 3 s, 10/50/90%); drawn into
     latency-curve.png beside the report (bench/curve_runs.py); and where each point's
     batches spent their time, step by step (the worker's trace.batches read by
     bench/batch_account.py; the WAL flushes from pg_stat_wal)             flashsale only
  S14 the waiting room (issue 33): 100,000 joins (--quick: 10,000) before the opening through
     the broker, the draw (its batch in the worker, the worker's memory), admission at a set
     rate per second of the log clock and of the broker's stamps of the results; what a
     token costs a buy in the worker (S1's sale with and without tokens, alternated) and
     through the gateway (S8's run with and without); and the room's pure costs
     (flashsale-room-micro) (bench/room_runs.py)                     flashsale only
  (S5, S8 and S13 use this invocation's S1 rate; --only S5, S8 and S13 run S1's flashsale run
  first; --only S8, S9 or S10 runs the three and the floor. Issue 29 named them S7-S9.)
"""
# Before the first flashsale run, one unmeasured S1-sized sale warms the broker up (its JIT),
# and a full collection empties its heap of what earlier runs left there. Before every measured
# run, sync(1) writes back what the runs before it left dirty in the page cache, so that no run
# measures the write-back of another; and a flashsale run starts only once the broker has
# removed the files of the topics it deleted (scripts/lib/run.sh, item 24).
#
# The peers use their own database, flashsale_bench (dropped and created again on every run),
# and the Redis gate its own redis-server on 127.0.0.1:$FLASHSALE_BENCH_REDIS_PORT (56379),
# started and stopped here. Raw rows: .local/bench/rows.jsonl (rows.py); logs: .local/bench/.
# Takes about 30 minutes on a 2-core machine (--quick: about 8; measured 1,949 s, 1,743 s and
# 468 s on 2026-12-05, 370-410 s and 105 s on 2026-12-04 before S12 and S13: S12's lock-based peers,
# which run to their time limit, and S13's 22 open loops are most of the growth).
#
# scripts/bench (bash) only finds python3 and runs this file; this file parses the flags, sets
# up, runs (runs.py, open_loop.py) and writes the report (report.py).

import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import cart_runs  # noqa: E402 (after the line above)
import curve_runs  # noqa: E402
import gateway_runs  # noqa: E402
import machine  # noqa: E402
import metrics_runs  # noqa: E402
import open_loop  # noqa: E402
import proc  # noqa: E402
import report  # noqa: E402
import room_runs  # noqa: E402
import rows as rowsfile  # noqa: E402
import runs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = ".local/bench"
PEERS = "build/bench/flashsale-peers"
BENCH_DB = "flashsale_bench"
# The optimistic peer's bound: re-reads per request before it gives up.
MAX_RETRIES = 100
APPROACHES = ["read-then-write", "conditional-update", "idempotent-reserve", "for-update",
              "optimistic"]
SIZES = {  # (default, --quick)
    "s1_buyers": (100000, 10000), "s1_stock": (500, 500), "s2_buyers": (20000, 2000),
    "s2_stock": (20000, 2000), "time_limit": (90, 30), "s3_intents": (1000000, 100000),
    "s3_stock": (10000, 1000), "s4_intents": (500000, 50000), "s5_seconds": (15, 5),
    "s10_waiting": (10000, 2000), "s12_carts": (100000, 10000), "s12_stock": (2000, 200),
    "s14_joins": (100000, 10000),
}


def say(text):
    print("bench: %s" % text, flush=True)


def die(text):
    print("bench: error: %s" % text, file=sys.stderr, flush=True)
    sys.exit(1)


def usage_error(text):
    print("bench: %s" % text, file=sys.stderr, flush=True)
    sys.exit(2)


def parse_flags(argv):
    """The flags, in the shell version's order of checks and with its messages and codes."""
    opts = {"quick": False, "clients": "32", "only": "", "flashsale": True, "s5_seconds": "",
            "out": "docs", "out_given": False}
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--quick":
            opts["quick"] = True
        elif a == "--no-flashsale":
            opts["flashsale"] = False
        elif a in ("--clients", "--only", "--s5-seconds", "--out"):
            if not args:
                sys.exit(1)  # the shell version's `shift 2` past the end stopped it here
            key = a[2:].replace("-", "_")
            opts[key] = args.pop(0)
            opts["out_given"] = opts["out_given"] or a == "--out"
        elif a in ("-h", "--help"):
            print(__doc__.strip("\n"))
            sys.exit(0)
        else:
            usage_error("unknown option '%s' (see --help)" % a)
    c = opts["clients"]
    if not c or not c.isdigit() or not c.isascii():
        usage_error("--clients takes an integer")
    if int(c) < 1 or int(c) > 256:
        usage_error("--clients must be in 1..256")
    if not re.fullmatch(r"|[1-9]|[1-9][0-9]|[1-5][0-9][0-9]|600", opts["s5_seconds"]):
        usage_error("--s5-seconds takes 1..600")
    if not re.fullmatch(r"|S[1-9]|S1[0-4]", opts["only"]):
        usage_error("--only takes S1 .. S14")
    if not opts["flashsale"] and opts["only"] not in ("", "S1", "S2"):
        usage_error("S3 .. S14 are flashsale runs: --no-flashsale leaves nothing to run")
    return opts


def new_bench(opts, out_dir):
    """The invocation's settings: sizes by --quick and --s5-seconds, the peers' bounds."""
    pick = 1 if opts["quick"] else 0
    sizes = {k: v[pick] for k, v in SIZES.items()}
    if opts["s5_seconds"]:
        sizes["s5_seconds"] = int(opts["s5_seconds"])
    return runs.Bench(
        quick=opts["quick"], clients=opts["clients"], only=opts["only"],
        with_flashsale=opts["flashsale"], out_dir=out_dir, out_given=opts["out_given"],
        bench_dir=BENCH_DIR, peers=PEERS, max_retries=MAX_RETRIES,
        redis_port=os.environ.get("FLASHSALE_BENCH_REDIS_PORT") or "56379",
        approaches=list(APPROACHES), redis=None, **sizes)


def out_dir_of(opts, caller_dir):
    """--out DIR (relative to where the program was started), created; exit 2 if it cannot be."""
    out = opts["out"]
    if not out:
        usage_error("--out takes a directory")
    if opts["out_given"] and not out.startswith("/"):
        out = os.path.join(caller_dir, out)
    if subprocess.run(["mkdir", "-p", out]).returncode != 0:  # mkdir's own message
        sys.exit(2)
    return out


def tail_to_stderr(path, n):
    with open(path, errors="replace") as f:
        sys.stderr.write("".join(f.readlines()[-n:]))


def source_env():
    """`. .local/env`: the variables it exports, into our environment (and the children's)."""
    before = subprocess.run(["bash", "-c", "env -0"], stdout=subprocess.PIPE).stdout
    p = subprocess.run(["bash", "-c", ". ./.local/env >/dev/null && env -0"],
                       stdout=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(1)  # bash said why
    old = dict(kv.split("=", 1) for kv in before.decode().split("\0") if "=" in kv)
    for kv in p.stdout.decode().split("\0"):
        if "=" in kv:
            k, v = kv.split("=", 1)
            if old.get(k) != v:
                os.environ[k] = v


def set_up(b):
    """Packages, services, build, the bench database."""
    os.makedirs(b.bench_dir, exist_ok=True)
    log = os.path.join(b.bench_dir, "setup.log")
    say("set-up (scripts/setup, log %s)" % log)
    with open(log, "w") as out:
        rc = subprocess.run(["scripts/setup"], stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail_to_stderr(log, 20)
        die("scripts/setup failed")
    if subprocess.run(["scripts/services", "status"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        say("services are down: scripts/services up")
        rc = subprocess.run(["scripts/services", "up"]).returncode
        if rc != 0:
            sys.exit(rc)
    source_env()
    say("build (ninja -C build)")
    if not os.path.isfile("build/build.ninja"):
        rc = subprocess.run(["meson", "setup", "build", "--buildtype=release"],
                            stdout=subprocess.DEVNULL).returncode
        if rc != 0:
            sys.exit(rc)
    log = os.path.join(b.bench_dir, "build.log")
    with open(log, "w") as out:
        rc = subprocess.run(["ninja", "-C", "build"], stdout=out,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail_to_stderr(log, 30)
        die("the build failed")
    if not os.access(b.peers, os.X_OK):
        die("%s was not built" % b.peers)
    # The peers make their own tables: they run as the admin role.
    b.bench_pg = proc.base_pg(proc.admin_pg()) + " dbname=" + BENCH_DB
    os.environ["FLASHSALE_BENCH_PG"] = b.bench_pg
    rc = subprocess.run(["psql", proc.admin_pg(), "-X", "-q", "-v",
                         "ON_ERROR_STOP=1", "-c", "DROP DATABASE IF EXISTS %s (FORCE)" % BENCH_DB,
                         "-c", "CREATE DATABASE " + BENCH_DB], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    if rc != 0:
        die("could not create the database " + BENCH_DB)


def _redis_answers(port):
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", port, "ping"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def redis_start(b):
    """Our own redis-server (no persistence, loopback only) when the peers have the gate."""
    listed = subprocess.run([b.peers, "--list"], stdout=subprocess.PIPE).stdout.decode()
    if "redis-gate" not in listed.split("\n"):
        say("redis-gate: flashsale-peers was built without hiredis (libhiredis-dev); skipped")
        return False
    if shutil.which("redis-server") is None:
        say("redis-gate: redis-server not found; skipped")
        return False
    if shutil.which("redis-cli") and _redis_answers(b.redis_port):
        say("redis-gate: 127.0.0.1:%s is taken by another server; skipped "
            "(set FLASHSALE_BENCH_REDIS_PORT)" % b.redis_port)
        return False
    here = os.path.join(ROOT, b.bench_dir)
    b.redis = subprocess.Popen(
        ["redis-server", "--port", b.redis_port, "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", here, "--logfile", os.path.join(here, "redis.log")],
        stdin=subprocess.DEVNULL)
    for _ in range(50):
        if shutil.which("redis-cli") and _redis_answers(b.redis_port):
            return True
        time.sleep(0.1)
    redis_stop(b)
    say("redis-gate: redis-server did not answer on 127.0.0.1:%s; skipped" % b.redis_port)
    return False


def redis_stop(b):
    if b.redis is not None:
        proc.stop(b.redis)
        b.redis = None


def plan(b):
    """The scenarios with peers, the flashsale-only runs, and the count of runs."""
    scenarios = [b.only] if b.only in ("S1", "S2") else (["S1", "S2"] if not b.only else [])
    alone = []
    if b.with_flashsale:
        if not b.only:
            alone = ["S3", "S4", "S5", "S6", "S7", "S8", "S11", "S12", "S13", "S14"]
        elif b.only in ("S5", "S13"):
            alone = ["S1", b.only]
        elif b.only in ("S8", "S9", "S10"):
            alone = ["S1", "S8"]
        elif b.only in ("S3", "S4", "S6", "S7", "S11", "S12", "S14"):
            alone = [b.only]
    per_scenario = len(b.approaches) + (1 if b.with_flashsale else 0)
    b.runs_total = per_scenario * len(scenarios) + len(alone)
    if "S5" in alone:
        b.runs_total += 3  # S5's floors, disk
    if "S8" in alone:
        b.runs_total += 4  # the two HTTP floors, S9, S10
    if "S11" in alone:
        b.runs_total += 1  # its two rows
    if "S12" in alone:
        b.runs_total += cart_runs.RUNS - 1  # two sizes, two peers and two flashsale runs each
    if "S14" in alone:
        b.runs_total += room_runs.RUNS - 1  # micro, room, the worker's pairs, the gateway's
    if "S13" in alone:
        b.runs_total += curve_runs.runs(b.quick) - 1  # the capacity; a worker, its account, two floors a point
    plus = " + flashsale" if b.with_flashsale else ""
    also = ("and flashsale alone in " + " ".join(alone)) if alone else ""
    say("%d runs: %d peers x %d scenario(s)%s %s, %s clients per peer, at most %d s per peer run"
        % (b.runs_total, len(b.approaches), len(scenarios), plus, also, b.clients, b.time_limit))
    return scenarios, alone


def scenario_rows(b, sc, buyers, stock):
    for ap in b.approaches:
        runs.run_peer(b, sc, ap, buyers, stock)
    if b.with_flashsale:
        {"S1": runs.flashsale_s1, "S2": runs.flashsale_s2}[sc](b)


def run_all(b, scenarios, alone):
    if b.with_flashsale:
        say("warm-up: one unmeasured %d-intent sale through the broker (log %s/warmup.log)"
            % (b.s1_buyers, b.bench_dir))
        runs.warmup(b)
    for sc in scenarios:
        sizes = {"S1": (b.s1_buyers, b.s1_stock), "S2": (b.s2_buyers, b.s2_stock)}[sc]
        scenario_rows(b, sc, *sizes)
    alone_runs = {
        "S1": [runs.flashsale_s1], "S3": [runs.flashsale_s3], "S4": [runs.flashsale_s4],
        "S5": [open_loop.flashsale_s5, lambda b: open_loop.s5_floor(b, "plain"),
               lambda b: open_loop.s5_floor(b, "durable"), open_loop.s5_disk],
        "S6": [runs.flashsale_s6], "S7": [runs.flashsale_s7], "S8": [gateway_runs.run_all],
        "S11": [metrics_runs.flashsale_s11], "S12": [cart_runs.run_all],
        "S13": [curve_runs.run_all], "S14": [room_runs.run_all],
    }
    for sc in alone:
        for run in alone_runs[sc]:
            run(b)


def header_of(b, argv, facts):
    """The rows file's header: the invocation, its sizes, the machine (machine.read)."""
    h = {"kind": "header", "mode": "--quick" if b.quick else "default", "args": list(argv),
         "date": "", "seconds": "", "commit": facts["commit"]}
    h.update({k: facts[k] for k in ("machine", "postgresql", "kafka", "redis")})
    h["redis"]["port"] = b.redis_port
    h["sizes"] = {
        "clients": b.clients, "time_limit_s": str(b.time_limit), "max_retries": str(b.max_retries),
        "s1_buyers": str(b.s1_buyers), "s1_stock": str(b.s1_stock),
        "s2_buyers": str(b.s2_buyers), "s2_stock": str(b.s2_stock),
        "s3_intents": str(b.s3_intents), "s3_stock": str(b.s3_stock),
        "s4_intents": str(b.s4_intents), "s5_seconds": str(b.s5_seconds),
        "s10_waiting": str(b.s10_waiting), "s12_carts": str(b.s12_carts),
        "s12_stock": str(b.s12_stock), "s14_joins": str(b.s14_joins),
        "s5_warm_s": str(open_loop.S5_WARM_S),
    }
    return h


def finish(b, header, t_start):
    """The end: Redis and the bench database gone, the header completed, the rows, the report,
    the chart and the rows beside them. Exits 1 if a run failed."""
    redis_stop(b)
    subprocess.run(["psql", proc.admin_pg(), "-X", "-q", "-c",
                    "DROP DATABASE IF EXISTS %s (FORCE)" % BENCH_DB],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    header["machine"]["load_end"] = machine.loadavg()
    t_total = int(time.time()) - t_start
    header["seconds"] = str(t_total)
    header["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows_path = os.path.join(b.bench_dir, "rows.jsonl")
    rowsfile.write(rows_path, header, b.rows)
    doc, _ = report.write(header, b.rows, b.out_dir, b.bench_dir)
    # The rows go with the report they gave, so that `scripts/bench report` gives it again.
    shutil.copyfile(rows_path, os.path.join(b.out_dir, "benchmarks.jsonl"))
    say("wrote %s and its charts in %d s" % (doc, t_total))
    if b.failed > 0:
        die("%d run(s) failed" % b.failed)


def main(argv):
    caller_dir = os.getcwd()  # --out DIR is relative to where the program was started
    os.chdir(ROOT)
    if argv[:1] == ["report"]:
        return report.main(argv[1:], ROOT, caller_dir)
    opts = parse_flags(argv)
    b = new_bench(opts, out_dir_of(opts, caller_dir))
    t_start = int(time.time())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        set_up(b)
        if redis_start(b):
            b.approaches.append("redis-gate")
        header = header_of(b, argv, machine.read(b.bench_pg))
        rows_path = os.path.join(b.bench_dir, "rows.jsonl")
        rowsfile.write(rows_path, header, [])  # an earlier run's rows are gone from here on

        def append_row():
            with open(rows_path, "a", encoding="utf-8") as f:
                f.write(rowsfile.dumps(b.rows[-1]) + "\n")
        b.on_row = append_row
        run_all(b, *plan(b))
        finish(b, header, t_start)
    except KeyboardInterrupt:
        return 130
    finally:
        redis_stop(b)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
