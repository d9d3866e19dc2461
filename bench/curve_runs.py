"""S13, the latency curve (issue 32): the worker's sustained capacity, then its latency at 10, 25,
50, 75 and 90% of it, each beside the plain and the durable floor at the same offered rate, in
the same invocation. S5 stays what it was (half of S1's burst rate): one more point, measured
the same way.

Capacity. An open loop (`flashsale load --rate`, S5's load: one hot SKU of 500 units, seed
501) against one worker on one partition, PROBE_S seconds (--quick: PROBE_QUICK_S) per probe,
all probes on one fresh run, each on a SKU of its own. A probe keeps up when the worker's last
answer comes at most LAG_MS after the last intent was published (`flashsale timing`: seconds
- publish_seconds, both on the broker's clock) and the load generator published at 95% of
the offered rate or more; a worker that falls behind leaves a backlog that grows with the
run, and its drain shows there. The search starts at half of S1's rate (20,000/s without
S1), multiplies the rate by GROW while the probes keep up (at most MAX_GROW times), then halves
the interval between the last rate kept up with (0 when the first probe fell behind) and the
first one not, BISECT times. The capacity is the highest rate kept up with. When the load
generator cannot offer a rate, that rate is treated as one not kept up with, and the row says
generator_bound=yes: the capacity found is then the generator's as much as the worker's.

Points. At each fraction of the capacity (--quick: 10, 50 and 90% only): the worker (open_loop.worker_point: a fresh run, a
first second not timed, as S5), then flashsale-echo plain and durable at the same rate (the
floors of S5, open_loop.floor_timing), each for POINT_S seconds (--quick: POINT_QUICK_S).

Account (issue 32's item 2). Each point's worker writes trace.batches; bench/batch_account.py
turns it into where the timed batches spent their time, step by step (fetch, gather, decide,
the committer's steps, produce, the broker's append), at p50, p99 and over the slowest 1%,
and pg_stat_wal (read before and after the point) gives the server's WAL flushes meanwhile:
one S13-account row per point.
"""

import os

import batch_account
import proc
from open_loop import S5_WARM_S, client_ms, floor_timing, worker_point
from rows import awk_num, commify, field, parse_kv
from runs import _psql_value, ready

FRACTIONS = (10, 25, 50, 75, 90)
# --quick (the test suite's smoke run) draws three of them: each point is a fresh run, an audit
# and two floors, about 15 s whatever its length.
FRACTIONS_QUICK = (10, 50, 90)
PROBE_S, PROBE_QUICK_S = 5, 2
POINT_S, POINT_QUICK_S = 10, 3
LAG_MS = 250
GROW, MAX_GROW, BISECT = 1.3, 8, 3
GENERATOR_SHARE = 0.95


def _start_rate(b):
    head = b.s1_rate.split(".")[0] if b.s1_rate else ""
    return max(int(head) // 2, 1000) if head.isdigit() and int(head) > 0 else 20000


class Prober:
    """The capacity search's one run: a worker, one SKU per probe."""

    def __init__(self, b):
        self.b = b
        self.log = b.log("S13-capacity.log")
        self.run = proc.Run(self.log, "bench-curve", 1)
        self.worker = self.run.start_worker(b.path("s13-capacity-worker.log"))
        self.n = 0
        # ready: the worker joined and answered a first sale record
        self.run.fs("sale", "open", "CAP0", "--stock", "500", out="null")
        self.ok = self.run.rc == 0 and ready(self.run)
        self.seconds = PROBE_QUICK_S if b.quick else PROBE_S

    def probe(self, rate):
        """One probe at RATE: (kept_up, generator_ok, lag_ms, TIMING line)."""
        self.n += 1
        sku = "CAP%d" % self.n
        self.run.fs("sale", "open", sku, "--stock", "500", "--wait", "30", out="null")
        proc.settle()
        start = proc.now_ms()
        loaded = self.run.fs_ok("load", sku, "--buyers", str(rate * self.seconds), "--rate",
                                str(rate), "--seed", "501")
        rc, timing = self.run.fs("timing", "--since", str(start), "--timeout", "300",
                                 out="capture")
        self.log.echo("probe %d at %d/s: %s" % (self.n, rate, timing))
        if not loaded or rc != 0 or not timing.startswith("TIMING "):
            return None
        secs, pub = awk_num(field(timing, "seconds")), awk_num(field(timing, "publish_seconds"))
        lag = max(secs - pub, 0.0) * 1000
        offered = awk_num(field(timing, "records")) / pub if pub > 0 else 0.0
        gen_ok = offered >= GENERATOR_SHARE * rate
        return lag <= LAG_MS and gen_ok, gen_ok, lag, offered

    def close(self):
        proc.stop(self.worker)
        audit = self.run.audit(self.b.path("s13-capacity-audit.txt"))
        self.log.close()
        return audit


def _probe_row(b, rate, got):
    kept, gen_ok, lag, offered = got
    b.add(parse_kv("scenario=S13-probe kind=flashsale approach=flashsale offered_per_s=%d "
                   "published_per_s=%.0f lag_ms=%.0f kept_up=%s generator_ok=%s check=ok" % (
                       rate, offered, lag, "yes" if kept else "no", "yes" if gen_ok else "no")))


def capacity(b):
    """The search; one row per probe and one for the capacity. Returns it (0 on failure)."""
    p = Prober(b)
    if not p.ok:
        p.close()
        return _capacity_failed(b, "the run did not start (log %s)" % p.log.path)
    # lo: the highest rate kept up with so far; hi: the lowest that was not (0: none yet, the
    # rate still grows); after the first rate not kept up with, BISECT probes halve [lo, hi].
    lo = hi = grown = bisects = 0
    rate, generator_bound = _start_rate(b), False
    while True:
        got = p.probe(rate)
        if got is None:
            p.close()
            return _capacity_failed(b, "a probe failed (log %s)" % p.log.path)
        _probe_row(b, rate, got)
        generator_bound = generator_bound or not got[1]
        if got[0]:
            lo = rate
        else:
            hi = rate
        if not hi:
            grown += 1
            if grown == MAX_GROW:
                break
            rate = int(rate * GROW)
            continue
        if bisects == BISECT:
            break
        bisects += 1
        rate = (lo + hi) // 2
        if rate <= lo or rate < 100:
            break
    audit = p.close()
    cap = lo
    check = "ok" if cap > 0 and audit == "ok" else "audit_%s" % audit if cap else "none_kept_up"
    s1 = awk_num(b.s1_rate) if b.s1_rate else 0.0
    b.add(parse_kv("scenario=S13-capacity kind=flashsale approach=flashsale capacity_per_s=%d "
                   "first_behind_per_s=%s generator_bound=%s probes=%d probe_s=%d lag_ms=%d "
                   "s1_per_s=%s check=%s" % (cap, hi or "-", "yes" if generator_bound else "no",
                                             p.n, p.seconds, LAG_MS, b.s1_rate or "-", check)))
    if check != "ok":
        b.failed += 1
    b.progress("S13", "capacity", "%s intents/s kept up with (%s/s fell behind; %d probes of %d "
               "s)%s%s  %s" % (
                   commify(str(cap)), commify(str(hi)) if hi else "-", p.n, p.seconds,
                   "  the load generator's limit reached" if generator_bound else "",
                   "  %.2fx S1's burst" % (cap / s1) if s1 > 0 else "", "check=%s" % check))
    return cap if check == "ok" else 0


def _capacity_failed(b, why):
    b.progress("S13", "capacity", "FAILED (%s)" % why)
    b.add(parse_kv("scenario=S13-capacity kind=flashsale approach=flashsale lag_ms=%d "
                   "check=error" % LAG_MS))
    b.failed += 1
    return 0


def _wal_syncs():
    """The server's WAL flushes so far: (count, ms), from pg_stat_wal (track_wal_io_timing on,
    as scripts/services sets it); None when it cannot be read."""
    v = _psql_value(proc.admin_pg(), "SELECT wal_sync, wal_sync_time FROM pg_stat_wal").split("|")
    try:
        return int(v[0]), float(v[1])
    except (ValueError, IndexError):
        return None


def _account_row(b, pct, trace, since, wal0, wal1):
    """S13-account: where the traced point's batches spent their time (bench/batch_account.py),
    and the server's WAL flushes meanwhile."""
    try:
        with open(trace) as f:
            res = batch_account.account(f, since)
    except OSError:
        res = None
    if not res:
        b.progress("S13", "%d%% account" % pct, "FAILED (no traced batch in %s)" % trace)
        b.add(parse_kv("scenario=S13-account kind=flashsale approach=flashsale fraction=%d "
                       "check=error" % pct))
        b.failed += 1
        return
    kv = ["scenario=S13-account", "kind=flashsale", "approach=flashsale", "fraction=%d" % pct,
          "batches=%d" % res["batches"], "records=%d" % res["records"],
          "stacked=%d" % res["stacked"], "in_line=%d" % res["in_line"],
          "slowest_batches=%d" % res["slowest"]["batches"],
          "slowest_records=%.0f" % res["slowest"]["records"]]
    for k in batch_account.STEPS + ("total",):
        kv += ["%s_p50=%.2f" % (k, res[k]["p50"]), "%s_p99=%.2f" % (k, res[k]["p99"]),
               "%s_slow=%.2f" % (k, res["slowest"][k])]
    syncs = wal1[0] - wal0[0] if wal0 and wal1 else 0
    flush_ms = (wal1[1] - wal0[1]) / syncs if syncs > 0 else None
    kv += ["wal_syncs=%s" % (syncs if wal0 and wal1 else "-"),
           "wal_sync_ms=%s" % ("%.2f" % flush_ms if flush_ms is not None else "-"), "check=ok"]
    b.add(parse_kv(" ".join(kv)))
    b.progress("S13", "%d%% account" % pct, "%d batches: p50 batch %.1f ms = fetch %.1f + "
               "gather %.1f + decide %.1f + commit %.1f + append %.1f ...; slowest 1%% %.1f ms; "
               "WAL flush %s ms on average (%s)" % (
                   res["batches"], res["total"]["p50"], res["fetch"]["p50"],
                   res["gather"]["p50"], res["decide"]["p50"],
                   res["send1"]["p50"] + res["send2"]["p50"], res["append"]["p50"],
                   res["slowest"]["total"],
                   "%.2f" % flush_ms if flush_ms is not None else "-",
                   "%s flushes" % syncs if wal0 and wal1 else "pg_stat_wal not read"))


def _point_worker(b, pct, rate, seconds):
    name = "S13-%d" % pct
    n = rate * (seconds + S5_WARM_S)
    trace = b.path("s13-%d-trace.txt" % pct)
    if os.path.exists(trace):
        os.remove(trace)
    wal0 = _wal_syncs()
    ok, timing, _, slowest, sold, left, audit, log_path, since = worker_point(
        b, name, rate, n, trace=trace)
    wal1 = _wal_syncs()
    t = lambda k: field(timing, k)  # noqa: E731
    check = "ok" if ok and timing and audit == "ok" and t("answered") == t("records") else "error"
    b.add(parse_kv(
        "scenario=S13 kind=flashsale approach=flashsale fraction=%d offered_per_s=%d "
        "requests=%s p50_ms=%s p99_ms=%s p999_ms=%s max_ms=%s client_ms=%s "
        "slowest_commit_ms=%s sold=%s check=%s" % (
            pct, rate, t("records") or "-", t("p50_ms") or "-", t("p99_ms") or "-",
            t("p999_ms") or "-", t("max_ms") or "-", client_ms(timing) if timing else "-",
            slowest, sold or "-", check)))
    if check != "ok":
        b.failed += 1
    b.progress("S13", "%d%% worker" % pct, "offered %s/s: p50 %s ms  p99 %s ms  p99.9 %s ms  "
               "slowest transaction %s ms  %s" % (
                   commify(str(rate)), t("p50_ms"), t("p99_ms"), t("p999_ms"), slowest,
                   "check=%s" % check if check == "ok" else "FAILED (log %s)" % log_path))
    _account_row(b, pct, trace, since, wal0, wal1)


def _point_floor(b, pct, kind, rate, seconds):
    sc = "S13-floor" if kind == "plain" else "S13-floor-durable"
    n = rate * (seconds + S5_WARM_S)
    timing, exit_line, rc, log_path = floor_timing(b, kind, "%s-%d" % (sc, pct),
                                                   "S13 %s floor" % kind, rate, n)
    t = lambda k: field(timing, k)  # noqa: E731
    check = "ok" if timing and rc == 0 and t("answered") == t("records") else "error"
    b.add(parse_kv(
        "scenario=%s kind=floor approach=echo fraction=%d offered_per_s=%d requests=%s "
        "p50_ms=%s p99_ms=%s p999_ms=%s max_ms=%s slowest_flush_ms=%s check=%s" % (
            sc, pct, rate, t("records") or "-", t("p50_ms") or "-", t("p99_ms") or "-",
            t("p999_ms") or "-", t("max_ms") or "-",
            (field(exit_line, "ms_sync_max") or "-") if kind == "durable" else "-", check)))
    if check != "ok":
        b.failed += 1
    b.progress("S13", "%d%% %s floor" % (pct, kind), "offered %s/s: p50 %s ms  p99 %s ms  "
               "p99.9 %s ms  %s" % (commify(str(rate)), t("p50_ms"), t("p99_ms"), t("p999_ms"),
                                    "check=%s" % check if check == "ok"
                                    else "FAILED (log %s)" % log_path))


def run_all(b):
    """The capacity, then every point: the worker, the plain floor, the durable floor."""
    cap = capacity(b)
    fractions = FRACTIONS_QUICK if b.quick else FRACTIONS
    if cap <= 0:
        b.run_no += len(fractions) * 4
        return
    seconds = POINT_QUICK_S if b.quick else POINT_S
    for pct in fractions:
        rate = max(cap * pct // 100, 100)
        _point_worker(b, pct, rate, seconds)
        _point_floor(b, pct, "plain", rate, seconds)
        _point_floor(b, pct, "durable", rate, seconds)


def runs(quick):
    """The progress lines S13 prints."""
    return 1 + 4 * len(FRACTIONS_QUICK if quick else FRACTIONS)
