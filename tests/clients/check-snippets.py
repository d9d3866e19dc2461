#!/usr/bin/python3
"""Checks that the pages' snippets are the tested code.

    /usr/bin/python3 tests/clients/check-snippets.py [DOC...]

A code block of a page (docs/web-tier.md and README.md unless DOCs are given) whose first line is a comment naming a file of tests/clients
(`// tests/clients/WebTierProducer.java`, `# tests/clients/confluent_producer.py`) must be,
line for line and after removing the common indentation, the part of that file between its
`snippet:begin` and `snippet:end` marker lines; and every file of tests/clients with markers
must have its block on one of the pages. Prints one line per snippet; exit 1 naming each difference.
"""
import difflib
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOCS = [os.path.join("docs", "web-tier.md"), "README.md"]


def excerpt(path):
    lines, inside, found = [], False, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "snippet:begin" in line:
                inside, found = True, True
            elif "snippet:end" in line:
                inside = False
            elif inside:
                lines.append(line.rstrip("\n"))
    return textwrap.dedent("\n".join(lines)).splitlines() if found else None


def main():
    docs = sys.argv[1:] or [os.path.join(ROOT, d) for d in DOCS]
    bad, named = 0, set()
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            bad += check_page(doc, f.read(), named)
    bad += unnamed(named)
    if bad:
        sys.exit(1)


def check_page(doc, body, named):
    bad = 0
    DOC = os.path.relpath(doc, ROOT)
    for block in re.findall(r"^```[a-z]*\n(.*?)^```$", body, re.S | re.M):
        lines = block.rstrip("\n").split("\n")
        m = re.match(r"^(?://|#) (tests/clients/\S+)$", lines[0])
        if not m:
            continue
        rel = m.group(1)
        named.add(rel)
        path = os.path.join(ROOT, rel)
        want = excerpt(path) if os.path.exists(path) else None
        if want is None:
            print("check-snippets: %s: no such file with snippet:begin/snippet:end markers" % rel)
            bad += 1
            continue
        got = textwrap.dedent("\n".join(lines[1:])).splitlines()
        if got != want:
            print("check-snippets: %s: the page's snippet differs from the file's excerpt:" % rel)
            for d in difflib.unified_diff(want, got, "the file", DOC, lineterm=""):
                print("    " + d)
            bad += 1
        else:
            print("check-snippets: ok %s (%d lines)" % (rel, len(got)))
    return bad


def unnamed(named):
    bad = 0
    for dirpath, _, files in os.walk(HERE):
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if "node_modules" in rel or name == os.path.basename(__file__):
                continue
            try:
                has = excerpt(os.path.join(dirpath, name)) is not None
            except UnicodeDecodeError:
                continue
            if has and rel not in named:
                print("check-snippets: %s has snippet markers but no snippet on the pages" % rel)
                bad += 1
    return bad


if __name__ == "__main__":
    main()
