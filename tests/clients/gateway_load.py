#!/usr/bin/env python3
"""Buyers against flashsale-gateway, for the integration tests (standard library only).

    gateway_load.py --url http://127.0.0.1:PORT --sku HOT --buyers N [--threads T]
                    [--wait SECONDS] [--retry-until SECONDS] [--out FILE]

Each thread holds one keep-alive connection. Per buyer: an intent id (a fresh UUID, the
Idempotency-Key), POST /v1/skus/SKU/buys, and with --wait a long-poll GET
/v1/intents/ID?wait=SECONDS for the decision. A connection error or a 503 is retried with the
same key (what a web tier does: the key makes the retry safe) until --retry-until seconds
have passed since the start; without it the buyer is recorded as failed. One JSON line per
buyer goes to --out: {"id", "buyer", "post": status, "outcome", "tries", "published"} (on the
log: answered 202, or 200 with a decision not from the edge flag); the last line of
stdout is a summary: "buyers=N accepted=N decided=N failed=N".
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
import uuid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sku", required=True)
    ap.add_argument("--buyers", type=int, required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--wait", type=float, default=0)
    ap.add_argument("--retry-until", type=float, default=0)
    ap.add_argument("--out")
    ap.add_argument("--prefix", default="gb")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    start = time.monotonic()
    lock = threading.Lock()
    rows = []
    next_buyer = [0]

    def take():
        with lock:
            i = next_buyer[0]
            if i >= a.buyers:
                return None
            next_buyer[0] += 1
            return i

    def worker():
        conn = None

        def request(method, path, body=None, headers=None):
            nonlocal conn
            if conn is None:
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=a.wait + 30)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                r = conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
                return r.status, data
            except (OSError, http.client.HTTPException):
                if conn:
                    conn.close()
                conn = None
                return None, b""

        while True:
            i = take()
            if i is None:
                break
            iid = str(uuid.uuid4())
            buyer = "%s%d" % (a.prefix, i)
            body = json.dumps({"buyer_id": buyer, "qty": 1})
            row = {"id": iid, "buyer": buyer, "post": None, "outcome": None, "tries": 0,
                   "published": False}
            while True:
                row["tries"] += 1
                st, data = request("POST", "/v1/skus/%s/buys" % a.sku, body,
                                   {"Content-Type": "application/json",
                                    "Idempotency-Key": iid})
                row["post"] = st
                if st in (200, 202):
                    # On the log: a 202, or a 200 with the decision already made (it reached
                    # the gateway before the delivery report did, or this is a retry). A 200
                    # from the sold-out flag says "source": "edge": nothing was published.
                    row["published"] = st == 202
                    if st == 200:
                        answer = json.loads(data)
                        row["outcome"] = answer.get("outcome")
                        row["published"] = answer.get("source") != "edge"
                    break
                if time.monotonic() - start >= a.retry_until:
                    break
                time.sleep(0.05)
            while a.wait > 0 and row["post"] == 202 and row["outcome"] is None:
                st, data = request("GET", "/v1/intents/%s?wait=%g" % (iid, a.wait))
                if st == 200:
                    row["outcome"] = json.loads(data).get("outcome")
                elif time.monotonic() - start >= max(a.retry_until, a.wait * 2):
                    break
                elif st is None or st == 503:
                    time.sleep(0.05)
            with lock:
                rows.append(row)
        if conn:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    accepted = sum(1 for r in rows if r["post"] in (200, 202))
    decided = sum(1 for r in rows if r["outcome"])
    failed = len(rows) - accepted
    print("buyers=%d accepted=%d decided=%d failed=%d seconds=%.2f"
          % (len(rows), accepted, decided, failed, time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
