"""S11, what the metrics cost the sale (issue 30): S1's flashsale run (scripts/demo --no-gateway,
S1's buyers and stock) with the worker's metrics endpoint on (metrics.listen) and scraped every
SCRAPE_MS, against the same run with the endpoint off, alternated (off, scraped, off, scraped)
in one invocation so that the machine's drift falls on both alike. The rows carry the median
rate of each kind; the report puts them side by side with their ratio. A scrape asks the
worker's main thread for the text (docs/reference/metrics.md): this measures what that costs a
sale while Prometheus, scraping every second at most, would ask ten times less often.
"""

import os
import statistics
import threading
import time
import urllib.request

import proc
from rows import commify, field, parse_kv

SCRAPE_MS = 100
PAIRS = 2
DEMO_WORKER_LOG = ".local/log/demo-worker.log"
TIME_LIMIT = 900


class Scraper(threading.Thread):
    """Finds the demo worker's metrics port in its log, then GETs /metrics every SCRAPE_MS until
    stopped, counting the answers and timing them."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.ok = self.failed = 0
        self.max_ms = 0.0
        self.samples = 0  # lines of the last text: it had content

    def _port(self):
        try:
            with open(DEMO_WORKER_LOG) as f:
                for line in f:
                    if "metrics: listening on" in line and "(port " in line:
                        return int(line.split("(port ")[1].split(")")[0])
        except (OSError, ValueError, IndexError):
            pass
        return None

    def run(self):
        port = None
        while port is None and not self.stop_event.wait(0.05):
            port = self._port()
        url = "http://127.0.0.1:%d/metrics" % (port or 0)
        while port and not self.stop_event.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    text = r.read().decode()
                self.ok += 1
                self.samples = sum(1 for ln in text.splitlines() if ln and ln[0] != "#")
            except OSError:
                self.failed += 1
            took = (time.monotonic() - t0) * 1000
            self.max_ms = max(self.max_ms, took)
            self.stop_event.wait(max(0.0, SCRAPE_MS / 1000 - took / 1000))


def _one(b, scraped, i):
    """One S1-sized demo run: (intents/s or None, the scraper or None)."""
    log = b.log("flashsale-S11-%s-%d.log" % ("scraped" if scraped else "off", i))
    env = dict(os.environ)
    scraper = None
    if scraped:
        env["FLASHSALE_RUN_CONF"] = "metrics.listen = 127.0.0.1:0"
    try:
        os.remove(DEMO_WORKER_LOG)  # the scraper must not read an earlier run's port
    except OSError:
        pass
    proc.settle()
    if scraped:
        scraper = Scraper()
        scraper.start()
    rc, _ = log.run(["timeout", "--kill-after=10", str(TIME_LIMIT), "scripts/demo",
                     "--no-gateway", "--buyers", str(b.s1_buyers), "--stock", str(b.s1_stock)],
                    env=env)
    if scraper:
        scraper.stop_event.set()
        scraper.join(5)
    line, timing = log.last("RESULT "), log.last("TIMING ")
    log.close()
    ok = rc == 0 and line and timing and field(line, "audit") == "ok"
    return (float(field(timing, "per_s")) if ok else None), scraper


def flashsale_s11(b):
    """S11: off and scraped, PAIRS times each, alternated; one row per kind (the median)."""
    rates = {False: [], True: []}
    scrapes = []
    for i in range(PAIRS):
        for scraped in (False, True):
            rate, scraper = _one(b, scraped, i)
            if rate is not None:
                rates[scraped].append(rate)
            if scraper:
                scrapes.append(scraper)
    for scraped in (False, True):
        name = "flashsale-scraped" if scraped else "flashsale-metrics-off"
        got = rates[scraped]
        extra = ""
        if scraped:
            ok = sum(s.ok for s in scrapes)
            extra = " scrapes=%d scrape_failed=%d scrape_max_ms=%.1f samples=%d" % (
                ok, sum(s.failed for s in scrapes), max([s.max_ms for s in scrapes] or [0]),
                max([s.samples for s in scrapes] or [0]))
        check = "ok" if len(got) == PAIRS else "error"
        if scraped and check == "ok" and (sum(s.ok for s in scrapes) == 0 or
                                          max(s.samples for s in scrapes) == 0):
            check = "error"  # scraped means scraped: a run nobody read proves nothing
        median = statistics.median(got) if got else 0
        b.add(parse_kv("scenario=S11 kind=flashsale approach=%s buyers=%s stock=%s runs=%d "
                       "attempts_per_s=%.0f rates=%s scrape_ms=%d check=%s%s" % (
                           name, b.s1_buyers, b.s1_stock, len(got), median,
                           ",".join("%.0f" % r for r in got) or "-", SCRAPE_MS, check, extra)))
        if check != "ok":
            b.failed += 1
        b.progress("S11", name, "%9s intents/s (median of %s)%s  %s" % (
            commify("%.0f" % median), ",".join(commify("%.0f" % r) for r in got) or "-",
            "  %d scrapes every %d ms, slowest %.1f ms" % (
                sum(s.ok for s in scrapes), SCRAPE_MS,
                max([s.max_ms for s in scrapes] or [0])) if scraped else "",
            "check=%s" % check))
