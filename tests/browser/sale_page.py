#!/usr/bin/python3
"""The sale page in real headless Chromium browsers (tests/integration/68-sale-page.sh).

    sale_page.py --url GW --sku SKU --stock N --expiry-sku SKU2 --not-open-sku SKU3
                 --closed-sku SKU4 --crowd N --load FILE --out FILE [--pages 5]

Run with Debian's /usr/bin/python3 (python3-selenium 4.8.3), chromium and chromium-driver
(FLASHSALE_CHROMIUM and FLASHSALE_CHROMEDRIVER name others).
Each page is its own browser (its own profile, so its own localStorage and its own six
connections), buying as ?buyer=page<i>. The sale of SKU (N units, one per buyer) must be
open and untouched. What it does, asserting each step in the pages themselves:

  1. every page's live counter shows N of N, open;
  2. page0 double-clicks Buy: one POST, "You're in the queue", then held; page1's buy
     reaches the gateway but its answer is held back in the browser (DevTools' Fetch
     domain), and the page is reloaded then: it sends the same key again, and holds (both
     are on the log before the crowd);
  3. the crowd (tests/clients/gateway_load.py, --crowd buyers) starts, and pages 2.. click
     while it buys: each ends held or sold out; every counter reaches 0, sold out;
  4. page0 pays through the payment provider's page (the gateway's payment.checkout.url,
     scripts/payment-stub: Pay there, back to the sale page, Paid), page1 cancels
     (Cancelled): every counter shows 1 again, open;
  5. a page that was told sold out clicks again (a new click-through, a new id) and holds;
     every counter 0 again; page0 and that page reloaded show what they showed, same ids;
  6. another page opens EXPIRY-SKU (one unit, a hold of 1 s), holds, and sees it expire;
  7. meanwhile the last page buys on NOT-OPEN-SKU (its window opens later: "Sale not
     open", the worker's decision) and CLOSED-SKU (closed: "Sale closed", at the edge).

What the browsers sent (Chrome's network log: every POST and its Idempotency-Key) and what
the pages showed go to --out (JSON) for the shell test to hold against Postgres. Any failed
step prints one line "FAIL: ..." and exits 1; a browser that cannot start is such a failure.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP_S = 30  # the longest any one condition is waited for
# Debian's packages; another Chromium and its driver can be named in the environment.
CHROMIUM = os.environ.get("FLASHSALE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FLASHSALE_CHROMEDRIVER", "/usr/bin/chromedriver")

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:  # never a silent skip
    print("FAIL: cannot import selenium for %s (python3-selenium, scripts/setup): %s"
          % (sys.executable, e))
    sys.exit(1)


class Fail(Exception):
    pass


def say(msg):
    print("sale_page: " + msg, flush=True)


# What a page shows, read in one round trip.
STATE_JS = """
const m = document.getElementById('message'), s = document.getElementById('status');
const t = (id) => document.getElementById(id).textContent;
return {outcome: m.dataset.outcome || '', intent: m.dataset.intent || '',
        decision: m.dataset.decision || '', source: m.dataset.source || '',
        text: m.textContent, status: s.dataset.status, available: t('available'),
        supply: t('supply'), buy_disabled: document.getElementById('buy').disabled,
        pay_shown: !document.getElementById('pay').hidden};
"""


class Page:
    # More Chromium flags (tests/browser/nginx_front.py: the test CA's certificate).
    extra_args = []

    def __init__(self, index, url, sku):
        self.index = index
        self.name = "page%d" % index
        self.base = url
        self.url = "%s/sale/%s?buyer=%s" % (url, sku, self.name)
        self.profile = tempfile.mkdtemp(prefix="flashsale-chromium-")
        self.driver = None
        self.net = []  # Chrome's performance log entries, drained as they come
        self.attempts = []  # what the page showed, per click-through

    def start(self):
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=800,700", "--user-data-dir=" + self.profile] + self.extra_args:
            o.add_argument(a)
        # The network log: every request the page sends, with its headers.
        o.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
        self.driver.set_page_load_timeout(STEP_S)

    def quit(self):
        if self.driver:
            try:
                self.driver.quit()
            except WebDriverException:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def state(self):
        return self.driver.execute_script(STATE_JS)

    def wait(self, what, cond, timeout=STEP_S):
        """Waits until cond(state) holds; returns that state."""
        last = {}

        def check(_):
            last.update(self.state())
            return cond(last)

        try:
            WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(check)
        except TimeoutException:
            raise Fail("%s: timed out after %d s waiting for %s; it shows %s"
                       % (self.name, timeout, what, json.dumps(last, sort_keys=True)))
        return dict(last)

    def counter(self, available, status):
        return self.wait("its counter to show %s available, %s" % (available, status),
                         lambda s: s["available"] == str(available) and s["status"] == status)

    def outcome(self, *outcomes):
        return self.wait("an outcome in %s" % (outcomes,),
                         lambda s: s["outcome"] in outcomes and s["intent"])

    def button(self, name):
        return self.driver.find_element("id", name)

    def drain(self):
        for e in self.driver.get_log("performance"):
            self.net.append(json.loads(e["message"])["message"])

    def posts(self):
        """[(path, Idempotency-Key)] of every POST the page sent."""
        self.drain()
        out = []
        for m in self.net:
            if m.get("method") != "Network.requestWillBeSent":
                continue
            req = m["params"]["request"]
            if req["method"] != "POST":
                continue
            h = {k.lower(): v for k, v in req.get("headers", {}).items()}
            out.append((req["url"][len(self.base):], h.get("idempotency-key", "")))
        return out

    def record(self, st):
        """Keeps the click-through the page shows (its first showing of each id)."""
        if not any(a["id"] == st["intent"] for a in self.attempts):
            self.attempts.append({"id": st["intent"], "decision": st["decision"],
                                  "source": st["source"], "shown": st["outcome"]})
        for a in self.attempts:
            if a["id"] == st["intent"]:
                a["last"] = st["outcome"]


def start_all(pages):
    errors = []

    def one(p):
        try:
            p.start()
        except Exception as e:  # chromedriver missing, Chromium refusing to start, ...
            errors.append("%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0]
                                      if str(e).strip() else repr(e)))

    threads = [threading.Thread(target=one, args=(p,)) for p in pages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise Fail("cannot start Chromium (%s) with chromedriver (%s): %s"
                   % (CHROMIUM, CHROMEDRIVER, errors[0]))


def gateway_knows(page, url, intent):
    """Waits until the buy is on the log (queued or decided; not 404, and not "publishing": a
    reload that sends it again while the first POST waits for its delivery report gets 409
    in_flight, which the page retries but its console reports)."""
    def known(_):
        try:
            with urllib.request.urlopen("%s/v1/intents/%s" % (url, intent), timeout=5) as r:
                return (r.status == 200
                        or json.loads(r.read() or b"{}").get("status") == "queued")
        except (urllib.error.HTTPError, ValueError):
            return False

    try:
        WebDriverWait(page.driver, STEP_S, poll_frequency=0.05).until(known)
    except TimeoutException:
        raise Fail("%s: the gateway does not know intent %s after %d s"
                   % (page.name, intent, STEP_S))


def check(cond, what):
    if not cond:
        raise Fail(what)
    say("ok: " + what)


def run(a, pages):
    t0 = time.monotonic()
    start_all(pages)
    say("%d browsers started in %.1f s" % (len(pages), time.monotonic() - t0))
    p0, p1, racers = pages[0], pages[1], pages[2:]

    # 1. The pages and their live counters.
    for p in pages:
        p.driver.get(p.url)
    for p in pages:
        p.wait("the sale open with %d of %d, Buy enabled" % (a.stock, a.stock),
               lambda s: s["status"] == "open" and s["available"] == str(a.stock)
               and s["supply"] == str(a.stock) and not s["buy_disabled"]
               and s["outcome"] == "idle" and s["text"] == "")
    check(True, "%d pages show %d of %d, open, Buy enabled" % (len(pages), a.stock, a.stock))

    # 2. A double click, and a reload during the buy: page1's buy reaches the gateway, but the
    # browser holds its answer back (DevTools' Fetch domain pauses it), and the page is
    # reloaded then, not knowing whether it bought.
    # page0's stream of its intent is held back likewise until it showed the queue.
    p0.driver.execute_cdp_cmd("Fetch.enable", {"patterns": [
        {"urlPattern": "*/v1/intents/*/events", "requestStage": "Response"}]})
    ActionChains(p0.driver).double_click(p0.button("buy")).perform()
    st = p0.outcome("queued")
    check(st["text"] == "You're in the queue" and st["buy_disabled"],
          "page0: \"You're in the queue\" (202), Buy disabled")
    p0.driver.execute_cdp_cmd("Fetch.disable", {})
    p1.driver.execute_cdp_cmd("Fetch.enable", {"patterns": [
        {"urlPattern": "*/buys", "requestStage": "Response"}]})
    p1.button("buy").click()
    st = p1.wait("its buy sent", lambda s: s["outcome"] == "posting" and s["intent"])
    gateway_knows(p1, a.url, st["intent"])
    check(p1.state()["outcome"] == "posting",
          "page1's buy is on the log and the page has no answer yet")
    p1.driver.refresh()
    # The page sends its buy again at once, paused likewise: let it through.
    p1.wait("the reloaded page", lambda s: s["intent"] == st["intent"])
    p1.driver.execute_cdp_cmd("Fetch.disable", {})
    for p in (p0, p1):
        st = p.outcome("held")
        p.record(st)
        keys = [k for path, k in p.posts() if path.startswith("/v1/skus/")]
        if p is p0:  # Buy disabled at the first click: the second one sends nothing
            check(keys == [st["intent"]], "page0's double click sent one buy (%s), got %s"
                  % (st["intent"], keys))
        else:  # sent before the reload or not: again after it, with the same key
            check(set(keys) == {st["intent"]}, "page1 sent %d buy POST(s), all with the key %s"
                  % (len(keys), st["intent"]))
        check(re.fullmatch(r"You got one: pay within \d\d:\d\d", st["text"]) is not None
              and st["pay_shown"] and st["buy_disabled"],
              "%s holds one: \"%s\", Pay shown, Buy disabled" % (p.name, st["text"]))

    # 3. The crowd, and the other pages clicking at the same moment, together.
    load = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/clients/gateway_load.py"), "--url", a.url,
         "--sku", a.sku, "--buyers", str(a.crowd), "--threads", "8", "--wait", "30",
         "--prefix", "crowd", "--out", a.load], stdout=subprocess.PIPE, text=True)
    clicks = [threading.Thread(target=lambda p=p: p.button("buy").click()) for p in racers]
    for t in clicks:  # at once, as a crowd clicks
        t.start()
    for t in clicks:
        t.join()
    during = load.poll() is None
    for p in racers:
        p.record(p.outcome("held", "sold_out"))
    out, _ = load.communicate(timeout=120)
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    say("crowd: " + summary)
    check(load.returncode == 0 and summary.startswith(
        "buyers=%d accepted=%d decided=%d failed=0" % (a.crowd, a.crowd, a.crowd)),
        "the crowd of %d buyers answered" % a.crowd)
    check(during, "pages 2-%d clicked as the crowd started (it was still buying after)"
          % (len(pages) - 1))
    for p in pages:
        p.counter(0, "sold_out")
    check(True, "every counter shows 0, sold out")
    won = [p for p in racers if p.attempts[-1]["decision"] == "held"]
    lost = [p for p in racers if p.attempts[-1]["shown"] == "sold_out"]
    say("racing pages: %s" % ", ".join("%s %s%s" % (p.name, p.attempts[-1]["shown"],
                                                    " (edge)" if p.attempts[-1]["source"] ==
                                                    "edge" else "") for p in racers))
    check(len(won) <= 1 and len(won) + len(lost) == len(racers),
          "at most one racing page holds (one unit was left), the others show sold out")

    # 4. Pay, cancel; the cancelled unit comes back on every counter. Pay goes through the
    # payment provider's page (scripts/payment-stub: it confirms the hold with the gateway,
    # signed, and sends the buyer back); the page cannot confirm by itself (issue 48).
    p0.button("pay").click()
    try:
        WebDriverWait(p0.driver, STEP_S, poll_frequency=0.05).until(
            lambda d: "/checkout?intent=" in d.current_url)
    except TimeoutException:
        raise Fail("page0: Pay did not lead to the payment provider's page (at %s)"
                   % p0.driver.current_url)
    check(p0.attempts[-1]["id"] in p0.driver.current_url,
          "page0's Pay leads to the payment provider's page, for its intent")
    p0.driver.find_element("id", "pay").click()
    try:
        WebDriverWait(p0.driver, STEP_S, poll_frequency=0.05).until(
            lambda d: d.current_url == p0.url)
    except TimeoutException:
        raise Fail("page0: the provider did not send it back (at %s: %s)"
                   % (p0.driver.current_url, p0.driver.find_element("tag name", "body").text))
    p0.record(p0.outcome("confirmed"))
    check(p0.state()["text"] == "Paid", "page0 paid, back on the sale page: \"Paid\"")
    p1.button("cancel").click()
    p1.record(p1.outcome("cancelled"))
    check(p1.state()["text"] == "Cancelled", "page1 cancelled: \"Cancelled\"")
    for p in pages:
        p.counter(1, "open")
    check(True, "every counter shows 1 again, open")

    # 5. A page told sold out wins the returned unit with a new click-through.
    pk = lost[0]
    old = pk.attempts[-1]["id"]
    check(not pk.state()["buy_disabled"], "%s's Buy is enabled after sold out" % pk.name)
    pk.button("buy").click()
    st = pk.outcome("held")
    pk.record(st)
    check(st["intent"] != old, "%s holds the returned unit with a new intent id" % pk.name)
    for p in pages:
        p.counter(0, "sold_out")
    check(True, "every counter shows 0 again")
    # Reloads after the buy: the same click-throughs, shown again, nothing sent.
    for p, want in ((p0, "confirmed"), (pk, "held")):
        shown = p.attempts[-1]["id"]
        p.driver.refresh()
        st = p.wait("the same intent, %s, after a reload" % want,
                    lambda s: s["outcome"] == want and s["intent"] == shown)
        check(True, "%s reloaded shows %s for the same intent" % (p.name, want))

    # 6. A hold that expires (another SKU: one unit, held 1 s) on a page not used above.
    pe = [p for p in racers if p is not pk][0]
    pe.driver.get("%s/sale/%s?buyer=%s" % (a.url, a.expiry_sku, pe.name))
    pe.counter(1, "open")
    pe.button("buy").click()
    pe.record(pe.outcome("held"))

    # 7. Meanwhile, on the last page: a sale not open yet (decided by the worker), and a
    # closed one (answered at the edge).
    pq = [p for p in racers if p is not pk and p is not pe][0]
    for sku, status, outcome, text in ((a.not_open_sku, "not_open", "not_open", "Sale not open"),
                                       (a.closed_sku, "closed", "closed", "Sale closed")):
        pq.driver.get("%s/sale/%s?buyer=%s" % (a.url, sku, pq.name))
        pq.wait("%s's status %s" % (sku, status), lambda s: s["status"] == status)
        pq.button("buy").click()
        st = pq.outcome(outcome)
        pq.record(st)
        check(st["text"] == text and not st["buy_disabled"],
              "%s on %s: \"%s\", Buy enabled again" % (pq.name, sku, text))

    st = pe.outcome("expired")
    pe.record(st)
    check(st["text"] == "Your hold expired", "%s: \"Your hold expired\"" % pe.name)
    pe.counter(1, "open")
    check(True, "the expired unit is back on %s's counter" % pe.name)

    # What each browser sent: one Idempotency-Key per click-through, however often sent.
    for p in pages:
        posts = p.posts()
        buys = [k for path, k in posts if path.startswith("/v1/skus/")]
        keys = list(dict.fromkeys(buys))
        want = [x["id"] for x in p.attempts if x["decision"] or x["source"] == "edge"]
        check(keys == want, "%s sent %d buy POST(s) with %d key(s): its %d click-through(s)"
              % (p.name, len(buys), len(keys), len(want)))
        p.buy_posts = buys
        severe = [e["message"] for e in p.driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not severe, "%s: no errors in the browser's console%s"
              % (p.name, "" if not severe else ": " + severe[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sku", required=True)
    ap.add_argument("--stock", type=int, required=True)
    ap.add_argument("--expiry-sku", required=True)
    ap.add_argument("--not-open-sku", required=True)
    ap.add_argument("--closed-sku", required=True)
    ap.add_argument("--crowd", type=int, required=True)
    ap.add_argument("--load", required=True, help="gateway_load.py's --out")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pages", type=int, default=5)
    a = ap.parse_args()
    if a.pages < 5:
        ap.error("--pages must be at least 5")
    pages = [Page(i, a.url, a.sku) for i in range(a.pages)]
    return drive(lambda: run(a, pages), pages, a.out, lambda _: [
        {"buyer": p.name, "attempts": p.attempts, "buy_posts": getattr(p, "buy_posts", [])}
        for p in pages])


def drive(go, pages, out_path, report):
    """Runs go(), then writes report(what go returned, or None) into OUT_PATH as JSON and closes
    every page, whatever happened; 0, or 1 with the failure printed."""
    t0 = time.monotonic()
    rc, got = 0, None
    try:
        got = go()
    except Fail as e:
        print("FAIL: %s" % e, flush=True)
        rc = 1
    except WebDriverException as e:
        print("FAIL: the browser: %s" % str(e).strip().splitlines()[0], flush=True)
        rc = 1
    finally:
        with open(out_path, "w") as f:
            json.dump(report(got), f)
        for p in pages:
            p.quit()
    say("%s in %.1f s" % ("done" if rc == 0 else "failed", time.monotonic() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())
