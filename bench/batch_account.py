#!/usr/bin/env python3
"""Where a batch's time goes: reads the worker's trace.batches file (one line per batch, the
wall-clock moments of src/worker/context.h's struct btrace) and prints, for the batches whose
first record was appended at or after --since-ms, each step's time at p50, p99 and max, and
the steps of the slowest 1% of batches (by their first record's wait for its answer) on
average; --json prints the same as one JSON object (scripts/bench's S13 account rows).

Steps, in the order a batch goes through them (ms):
  fetch      the broker's append of its first record to the worker's poll of it, when that
             poll was already waiting at the append (the record was on its way: the broker's
             and the client library's time); for a batch whose poll began after the append
             (the worker was busy), the p50 of those, or the whole wait if shorter
  queued     the rest of that wait, for a batch whose poll began after the append: the
             record waited for the worker, behind its earlier records
  gather     that poll to the start of its decision: more records, batch.wait.ms, and a
             committer to be free (both busy: it waits for one to finish)
  decide     deciding it and handing it to a committer thread
  wake       the committer thread waking up
  render     the committer rendering its statements
  send1      in line: the statements' round trip (the compare-and-set); stacked: the rows'
             COPYs, sent while the batch before commits
  send2      in line: the rows' COPYs with COMMIT; stacked: the row lock (waiting for the batch
             before to commit), the statements and COMMIT. The WAL flush is in here.
  finish     the commit known to the committer until the main thread takes it (it was busy,
             or an older batch was not finished yet)
  produce    producing the answers
  append     until the broker's append of the last of them (its LogAppendTime stamp, ms)
The total is the first record's wait for its answer on the broker's clock, as `flashsale
timing` measures it. Not in it: the worker hearing of the delivery (report, after append).
A batch committed in line (no committer: a lookup) has its whole transaction in decide.

usage: bench/batch_account.py [--since-ms MS] [--until-ms MS] [--json] TRACE
"""

import json
import sys

STEPS = ("fetch", "queued", "gather", "decide", "wake", "render", "send1", "send2", "finish",
         "produce", "append")


def parse(line):
    out = {}
    for tok in line.split():
        k, _, v = tok.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            return None
    return out


def steps_of(t):
    """The steps of one batch in ms, and its first record's total (append to delivered)."""
    first_us = t["append_first_ms"] * 1000
    # The broker's stamp is in whole ms (the step before it may come out a little negative);
    # without one (a results topic with CreateTime) the delivery report's time stands in.
    last_us = t["appended_ms"] * 1000 + 999 if t.get("appended_ms") else t["delivered"]
    if t["inline"]:
        marks = [first_us, t["read_first"], t["decide"], t["committed"], t["committed"],
                 t["committed"], t["committed"], t["committed"], t["finished"], t["produced"],
                 t["delivered"]]
    else:
        marks = [first_us, t["read_first"], t["decide"], t["handed"], t["start"],
                 t["prepared"], t["phase"] or t["prepared"], t["committed"], t["finished"],
                 t["produced"], last_us]
    vals = [max(0.0, (b - a) / 1000.0) for a, b in zip(marks, marks[1:])]
    # fetch and queued are split once every batch is read (account): queued for now.
    return dict(zip(STEPS, [0.0, vals[0]] + vals[1:])), (last_us - first_us) / 1000.0


def pct(sorted_vals, q):
    if not sorted_vals:
        return 0.0
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def account(lines, since_ms=0, until_ms=None):
    batches = []
    for line in lines:
        t = parse(line)
        if not t or "delivered" not in t or not t.get("read_first"):
            continue
        if t["append_first_ms"] < since_ms or (until_ms and t["append_first_ms"] >= until_ms):
            continue
        s, total = steps_of(t)
        batches.append((total, s, t))
    if not batches:
        return None
    # A batch whose first record came while the worker's poll was waiting waited on the way
    # only (the stamp is in whole ms: a poll begun within that ms counts as waiting); the
    # p50 of those waits is the way's usual time, which a batch queued behind a busy worker
    # spent too.
    idle = lambda t: t.get("poll_start", 0) < t["append_first_ms"] * 1000 + 1000  # noqa: E731
    ways = sorted(b[1]["queued"] for b in batches if idle(b[2]))
    usual = pct(ways, 0.5)
    for _, s, t in batches:
        wait = s["queued"]
        s["fetch"] = wait if idle(t) else min(wait, usual)
        s["queued"] = wait - s["fetch"]
    res = {"batches": len(batches), "records": sum(b[2]["n"] for b in batches),
           "stacked": sum(1 for b in batches if b[2]["after"]),
           "in_line": sum(1 for b in batches if b[2]["inline"])}
    totals = sorted(b[0] for b in batches)
    res["total"] = {"p50": pct(totals, 0.5), "p99": pct(totals, 0.99), "max": totals[-1]}
    for k in STEPS:
        v = sorted(b[1][k] for b in batches)
        res[k] = {"p50": pct(v, 0.5), "p99": pct(v, 0.99), "max": v[-1]}
    worst = sorted(batches, key=lambda b: b[0], reverse=True)
    top = worst[:max(1, len(worst) // 100)]
    res["slowest"] = {"batches": len(top), "total": sum(b[0] for b in top) / len(top)}
    for k in STEPS:
        res["slowest"][k] = sum(b[1][k] for b in top) / len(top)
    res["slowest"]["records"] = sum(b[2]["n"] for b in top) / len(top)
    res["worst"] = [{"total": b[0], "records": b[2]["n"], "after": b[2]["after"],
                     "steps": b[1]} for b in worst[:5]]
    return res


def table(res):
    out = ["%d batches, %d records (%d stacked on one in flight, %d in line)"
           % (res["batches"], res["records"], res["stacked"], res["in_line"]),
           "%-9s %9s %9s %9s %13s" % ("step ms", "p50", "p99", "max", "slowest 1%")]
    for k in STEPS + ("total",):
        r = res[k]
        out.append("%-9s %9.2f %9.2f %9.2f %13.2f" % (k, r["p50"], r["p99"], r["max"],
                                                   res["slowest"][k]))
    out.append("slowest 1%%: %d batches of %.0f records on average"
               % (res["slowest"]["batches"], res["slowest"]["records"]))
    for w in res["worst"]:
        out.append("  %.1f ms, %d records%s: %s" % (
            w["total"], w["records"], " (stacked)" if w["after"] else "",
            " ".join("%s %.1f" % (k, w["steps"][k]) for k in STEPS if w["steps"][k] >= 0.5)))
    return "\n".join(out)


def main(argv):
    since, until, as_json, path = 0, None, False, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if a in ("--since-ms", "--until-ms") and i + 1 < len(argv):
            try:
                v = int(argv[i + 1])
            except ValueError:
                print("batch_account.py: %s needs an integer" % a, file=sys.stderr)
                return 2
            if a == "--since-ms":
                since = v
            else:
                until = v
            i += 2
            continue
        if a == "--json":
            as_json = True
        elif path is None and not a.startswith("-"):
            path = a
        else:
            print("batch_account.py: unexpected argument %r (--help)" % a, file=sys.stderr)
            return 2
        i += 1
    if not path:
        print("batch_account.py: a trace file is needed (--help)", file=sys.stderr)
        return 2
    try:
        with open(path) as f:
            res = account(f, since, until)
    except OSError as e:
        print("batch_account.py: %s" % e, file=sys.stderr)
        return 1
    if res is None:
        print("batch_account.py: no traced batch in %s after %d" % (path, since),
              file=sys.stderr)
        return 1
    print(json.dumps(res) if as_json else table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
