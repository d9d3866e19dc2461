"""The benchmark's runs, one function per run: the peers (build/bench/flashsale-peers, one
approach per run) and the flashsale worker's own runs S1, S2, S3, S4, S6 and S7 (S5 and its
floors are in open_loop.py). Each appends one row to bench.rows (rows.py says what a row holds)
and prints one progress line.

The flashsale runs are owned by the engineer working on the worker's speed (issue 5): replace
the scripts/demo calls with finer measurements when they exist. Runs of their own (not
scripts/demo) use a fresh database and topics (proc.Run: scripts/lib/run.sh), the workers
started here, the load from `flashsale load`, the end from `flashsale wait`, the figures from
`flashsale timing`, the verdict from `flashsale audit`.
"""

import os
import re
import subprocess
import sys
import threading
import time

import proc
from rows import awk_div, awk_num, awk_print_num, commify, field, flashsale_row, fnum, parse_kv

# The flashsale runs (scripts/demo) are bounded as a whole, set-up included.
FLASHSALE_TIME_LIMIT = 600


class Bench:
    """One invocation: its sizes and flags (bench.py fills them), the rows so far, the count of
    failed runs, and what later runs take from earlier ones (S1's rate for S5)."""

    def __init__(self, **settings):
        self.__dict__.update(settings)
        self.rows = []
        self.failed = 0
        self.run_no = 0
        self.runs_total = 0
        self.s1_rate = ""
        self.s5_rate = 0
        self.on_row = None  # called after each row (bench.py rewrites the rows file)

    def say(self, text):
        print("bench: %s" % text, flush=True)

    def progress(self, sc, name, text):
        self.run_no += 1
        print("[%2d/%d] %-3s %-19s %s" % (self.run_no, self.runs_total, sc, name, text), flush=True)

    def add(self, row):
        self.rows.append(row)
        if self.on_row:
            self.on_row()

    def log(self, name):
        return proc.Log(os.path.join(self.bench_dir, name))

    def path(self, name):
        return os.path.join(self.bench_dir, name)


def _tee(src, log_path):
    """Copies SRC (a pipe) to our stderr and to LOG_PATH (2> >(tee LOG >&2))."""
    with open(log_path, "wb") as log:
        while True:
            chunk = os.read(src.fileno(), 65536)
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()


def run_peer(b, sc, ap, buyers, stock, clients=None, extra=()):
    """One peer run: APPROACH for BUYERS buyers of STOCK units (CLIENTS: the invocation's unless
    given; EXTRA: more flags, the carts' --skus ...)."""
    log = b.path("peer-%s-%s.log" % (sc, ap))
    clients = clients or b.clients
    proc.settle()
    cmd = [b.peers, "--approach", ap, "--clients", clients, "--buyers", str(buyers),
           "--stock", str(stock), "--time-limit", str(b.time_limit), "--max-retries",
           str(b.max_retries), "--redis-port", b.redis_port] + list(extra)
    if sys.stdout.isatty():
        cmd.append("--progress")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tee = threading.Thread(target=_tee, args=(p.stderr, log))
    tee.start()
    line = p.stdout.read().decode("utf-8", "replace").rstrip("\n")
    rc = p.wait()
    tee.join()
    if (rc != 0 and rc != 3) or not line:
        b.progress(sc, ap, "FAILED (exit %d, log %s)" % (rc, log))
        b.add(parse_kv("scenario=%s kind=peer approach=%s clients=%s buyers=%s stock=%s "
                       "check=error" % (sc, ap, clients, buyers, stock)))
        b.failed += 1
        return
    if line.startswith("PEER "):
        line = line[len("PEER "):]
    b.add(parse_kv("scenario=%s kind=peer %s" % (sc, line)))
    f = lambda k: field(line, k)  # noqa: E731 (the shell version's `field "$line" KEY`)
    b.progress(sc, ap, "%7.1f s %9s attempts/s %8s winners/s  p99 %8.1f ms  %s" % (
        fnum(f("seconds")), commify(f("attempts_per_s")), commify(f("winners_per_s")),
        fnum(f("p99_ms")),
        "sold %s/%s  check=%s" % (commify(f("sold")), commify(str(
            stock * int(f("skus") or 1) if sc.startswith("S12") else stock)), f("check"))
        + ("  deadlocks %s" % f("deadlocks") if sc.startswith("S12") else "")))


def flashsale_failed(b, sc, buyers, stock, why):
    b.progress(sc, "flashsale", "FAILED (%s)" % why)
    b.add(parse_kv("scenario=%s kind=flashsale approach=flashsale buyers=%s stock=%s check=error"
                   % (sc, buyers, stock)))
    b.failed += 1


def flashsale_demo_row(b, sc, buyers, stock):
    """scripts/demo end to end: publish every intent, decide, record in Postgres, answer on the
    results topic; the rate and latencies are its `flashsale timing` figures."""
    log = b.log("flashsale-%s.log" % sc)
    proc.settle()
    rc, _ = log.run(["timeout", "--kill-after=10", str(FLASHSALE_TIME_LIMIT), "scripts/demo",
                     "--no-gateway",
                     "--buyers", str(buyers), "--stock", str(stock)])
    line, timing = log.last("RESULT "), log.last("TIMING ")
    log.close()
    if not line or not timing:
        flashsale_failed(b, sc, buyers, stock, "exit %d, log %s" % (rc, log.path))
        return
    b.add(flashsale_row(sc, buyers, stock, field(line, "sold"), field(line, "remaining"),
                        field(line, "audit"), rc, timing))
    if sc == "S1":
        b.s1_rate = field(timing, "per_s")
    b.progress(sc, "flashsale", "%7.1f s %9s intents/s  p99 %6s ms  (scripts/demo)  %s" % (
        fnum(field(timing, "seconds")), commify(field(timing, "per_s")), field(timing, "p99_ms"),
        "sold %s/%s  audit=%s" % (field(line, "sold"), commify(str(stock)), field(line, "audit"))))


def flashsale_s1(b):
    """S1 hot SKU: all buyers on one SKU that has far fewer units."""
    flashsale_demo_row(b, "S1", b.s1_buyers, b.s1_stock)


def flashsale_s2(b):
    """S2 all winners: stock >= demand; the rate is winners durably committed per second."""
    flashsale_demo_row(b, "S2", b.s2_buyers, b.s2_stock)


def warmup(b):
    """Warm-up, measured nowhere: one S1-sized sale through the broker before the first
    flashsale run. A broker just started compiles its hot paths (the JVM's JIT) during its first
    hundred thousand records: after a restart the first S1-sized runs gave 75,758-82,645
    intents/s and the next ones 109,649-117,096. A sale system is warm."""
    log = b.log("warmup.log")
    run = proc.Run(log, "bench-warmup", 1)
    worker = run.start_worker(b.path("warmup-worker.log"))
    ok = run.rc == 0
    ok = run.fs_ok("sale", "open", "WARM", "--stock", str(b.s1_stock)) and ok
    ok = run.fs_ok("load", "WARM", "--buyers", str(b.s1_buyers), "--seed", "1") and ok
    ok = run.fs_ok("wait", "--timeout", "300", "--quiet", out="log") and ok
    proc.stop(worker)
    log.close()
    if not ok:
        b.say("warm-up failed (log %s); measuring anyway" % log.path)
    broker_collect(b)


def broker_collect(b):
    """A full collection of the local broker's heap, while nothing is measured. A broker that
    has been up for long carries the garbage of its earlier runs in its old generation; once
    that passes G1's mark threshold, a mark cycle starts and its first collection after it
    paused the broker for 126 ms in the middle of an S5 run, after 45 minutes of runs. A bench
    run starts from the heap it would have after a restart, without losing the warm-up's
    compiled code. jcmd comes with the JDK (scripts/setup)."""
    try:
        with open(".local/run/kafka.pid") as f:
            pid = f.read().strip()
    except OSError:
        pid = ""
    if pid:
        try:
            done = subprocess.run(["jcmd", pid, "GC.class_histogram"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0
        except OSError:
            done = False
        if done:
            return
    b.say("could not collect the broker's heap (jcmd, pid '%s'); measuring anyway"
          % (pid or "none"))


def ready(run):
    """Ready: the workers joined, decided the sale records and answered them."""
    return run.fs_ok("timing", "--timeout", "120")


def s3_memory(samples):
    """S3's memory from its samples (RSS KiB sums, one a second): the sum of both workers' RSS
    at 25%, 50% and 100% of the run and at its peak. Warm-up is the first half (the
    per-partition dedupe caches fill, dedupe.cache.max entries each); flat = nothing in the
    second half above the half-way figure + 10%."""
    n = len(samples)
    r = lambda i: samples[i - 1] if 1 <= i <= n else 0.0  # noqa: E731 (awk's r[i], 1-based)
    q, h = max(n // 4, 1), max(n // 2, 1)
    peak = late = 0.0
    for i in range(1, n + 1):
        peak = max(peak, r(i))
        if i >= h:
            late = max(late, r(i))
    return ("rss_q1_mb=%.1f rss_warm_mb=%.1f rss_peak_mb=%.1f rss_end_mb=%.1f rss_flat=%s "
            "samples=%d" % (r(q) / 1024, r(h) / 1024, peak / 1024, r(n) / 1024,
                            "yes" if late <= r(h) * 1.10 else "no", n))


class RssSampler(threading.Thread):
    """Every second, "SECONDS RSS_KB_SUM" of PIDS into PATH (and kept for s3_memory)."""

    def __init__(self, pids, path):
        super().__init__(daemon=True)
        self.pids, self.path, self.samples = pids, path, []
        self.done = threading.Event()

    def run(self):
        t = 0
        with open(self.path, "w") as out:
            while not self.done.is_set():
                total = sum(_vmrss_kb(pid) for pid in self.pids)
                out.write("%d %d\n" % (t, total))
                out.flush()
                self.samples.append(float(total))
                self.done.wait(1)
                t += 1

    def stop(self):
        self.done.set()
        self.join()


def _vmrss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def flashsale_s3(b):
    """S3: S3_INTENTS intents over 20 SKUs, 80% of them on 2, 4 partitions, 2 workers; the
    workers' resident memory sampled every second."""
    log = b.log("flashsale-S3.log")
    hot, cold, stock = b.s3_intents * 4 // 10, b.s3_intents * 2 // 10 // 18, b.s3_stock
    skus = ["S3-%02d" % i for i in range(20)]
    run = proc.Run(log, "bench-s3", 4)
    for sku in skus:
        run.fs("sale", "open", sku, "--stock", str(stock), out="null")
    workers = [run.start_worker(b.path("s3-worker-%d.log" % i)) for i in (1, 2)]
    rc = 0 if ready(run) else 1
    with open(b.path("s3.pids"), "w") as f:
        f.write(" ".join(str(w.pid) for w in workers) + "\n")
    sampler = RssSampler([w.pid for w in workers], b.path("s3-rss.txt"))
    sampler.start()
    proc.settle()
    since = proc.now_ms()  # the intents only: the sale records are not timed
    loads = [run.fs_start("load", sku, "--buyers", str(hot if i < 2 else cold),
                          "--seed", str(300 + i)) for i, sku in enumerate(skus)]
    for p in loads:
        rc = 1 if p.wait() != 0 else rc
    if not run.fs_ok("wait", "--timeout", str(FLASHSALE_TIME_LIMIT), "--quiet", out="log"):
        rc = 1
    timed_rc, timing = run.fs("timing", "--since", str(since), "--timeout", "300", out="capture")
    rc = 1 if timed_rc != 0 else rc
    log.echo(timing)
    sampler.stop()
    sold, left = run.summary_sums(skus)
    audit = run.audit(b.path("s3-audit.txt"))
    proc.stop(*workers)
    timing = log.last("TIMING ")
    log.close()
    if not timing:
        flashsale_failed(b, "S3", b.s3_intents, 20 * stock, "log %s" % log.path)
        return
    mem = s3_memory(sampler.samples)
    b.add(flashsale_row("S3", b.s3_intents, 20 * stock, sold, left, audit, rc, timing, mem))
    b.progress("S3", "flashsale", "%7.1f s %9s intents/s  p99 %6s ms  memory %s / %s / %s MB "
               "(25%%/50%%/end) flat=%s  audit=%s" % (
                   fnum(field(timing, "seconds")), commify(field(timing, "per_s")),
                   field(timing, "p99_ms"), field(mem, "rss_q1_mb"), field(mem, "rss_warm_mb"),
                   field(mem, "rss_end_mb"), field(mem, "rss_flat"), audit))


def flashsale_s4(b):
    """S4: the sold-out fast path: a sale sells out, then S4_INTENTS more buyers come; only
    those are timed (flashsale timing --since the moment before they are published)."""
    log, stock = b.log("flashsale-S4.log"), 500
    run = proc.Run(log, "bench-s4", 1)
    run.fs("sale", "open", "S4", "--stock", str(stock), out="null")
    worker = run.start_worker(b.path("s4-worker.log"))
    ok = ready(run)
    ok = run.fs_ok("load", "S4", "--buyers", str(stock * 2), "--seed", "401") and ok
    ok = run.fs_ok("wait", "--timeout", "120", "--quiet", out="log") and ok
    proc.settle()
    since = proc.now_ms()
    ok = run.fs_ok("load", "S4", "--buyers", str(b.s4_intents), "--seed", "402") and ok
    ok = run.fs_ok("wait", "--timeout", str(FLASHSALE_TIME_LIMIT), "--quiet", out="log") and ok
    ok = run.fs_ok("timing", "--since", str(since), "--timeout", "300", out="log") and ok
    sold, left = run.summary_sums(["S4"])
    audit = run.audit(b.path("s4-audit.txt"))
    proc.stop(worker)
    timing = log.last("TIMING ")
    log.close()
    if not timing:
        flashsale_failed(b, "S4", b.s4_intents, stock, "log %s" % log.path)
        return
    b.add(flashsale_row("S4", b.s4_intents + stock * 2, stock, sold, left, audit,
                        0 if ok else 1, timing))
    b.progress("S4", "flashsale", "%7.1f s %9s intents/s  p99 %6s ms  (after the sell-out)  "
               "audit=%s" % (fnum(field(timing, "seconds")), commify(field(timing, "per_s")),
                             field(timing, "p99_ms"), audit))


def _ratio_text(a, b):
    """a / b as `awk 'BEGIN { print a / b }'` printed it (what the progress lines format)."""
    return awk_print_num(awk_div(awk_num(a), awk_num(b)))


def _s6_steps(b, log, pg_replay, db):
    """S6's commands: the fresh run, the empty database, the replay; the replay's status, as
    the shell version's pipeline gave it (1 when it printed no rate)."""
    admin = proc.admin_pg()
    schema_pg = proc.base_pg(admin) + " dbname=" + db
    proc.settle()
    rc, out = log.run(["timeout", "--kill-after=10", str(FLASHSALE_TIME_LIMIT), "scripts/demo",
                     "--no-gateway",
                       "--buyers", str(b.s1_buyers), "--stock", str(b.s1_stock)], out="capture")
    for line in out.split("\n"):
        if line.startswith(("TIMING ", "RESULT ")):
            log.echo(line)
    log.run(["psql", admin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
             "DROP DATABASE IF EXISTS %s (FORCE)" % db, "-c", "CREATE DATABASE %s" % db])
    quiet = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    for sql in sorted(f for f in os.listdir("sql") if f.endswith(".sql")):
        log.run(["psql", schema_pg, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "sql/" + sql],
                env=quiet)
    log.f.flush()
    p = subprocess.run(["build/flashsale", "-c", ".local/demo/flashsale.conf", "--set",
                        "pg=" + pg_replay, "replay"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc.run_env())
    rates = [line for line in p.stdout.decode("utf-8", "replace").replace("\r", "\n").split("\n")
             if "records/s" in line]
    if rates:
        log.echo(rates[-1])
        return p.returncode
    return 1


def flashsale_s6(b):
    """S6: a fresh S1-sized run (scripts/demo), then its intents log replayed into an empty
    database with `flashsale replay`; the replay's rate (records decided and recorded per
    second, from its progress line) against the fresh run's end-to-end rate, and the rebuilt
    decisions compared with the fresh ones (md5 over every column of every row)."""
    log, db = b.log("flashsale-S6.log"), "flashsale_bench_replay"
    admin = proc.admin_pg()
    base = proc.base_pg(os.environ.get("FLASHSALE_PG", ""))  # the replay: the application role
    pg_replay, pg_fresh = base + " dbname=" + db, base + " dbname=flashsale_demo"
    rc = _s6_steps(b, log, pg_replay, db)
    fresh_rate = field(log.last("TIMING "), "per_s")
    q = "SELECT md5(string_agg(d::text, '|' ORDER BY part, off, kind)) FROM decisions d"
    same = "yes" if _psql_value(pg_replay, q) == _psql_value(pg_fresh, q) else "no"
    subprocess.run(["psql", admin, "-X", "-q", "-c", "DROP DATABASE IF EXISTS %s (FORCE)" % db],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = re.match(r".* ([0-9]+) records/s.*", log.last(contains="records/s"))
    replay_rate = m.group(1) if m else ""
    log.close()
    if not replay_rate or not fresh_rate:
        flashsale_failed(b, "S6", b.s1_buyers, b.s1_stock, "log %s" % log.path)
        return
    check = "ok" if same == "yes" else "decisions_differ"
    if rc != 0:
        check += ",exit_%d" % rc
    b.add(parse_kv(
        "scenario=S6 kind=flashsale approach=flashsale clients=- buyers=%d requests=%d stock=%d "
        "seconds=- attempts_per_s=%s winners_per_s=- p50_ms=- p99_ms=- sold=- oversell=0 "
        "stock_left=- complete=yes check=%s fresh_per_s=%s same_decisions=%s" % (
            b.s1_buyers, b.s1_buyers, b.s1_stock, replay_rate, check, fresh_rate, same)))
    b.progress("S6", "flashsale", "replay %s records/s, the fresh run %s/s: %.2fx  decisions "
               "identical: %s" % (commify(replay_rate), commify(fresh_rate),
                                  fnum(_ratio_text(replay_rate, fresh_rate)), same))


def _psql_value(pg, query):
    """QUERY's one value on PG (a row's columns joined by '|'; "" when psql fails)."""
    p = subprocess.run(["psql", pg, "-X", "-At", "-c", query], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    return p.stdout.decode("utf-8", "replace").rstrip("\n")


def s7_run(b, log, name, *cli_options):
    """One S7 run: S1's sale on 4 partitions, published with CLI_OPTIONS; writes its TIMING
    line and an S7RUN line into LOG. The forwarded copies come after their originals, and
    `fs wait` knows only the records there when it starts: the run waits until every buy has
    its decision. Timed from just before the first publish to the last answer stored (the
    timing's last_answer_ms; both on this host's clock)."""
    run = proc.Run(log, "bench-s7", 4)
    run.fs("sale", "open", "SKU1", "--stock", str(b.s1_stock), out="null")
    worker = run.start_worker(b.path("s7-%s-worker.log" % name))
    rc = 0 if ready(run) else 1  # ready: the sale record answered
    proc.settle()
    start = proc.now_ms()
    if not run.fs_ok(*cli_options, "load", "SKU1", "--buyers", str(b.s1_buyers), "--seed", "701"):
        rc = 1
    deadline = time.monotonic() + FLASHSALE_TIME_LIMIT
    while _decided(log, run.pg) < b.s1_buyers:
        if time.monotonic() >= deadline:
            rc = 1
            break
        time.sleep(0.05)
    if not run.fs_ok("timing", "--since", str(start), "--timeout", "300", out="log"):
        rc = 1
    sold, left = run.summary_sums(["SKU1"])
    audit = run.audit(b.path("s7-%s-audit.txt" % name))
    proc.stop(worker)
    log.echo("S7RUN name=%s start_ms=%d sold=%s left=%s audit=%s rc=%d"
             % (name, start, sold, left, audit, rc))


def _decided(log, pg):
    """The run's count of decisions (0 while psql cannot tell)."""
    rc, out = log.run(["psql", pg, "-X", "-At", "-c", "SELECT count(*) FROM decisions"],
                      out="capture")
    try:
        return int(out)
    except ValueError:
        return 0


def s7_seconds(timing, start_ms):
    """Seconds from START_MS (epoch ms) to the last answer of a TIMING line."""
    a, s = awk_num(field(timing, "last_answer_ms") or "0"), awk_num(start_ms)
    return "%.3f" % ((a - s) / 1000 if a > s else 0)


def s7_rate(b, secs):
    """BUYERS / SECONDS, 0 for no time."""
    t = awk_num(secs)
    return "%.0f" % (b.s1_buyers / t if t > 0 else 0)


def flashsale_s7(b):
    """S7: S1's sale (SKU1: the rule puts it on partition 3 of 4, CRC32 on 2) published by the
    rule, then by a web tier with librdkafka's default partitioner, every buy of which is
    forwarded. The rate and the latency from the publish call against the routed run's."""
    log = b.log("flashsale-S7.log")
    s7_run(b, log, "routed")
    s7_run(b, log, "forwarded", "--set", "kafka.producer.partitioner=consistent_random")
    timings = log.lines("TIMING ")
    routed, timing = (timings + ["", ""])[0], (timings + ["", ""])[1]
    run = log.last("S7RUN name=forwarded ")
    runs_ok = [line for line in log.lines("S7RUN ") if line.endswith(" rc=0")]
    routed_run = " ".join(log.lines("S7RUN name=routed "))
    log.close()
    if not routed or not timing or not run or len(runs_ok) != 2:
        flashsale_failed(b, "S7", b.s1_buyers, b.s1_stock, "log %s" % log.path)
        return
    routed_rate = s7_rate(b, s7_seconds(routed, field(routed_run, "start_ms")))
    secs = s7_seconds(timing, field(run, "start_ms"))
    rate = s7_rate(b, secs)
    # The row's rate and seconds from the first publish (the timing's own start at the first
    # copy would leave the forwarding hop of the first batch out).
    timing = re.sub(r" seconds=[0-9.]+", " seconds=" + secs, timing, count=1)
    timing = re.sub(r" per_s=[0-9]+", " per_s=" + rate, timing, count=1)
    t = lambda k: field(timing, k)  # noqa: E731
    r = lambda k: field(routed, k)  # noqa: E731
    b.add(flashsale_row(
        "S7", b.s1_buyers, b.s1_stock, field(run, "sold"), field(run, "left"), field(run, "audit"),
        0, timing, "routed_per_s=%s client_ms=%s/%s routed_client_ms=%s/%s forwarded=%s" % (
            routed_rate, t("client_p50_ms"), t("client_p99_ms"), r("client_p50_ms"),
            r("client_p99_ms"), t("forwarded"))))
    # `awk 'BEGIN { print b ? a / b : 0 }'`, which the line then formats with %.2f
    ratio = _ratio_text(rate, routed_rate) if awk_num(routed_rate) else "0"
    b.progress("S7", "flashsale", "forwarded %s of %s buys: %s intents/s against %s routed "
               "(%.2fx); from the publish call p50/p99 %s/%s ms against %s/%s" % (
                   commify(t("forwarded")), commify(str(b.s1_buyers)), commify(rate),
                   commify(routed_rate), fnum(ratio), t("client_p50_ms"), t("client_p99_ms"),
                   r("client_p50_ms"), r("client_p99_ms")))
