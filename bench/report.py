"""docs/BENCHMARKS.md, docs/benchmarks.png and docs/latency-curve.png (when the rows have S13's
points) from a rows file (rows.py), and nothing else: the same rows give the same page. bench.py calls write() at the end of a run; run on its own it is
`scripts/bench report`:

  scripts/bench report [--rows FILE] [--out DIR] [--check]

FILE defaults to docs/benchmarks.jsonl and DIR to docs/. --check writes the page into a
temporary folder and exits 1 if it differs from DIR/BENCHMARKS.md (meson test bench_report,
suite unit: the page cannot drift from its rows); the charts are not compared (a PNG from
gnuplot and cairo is not the same bytes on every machine).

Every figure is also a ratio against the best peer of the same invocation: the per-request
approach with the highest rate (S1: attempts/s, S2: winners/s) whose check passed.
"""

import difflib
import os
import shutil
import subprocess
import sys
import tempfile

import report_text
import rows as rowsfile
from rows import awk_div, awk_num, commify, is_num, value


def header_fields(h):
    """The str.format fields of report_text from the rows file's header."""
    g = lambda section, key, default="": value(h.get(section) or {}, key) or default  # noqa: E731
    size = lambda key: value(h.get("sizes") or {}, key)  # noqa: E731
    s5_seconds, s5_warm = size("s5_seconds"), size("s5_warm_s")
    return {
        "mode": value(h, "mode"), "date": value(h, "date"), "commit": value(h, "commit"),
        "seconds": value(h, "seconds"),
        "cores": g("machine", "cores"), "cpu": g("machine", "cpu", "?"),
        "memory": g("machine", "memory"), "kernel": g("machine", "kernel"),
        "load_start": g("machine", "load_start"), "load_end": g("machine", "load_end"),
        "pg": g("postgresql", "server_version"), "fsync": g("postgresql", "fsync"),
        "sync_commit": g("postgresql", "synchronous_commit"),
        "wal_sync": g("postgresql", "wal_sync_method"), "fpw": g("postgresql", "full_page_writes"),
        "shared_buffers": g("postgresql", "shared_buffers"),
        "kafka": g("kafka", "version", "?"),
        "kafka_flush": g("kafka", "log.flush.interval.ms",
                         "unset (the kernel writes the logs back)"),
        "kafka_flush_tick": g("kafka", "log.flush.scheduler.interval.ms", "?"),
        "rdkafka": g("kafka", "librdkafka"),
        "redis": g("redis", "version", "-"), "redis_port": g("redis", "port"),
        "hiredis": g("redis", "hiredis"),
        "s1_buyers": commify(size("s1_buyers")), "s1_stock": commify(size("s1_stock")),
        "s2_buyers": commify(size("s2_buyers")), "s2_stock": commify(size("s2_stock")),
        "s3_intents": commify(size("s3_intents")), "s3_stock": commify(size("s3_stock")),
        "s4_intents": commify(size("s4_intents")),
        "s5_total": "%d" % (awk_num(s5_seconds) + awk_num(s5_warm)), "s5_warm": s5_warm,
        "s5_seconds": s5_seconds, "clients": size("clients"), "time_limit": size("time_limit_s"),
        "max_retries": size("max_retries"),
    }


def _ratio(v, b):
    if not is_num(v) or not is_num(b) or awk_num(b) == 0:
        return ""
    return " (%.2fx)" % (awk_num(v) / awk_num(b))


def _rate(v, b):
    return commify(v) + _ratio(v, b) if is_num(v) else "-"


def _ms(v, b):
    return ("%.2f" % awk_num(v)) + _ratio(v, b) if is_num(v) else "-"


def _best_peers(rows):
    """The S1 and S2 scenarios in their order, and the index of each one's best peer."""
    order, best = [], {}
    for i, r in enumerate(rows):
        sc = value(r, "scenario")
        if sc not in ("S1", "S2"):
            continue
        if sc not in order:
            order.append(sc)
        metric = "winners_per_s" if sc == "S2" else "attempts_per_s"
        if (value(r, "kind") == "peer" and value(r, "check") == "ok" and is_num(value(r, metric))
                and (sc not in best
                     or awk_num(value(r, metric)) > awk_num(value(rows[best[sc]], metric)))):
            best[sc] = i
    return order, best


FAILED_ROW = "| %s | - | - | - | - | - | - | - | - | - | - | run failed |"


def peer_tables(rows):
    """## S1 hot SKU and ## S2 all winners: every approach's row, ratios against the best."""
    out = []
    order, best = _best_peers(rows)
    for sc in order:
        b = best.get(sc)
        base = rows[b] if b is not None else {}
        out.append("## %s\n" % {"S1": "S1 hot SKU", "S2": "S2 all winners"}[sc])
        out.append(("Best peer: **%s**. " % value(base, "approach") if b is not None
                    else "No peer passed its check: no ratios. ")
                   + "sold/stock is checked in SQL after the run; oversell = sold - stock.\n")
        out.append("| approach | seconds | attempts/s | winners/s | p50 ms | p99 ms "
                   "| sold / stock | oversell | retries/sale | gave up | errors | check |")
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
        for i, r in enumerate(rows):
            if value(r, "scenario") != sc:
                continue
            v = lambda k: value(r, k)  # noqa: E731
            name = "**%s**" % v("approach") if i == b else v("approach")
            if v("kind") == "flashsale":
                name += " (worker)"
            if v("check") == "error":
                out.append(FAILED_ROW % name)
                continue
            bv = lambda k: value(base, k)  # noqa: E731
            oversell = "**%s**" % v("oversell") if awk_num(v("oversell")) > 0 else v("oversell")
            out.append("| %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s |" % (
                name, _ms(v("seconds"), bv("seconds")),
                _rate(v("attempts_per_s"), bv("attempts_per_s")),
                _rate(v("winners_per_s"), bv("winners_per_s")),
                _ms(v("p50_ms"), bv("p50_ms")), _ms(v("p99_ms"), bv("p99_ms")),
                commify(v("sold")), commify(v("stock")), oversell,
                v("retries_per_sale") or "-", v("gave_up") or "-", v("errors") or "-",
                v("check")))
        out.append("")
    return "".join(line + "\n" for line in out)


def checks_found(rows, max_retries):
    """One item per run that did not end with check=ok."""
    out = []
    for f in rows:
        v = lambda k: value(f, k)  # noqa: E731
        if v("check") == "ok":
            continue
        if v("check") == "error":
            out.append("- %s %s: the run failed (see .local/bench/)"
                       % (v("scenario"), v("approach")))
            continue
        if v("kind") == "floor":
            out.append("- %s: %s (see .local/bench/%s.log)" % (v("scenario"), v("check"),
                                                               v("scenario")))
            continue
        if v("scenario") == "S13-capacity":
            out.append("- S13 capacity: %s (see .local/bench/S13-capacity.log)" % v("check"))
            continue
        if v("scenario").startswith("S14"):
            out.append("- %s %s: %s (see .local/bench/%s*)" % (
                v("scenario"), v("approach"), v("check"), v("scenario")))
            continue
        if v("scenario").startswith("S12"):  # stock is per SKU: the supply is stock x SKUs
            out.append("- %s %s: %s: %s carts held, %s units of %s, %s deadlocks." % (
                v("scenario"), v("approach"), v("check"), commify(v("won")),
                commify(v("sold")), commify("%d" % (awk_num(v("stock")) * awk_num(v("skus")))),
                v("deadlocks")))
            continue
        text = "- %s %s: %s: sold %s of %s units (oversell %s, %s left in stock)" % (
            v("scenario"), v("approach"), v("check"), commify(v("sold")), commify(v("stock")),
            v("oversell"), v("stock_left"))
        if awk_num(v("gave_up")) > 0:
            text += (", %s buyer(s) gave up after %s retries while units were left"
                     % (v("gave_up"), max_retries))
        if awk_num(v("dup_orders")) > 0:
            text += ", %s order keys recorded twice" % v("dup_orders")
        if awk_num(v("errors")) > 0:
            text += ", %s errors" % v("errors")
        if v("complete") == "no":
            text += ", stopped at the time limit or on errors"
        out.append(text + ".")
    if not out:
        out.append("- nothing: every run passed.")
    return "".join(line + "\n" for line in out)


def render(header, rows):
    """The whole of BENCHMARKS.md."""
    fields = header_fields(header)
    max_retries = value(header.get("sizes") or {}, "max_retries")
    return (report_text.INTRO.format(**fields) + peer_tables(rows)
            + "What the checks found (every run that did not end with check=ok):\n\n"
            + checks_found(rows, max_retries) + "\n" + report_text.WHY
            + alone_table(rows) + http_table(rows) + metrics_table(rows) + cart_table(rows)
            + curve_table(rows) + room_table(rows))


ALONE_NAMES = {"S5-floor": "S5 floor", "S5-floor-durable": "S5 floor, durable",
               "S5-disk": "S5 disk alone"}


def _alone_rows(rows):
    """S3 .. S7 and S5's floors in their order; S1's best peer by attempts/s (its name and
    rate); the last floor and durable floor rows (S5's p99 is read against them)."""
    alone, s1best, s1name, floor, dfloor = [], 0.0, "", None, None
    for r in rows:
        sc, rate = value(r, "scenario"), value(r, "attempts_per_s")
        if (sc == "S1" and value(r, "kind") == "peer" and value(r, "check") == "ok"
                and is_num(rate) and awk_num(rate) > s1best):
            s1best, s1name = awk_num(rate), value(r, "approach")
        if sc in ("S3", "S4", "S5", "S6", "S7", "S5-disk"):
            alone.append(r)
        elif sc == "S5-floor":
            floor = r
            alone.append(r)
        elif sc == "S5-floor-durable":
            dfloor = r
            alone.append(r)
    return alone, s1best, s1name, floor, dfloor


def _times_p99(r, f, name):
    """"Nx that of NAME": the p99 of R over that of F, when F ran and passed its check."""
    if (f is None or value(f, "check") != "ok" or not is_num(value(f, "p99_ms"))
            or awk_num(value(f, "p99_ms")) <= 0 or not is_num(value(r, "p99_ms"))):
        return ""
    return "%.1fx that of %s" % (awk_num(value(r, "p99_ms")) / awk_num(value(f, "p99_ms")), name)


def _against(r, s1best, s1name, floor, dfloor):
    """The "against" column of an alone row: what its figure is read against."""
    sc, v = value(r, "scenario"), lambda k: value(r, k)  # noqa: E731
    if sc == "S4" and s1best > 0:
        return "%.2fx S1 best peer (%s, %s/s)" % (awk_num(v("attempts_per_s")) / s1best, s1name,
                                                 commify(s1best))
    if sc == "S6" and is_num(v("fresh_per_s")):
        return "%.2fx the fresh run (%s/s)" % (
            awk_div(awk_num(v("attempts_per_s")), awk_num(v("fresh_per_s"))),
            commify(v("fresh_per_s")))
    if sc == "S7" and is_num(v("routed_per_s")):
        return ("%.2fx the same sale published by the rule (%s/s); from the publish call p50/p99 "
                "%s ms, routed %s ms; %s forwarded" % (
                    awk_div(awk_num(v("attempts_per_s")), awk_num(v("routed_per_s"))),
                    commify(v("routed_per_s")), v("client_ms"), v("routed_client_ms"),
                    commify(v("forwarded"))))
    if sc == "S5":
        text = ("offered %s/s; the slowest transaction %s ms; p99 %s ms with the first second; "
                "from the publish call p50/p99/p99.9 %s ms" % (
                    commify(v("offered_per_s")), v("slowest_commit_ms"), v("whole_p99_ms"),
                    v("client_ms")))
        times = [t for t in (_times_p99(r, floor, "the floor"),
                             _times_p99(r, dfloor, "the durable floor")) if t]
        return text + ("; p99 " + ", ".join(times) if times else "")
    if sc.startswith("S5-floor"):
        what = " or stored"
        if sc == "S5-floor-durable":
            what = (", each batch of intents written to a file and flushed (fdatasync) first, "
                    "the slowest flush %s ms" % v("slowest_flush_ms"))
        return ("the open loop of S5 (offered %s/s) answered by flashsale-echo: nothing decided%s"
                "; from the publish call p50/p99/p99.9 %s ms" % (
                    commify(v("offered_per_s")), what, v("client_ms")))
    if sc == "S5-disk":
        return ("flushes (records): an 8 KiB write and fdatasync every 5 ms, the services idle, "
                "no load; %s of them over 20 ms" % v("over_20ms"))
    return "-"


def _alone_line(r, against):
    sc, v = value(r, "scenario"), lambda k: value(r, k)  # noqa: E731
    fig = lambda k: v(k) if is_num(v(k)) else "-"  # noqa: E731
    mem = "-"
    if sc == "S3":
        mem = "%s MB at 25%%, %s at 50%%, %s at the end, peak %s: flat %s" % (
            v("rss_q1_mb"), v("rss_warm_mb"), v("rss_end_mb"), v("rss_peak_mb"), v("rss_flat"))
    sold = "%s / %s" % (commify(v("sold")), commify(v("stock"))) if is_num(v("sold")) else "-"
    if sc == "S6":
        sold = "decisions identical: " + v("same_decisions")
    if sc.startswith("S5-floor") or sc == "S5-disk":
        sold = "-"
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        ALONE_NAMES.get(sc, sc), commify(v("requests")) if is_num(v("requests")) else "-",
        fig("seconds"), commify(v("attempts_per_s")) if is_num(v("attempts_per_s")) else "-",
        against, fig("p50_ms"), fig("p99_ms"), fig("p999_ms"), fig("max_ms"), sold, mem,
        v("check"))


def alone_table(rows):
    """## flashsale alone: S3 .. S7, one row each, ratios where the scenario has a reference."""
    alone, s1best, s1name, floor, dfloor = _alone_rows(rows)
    if not alone:
        return ""
    out = ["## flashsale alone: S3 .. S7\n",
           "| scenario | records | seconds | records/s | against | p50 ms | p99 ms | p99.9 ms "
           "| max ms | sold / stock | memory | check |",
           "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|---|---|"]
    for r in alone:
        name = ALONE_NAMES.get(value(r, "scenario"), value(r, "scenario"))
        if value(r, "check") == "error":
            out.append(FAILED_ROW % name)
            continue
        out.append(_alone_line(r, _against(r, s1best, s1name, floor, dfloor)))
    out += ["", "Targets (issue 5): S4 >= 100,000 intents/s end to end; S5 p99 <= 20 ms; S6 replay "
            ">= the fresh rate; S3 memory flat after warm-up. The figures above are where this "
            "run stands.", ""]
    return "".join(line + "\n" for line in out)


HTTP_NAMES = {"S8-floor": "S8 HTTP floor", "S9-floor": "S9 HTTP floor, POST only",
              "S8": "S8 HTTP end to end", "S9": "S9 after the sell-out", "S10": "S10 waiting"}


def _http_against(r):
    """The "against" column of an HTTP row."""
    sc, v = value(r, "scenario"), lambda k: value(r, k)  # noqa: E731
    rate = awk_num(v("attempts_per_s"))
    if sc == "S8":
        parts = []
        if is_num(v("floor_per_s")) and awk_num(v("floor_per_s")) > 0:
            parts.append("%.2fx the HTTP floor (%s/s)" % (rate / awk_num(v("floor_per_s")),
                                                          commify(v("floor_per_s"))))
        if is_num(v("s1_per_s")) and awk_num(v("s1_per_s")) > 0:
            parts.append("%.2fx S1 (%s/s, Kafka direct)" % (rate / awk_num(v("s1_per_s")),
                                                            commify(v("s1_per_s"))))
        parts.append("%s published, %s at the edge" % (commify(v("published")),
                                                       commify(v("edge"))))
        return "; ".join(parts)
    if sc == "S9":
        text = "%s published" % v("published")
        if is_num(v("floor_per_s")) and awk_num(v("floor_per_s")) > 0:
            text = "%.2fx the POST-only floor (%s/s); %s" % (
                rate / awk_num(v("floor_per_s")), commify(v("floor_per_s")), text)
        return text
    if sc == "S10":
        return ("%s long-polls at once: %s KiB each (RSS %.1f MB before, %.1f MB waiting); "
                "answered once a worker ran" % (
                    commify(v("waiting")), v("per_conn_kib"), awk_num(v("rss_before_kb")) / 1024,
                    awk_num(v("rss_waiting_kb")) / 1024))
    return "the same buyers against libmicrohttpd answering constants"


def http_table(rows):
    """## The HTTP front door: S8 .. S10 and their floors."""
    found = [r for r in rows if value(r, "scenario") in HTTP_NAMES]
    if not found:
        return ""
    out = ["## The HTTP front door: S8 .. S10\n",
           "Buyers over HTTP/1.1 keep-alive connections (build/bench/flashsale-httpload: "
           "libcurl, 2 threads, 64 connections), each POSTing its buy and long-polling its "
           "result (S9: POST only); buyers/s from the first request to the last answer, "
           "latency per buyer from its POST to its decision.\n",
           "| scenario | buyers | seconds | buyers/s | against | p50 ms | p99 ms | p99.9 ms "
           "| max ms | check |",
           "|---|--:|--:|--:|---|--:|--:|--:|--:|---|"]
    for r in found:
        name = HTTP_NAMES[value(r, "scenario")]
        if value(r, "check") == "error":
            out.append("| %s | failed: see the log | | | | | | | | error |" % name)
            continue
        fig = lambda k: value(r, k) if is_num(value(r, k)) else "-"  # noqa: E731
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, commify(value(r, "buyers")), fig("seconds"),
            commify(value(r, "attempts_per_s")) if is_num(value(r, "attempts_per_s")) else "-",
            _http_against(r), fig("p50_ms"), fig("p99_ms"), fig("p999_ms"), fig("max_ms"),
            value(r, "check")))
    out += ["", "Targets (issue 29, which calls them S7-S9): S8 >= 0.5x S1 and >= 0.25x the "
            "HTTP floor; S9 >= 0.8x the POST-only floor, nothing published; S10 <= 16 KiB per "
            "waiting connection. The buyers' program and the gateway share the machine's 2 "
            "cores with the broker, Postgres and the worker.", ""]
    stands = http_targets(found)
    if stands:
        out += ["Where this run stands: " + "; ".join(stands) + ".", ""]
    return "".join(line + "\n" for line in out)


def http_targets(found):
    """Each HTTP target this run measured, met or missed, with its figure. S8 against S1 also
    names the floor's own ratio to S1: no gateway on the same library and buyers can beat it."""
    by = {value(r, "scenario"): r for r in found if value(r, "check") != "error"}
    num = lambda r, k: awk_num(value(r, k)) if is_num(value(r, k)) else 0  # noqa: E731
    verdict = lambda ok: "met" if ok else "missed"  # noqa: E731
    out = []
    s8, s9, s10, floor8 = by.get("S8"), by.get("S9"), by.get("S10"), by.get("S8-floor")
    if s8 and num(s8, "floor_per_s") > 0:
        x = num(s8, "attempts_per_s") / num(s8, "floor_per_s")
        out.append("S8 >= 0.25x the HTTP floor %s (%.2fx)" % (verdict(x >= 0.25), x))
    if s8 and num(s8, "s1_per_s") > 0:
        x = num(s8, "attempts_per_s") / num(s8, "s1_per_s")
        text = "S8 >= 0.5x S1 %s (%.2fx)" % (verdict(x >= 0.5), x)
        if floor8 and num(floor8, "attempts_per_s") > 0:
            text += (", where the HTTP floor itself, libmicrohttpd answering constants to the "
                     "same buyers, is %.2fx S1" % (num(floor8, "attempts_per_s") /
                                                   num(s8, "s1_per_s")))
        out.append(text)
    if s9 and num(s9, "floor_per_s") > 0:
        x = num(s9, "attempts_per_s") / num(s9, "floor_per_s")
        ok = x >= 0.8 and num(s9, "published") == 0
        out.append("S9 >= 0.8x the POST-only floor with nothing published %s (%.2fx, %s "
                   "published)" % (verdict(ok), x, value(s9, "published")))
    if s10 and is_num(value(s10, "per_conn_kib")):
        kib = num(s10, "per_conn_kib")
        out.append("S10 <= 16 KiB per waiting connection %s (%s KiB)" % (
            verdict(kib <= 16), value(s10, "per_conn_kib")))
    return out


def metrics_table(rows):
    """## What the metrics cost: S11, the worker's metrics off and scraped, with the ratio."""
    found = {value(r, "approach"): r for r in rows if value(r, "scenario") == "S11"}
    off, on = found.get("flashsale-metrics-off"), found.get("flashsale-scraped")
    if not off and not on:
        return ""
    out = ["## What the metrics cost: S11\n",
           "S1's flashsale run (scripts/demo --no-gateway) with the worker's metrics endpoint "
           "off, and on with a scrape every %s ms (ten times Prometheus's usual fastest), "
           "alternated in this invocation; each row is the median of its runs.\n" % (
               value(on or off, "scrape_ms")),
           "| worker | runs | intents/s (median) | each run | scrapes | slowest scrape ms "
           "| check |",
           "|---|--:|--:|---|--:|--:|---|"]
    for name, r in (("metrics off", off), ("metrics scraped", on)):
        if not r:
            continue
        v = lambda k: value(r, k) if is_num(value(r, k)) else "-"  # noqa: E731
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, v("runs"), commify(value(r, "attempts_per_s")),
            ", ".join(commify(x) for x in value(r, "rates").split(",")), v("scrapes"),
            v("scrape_max_ms"), value(r, "check")))
    if (off and on and value(off, "check") == "ok" and value(on, "check") == "ok"
            and awk_num(value(off, "attempts_per_s")) > 0):
        out += ["", "Scraped against off: %.2fx (the medians)." % (
            awk_num(value(on, "attempts_per_s")) / awk_num(value(off, "attempts_per_s")))]
    out.append("")
    return "".join(line + "\n" for line in out)


CART_TITLES = {"S12-seed": "the seed's table", "S12": "the large run"}


def _cart_rows(rows, sc):
    """SC's rows and its reference: the cart-sorted peer's row when its check passed."""
    found = [r for r in rows if value(r, "scenario") == sc]
    base = [r for r in found if value(r, "approach") == "cart-sorted"
            and value(r, "check") == "ok"]
    return found, (base[0] if base else None)


def _cart_line(r, base):
    v = lambda k: value(r, k)  # noqa: E731
    name = v("approach") + (" (worker)" if v("kind") == "flashsale" else "")
    if v("check") == "error":
        return FAILED_ROW_CART % name
    bv = lambda k: value(base, k) if base else ""  # noqa: E731
    supply = awk_num(v("stock")) * awk_num(v("skus"))
    per_cart = (("%.1f" % (awk_num(v("records")) / awk_num(v("requests"))))
                if is_num(v("records")) and awk_num(v("requests")) > 0 else "-")
    over = "**%s**" % v("oversell") if awk_num(v("oversell")) > 0 else v("oversell")
    return "| %s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s |" % (
        name, _ms(v("seconds"), bv("seconds")), _rate(v("attempts_per_s"), bv("attempts_per_s")),
        commify(v("won")), commify(v("sold")), commify("%d" % supply), over,
        v("deadlocks") or "-", per_cart, v("batches") or "-", v("check"))


FAILED_ROW_CART = "| %s | failed | - | - | - | - | - | - | - | error |"


def cart_table(rows):
    """## Carts: S12, the seed's table and the large run, every row against cart-sorted."""
    if not any(value(r, "scenario") in CART_TITLES for r in rows):
        return ""
    out = ["## Carts: S12\n",
           "Carts of several lines, all or nothing (issue 31). The peers lock each line's row "
           "`FOR UPDATE`, in the cart's order (cart-for-update: crossing carts deadlock, "
           "Postgres ends one, it is retried) or in SKU order (cart-sorted); flashsale decides "
           "on one partition (every line on the cart's own partition: one step) and on four "
           "(the reservation protocol, docs/DESIGN-NOTES.md). carts/s = carts decided, held or "
           "refused, per second (flashsale: from the first publish to the last answer stored); "
           "units = units the held carts took; oversell = units beyond a SKU's stock (flashsale: "
           "SKUs over their stock, from its skus table); records "
           "and batches: the worker's, the protocol's messages included. Ratios against "
           "cart-sorted.\n"]
    targets = []
    for sc, title in CART_TITLES.items():
        found, base = _cart_rows(rows, sc)
        if not found:
            continue
        f = found[0]
        out += ["### %s %s: %s carts of %s lines over %s SKUs of %s units\n" % (
                    sc, title, commify(value(f, "buyers")), value(f, "lines"),
                    value(f, "skus"), commify(value(f, "stock"))),
                "| approach | seconds | carts/s | carts held | units / supply | oversell "
                "| deadlocks | records/cart | batches | check |",
                "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
        out += [_cart_line(r, base) for r in found]
        out.append("")
        if sc != "S12" or not base:
            continue
        for r in found:
            if value(r, "kind") != "flashsale" or value(r, "check") != "ok":
                continue
            x = awk_num(value(r, "attempts_per_s")) / max(awk_num(value(base, "attempts_per_s")),
                                                         1e-9)
            targets.append("%s: %.2fx cart-sorted, %s" % (
                value(r, "approach"), x, "met" if x >= 10 else "missed"))
    if targets:
        out += ["Target (issue 31): 0 deadlocks, no oversell, and >= 10x cart-sorted on the "
                "large run: " + "; ".join(targets) + ".", ""]
    return "".join(line + "\n" for line in out)


def _room_rows(rows):
    """S14's rows by scenario and approach."""
    return {(value(r, "scenario"), value(r, "approach")): r for r in rows
            if value(r, "scenario").startswith("S14")}


def _pair_line(name, plain, tokens):
    """One line of S14's token costs: the two rates and their ratio."""
    if not plain or not tokens:
        return []
    a, t = awk_num(value(plain, "attempts_per_s")), awk_num(value(tokens, "attempts_per_s"))
    ratio = "%.2fx" % (t / a) if a > 0 else "-"
    return ["| %s | %s | %s | %s | %s / %s |" % (
        name, commify(value(plain, "attempts_per_s")), commify(value(tokens, "attempts_per_s")),
        ratio, value(plain, "check"), value(tokens, "check"))]


def room_table(rows):
    """## The waiting room: S14, the joins, the draw, the rate, and what a token costs."""
    found = _room_rows(rows)
    if not found:
        return ""
    out = ["## The waiting room: S14\n",
           "Issue 33 (bench/room_runs.py has the method). One partition, the key ring's two "
           "keys, each run a fresh database and topics.\n"]
    m = found.get(("S14-micro", "room-micro"))
    if m and value(m, "check") == "ok":
        out += ["**The room's pure costs** (build/bench/flashsale-room-micro --buyers %s, one "
                "process, no services): a join %s us, the draw of every buyer %s ms, the "
                "room's arrays and index %s MB; a token minted in %s us and verified in %s "
                "us.\n" % (commify(value(m, "buyers")), value(m, "join_us"),
                            value(m, "draw_ms"), value(m, "memory_mb"), value(m, "mint_us"),
                            value(m, "verify_us"))]
    r = found.get(("S14-room", "flashsale-room"))
    if r:
        v = lambda k: value(r, k)  # noqa: E731
        mb = lambda k: "%.1f" % ((awk_num(v(k)) - awk_num(v("rss_kb"))) / 1024.0)  # noqa: E731
        out += ["**%s buyers join before the opening, through the broker** (check: %s):\n" % (
                    commify(v("buyers")), v("check")),
                "| measure | value |", "|---|--:|",
                "| joins/s (publish to the last row stored) | %s |" % commify(v("joins_per_s")),
                "| buyers in the draw (the worker's log) | %s |" % commify(v("draw_buyers")),
                "| the draw's batch, decided in (ms) | %s |" % v("draw_batch_ms"),
                "| the worker's RSS: grown with the joins (MB) | %s |" % mb("rss_joined_kb"),
                "| the worker's RSS: grown by the draw's end (MB) | %s |" % mb("rss_drawn_kb"),
                "| admission rate set (per s) | %s |" % commify(v("rate")),
                "| admitted in the busiest second of the log clock | %s |" % commify(
                    v("log_per_s_max")),
                "| the first slot after the opening (ms) | %s |" % v("first_slot_ms"),
                "| admission results per second of the broker's stamps: min / median / max "
                "| %s / %s / %s |" % (commify(v("stamp_per_s_min")),
                                      commify(v("stamp_per_s_median")),
                                      commify(v("stamp_per_s_max"))),
                "| a result's stamp after its slot: p50 / p99 / max (ms) | %s / %s / %s |" % (
                    v("late_p50_ms"), v("late_p99_ms"), v("late_max_ms")),
                ""]
    lines = (_pair_line("worker (`flashsale load`, intents/s, medians)",
                        found.get(("S14-worker", "flashsale-plain")),
                        found.get(("S14-worker", "flashsale-tokens")))
             + _pair_line("gateway and worker (S8's run, buyers/s)",
                          found.get(("S14-gateway", "gateway-plain")),
                          found.get(("S14-gateway", "gateway-tokens"))))
    if lines:
        out += ["**What a token costs a buy**: S1's sale plain and behind a room, every buyer "
                "admitted first (untimed) and every buy carrying its token, checked by the "
                "worker (and at the gateway's edge in the second line):\n",
                "| path | plain | with tokens | tokens against plain | checks |",
                "|---|--:|--:|--:|---|"] + lines + [""]
    return "".join(line + "\n" for line in out)


def _curve_rows(rows):
    """S13's capacity row, its probes, and its points by fraction: {pct: {kind: row}}."""
    cap, probes, points = None, [], {}
    for r in rows:
        sc = value(r, "scenario")
        if sc == "S13-capacity":
            cap = r
        elif sc == "S13-probe":
            probes.append(r)
        elif sc in ("S13", "S13-floor", "S13-floor-durable", "S13-account"):
            pct = int(awk_num(value(r, "fraction")))
            points.setdefault(pct, {})[{"S13": "worker", "S13-floor": "plain",
                                        "S13-floor-durable": "durable",
                                        "S13-account": "account"}[sc]] = r
    return cap, probes, points


def _p99_over(w, d):
    """The worker's p99 over the durable floor's, or None."""
    if not w or not d or not is_num(value(w, "p99_ms")) or not is_num(value(d, "p99_ms")):
        return None
    floor = awk_num(value(d, "p99_ms"))
    return awk_num(value(w, "p99_ms")) / floor if floor > 0 else None


def curve_table(rows):
    """## The latency curve: S13, the capacity and every point beside its floors."""
    cap, probes, points = _curve_rows(rows)
    if not cap:
        return ""
    v = lambda k: value(cap, k)  # noqa: E731
    out = ["## The latency curve: S13\n",
           "The worker's sustained capacity, found with an open loop (S5's load: one hot SKU, one "
           "partition, one worker) whose rate goes up while the last answer comes within %s ms "
           "of the last publish, then the latency at fractions of it, each beside the plain "
           "floor and the durable floor at the same offered rate (flashsale-echo, as S5's); "
           "latency on the broker's clock, after an untimed first second (bench/curve_runs.py)."
           "\n" % v("lag_ms")]
    if v("check") == "error":
        return "".join(line + "\n" for line in out + ["The capacity search failed.", ""])
    s1 = awk_num(v("s1_per_s")) if is_num(v("s1_per_s")) else 0
    out.append("Sustained capacity: **%s intents/s**%s; the first rate that fell behind: %s. "
               "Probes (%s s each): %s.\n" % (
                   commify(v("capacity_per_s")),
                   " (%.2fx S1's burst rate, %s/s)" % (awk_num(v("capacity_per_s")) / s1,
                                                      commify(v("s1_per_s"))) if s1 else "",
                   (commify(v("first_behind_per_s")) + "/s" if is_num(v("first_behind_per_s"))
                    else "none") + (" (the load generator fell short of a probe's rate)"
                                    if v("generator_bound") == "yes" else ""),
                   v("probe_s"),
                   ", ".join("%s/s %s (lag %s ms)" % (
                       commify(value(r, "offered_per_s")),
                       "kept up" if value(r, "kept_up") == "yes" else "behind",
                       value(r, "lag_ms")) for r in probes) or "none"))
    out += ["| of capacity | offered/s | p50 ms | p99 ms | p99.9 ms | plain floor p99 "
            "| durable floor p99 | p99 / durable floor | slowest transaction ms | check |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for pct in sorted(points):
        w, f, d = (points[pct].get(k) for k in ("worker", "plain", "durable"))
        x = _p99_over(w, d)
        g = lambda r, k: value(r, k) if r and value(r, k) else "-"  # noqa: E731
        checks = [value(r, "check") for r in (w, f, d) if r]
        out.append("| %d%% | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            pct, commify(g(w, "offered_per_s")), g(w, "p50_ms"), g(w, "p99_ms"),
            g(w, "p999_ms"), g(f, "p99_ms"), g(d, "p99_ms"),
            "%.1fx" % x if x is not None else "-", g(w, "slowest_commit_ms"),
            "ok" if checks and all(c == "ok" for c in checks) else ",".join(checks) or "-"))
    out.append("")
    targets = []
    if s1:
        r = awk_num(v("capacity_per_s")) / s1
        targets.append("capacity >= 0.8x S1's burst: %.2fx, %s" % (r, "met" if r >= 0.8
                                                                    else "missed"))
    for pct, bound in ((50, 2), (75, 4)):
        x = _p99_over(points.get(pct, {}).get("worker"), points.get(pct, {}).get("durable"))
        if x is not None:
            targets.append("p99 <= %dx the durable floor at %d%%: %.1fx, %s" % (
                bound, pct, x, "met" if x <= bound else "missed"))
    if targets:
        out += ["Targets (issue 32): " + "; ".join(targets) + ".", ""]
    out += _account_table(points)
    if curve_chart_data(rows):  # (drawn only from points whose worker run passed)
        out += ["![latency against the offered rate, the floors as lines, log scales]"
                "(latency-curve.png)", ""]
    return "".join(line + "\n" for line in out)


# S13-account's steps (bench/batch_account.py), what each is, and whose time it is: the
# machine's (the broker, the client library's queues, the disk) or the worker's (its own code,
# and the rows it has Postgres write).
ACCOUNT_STEPS = (
    ("fetch", "the broker's append of the batch's first intent to the worker's poll, on the "
     "way (for one read by a busy worker: the way's p50)", "machine"),
    ("queued", "the rest of that wait: the worker busy with earlier records", "worker"),
    ("gather", "more records, batch.wait.ms, a committer to be free", "worker"),
    ("decide", "deciding, handing to a committer", "worker"),
    ("wake", "the committer thread waking", "worker"),
    ("render", "rendering the statements", "worker"),
    ("send1", "in line the statements' round trip; stacked the rows' COPYs", "worker"),
    ("send2", "in line the rows' COPYs and COMMIT; stacked the row lock, statements, COMMIT "
     "(the WAL flush is in here)", "worker"),
    ("finish", "the main thread taking the outcome", "worker"),
    ("produce", "producing the answers", "worker"),
    ("append", "to the broker's append of the last answer", "machine"),
)


def _account_table(points):
    """Where a batch's time goes, at 50% and 75% of the capacity (the targets' points)."""
    accs = [(pct, points[pct]["account"]) for pct in (50, 75)
            if points.get(pct, {}).get("account")
            and value(points[pct]["account"], "check") == "ok"]
    if not accs:
        return []
    num = lambda r, k: awk_num(value(r, k)) if is_num(value(r, k)) else 0.0  # noqa: E731
    out = ["### Where a batch's time goes\n",
           "Each point's worker wrote a line per batch (trace.batches); bench/batch_account.py "
           "splits the time from the broker's append of a batch's first intent to its last "
           "answer's into steps: p50 and p99 over the timed batches, and the average over the "
           "slowest 1%. The WAL flush is inside send2; pg_stat_wal gives its average over the "
           "point (the server's every flush).\n",
           "| step | whose | " + " | ".join("%d%%: p50 | p99 | slowest 1%%" % pct
                                           for pct, _ in accs) + " |",
           "|---|---|" + "--:|--:|--:|" * len(accs)]
    for k, what, whose in ACCOUNT_STEPS:
        out.append("| %s (%s) | %s | %s |" % (k, what, whose, " | ".join(
            "%.2f | %.2f | %.2f" % (num(r, k + "_p50"), num(r, k + "_p99"), num(r, k + "_slow"))
            for _, r in accs)))
    out.append("| **total** (the batch's first intent) | | %s |" % " | ".join(
        "**%.2f** | **%.2f** | **%.2f**" % (num(r, "total_p50"), num(r, "total_p99"),
                                            num(r, "total_slow")) for _, r in accs))
    out.append("")
    for pct, r in accs:
        flush = num(r, "wal_sync_ms") if is_num(value(r, "wal_sync_ms")) else None
        parts = []
        for col, label in (("p50", "the p50 batch"), ("slow", "the slowest 1%")):
            total = num(r, "total_" + col)
            machine = num(r, "fetch_" + col) + num(r, "append_" + col) + (flush or 0.0)
            if total > 0:
                parts.append("%s %.1f ms, of which the machine's %.1f ms (%.0f%%: fetch, "
                             "append%s) and the worker's %.1f ms" % (
                                 label, total, machine, 100 * machine / total,
                                 ", a WAL flush" if flush is not None else "",
                                 total - machine))
        out.append("At %d%%: %s batches of %s records (%s stacked); %s. WAL flushes: %s, "
                   "%s ms each on average.\n" % (
                       pct, value(r, "batches"), commify(value(r, "records")),
                       value(r, "stacked"), "; ".join(parts), value(r, "wal_syncs"),
                       value(r, "wal_sync_ms")))
    return out


def curve_chart_data(rows):
    """One line per point: offered/s, the worker's p50, p99, p99.9, the floors' p99."""
    _, _, points = _curve_rows(rows)
    out = []
    for pct in sorted(points):
        w, f, d = (points[pct].get(k) for k in ("worker", "plain", "durable"))
        if not w or value(w, "check") != "ok":
            continue
        g = lambda r, k: value(r, k) if r and is_num(value(r, k)) else "-"  # noqa: E731
        out.append("%s %s %s %s %s %s" % (g(w, "offered_per_s"), g(w, "p50_ms"),
                                          g(w, "p99_ms"), g(w, "p999_ms"), g(f, "p99_ms"),
                                          g(d, "p99_ms")))
    return "".join(line + "\n" for line in out)


def curve_gnuplot(chart, data):
    return """set terminal pngcairo size 1000,560 font "sans,10" noenhanced
set output "%s"
set title "S13: the worker's latency against the offered rate, beside its floors"
set datafile missing "-"
set logscale xy
set xlabel "offered intents/s (log scale)"
set ylabel "ms, from the broker's stamp (log scale)"
set grid
set key top left
plot "%s" using 1:2 with linespoints lw 2 lc rgb "#1f77b4" title "worker p50", \
	'' using 1:3 with linespoints lw 2 lc rgb "#d62728" title "worker p99", \
	'' using 1:4 with linespoints lw 2 lc rgb "#9467bd" title "worker p99.9", \
	'' using 1:5 with lines lw 2 dashtype 2 lc rgb "#7f7f7f" title "plain floor p99", \
	'' using 1:6 with lines lw 2 dashtype 2 lc rgb "#2ca02c" title "durable floor p99"
""" % (chart, data)


def write_curve_chart(rows, chart, work_dir):
    """CHART (latency-curve.png) when the rows have S13 points."""
    data_text = curve_chart_data(rows)
    if data_text:
        _gnuplot(work_dir, "curve", data_text, lambda data: curve_gnuplot(chart, data))


def chart_data(rows):
    """The chart's data: one line per approach, "NAME S1_ATTEMPTS/S S2_WINNERS/S" ("-" where
    it has no row), in the order the approaches first ran; failed runs and floors left out."""
    names, s1, s2 = [], {}, {}
    for r in rows:
        if (value(r, "check") == "error" or value(r, "kind") == "floor"
                or value(r, "scenario") not in ("S1", "S2")):
            continue
        a = value(r, "approach")
        if a not in names:
            names.append(a)
        if value(r, "scenario") == "S1":
            s1[a] = value(r, "attempts_per_s")
        if value(r, "scenario") == "S2":
            s2[a] = value(r, "winners_per_s")
    return "".join("%s %s %s\n" % (a, s1.get(a, "-"), s2.get(a, "-")) for a in names)


def gnuplot_script(header, chart, data):
    """The gnuplot commands that draw CHART from DATA: S1 attempts/s and S2 winners/s per
    approach, log scale."""
    f = header_fields(header)
    pg_version = f["pg"].split(" ")[0]
    return """set terminal pngcairo size 1000,560 font "sans,10" noenhanced
set output "%s"
set title "flashsale and its peers: %s cores, PostgreSQL %s " . \\
	"(fsync=%s, synchronous_commit=%s), %s clients per peer"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set datafile missing "-"
set logscale y
set ylabel "per second (log scale)"
set grid ytics
set xtics rotate by -20 nomirror
set key top left
plot "%s" using 2:xtic(1) \\
	title "S1 hot SKU: attempts/s (%s buyers, %s units)", \\
	'' using 3 title "S2 all winners: winners/s (%s buyers)"
""".replace("\\\n", "") % (  # continued lines joined, as the shell's here-document did
        chart, f["cores"], pg_version, f["fsync"], f["sync_commit"], f["clients"], data,
        f["s1_buyers"], f["s1_stock"], f["s2_buyers"])


def say(text):
    print("bench: %s" % text, flush=True)


def _gnuplot(work_dir, name, data_text, script_of):
    """gnuplot on SCRIPT_OF(the data file): NAME.dat and gnuplot-NAME.log in WORK_DIR; says why
    when there is no chart."""
    if shutil.which("gnuplot") is None:
        say("gnuplot not found (package gnuplot-nox); no %s chart" % name)
        return
    data = os.path.join(work_dir, name + ".dat")
    log = os.path.join(work_dir, "gnuplot-%s.log" % name)
    with open(data, "w") as f:
        f.write(data_text)
    with open(log, "w") as out:
        rc = subprocess.run(["gnuplot"], input=script_of(data).encode(), stdout=out,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        say("gnuplot failed (log %s); no %s chart" % (log, name))


def write_chart(header, rows, chart, work_dir):
    """CHART with gnuplot (its data and log in WORK_DIR); says why when there is none."""
    if not any(value(r, "scenario") in ("S1", "S2") for r in rows):
        say("no S1 or S2 rows: no chart (the last one is kept)")
        return
    _gnuplot(work_dir, "chart", chart_data(rows),
             lambda data: gnuplot_script(header, chart, data))


def write(header, rows, out_dir, work_dir, chart=True):
    """OUT_DIR/BENCHMARKS.md (written whole, then moved into place) and, with CHART,
    OUT_DIR/benchmarks.png. Returns the two paths."""
    doc, png = os.path.join(out_dir, "BENCHMARKS.md"), os.path.join(out_dir, "benchmarks.png")
    with open(doc + ".tmp", "w", encoding="utf-8") as f:
        f.write(render(header, rows))
    os.replace(doc + ".tmp", doc)
    if chart:
        write_chart(header, rows, png, work_dir)
        write_curve_chart(rows, os.path.join(out_dir, "latency-curve.png"), work_dir)
    return doc, png


def check(header, rows, rows_path, out_dir):
    """--check: the page the rows give, written into a temporary folder, against
    OUT_DIR/BENCHMARKS.md. Returns the exit status (0 same, 1 different)."""
    committed = os.path.join(out_dir, "BENCHMARKS.md")
    with tempfile.TemporaryDirectory(prefix="flashsale-bench-report.") as tmp:
        doc, _ = write(header, rows, tmp, tmp, chart=False)
        with open(doc, encoding="utf-8") as f:
            fresh = f.read().splitlines(keepends=True)
    try:
        with open(committed, encoding="utf-8") as f:
            old = f.read().splitlines(keepends=True)
    except OSError as e:
        print("bench: %s: %s" % (committed, e.strerror), file=sys.stderr)
        return 1
    if fresh == old:
        return 0
    sys.stderr.writelines(difflib.unified_diff(old, fresh, committed, "from " + rows_path))
    print("bench: %s differs from what %s gives: run scripts/bench report"
          % (committed, rows_path), file=sys.stderr)
    return 1


USAGE = """scripts/bench report [--rows FILE] [--out DIR] [--check]

Writes DIR/BENCHMARKS.md and DIR/benchmarks.png from the rows of a benchmark run, running
nothing. FILE defaults to docs/benchmarks.jsonl, DIR to docs/ (a run's own rows are
.local/bench/rows.jsonl, and benchmarks.jsonl beside the report it wrote). --check writes
nothing and exits 1 if DIR/BENCHMARKS.md differs from what FILE gives (the chart is not
compared)."""


def main(argv, root, caller_dir):
    """`scripts/bench report ARGV`; paths in ARGV are relative to CALLER_DIR."""
    rows_path, out_dir, checking = os.path.join("docs", "benchmarks.jsonl"), "docs", False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("--rows", "--out"):
            v = args.pop(0) if args else ""
            if not v:
                print("bench: %s takes a %s" % (a, "file" if a == "--rows" else "directory"),
                      file=sys.stderr)
                return 2
            v = os.path.join(caller_dir, v)
            rows_path, out_dir = (v, out_dir) if a == "--rows" else (rows_path, v)
        elif a == "--check":
            checking = True
        elif a in ("-h", "--help"):
            print(USAGE)
            return 0
        else:
            print("bench: unknown option '%s' (see scripts/bench report --help)" % a,
                  file=sys.stderr)
            return 2
    os.chdir(root)
    try:
        header, rows = rowsfile.read(rows_path)
    except (OSError, ValueError) as e:
        print("bench: error: %s" % (e if isinstance(e, ValueError) else
                                    "%s: %s" % (rows_path, e.strerror)), file=sys.stderr)
        return 1
    if checking:
        return check(header, rows, rows_path, out_dir)
    os.makedirs(out_dir, exist_ok=True)
    work_dir = os.path.join(".local", "bench")
    os.makedirs(work_dir, exist_ok=True)
    doc, png = write(header, rows, out_dir, work_dir)
    say("wrote %s and its charts from %s" % (doc, rows_path))
    return 0
