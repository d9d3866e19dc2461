"""The benchmark's rows: one dict per run, and the numbers in them as the old awk code read them.

A rows file (JSON lines) has a header object first (kind "header": the machine, the sizes and
the flags of the invocation, what the report prints about them), then one object per run
(kind "peer", "flashsale" or "floor"), its fields in the order they were measured. Every value
is kept as the text the measuring program printed ("7.519", "0.40", "20/350/396") and "-" where
a figure is not measured, so that the report prints a figure exactly as it was measured; the
helpers below read them as numbers the way awk did (a leading numeric prefix, else 0).

Shared by bench.py and the runs (which write rows) and report.py (which reads them).
"""

import json
import math
import re

_NUMERIC_PREFIX = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_LOOKS_NUMERIC = re.compile(r"[0-9.]+")  # the report's num(): digits and dots only


def awk_num(text):
    """TEXT as awk reads a string as a number: its longest numeric prefix, or 0."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _NUMERIC_PREFIX.match(text or "")
    if not m:
        return 0.0
    try:
        return float(m.group(0))
    except ValueError:  # "1." or similar that the prefix rule let through
        return 0.0


def is_num(text):
    """The report's test for a measured figure: not empty, not "-", only digits and dots."""
    return isinstance(text, str) and _LOOKS_NUMERIC.fullmatch(text) is not None


def awk_div(a, b):
    """a / b as mawk gives it: inf or nan for a zero divisor instead of an error."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def awk_print_num(x):
    """A number as awk's print shows it: an integer as such, else OFMT (%.6g)."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e16:
        return "%d" % int(x)
    return "%.6g" % x


def commify(text):
    """Thousands separators, as the old commify (the same string rule, also for a sign)."""
    s = "%.0f" % awk_num(text)
    out = ""
    while len(s) > 3:
        out = "," + s[-3:] + out
        s = s[:-3]
    return s + out


def fnum(text):
    """TEXT as bash's printf reads a %f argument (0 for what is not a number)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def parse_kv(line):
    """The key=value fields of LINE, in order, as the old awk code split them (later wins)."""
    row = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        row[key] = value if sep else token
    return row


def field(text, key):
    """The first KEY=value of TEXT (words split on blanks and newlines), or ""."""
    prefix = key + "="
    for token in text.replace("\n", " ").split(" "):
        if token.startswith(prefix):
            return token[len(prefix):]
    return ""


def value(row, key):
    """ROW's KEY as text ("" when it is missing, as awk's fields were)."""
    v = row.get(key, "")
    if v is None:
        return ""
    return v if isinstance(v, str) else str(v)


def flashsale_row(sc, buyers, stock, sold, left, audit, rc, timing, extra=""):
    """The row of a flashsale run, from its `flashsale timing` line (broker clock, first record
    published to last answer stored: the rate is its per_s, the latencies its percentiles),
    the summed `flashsale summary` (SOLD, LEFT), the audit's verdict and the run's exit status;
    EXTRA: more key=value fields. The check names what is wrong, or is "ok"."""
    f = parse_kv(timing)
    b, s = awk_num(buyers), awk_num(stock)
    n_sold, n_left = awk_num(sold), awk_num(left)
    want = min(s, b)
    problems = []
    if n_sold > s:
        problems.append("oversold")
    if n_sold < want:
        problems.append("undersold")
    if n_sold + n_left != s:
        problems.append("stock_mismatch")
    if audit != "ok":
        problems.append("audit_" + audit)
    if value(f, "answered") == "" or awk_num(value(f, "answered")) < awk_num(value(f, "records")):
        problems.append("unanswered")
    if awk_num(rc) != 0:
        problems.append("exit_%s" % rc)
    ips = awk_num(value(f, "per_s"))
    row = {
        "scenario": sc, "kind": "flashsale", "approach": "flashsale", "clients": "-",
        "buyers": "%d" % b, "requests": "%d" % awk_num(value(f, "records")), "stock": "%d" % s,
        "seconds": value(f, "seconds"), "attempts_per_s": "%.0f" % ips,
        "winners_per_s": "%.1f" % (n_sold * ips / b if b > 0 else 0),
        "p50_ms": value(f, "p50_ms"), "p99_ms": value(f, "p99_ms"),
        "p999_ms": value(f, "p999_ms"), "max_ms": value(f, "max_ms"),
        "sold": "%d" % n_sold, "oversell": "%d" % (n_sold - s if n_sold > s else 0),
        "stock_left": "%d" % n_left, "dup_orders": "-", "retries_per_sale": "-", "gave_up": "-",
        "errors": "-", "complete": "yes" if awk_num(rc) == 0 else "no",
        "check": ",".join(problems) if problems else "ok",
    }
    row.update(parse_kv(extra))
    return row


def dumps(obj):
    """One line of a rows file."""
    return json.dumps(obj, ensure_ascii=False)


def write(path, header, rows):
    """The rows file: the header, then one line per run."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(header) + "\n")
        for row in rows:
            f.write(dumps(row) + "\n")


def read(path):
    """(header, rows) of a rows file; the header is {} when the file has none."""
    header, rows = {}, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not a JSON object: %s" % (path, n, e)) from None
            if not isinstance(obj, dict):
                raise ValueError("%s:%d: not a JSON object" % (path, n))
            if obj.get("kind") == "header" and not header and not rows:
                header = obj
            else:
                rows.append(obj)
    return header, rows
