"""S5, the open loop, and its floors: the latency of the worker at half of S1's rate, then the
same load answered by build/bench/flashsale-echo (bench/echo.c), which decides and stores
nothing (plain) or writes and fdatasyncs each batch first (durable), then the disk alone.
Each appends one row to bench.rows and prints one progress line (runs.py has the others).

S5 runs at half the maximum measured in this invocation (S1's rate), for S5_SECONDS after a
first second that is left out; the latency percentiles, the intent's append to its answer's on
the broker's clock, are the result, and beside them the same from the load generator's
publish call (the time in each version-7 intent id: its producer's 10 ms linger included). The
first second is a fresh worker and database session warming up (the figures are in the
BENCHMARKS.md text). The whole load's p99, that second included, is reported beside the
steady one.
"""

import time

import proc
from rows import awk_num, commify, field, flashsale_row, parse_kv
from runs import flashsale_failed, ready

S5_WARM_S = 1


def s5_load(run, rate, n):
    """The open loop itself, one function for S5 and its floors so that they get the same load:
    sync, then N intents at RATE per second (seed 501). Returns (ok, start in epoch ms)."""
    proc.settle()
    start = proc.now_ms()
    ok = run.fs_ok("load", "S5", "--buyers", str(n), "--rate", str(rate), "--seed", "501")
    return ok, start


def client_ms(timing, keys=("client_p50_ms", "client_p99_ms", "client_p999_ms")):
    """The latency from the publish call: only when every timed intent had a version-7 id
    (load mints them); "-" otherwise."""
    if field(timing, "client_timed") != field(timing, "answered"):
        return "-"
    return "/".join(field(timing, k) for k in keys)


def s5_rate_of(s1_rate):
    """Half of S1's rate (its integer part), or of 20,000 when S1 gave none: (MAX, RATE)."""
    head = s1_rate.rsplit(".", 1)[0] if "." in s1_rate else s1_rate
    try:
        top = int(head)
    except ValueError:
        top = 0
    if top <= 0:
        return "20000", 10000
    return s1_rate, top // 2


def worker_point(b, name, rate, n, stock=500, trace=None):
    """One open loop against a fresh worker (run NAME, one partition, a sale of STOCK units):
    N intents at RATE per second, timed after the first S5_WARM_S seconds and whole; TRACE: a
    path for the worker's trace.batches. Returns (ok, the timed TIMING line, the whole one,
    the slowest transaction in ms, sold, left, audit, the log's path, the start of the timed
    part in epoch ms)."""
    log = b.log("flashsale-%s.log" % name)
    log.echo("open loop at %d intents/s, %d intents; the first %d s not timed"
             % (rate, n, S5_WARM_S))
    run = proc.Run(log, "bench-" + name.lower(), 1)
    run.fs("sale", "open", "S5", "--stock", str(stock), out="null")
    wlog = b.path("%s-worker.log" % name.lower())
    cmd = ["build/flashsale-worker"] + (["--set", "trace.batches=" + trace] if trace else [])
    worker = run.start_worker(wlog, cmd)
    ok = ready(run)
    loaded, start = s5_load(run, rate, n)  # the intents only: the sale record is not timed
    ok = loaded and ok
    ok = run.fs_ok("wait", "--timeout", "120", "--quiet", out="log") and ok
    whole_rc, whole = run.fs("timing", "--since", str(start), "--timeout", "300", out="capture")
    ok = whole_rc == 0 and ok
    log.echo("WHOLE " + (whole[len("TIMING "):] if whole.startswith("TIMING ") else whole))
    timed_from = start + S5_WARM_S * 1000
    ok = run.fs_ok("timing", "--since", str(timed_from), "--timeout", "300", out="log") and ok
    sold, left = run.summary_sums(["S5"])
    audit = run.audit(b.path("%s-audit.txt" % name.lower()))
    proc.stop(worker)
    timing, whole_line = log.last("TIMING "), log.last("WHOLE ")
    log.close()
    # The worker's slowest batch transaction (its exit line): a latency tail that is the
    # database's own (a stalled WAL flush) shows here.
    exits = proc.file_lines(wlog, " exit: ")
    slowest = field(exits[-1] if exits else "", "ms_commit_max") or "-"
    return ok, timing, whole_line, slowest, sold, left, audit, log.path, timed_from


def flashsale_s5(b):
    """S5: the open loop against a worker."""
    stock = 500
    top, rate = s5_rate_of(b.s1_rate)
    n = rate * (b.s5_seconds + S5_WARM_S)
    b.s5_rate = rate
    ok, timing, whole_line, slowest, sold, left, audit, log_path, _ = worker_point(
        b, "S5", rate, n, stock)
    if not timing:
        flashsale_failed(b, "S5", n, stock, "log %s" % log_path)
        return
    whole_p99 = field(whole_line, "p99_ms") or "-"
    client = client_ms(timing)
    b.add(flashsale_row("S5", n, stock, sold, left, audit, 0 if ok else 1, timing,
                        "offered_per_s=%d slowest_commit_ms=%s whole_p99_ms=%s client_ms=%s"
                        % (rate, slowest, whole_p99, client)))
    b.progress("S5", "flashsale", "offered %s/s (half of %s): p50 %s ms  p99 %s ms  p99.9 %s ms  "
               "max %s ms  slowest transaction %s ms  p99 with the first %s s %s ms  from the "
               "publish call p50/p99/p99.9 %s ms  audit=%s" % (
                   commify(str(rate)), commify(top), field(timing, "p50_ms"),
                   field(timing, "p99_ms"), field(timing, "p999_ms"), field(timing, "max_ms"),
                   slowest, S5_WARM_S, whole_p99, client, audit))


def _echo_ready(echo_log, pid_proc):
    """Ready: flashsale-echo has reached the end of the (empty) intents partition (30 s)."""
    for _ in range(300):
        if proc.file_lines(echo_log, "flashsale-echo: ready"):
            return True
        if not proc.alive(pid_proc):
            break
        time.sleep(0.1)
    return bool(proc.file_lines(echo_log, "flashsale-echo: ready"))


def floor_timing(b, kind, sc, label, rate, n):
    """The floor's commands: (TIMING line, exit line of flashsale-echo, rc, log path)."""
    echo_cmd = ["build/bench/flashsale-echo"]
    if kind == "durable":
        echo_cmd += ["--sync", b.path("echo-ring")]
    log, echo_log = b.log(sc + ".log"), b.path(sc + "-echo.log")
    log.echo("%s: open loop at %d intents/s, %d intents, answered by %s"
             % (label, rate, n, " ".join(echo_cmd)))
    run = proc.Run(log, "bench-s5-floor", 1)
    echo = run.start_worker(echo_log, echo_cmd)
    rc = 0
    if _echo_ready(echo_log, echo):
        loaded, start = s5_load(run, rate, n)
        timed = run.fs_ok("timing", "--since", str(start + S5_WARM_S * 1000), "--timeout", "120",
                          out="log")
        rc = 0 if loaded and timed else 1
    else:
        log.echo("flashsale-echo not ready after 30 s (log %s)" % echo_log)
        rc = 1
    proc.stop(echo)
    if echo.returncode != 0:
        rc = 1
    timing = log.last("TIMING ")
    log.close()
    exits = proc.file_lines(echo_log, " exit: ")
    return timing, (exits[-1] if exits else ""), rc, log.path


def s5_floor(b, kind):
    """S5's floor (KIND plain) or durable floor: the same open loop (rate, length, seed, load
    generator, sync before it) answered by flashsale-echo in the worker's place. It answers each
    intent as soon as it has read it, deciding and storing nothing, with the worker's Kafka
    settings: what the broker, the two clients' lingers and this machine cost before the
    worker's own work. Durable also writes each batch's records to a file on the database's
    file system and waits for fdatasync before answering: what the durable flush alone costs."""
    sc = "S5-floor" if kind == "plain" else "S5-floor-durable"
    label = "floor" if kind == "plain" else "floor, durable"
    rate = b.s5_rate if b.s5_rate > 0 else 10000
    n = rate * (b.s5_seconds + S5_WARM_S)
    timing, exit_line, rc, log_path = floor_timing(b, kind, sc, label, rate, n)
    if not timing:
        b.progress("S5", label, "FAILED (log %s)" % log_path)
        b.add(parse_kv("scenario=%s kind=floor approach=echo check=error" % sc))
        b.failed += 1
        return
    t = lambda k: field(timing, k)  # noqa: E731
    check = "ok" if t("answered") == t("records") else "unanswered"
    if rc != 0:
        check += ",exit_%d" % rc
    if check.startswith("ok,"):
        check = check[len("ok,"):]
    flush = flushes = "-"
    if kind == "durable":
        flush = field(exit_line, "ms_sync_max") or "-"
        flushes = field(exit_line, "syncs") or "-"
    client = client_ms(timing)
    b.add(parse_kv(
        "scenario=%s kind=floor approach=echo requests=%s seconds=%s attempts_per_s=%s "
        "p50_ms=%s p99_ms=%s p999_ms=%s max_ms=%s offered_per_s=%d client_ms=%s "
        "slowest_flush_ms=%s flushes=%s check=%s" % (
            sc, t("records"), t("seconds"), t("per_s"), t("p50_ms"), t("p99_ms"), t("p999_ms"),
            t("max_ms"), rate, client, flush, flushes, check)))
    if check != "ok":
        b.failed += 1
    what = "nothing decided or stored"
    if kind == "durable":
        what = ("nothing decided, each batch written and fdatasync'd first, the slowest flush "
                "%s ms" % flush)
    b.progress("S5", label, "offered %s/s, answered by flashsale-echo (%s): p50 %s ms  p99 %s ms  "
               "p99.9 %s ms  max %s ms  from the publish call p50/p99/p99.9 %s ms  check=%s" % (
                   commify(str(rate)), what, t("p50_ms"), t("p99_ms"), t("p999_ms"), t("max_ms"),
                   client, check))


def s5_disk(b):
    """S5's disk alone: `flashsale-echo --probe`, with the services up and idle and no load: an
    8 KiB write and fdatasync every 5 ms on the database's file system, for as long as S5 is
    timed. A commit's answer waits for such a flush; when the disk alone stalls past 20 ms now
    and then, no design that answers only what is durable meets S5's p99 through those stalls."""
    log = b.log("S5-disk.log")
    proc.settle()
    rc, _ = log.run(["build/bench/flashsale-echo", "--probe", str(b.s5_seconds), "--sync",
                     b.path("echo-ring")])
    line = log.last(contains=" exit: ")
    log.close()
    if rc != 0 or not line:
        b.progress("S5", "disk alone", "FAILED (log %s)" % log.path)
        b.add(parse_kv("scenario=S5-disk kind=floor approach=probe check=error"))
        b.failed += 1
        return
    ms = {k: "%.2f" % (awk_num(field(line, "us_sync_" + k)) / 1000)
          for k in ("p50", "p99", "p999", "max")}
    b.add(parse_kv(
        "scenario=S5-disk kind=floor approach=probe requests=%s seconds=%d p50_ms=%s p99_ms=%s "
        "p999_ms=%s max_ms=%s over_20ms=%s check=ok" % (
            field(line, "syncs"), b.s5_seconds, ms["p50"], ms["p99"], ms["p999"], ms["max"],
            field(line, "syncs_over_20ms"))))
    b.progress("S5", "disk alone", "%s flushes of 8 KiB, one every 5 ms, the services idle: "
               "p50 %s ms  p99 %s ms  p99.9 %s ms  max %s ms  over 20 ms: %s" % (
                   commify(field(line, "syncs")), ms["p50"], ms["p99"], ms["p999"], ms["max"],
                   field(line, "syncs_over_20ms")))
