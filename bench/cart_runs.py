"""S12, carts (issue 31): the seed's shopping-cart checkout, then a large run, each with the two
lock-based peers and the flashsale worker, in the same invocation.

  S12-seed  the seed's table: 8 customers x 15 carts of 3 lines over 8 SKUs of 1,000 units,
            2 ms of work per line between the read and the write (the seed's pricing). The
            peers run it as written (8 clients, closed loop); flashsale gets 120 such carts
            from `flashsale load` at once.
  S12       100,000 carts (--quick: 10,000) of 3 distinct lines over 20 SKUs of 2,000 units
            (--quick: 200), so that carts overlap; the peers with the invocation's clients
            (32).
The lines are drawn from seed SEED_N, by the peers' generator (bench/peers.c) and by `flashsale
load`'s: the same sizes and spread, not the same carts, and the same carts again in every
invocation.

Peers: build/bench/flashsale-peers --approach cart-for-update (the lines locked in the cart's
order: Postgres breaks the deadlocks, the cart is retried) and cart-sorted (locked in SKU
order). flashsale twice: on one partition (every cart's lines are on its coordinator's
partition: decided in one step, no messages) and on four (the lines spread over partitions by
the partitioning rule: the reservation protocol of docs/DESIGN-NOTES.md). A flashsale run is a
fresh database and topics (proc.Run), one worker, each SKU opened with --per-buyer 1 and a
600 s hold (nothing expires in the run); timed from just before the first publish until every
cart has its answer stored (carts.answer, polled every 20 ms); the worker's records and
batches from its last stats line, the units from the skus table, the verdict from
`flashsale audit` (its replay included).

carts/s = carts decided (held or refused) per second; units = units the held carts took
(flashsale: held, nothing is confirmed in the run; the peers: sold); oversell = units taken
beyond a SKU's stock (flashsale: SKUs whose available went below zero or whose held + sold
passed the stock: the audit's INV-1 and INV-8 say the same).
"""

import time

import proc
import runs
from rows import commify, field, parse_kv

SEED_N = 1201
SEED = {"clients": 8, "carts": 120, "skus": 8, "lines": 3, "stock": 1000, "think_us": 2000}
LINES, SKUS = 3, 20
PARTITIONS = (1, 4)
HOLD = "600s"
TIME_LIMIT = 600


def sizes(b, sc):
    """(clients, carts, skus, stock, think_us) of scenario SC."""
    if sc == "S12-seed":
        return (str(SEED["clients"]), SEED["carts"], SEED["skus"], SEED["stock"],
                SEED["think_us"])
    return b.clients, b.s12_carts, SKUS, b.s12_stock, 0


def peer(b, sc, ap):
    clients, carts, skus, stock, think_us = sizes(b, sc)
    runs.run_peer(b, sc, ap, carts, stock, clients=clients,
                  extra=["--skus", str(skus), "--lines", str(LINES), "--think-us", str(think_us),
                         "--seed", str(SEED_N)])


def _int(text):
    try:
        return int(text)
    except ValueError:
        return -1


def _wait_answered(run, carts, deadline):
    """Polls until every cart has its answer; the host clock when the last one was seen, or
    None at the deadline."""
    while time.monotonic() < deadline:
        q = "SELECT count(*) FROM carts WHERE answer IS NOT NULL"
        if _int(runs._psql_value(run.pg, q)) >= carts:
            return time.time()
        time.sleep(0.02)
    return None


def _stats(path):
    """The worker's last stats line's records and batches ("", "" when there is none)."""
    lines = proc.file_lines(path, " records=")
    last = lines[-1] if lines else ""
    return field(last, "records"), field(last, "batches")


def flashsale(b, sc, partitions):
    """One flashsale run of SC on PARTITIONS partitions; one row."""
    _, carts, skus, stock, _ = sizes(b, sc)
    name = "flashsale-%dp" % partitions
    log = b.log("%s-%s.log" % (sc, name))
    wlog = b.path("%s-%s-worker.log" % (sc, name))
    run = proc.Run(log, "bench-carts", partitions)
    ok = run.rc == 0
    worker = run.start_worker(wlog)
    names = ["C%02d" % i for i in range(skus)]
    for sku in names:
        ok = run.fs_ok("sale", "open", sku, "--stock", str(stock), "--per-buyer", "1",
                       "--hold", HOLD, "--wait", "60") and ok
    proc.settle()
    start = time.time()
    ok = run.fs_ok("load", ",".join(names), "--cart-lines", str(LINES), "--buyers", str(carts),
                   "--seed", str(SEED_N)) and ok
    end = _wait_answered(run, carts, time.monotonic() + TIME_LIMIT) if ok else None
    ok = ok and end is not None
    held = _int(runs._psql_value(run.pg, "SELECT count(*) FROM carts WHERE answer = 'held'"))
    units = runs._psql_value(
        run.pg, "SELECT coalesce(sum(held + sold), 0), coalesce(sum(available), 0), "
                "count(*) FILTER (WHERE available < 0 OR held + sold > supply) FROM skus")
    taken, left, over = (units.split("|") + ["", "", ""])[:3]
    audit = run.audit(b.path("%s-%s-audit.txt" % (sc, name)))
    proc.stop(worker)
    records, batches = _stats(wlog)
    log.close()
    if not ok or held < 0 or not taken:
        b.progress(sc, name, "FAILED (log %s)" % log.path)
        b.add(parse_kv("scenario=%s kind=flashsale approach=%s partitions=%d buyers=%d "
                       "stock=%d skus=%d check=error" % (sc, name, partitions, carts, stock,
                                                         skus)))
        b.failed += 1
        return
    secs = end - start
    rate = carts / secs if secs > 0 else 0
    check = "ok" if audit == "ok" and over == "0" else "audit_%s,oversold_skus_%s" % (audit, over)
    b.add(parse_kv(
        "scenario=%s kind=flashsale approach=%s partitions=%d clients=- buyers=%d requests=%d "
        "stock=%d skus=%d lines=%d seconds=%.3f attempts_per_s=%.0f winners_per_s=- won=%d "
        "sold=%s stock_left=%s oversell=%s deadlocks=- records=%s batches=%s complete=yes "
        "check=%s" % (sc, name, partitions, carts, carts, stock, skus, LINES, secs, rate, held,
                      taken, left, over, records or "-",
                      batches or "-", check)))
    if check != "ok":
        b.failed += 1
    b.progress(sc, name, "%7.1f s %9s carts/s  held %s  units %s/%s  records/cart %s  %s" % (
        secs, commify("%.0f" % rate), commify(str(held)), commify(taken),
        commify(str(stock * skus)),
        "%.1f" % (int(records) / carts) if records.isdigit() else "-", "check=%s" % check))


def run_all(b):
    """S12-seed, then S12: the two peers, then flashsale on 1 and 4 partitions."""
    for sc in ("S12-seed", "S12"):
        for ap in ("cart-for-update", "cart-sorted"):
            peer(b, sc, ap)
        for parts in PARTITIONS:
            flashsale(b, sc, parts)


RUNS = 2 * (2 + len(PARTITIONS))
