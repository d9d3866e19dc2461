#!/usr/bin/python3
"""The sale page's waiting room in real headless Chromium browsers (tests/integration/72-waiting-room.sh).

    queue_page.py --url GW --sku SKU --ahead N --out FILE

Run with Debian's /usr/bin/python3 (python3-selenium), chromium and chromium-driver, as
tests/browser/sale_page.py (whose Page and helpers it uses). SKU must be a sale behind a
waiting room that admits slowly (2 a second, say), open and without joiners, with at least
two units. Two pages, each its own browser: `qstream` follows its place on the queue's event
stream; `qpoll` has that stream blocked in the browser (DevTools' Network.setBlockedURLs), so
it falls back to the ?wait= long-poll. Once both browsers run, N buyers join through the
gateway (ahead of the pages), then the pages load. Asserted in the pages themselves:

  1. each page sees the sale behind a room, joins, and shows "You're in the queue" with its
     number, how many are ahead and the estimated wait, Buy disabled;
  2. the number ahead goes down while it waits (seen at least twice, never up);
  3. once admitted the page is the Buy page ("It's your turn", Buy enabled), over the stream
     for qstream and the long-poll for qpoll;
  4. Buy: held, the buy sent with the admission token the page was given.

What the pages showed and the tokens they bought with go to --out (JSON) for the shell test
to hold against Postgres and the intents topic. Any failed step prints one line "FAIL: ..."
and exits 1; a browser that cannot start is such a failure.
"""
import argparse
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Its Page (one browser, its own profile) and start_all (a browser that cannot start fails);
# it imports selenium, failing the same way when it cannot.
from sale_page import Fail, Page, drive, start_all  # noqa: E402


STEP_S = 30
QUEUE_JS = """
const q = document.getElementById('queue'), m = document.getElementById('message');
const t = (id) => document.getElementById(id).textContent;
let a = null;
try { a = JSON.parse(localStorage.getItem(arguments[0]) || 'null'); } catch (e) {}
return {queue: q.hidden ? 'hidden' : q.dataset.status, transport: q.dataset.transport || '',
        queue_text: t('queue-message'), place_shown: !document.getElementById('place').hidden,
        position: t('position'), ahead: t('ahead'), wait: t('wait'),
        buy_disabled: document.getElementById('buy').disabled,
        outcome: m.dataset.outcome || '', intent: m.dataset.intent || '',
        decision: m.dataset.decision || '', text: m.textContent,
        token: a ? a.token : ''};
"""


def say(msg):
    print("queue_page: " + msg, flush=True)


def check(cond, what):
    if not cond:
        raise Fail(what)
    say("ok: " + what)


def join(url, sku, buyer):
    req = urllib.request.Request("%s/v1/skus/%s/queue" % (url, sku), method="POST",
                                 data=json.dumps({"buyer_id": buyer}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        if r.status != 202:
            raise Fail("join %s: HTTP %d" % (buyer, r.status))


def run(a, pages):
    t0 = time.monotonic()
    start_all(pages)
    say("%d browsers started in %.1f s" % (len(pages), time.monotonic() - t0))
    qstream, qpoll = pages
    # qpoll's browser may not open the queue's stream: the page must fall back to the GET.
    qpoll.driver.execute_cdp_cmd("Network.enable", {})
    qpoll.driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/queue/*/events"]})
    for i in range(a.ahead):
        join(a.url, a.sku, "ahead-%d" % i)
    say("%d buyers joined ahead of the pages" % a.ahead)
    for p in pages:
        p.driver.get(p.url)

    def state(p):
        return p.driver.execute_script(QUEUE_JS, "flashsale.admission.%s.%s" % (a.sku, p.name))

    # 1-3. The queue, the number ahead going down, the admission.
    seen = {p.name: [] for p in pages}
    last = {}
    deadline = time.monotonic() + 2 * STEP_S + a.ahead
    while time.monotonic() < deadline:
        for p in pages:
            st = state(p)
            last[p.name] = st
            if st["queue"] == "waiting" and st["place_shown"]:
                check_waiting(p, st)
                if not seen[p.name] or seen[p.name][-1] != int(st["ahead"]):
                    seen[p.name].append(int(st["ahead"]))
        if all(last[p.name]["queue"] == "admitted" for p in pages):
            break
        time.sleep(0.05)
    else:
        raise Fail("the pages not admitted after %d s: %s" % (2 * STEP_S + a.ahead,
                                                               json.dumps(last, sort_keys=True)))
    for p in pages:
        s = seen[p.name]
        check(len(s) >= 2 and s[0] > 0 and all(x > y for x, y in zip(s, s[1:])),
              "%s showed the number ahead going down: %s" % (p.name, s))
        st = last[p.name]
        check(st["queue_text"] == "It's your turn: buy now" and not st["buy_disabled"]
              and st["token"].startswith("v1."),
              "%s admitted: \"%s\", Buy enabled, a token kept" % (p.name, st["queue_text"]))
    check(last["qstream"]["transport"] == "stream",
          "qstream followed its place on the stream (transport %s)" % last["qstream"]["transport"])
    check(last["qpoll"]["transport"] == "poll",
          "qpoll, its stream blocked, fell back to the long-poll (transport %s)"
          % last["qpoll"]["transport"])

    # 4. Buy: held.
    out = []
    for p in pages:
        token = last[p.name]["token"]
        p.button("buy").click()
        st = p.wait("held", lambda s: s["outcome"] == "held" and s["intent"])
        check(st["text"].startswith("You got one: pay within"),
              "%s bought once admitted: \"%s\"" % (p.name, st["text"]))
        out.append({"buyer": p.name, "intent": st["intent"], "token": token,
                    "ahead_seen": seen[p.name], "transport": last[p.name]["transport"]})
        severe = [e["message"] for e in p.driver.get_log("browser")
                  if e["level"] == "SEVERE" and e.get("source") != "network"]
        check(not severe, "%s: no script errors in the browser's console%s"
              % (p.name, "" if not severe else ": " + severe[0]))
    return out


def check_waiting(p, st):
    """A drawn place: "You're in the queue", its number, ahead and wait, Buy disabled."""
    if not (st["queue_text"] == "You're in the queue" and st["position"].isdigit()
            and st["ahead"].isdigit() and st["wait"].isdigit() and st["buy_disabled"]):
        raise Fail("%s: a waiting place shown wrong: %s" % (p.name, json.dumps(st, sort_keys=True)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sku", required=True)
    ap.add_argument("--ahead", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    pages = [Page(i, a.url, a.sku) for i in range(2)]
    for p, name in zip(pages, ("qstream", "qpoll")):
        p.name = name
        p.url = "%s/sale/%s?buyer=%s" % (a.url, a.sku, name)
    return drive(lambda: run(a, pages), pages, a.out, lambda out: out or [])


if __name__ == "__main__":
    sys.exit(main())
