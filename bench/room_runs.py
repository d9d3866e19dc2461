"""S14, the waiting room (issue 33), flashsale only, in four parts of one invocation:

  S14-micro    build/bench/flashsale-room-micro --buyers JOINS: the room's pure costs in one
               process (a join, the draw, the memory of its arrays, a token minted and verified)
  S14-room     JOINS buyers (100,000; --quick 10,000) join one SKU's room through the broker
               (`flashsale load --join`) before its opening; the draw at the opening; then
               admission at RATE a second (JOINS / 5 s: every buyer admitted in 5 s of the log
               clock). Measured: joins/s (from the publish to the last join row stored), the
               worker's RSS before the joins, after them and after the draw, the draw's batch
               (the worker's log line "room ROOM: drawn ..."), admissions per second of the
               log clock (the slots) and per second of the broker's stamps of the `admission`
               results (flashsale-echo --dump), and how late a result's stamp is after its
               slot. The audit (INV-9) and its replay close it.
  S14-worker   S1's sale (S1's buyers and stock) published by `flashsale load`, once plain and
               once behind a waiting room with every buy carrying its buyer's token (`load
               --token`, minted before the first publish), alternated (plain, tokens, plain,
               tokens); intents/s by `flashsale timing` (first publish to last answer, the
               broker's clock); the medians and their ratio: what verifying a token costs the
               worker per buy
  S14-gateway  S8's run (S1's sale through flashsale-gateway, each buyer POSTing and
               long-polling) plain and with tokens (flashsale-httpload --token-keys): the
               gateway checks each token at the edge and the worker again; buyers/s and the
               ratio

Every run is a fresh database and topics with one partition, the key ring (two keys, one
signing) in .local/bench/s14-keys (0600) named by the run's admission.keys.
"""

import json
import os
import secrets
import statistics
import time

import gateway_runs
import proc
import runs
from rows import awk_num, commify, field, parse_kv

DRAW_SEED = "s14-seed-5e0c2b7f9a1d4c8e6b3f0a2d7c9e1b4f"
ADMIT_SECONDS = 5       # every buyer admitted within this much of the log clock
OPEN_AFTER_MS = {False: 30000, True: 10000}  # the opening, after the sale is opened
PAIRS = 2
ADMIT_RATE_MAX = 1000000  # FS_ADMIT_RATE_MAX (src/core/record.h)
TIME_LIMIT = 300
MICRO = "build/bench/flashsale-room-micro"
ECHO = "build/bench/flashsale-echo"


def _keys(b):
    """The key ring file (0600), written afresh: two keys, the second signing."""
    path = os.path.abspath(b.path("s14-keys"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# scripts/bench S14\nk-old %s\nk-new %s\nsign k-new\n" % (
            secrets.token_hex(32), secrets.token_hex(32)))
    return path


def _run(b, log, name, keys):
    """A fresh run of one partition whose configuration names the key ring."""
    run = proc.Run(log, name, 1)
    with open(run.conf, "a") as f:
        f.write("admission.keys = %s\n" % keys)
    return run


def _count(run, query):
    try:
        return int(runs._psql_value(run.pg, query))
    except ValueError:
        return -1


def _wait(cond, seconds, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def _pct(values, p):
    """The p-th percentile (nearest rank) of VALUES, sorted here; 0 for none."""
    if not values:
        return 0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(len(v) * p / 100.0 + 0.999999) - 1))]


def micro(b):
    """S14-micro: the room's pure costs (flashsale-room-micro)."""
    log = b.log("S14-micro.log")
    rc, out = log.run([MICRO, "--buyers", str(b.s14_joins)], out="capture", timeout=TIME_LIMIT)
    log.echo(out)
    log.close()
    num = lambda text, after: (text.split(after, 1)[1].split()[0]  # noqa: E731
                               if after in text else "")
    lines = {ln.split(":", 1)[0]: ln for ln in out.split("\n") if ":" in ln}
    row = {"join_us": num(lines.get("joins", ""), "ms ("),
           "draw_ms": num(lines.get("draw", ""), "ordered in "),
           "memory_mb": num(lines.get("memory", ""), "memory: "),
           "mint_us": num(lines.get("tokens", ""), "mint "),
           "verify_us": num(lines.get("tokens", ""), "verify ")}
    ok = rc == 0 and all(row.values())
    b.add(parse_kv("scenario=S14-micro kind=flashsale approach=room-micro buyers=%d "
                   "check=%s" % (b.s14_joins, "ok" if ok else "error")) | row)
    if not ok:
        b.failed += 1
        b.progress("S14", "room-micro", "FAILED (log %s)" % log.path)
        return
    b.progress("S14", "room-micro", "%s buyers: a join %s us, the draw %s ms, %s MB; a token "
               "minted in %s us, verified in %s us" % (
                   commify(str(b.s14_joins)), row["join_us"], row["draw_ms"],
                   row["memory_mb"], row["mint_us"], row["verify_us"]))


def _draw_line(path):
    """The worker's "room ROOM: drawn" line: (buyers in the draw, the batch's ms) or None."""
    for line in proc.file_lines(path, "room ROOM: drawn"):
        try:
            buyers = int(line.split(", ")[1].split()[0])
            ms = float(line.split("decisions took ")[1].split()[0])
            return buyers, ms
        except (IndexError, ValueError):
            pass
    return None


def _stamps(b, run, log, want):
    """The admission results' (broker stamp, slot) pairs, read until WANT are there."""
    found = []
    for _ in range(30):
        rc, out = log.run([ECHO, "-c", run.conf, "--dump", '"type":"admission"'],
                          out="capture", env=proc.run_env(), timeout=120)
        found = []
        for line in out.split("\n"):
            ts, _, value = line.partition(" ")
            try:
                found.append((int(ts), int(json.loads(value)["not_before"])))
            except (ValueError, KeyError):
                pass
        if rc == 0 and len(found) >= want:
            break
        time.sleep(1)
    return found


def room(b):
    """S14-room: the joins, the draw, the admissions."""
    joins, rate = b.s14_joins, b.s14_joins // ADMIT_SECONDS
    log = b.log("S14-room.log")
    wlog = b.path("S14-room-worker.log")
    run = _run(b, log, "bench-s14", _keys(b))
    ok = run.rc == 0
    worker = run.start_worker(wlog)
    opens = proc.now_ms() + OPEN_AFTER_MS[b.quick]
    ok = run.fs_ok("sale", "open", "ROOM", "--stock", str(b.s1_stock), "--per-buyer", "1",
                   "--hold", "600", "--opens-at", str(opens), "--admission-rate", str(rate),
                   "--token-seconds", "600", "--draw", "random", "--draw-seed", DRAW_SEED,
                   "--wait", "60") and ok
    proc.settle()
    rss0 = runs._vmrss_kb(worker.pid)
    t0 = time.time()
    ok = run.fs_ok("load", "ROOM", "--buyers", str(joins), "--join", "--buyer-prefix",
                   "s14") and ok
    joined = ok and _wait(lambda: _count(run, "SELECT count(*) FROM room_joins") >= joins,
                          (opens - proc.now_ms()) / 1000.0)
    t1 = time.time()
    rss1 = runs._vmrss_kb(worker.pid)
    early = joined and proc.now_ms() < opens
    drawn = early and _wait(lambda: _draw_line(wlog) is not None,
                            (opens - proc.now_ms()) / 1000.0 + 30, 0.02)
    rss2 = runs._vmrss_kb(worker.pid)
    draw = _draw_line(wlog) or (0, 0.0)
    q = "SELECT count(admitted_ms) FROM room_joins"
    admitted = drawn and _wait(lambda: _count(run, q) >= joins, ADMIT_SECONDS + 60, 0.2)
    slots = [int(x) for x in runs._psql_value(
        run.pg, "SELECT admitted_ms FROM room_joins ORDER BY admitted_ms").split()
        if x.lstrip("-").isdigit()]
    stamps = _stamps(b, run, log, joins) if admitted else []
    audit = run.audit(b.path("S14-room-audit.txt"))
    proc.stop(worker)
    log.close()
    # The log clock: the slots per second from the opening (exactly RATE each, the last
    # second the rest), the first at the opening.
    per_log = {}
    for s in slots:
        per_log[(s - opens) // 1000] = per_log.get((s - opens) // 1000, 0) + 1
    # The broker's clock: the results' stamps per second from the first one; the full seconds
    # (the last one is partial).
    per_stamp = {}
    first = min((t for t, _ in stamps), default=0)
    for t, _ in stamps:
        per_stamp[(t - first) // 1000] = per_stamp.get((t - first) // 1000, 0) + 1
    full = [per_stamp[k] for k in sorted(per_stamp)[:-1]] or list(per_stamp.values())
    late = [t - s for t, s in stamps]
    problems = []
    if not ok or not joined:
        problems.append("joins")
    elif not early:
        problems.append("joined_after_opening")
    elif not drawn or draw[0] != joins:
        problems.append("draw_%d" % draw[0])
    elif not admitted or len(slots) != joins:
        problems.append("admitted_%d" % len(slots))
    elif len(stamps) != joins:
        problems.append("results_%d" % len(stamps))
    if slots and (slots[0] != opens or max(per_log.values()) > rate):
        problems.append("rate")
    if audit != "ok":
        problems.append("audit")
    check = ",".join(problems) or "ok"
    row = parse_kv(
        "scenario=S14-room kind=flashsale approach=flashsale-room partitions=1 buyers=%d "
        "stock=%d rate=%d seconds=%.3f joins_per_s=%.0f draw_buyers=%d draw_batch_ms=%.1f "
        "rss_kb=%d rss_joined_kb=%d rss_drawn_kb=%d log_per_s_max=%d first_slot_ms=%d "
        "stamp_per_s_min=%d stamp_per_s_median=%d stamp_per_s_max=%d late_p50_ms=%d "
        "late_p99_ms=%d late_max_ms=%d admitted=%d results=%d check=%s" % (
            joins, b.s1_stock, rate, t1 - t0, joins / (t1 - t0) if t1 > t0 else 0, draw[0],
            draw[1], rss0, rss1, rss2, max(per_log.values(), default=0),
            (slots[0] - opens) if slots else -1, min(full, default=0),
            int(statistics.median(full)) if full else 0, max(full, default=0),
            _pct(late, 50), _pct(late, 99), max(late, default=0), len(slots), len(stamps),
            check))
    b.add(row)
    if check != "ok":
        b.failed += 1
    b.progress("S14", "flashsale-room", "%s joins at %s/s; the draw's batch %.1f ms; RSS +%.1f "
               "MB joined, +%.1f MB drawn; admitted %s/s (log clock, max %s); broker stamps "
               "%s-%s/s, late p50/p99 %s/%s ms  check=%s" % (
                   commify(str(joins)), commify(row["joins_per_s"]), draw[1],
                   (rss1 - rss0) / 1024.0, (rss2 - rss0) / 1024.0, commify(str(rate)),
                   commify(row["log_per_s_max"]), commify(row["stamp_per_s_min"]),
                   commify(row["stamp_per_s_max"]), row["late_p50_ms"], row["late_p99_ms"],
                   check))


def _admit_all(run, buyers, prefix):
    """Behind a room: BUYERS buyers (PREFIX-0 ..) join and are admitted (at the highest rate,
    in log order) before their buys, as the audit's INV-9 requires of every held buy. True
    once every one is admitted."""
    ok = run.fs_ok("load", "SKU1", "--buyers", str(buyers), "--join", "--buyer-prefix", prefix)
    q = "SELECT count(admitted_ms) FROM room_joins"
    return ok and _wait(lambda: _count(run, q) >= buyers, TIME_LIMIT, 0.1)


def _open(run, b, tokens):
    """SKU1 with S1's stock; with tokens behind a room that admits every buyer at once (fifo,
    the highest rate), the sale record answered."""
    room = (["--admission-rate", str(ADMIT_RATE_MAX), "--token-seconds", "600", "--draw",
             "fifo"] if tokens else [])
    return run.rc == 0 and run.fs_ok("sale", "open", "SKU1", "--stock", str(b.s1_stock), *room)


def _sale_problems(b, run, audit_path):
    """What S1's sale on RUN got wrong, its worker still running: SKU1 not sold out exactly,
    a buy refused for its token, the audit."""
    problems = []
    refused = _count(run, "SELECT count(*) FROM decisions WHERE reason LIKE '%token%'")
    sold, left = run.summary_sums(["SKU1"])
    if awk_num(sold) != b.s1_stock or awk_num(left) != 0:
        problems.append("sold_%s_left_%s" % (sold, left))
    if refused != 0:
        problems.append("token_refusals_%d" % refused)
    if run.audit(audit_path) != "ok":
        problems.append("audit")
    return problems


def _worker_run(b, log, keys, tokens, i):
    """One S1-sized sale, plain or behind a room with every buy's token: (per_s, problems).
    Behind the room, the buyers join and are admitted first, untimed; the worker's tokens
    are not taken from the results: `load --token` mints the same claims with the same key
    ring (the audit's INV-9 checks the admissions, not the tokens' text)."""
    name = "tokens" if tokens else "plain"
    run = _run(b, log, "bench-s14-" + name, keys)
    ok = _open(run, b, tokens)
    worker = run.start_worker(b.path("S14-worker-%s-%d.log" % (name, i)))
    ok = runs.ready(run) and ok
    prefix = "s14w%d" % i
    if tokens:
        ok = _admit_all(run, b.s1_buyers, prefix) and ok
    proc.settle()
    start = proc.now_ms()
    ok = run.fs_ok("load", "SKU1", "--buyers", str(b.s1_buyers), "--seed", str(1401 + i),
                   "--buyer-prefix", prefix, *(["--token"] if tokens else [])) and ok
    ok = ok and _wait(lambda: _count(run, "SELECT count(*) FROM decisions WHERE "
                                     "intent_id IS NOT NULL") >= b.s1_buyers, TIME_LIMIT, 0.05)
    rc, timing = run.fs("timing", "--since", str(start), "--timeout", "120", out="capture")
    problems = ([] if ok and rc == 0 else ["run"]) + _sale_problems(
        b, run, b.path("S14-worker-%s-%d-audit.txt" % (name, i)))
    proc.stop(worker)
    return field(timing, "per_s"), problems


def worker_pairs(b):
    """S14-worker: plain and tokens alternated; one row each with the median."""
    log = b.log("S14-worker.log")
    keys = _keys(b)
    found = {False: [], True: []}
    bad = {False: [], True: []}
    for i in range(PAIRS):
        for tokens in (False, True):
            rate, problems = _worker_run(b, log, keys, tokens, i)
            found[tokens].append(rate)
            bad[tokens] += problems
    log.close()
    med = {}
    for tokens in (False, True):
        rates = [awk_num(r) for r in found[tokens] if r]
        med[tokens] = statistics.median(rates) if len(rates) == PAIRS else 0
        check = ",".join(sorted(set(bad[tokens]))) or ("ok" if med[tokens] else "error")
        b.add(parse_kv("scenario=S14-worker kind=flashsale approach=%s partitions=1 buyers=%d "
                       "stock=%d runs=%d attempts_per_s=%.0f rates=%s check=%s" % (
                           "flashsale-tokens" if tokens else "flashsale-plain", b.s1_buyers,
                           b.s1_stock, PAIRS, med[tokens],
                           ",".join(r or "0" for r in found[tokens]), check)))
        if check != "ok":
            b.failed += 1
    b.progress("S14", "worker", "plain %s intents/s, with tokens %s (medians of %s, %s): "
               "%.2fx" % (commify("%.0f" % med[False]), commify("%.0f" % med[True]),
                          ",".join(found[False]), ",".join(found[True]),
                          med[True] / med[False] if med[False] else 0))


def _gateway_run(b, log, keys, tokens):
    name = "tokens" if tokens else "plain"
    run = _run(b, log, "bench-s14-gw-" + name, keys)
    ok = _open(run, b, tokens)
    worker = run.start_worker(b.path("S14-gateway-%s-worker.log" % name))
    ok = runs.ready(run) and ok
    if tokens:  # flashsale-httpload's buyers are hb-0 .. hb-(N-1)
        ok = _admit_all(run, b.s1_buyers, "hb") and ok
    port = gateway_runs._free_port()
    gw = gateway_runs._start_gateway(run, b.path("S14-gateway-%s.log" % name), port)
    if gw is None:
        proc.stop(worker)
        return "", ["gateway"]
    proc.settle()
    line, rc = gateway_runs._load(log, port, "SKU1", b.s1_buyers, "buy-wait", 1451,
                                  extra=["--token-keys", keys] if tokens else [])
    run.fs_ok("wait", "--timeout", "120", "--quiet")
    problems = ([] if ok and line and rc == 0 else ["run"]) + _sale_problems(
        b, run, b.path("S14-gateway-%s-audit.txt" % name))
    if field(line, "other") not in ("0", ""):  # an answer neither held nor sold out
        problems.append("other_%s" % field(line, "other"))
    proc.stop(gw, worker)
    return line, problems


def gateway_pair(b):
    """S14-gateway: S8's run plain, then with tokens; a row each."""
    log = b.log("S14-gateway.log")
    keys = _keys(b)
    rates = {}
    for tokens in (False, True):
        line, problems = _gateway_run(b, log, keys, tokens)
        check = ",".join(problems) or "ok"
        row = gateway_runs._row("S14-gateway", "http",
                                "gateway-tokens" if tokens else "gateway-plain", line, check)
        b.add(row)
        rates[tokens] = awk_num(field(line, "per_s"))
        if check != "ok":
            b.failed += 1
    log.close()
    b.progress("S14", "gateway", "plain %s buyers/s, with tokens %s: %.2fx" % (
        commify("%.0f" % rates[False]), commify("%.0f" % rates[True]),
        rates[True] / rates[False] if rates[False] else 0))


def run_all(b):
    micro(b)
    room(b)
    worker_pairs(b)
    gateway_pair(b)


RUNS = 1 + 1 + 2 * PAIRS + 2
