"""The HTTP front door's runs (issue 29), through flashsale-gateway, with the buyers of
build/bench/flashsale-httpload (libcurl, 2 threads, 64 keep-alive connections):

  S8-floor / S9-floor  build/bench/flashsale-http-floor: libmicrohttpd set up as the gateway,
                       answering every POST 202 and every GET a decision, constants: the same
                       buyers (POST then GET; then POST only) against HTTP alone
  S8  HTTP end to end: S1's sale (S1's buyers, S1's stock) through the gateway: each buyer
      POSTs its buy and long-polls its result; buyers/s from the first request to the last
      result, latency per buyer, against the floor and against S1 of this invocation
  S9  after the sell-out: as many buys again for the sold-out SKU, POST only, answered by the
      edge flag: against the POST-only floor; nothing may be published
  S10 waiting connections: N buyers (10,000; --quick 2,000) whose buys are on the log while no
      worker runs, each holding a long-poll at once; the gateway's memory per waiting
      connection (its RSS with them waiting, less its RSS before, over N); then a worker
      starts and every one must be answered

(issue 29 calls them S7-S9: S7 was already the partitioner's scenario.) Each appends a row
(kind "floor" or "http") and prints one progress line.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request

import proc
from rows import awk_num, commify, field, fnum, parse_kv

LOAD = "build/bench/flashsale-httpload"
FLOOR = "build/bench/flashsale-http-floor"
GATEWAY = "build/flashsale-gateway"
CONCURRENCY = 64
THREADS = 2
TIME_LIMIT = 600


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _get_json(url, timeout=2):
    """(status, body as an object) of a GET; (0, {}) when it cannot be had."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (OSError, ValueError):
        return 0, {}


def _wait_for(what, cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def _start_gateway(run, log_path, port):
    """The gateway on RUN's configuration, ready (readyz 200), or None."""
    out = open(log_path, "w")
    # Buyers unproven (auth.mode = off, loopback only): S8 with tokens against without is
    # left for later (issue 48, item 2; docs/reference/security.md).
    g = subprocess.Popen([GATEWAY, "-c", run.conf, "--set", "listen=127.0.0.1:%d" % port,
                          "--set", "auth.mode=off"],
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=proc.run_env())
    url = "http://127.0.0.1:%d/readyz" % port
    if not _wait_for("readyz", lambda: _get_json(url)[0] == 200 or g.poll() is not None, 60):
        proc.stop(g)
        return None
    return g if g.poll() is None else None


def _load(log, port, sku, buyers, mode, seed, concurrency=CONCURRENCY, wait=60, extra=()):
    """One flashsale-httpload run: its HTTPLOAD line ("" when it printed none) and exit code."""
    rc, out = log.run([LOAD, "--url", "http://127.0.0.1:%d" % port, "--sku", sku, "--buyers",
                       str(buyers), "--concurrency", str(concurrency), "--threads", str(THREADS),
                       "--mode", mode, "--seed", str(seed), "--wait", str(wait)] + list(extra),
                      out="capture", timeout=TIME_LIMIT)
    log.echo(out)
    lines = [ln for ln in out.split("\n") if ln.startswith("HTTPLOAD buyers=")]
    return (lines[-1] if lines else ""), rc


def _row(sc, kind, approach, line, check, extra=""):
    f = parse_kv(line)
    row = {
        "scenario": sc, "kind": kind, "approach": approach, "clients": str(CONCURRENCY),
        "buyers": f.get("buyers", "-"), "requests": f.get("requests", "-"),
        "stock": "-", "seconds": f.get("seconds", "-"), "attempts_per_s": f.get("per_s", "-"),
        "winners_per_s": "-", "p50_ms": f.get("p50_ms", "-"), "p99_ms": f.get("p99_ms", "-"),
        "p999_ms": f.get("p999_ms", "-"), "max_ms": f.get("max_ms", "-"), "sold": "-",
        "oversell": "-", "stock_left": "-", "dup_orders": "-", "retries_per_sale": "-",
        "gave_up": "-", "errors": f.get("failed", "-"), "complete": "yes" if check == "ok" else "no",
        "check": check, "accepted": f.get("accepted", "-"), "edge": f.get("edge", "-"),
    }
    row.update(parse_kv(extra))
    return row


def _failed(b, sc, why):
    b.progress(sc, "flashsale-gateway", "FAILED (%s)" % why)
    b.add(parse_kv("scenario=%s kind=http approach=flashsale-gateway check=error" % sc))
    b.failed += 1


def http_floor(b):
    """S8-floor and S9-floor: the buyers against libmicrohttpd answering constants."""
    log = b.log("http-floor.log")
    port = _free_port()
    floor = log.start([FLOOR, "--port", str(port)])
    ok = _wait_for("the floor", lambda: _get_json("http://127.0.0.1:%d/" % port)[0] == 200, 30)
    for sc, mode in (("S8-floor", "buy-wait"), ("S9-floor", "buy")):
        line, rc = _load(log, port, "SKU1", b.s1_buyers, mode, 1) if ok else ("", 1)
        check = "ok" if line and rc == 0 else "error"
        if check != "ok":
            b.progress(sc, "http-floor", "FAILED (log %s)" % log.path)
            b.add(parse_kv("scenario=%s kind=floor approach=http-floor check=error" % sc))
            b.failed += 1
            continue
        b.add(_row(sc, "floor", "http-floor", line, check))
        setattr(b, "http_floor_" + ("e2e" if mode == "buy-wait" else "buy"), field(line, "per_s"))
        b.progress(sc, "http-floor", "%7.2f s %9s buyers/s  p99 %s ms  (%s, constants: "
                   "libmicrohttpd alone)" % (fnum(field(line, "seconds")),
                                             commify(field(line, "per_s")),
                                             field(line, "p99_ms"), mode))
    proc.stop(floor)
    log.close()


def _decided(run):
    rc, out = run.log.run(["psql", run.pg, "-X", "-At", "-c", "SELECT count(*) FROM decisions"],
                          out="capture")
    try:
        return int(out)
    except ValueError:
        return -1


def flashsale_s8_s9(b):
    """S8: S1's sale through the gateway; S9: as many buys again after the sell-out."""
    log = b.log("flashsale-S8.log")
    run = proc.Run(log, "bench-s8", 1)
    run.fs("sale", "open", "SKU1", "--stock", str(b.s1_stock), out="null")
    worker = run.start_worker(b.path("s8-worker.log"))
    run.fs_ok("timing", "--timeout", "120")  # the sale record answered
    port = _free_port()
    gw = _start_gateway(run, b.path("s8-gateway.log"), port)
    if gw is None:
        proc.stop(worker)
        _failed(b, "S8", "the gateway did not get ready, log %s" % b.path("s8-gateway.log"))
        _failed(b, "S9", "no S8")
        return
    proc.settle()
    line, rc = _load(log, port, "SKU1", b.s1_buyers, "buy-wait", 801)
    run.fs_ok("wait", "--timeout", "120", "--quiet")
    sold, left = run.summary_sums(["SKU1"])
    audit = run.audit(b.path("s8-audit.txt"))
    published = field(line, "accepted")
    problems = []
    if not line or rc != 0:
        problems.append("unanswered")
    if awk_num(sold) != b.s1_stock or awk_num(left) != 0:
        problems.append("sold_%s_left_%s" % (sold, left))
    if field(line, "held") != str(b.s1_stock):
        problems.append("held_%s" % field(line, "held"))
    if audit != "ok":
        problems.append("audit_" + audit)
    check = ",".join(problems) or "ok"
    floor, s1 = getattr(b, "http_floor_e2e", ""), b.s1_rate
    b.add(_row("S8", "http", "flashsale-gateway", line, check,
               "sold=%s stock=%s stock_left=%s floor_per_s=%s s1_per_s=%s published=%s" % (
                   sold or "-", b.s1_stock, left or "-", floor or "-", s1 or "-", published)))
    rate = awk_num(field(line, "per_s"))
    b.progress("S8", "flashsale-gateway", "%7.2f s %9s buyers/s  p99 %s ms  %.2fx the floor, "
               "%.2fx S1; %s published, %s at the edge  sold %s/%s  audit=%s" % (
                   fnum(field(line, "seconds")), commify(field(line, "per_s")),
                   field(line, "p99_ms"), rate / awk_num(floor) if awk_num(floor) else 0,
                   rate / awk_num(s1) if awk_num(s1) else 0, commify(published),
                   commify(field(line, "edge")), sold, commify(str(b.s1_stock)), audit))

    # S9: the SKU is sold out; the edge answers, nothing is published.
    before = _decided(run)
    line, rc = _load(log, port, "SKU1", b.s1_buyers, "buy", 901)
    run.fs_ok("wait", "--timeout", "60", "--quiet")
    after = _decided(run)
    problems = []
    if not line or rc != 0:
        problems.append("unanswered")
    if field(line, "edge") != str(b.s1_buyers):
        problems.append("edge_%s" % field(line, "edge"))
    if after != before or before < 0:
        problems.append("published_%d" % (after - before))
    check = ",".join(problems) or "ok"
    floor = getattr(b, "http_floor_buy", "")
    b.add(_row("S9", "http", "flashsale-gateway", line, check,
               "floor_per_s=%s published=%d" % (floor or "-", after - before)))
    rate = awk_num(field(line, "per_s"))
    b.progress("S9", "flashsale-gateway", "%7.2f s %9s buyers/s  p99 %s ms  %.2fx the POST-only "
               "floor; %s at the edge, %d published" % (
                   fnum(field(line, "seconds")), commify(field(line, "per_s")),
                   field(line, "p99_ms"), rate / awk_num(floor) if awk_num(floor) else 0,
                   commify(field(line, "edge")), after - before))
    proc.stop(gw, worker)
    log.close()


def _rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def flashsale_s10(b):
    """S10: N long-polls waiting at once on the gateway; its memory per waiting connection."""
    n = b.s10_waiting
    log = b.log("flashsale-S10.log")
    run = proc.Run(log, "bench-s10", 1)
    port = _free_port()
    gw = _start_gateway(run, b.path("s10-gateway.log"), port)
    if gw is None:
        _failed(b, "S10", "the gateway did not get ready, log %s" % b.path("s10-gateway.log"))
        return
    # The sale is opened with no worker running: every buy waits on the log.
    run.fs("sale", "open", "SKU1", "--stock", str(n), out="null")
    rss0 = _rss_kb(gw.pid)
    load = subprocess.Popen([LOAD, "--url", "http://127.0.0.1:%d" % port, "--sku", "SKU1",
                             "--buyers", str(n), "--concurrency", str(n), "--threads",
                             str(THREADS), "--mode", "buy-wait", "--wait", "300", "--seed",
                             "1001"], stdout=subprocess.PIPE, stderr=log.f,
                            stdin=subprocess.DEVNULL, text=True)
    first = load.stdout.readline()
    ready_url = "http://127.0.0.1:%d/readyz" % port
    waiting = _wait_for("the long-polls", lambda: _get_json(ready_url)[1].get("long_polls", 0)
                        >= n, 120) and first.startswith("HTTPLOAD WAITING")
    polls = _get_json(ready_url)[1]
    rss1 = _rss_kb(gw.pid)
    worker = run.start_worker(b.path("s10-worker.log"))
    try:
        rest, _ = load.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        load.kill()
        rest, _ = load.communicate()
    log.echo(first + rest)
    line = ([ln for ln in rest.split("\n") if ln.startswith("HTTPLOAD buyers=")] or [""])[-1]
    run.fs_ok("wait", "--timeout", "120", "--quiet")
    audit = run.audit(b.path("s10-audit.txt"))
    proc.stop(gw, worker)
    log.close()
    per_kib = (rss1 - rss0) / n if n else 0
    problems = []
    if not waiting:
        problems.append("not_all_waiting_%s" % polls.get("long_polls", 0))
    if field(line, "held") != str(n) or load.returncode != 0:
        problems.append("unanswered_%s" % field(line, "held"))
    if audit != "ok":
        problems.append("audit_" + audit)
    check = ",".join(problems) or "ok"
    b.add(_row("S10", "http", "flashsale-gateway", line, check,
               "waiting=%s rss_before_kb=%d rss_waiting_kb=%d per_conn_kib=%.1f" % (
                   polls.get("long_polls", 0), rss0, rss1, per_kib)))
    b.progress("S10", "flashsale-gateway", "%s long-polls waiting at once, %.1f KiB each (RSS "
               "%.1f -> %.1f MB); all answered once a worker ran: %s" % (
                   commify(str(polls.get("long_polls", 0))), per_kib, rss0 / 1024.0,
                   rss1 / 1024.0, "yes" if "unanswered" not in check else "no"))


def run_all(b):
    http_floor(b)
    flashsale_s8_s9(b)
    flashsale_s10(b)
