#!/usr/bin/python3
"""The sale page in headless Chromium through the shipped nginx front (issue 48, item 7;
tests/integration/86-nginx-front.sh).

    nginx_front.py --url https://127.0.0.1:PORT --sku SKU --stock N

One browser (tests/browser/sale_page.py's Page: its own profile), buying as ?buyer=front0 on
the open sale of SKU (N units, untouched) over TLS: the test's throw-away CA is not in
Chromium's store, so it runs with --ignore-certificate-errors (loopback only). It asserts, in
the page itself: the live counter shows N of N; Buy holds, and the counter (the SKU's event
stream through nginx) shows N-1; Pay goes to the payment provider's page (the stub, which
confirms through nginx too) and back: "Paid". Prints "FAIL: ..." and exits 1 on any failed
step.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sale_page  # noqa: E402  (Debian's python3-selenium; Page, check, Fail, STEP_S)
from sale_page import Fail, Page, check  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def run(a, p):
    p.start()
    p.driver.get(p.url)
    check(p.driver.current_url.startswith("https://"), "the page over TLS: %s" % p.url)
    p.wait("the sale open with %d of %d" % (a.stock, a.stock),
           lambda s: s["status"] == "open" and s["available"] == str(a.stock)
           and not s["buy_disabled"] and s["outcome"] == "idle")
    check(True, "the page through nginx shows %d of %d, open, Buy enabled" % (a.stock, a.stock))
    p.button("buy").click()
    st = p.outcome("held")
    check(st["intent"] != "", "Buy holds through nginx (intent %s)" % st["intent"])
    p.counter(a.stock - 1, "open")
    check(True, "the live counter (the SKU's stream through nginx) shows %d" % (a.stock - 1))
    p.button("pay").click()
    try:
        WebDriverWait(p.driver, sale_page.STEP_S, poll_frequency=0.05).until(
            lambda d: "/checkout?intent=" in d.current_url)
    except TimeoutException:
        raise Fail("Pay did not lead to the payment provider's page (at %s)"
                   % p.driver.current_url)
    p.driver.find_element("id", "pay").click()
    try:
        WebDriverWait(p.driver, sale_page.STEP_S, poll_frequency=0.05).until(
            lambda d: d.current_url == p.url)
    except TimeoutException:
        raise Fail("the provider did not send it back (at %s: %s)"
                   % (p.driver.current_url, p.driver.find_element("tag name", "body").text))
    p.outcome("confirmed")
    check(p.state()["text"] == "Paid", "paid through the provider, back on the page over TLS: \"Paid\"")
    return st["intent"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sku", required=True)
    ap.add_argument("--stock", type=int, required=True)
    a = ap.parse_args()
    Page.extra_args = ["--ignore-certificate-errors"]
    p = Page(0, a.url.rstrip("/"), a.sku)
    p.name = "front0"
    p.url = "%s/sale/%s?buyer=%s" % (p.base, a.sku, p.name)
    try:
        intent = run(a, p)
        print(json.dumps({"buyer": p.name, "intent": intent}))
        return 0
    except Fail as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    finally:
        p.quit()


if __name__ == "__main__":
    sys.exit(main())
