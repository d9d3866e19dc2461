#!/usr/bin/env python3
"""Checks a /metrics text against docs/reference/metrics.md (tests/prometheus/check-metrics.sh).

    metrics_doc.py DOC TEXT_FILE

The process is told by its info metric (flashsale_worker_info or flashsale_gateway_info), and
its table of the page is the contract: every family there has a `# TYPE` line with the type
the page gives, every flashsale_ family of the text is in that table, and every sample carries
exactly the labels the page names (histograms: `le` on `_bucket` too). Families without the
flashsale_ prefix are not the page's and are left alone. Prints one line per problem and exits
1 when there is any; prints a one-line summary and exits 0 otherwise.
"""

import re
import sys

SECTIONS = {"## flashsale-worker": "worker", "## flashsale-gateway": "gateway"}
INFO = {"flashsale_worker_info": "worker", "flashsale_gateway_info": "gateway"}
ROW = re.compile(r"^\|\s*`(flashsale_[a-z0-9_]+)`\s*\|\s*([a-z]+)\s*\|([^|]*)\|")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+(\s+-?\d+)?$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def read_doc(path):
    """{process: {family: (type, frozenset(labels))}} from the page's two tables."""
    tables, current = {"worker": {}, "gateway": {}}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("## "):
                current = SECTIONS.get(line.strip())
                continue
            m = ROW.match(line)
            if current and m:
                labels = frozenset(re.findall(r"`([a-z_]+)`", m.group(3)))
                tables[current][m.group(1)] = (m.group(2), labels)
    return tables


def parse_labels(text):
    labels, pos = {}, 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            return None
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def family_of(name, types):
    """The family a sample belongs to (a histogram's _bucket, _sum, _count are its own)."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) == "histogram":
            return base
    return None


def main():
    if len(sys.argv) != 3:
        print("usage: metrics_doc.py DOC TEXT_FILE", file=sys.stderr)
        return 2
    tables = read_doc(sys.argv[1])
    if not tables["worker"] or not tables["gateway"]:
        print(f"{sys.argv[1]}: no table of flashsale-worker or flashsale-gateway metrics found")
        return 1
    types, samples, problems = {}, [], []
    with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("# TYPE "):
                parts = line.split()
                if len(parts) == 4:
                    types[parts[2]] = parts[3]
            elif line and not line.startswith("#"):
                samples.append((n, line))
    found = [INFO[name] for name in INFO if name in types]
    if len(found) != 1:
        print("neither flashsale_worker_info nor flashsale_gateway_info has a # TYPE line (or "
              "both do): not the /metrics of one flashsale process")
        return 1
    process = found[0]
    table = tables[process]
    for name, (kind, _) in table.items():
        if name not in types:
            problems.append(f"{name}: documented ({kind}) but no # TYPE line")
        elif types[name] != kind:
            problems.append(f"{name}: # TYPE says {types[name]}, the page says {kind}")
    for name in types:
        if name.startswith("flashsale_") and name not in table:
            problems.append(f"{name}: not in the page's flashsale-{process} table")
    for n, line in samples:
        m = SAMPLE.match(line)
        if not m:
            problems.append(f"line {n}: not a sample: {line[:80]}")
            continue
        name = m.group(1)
        if not name.startswith("flashsale_"):
            continue
        family = family_of(name, types)
        if family is None:
            problems.append(f"line {n}: {name} has no # TYPE line")
            continue
        if family not in table:
            continue  # reported above
        labels = parse_labels(m.group(3) or "")
        if labels is None:
            problems.append(f"line {n}: labels not understood: {line[:80]}")
            continue
        want = set(table[family][1])
        if name.endswith("_bucket") and family != name:
            want.add("le")
        if set(labels) != want:
            problems.append(f"line {n}: {name} has labels {sorted(labels)}, the page says "
                            f"{sorted(want)}")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"flashsale-{process}: {len(table)} families as docs/reference/metrics.md says, "
          f"{len(samples)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
