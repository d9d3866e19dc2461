#!/usr/bin/python3
"""Checks that README.md's "Publishing from your web tier" snippets are the tested code.

    /usr/bin/python3 tests/clients/check-readme.py [README]

A code block of that section whose first line is a comment naming a file of tests/clients
(`// tests/clients/WebTierProducer.java`, `# tests/clients/confluent_producer.py`) must be,
line for line and after removing the common indentation, the part of that file between its
`README:begin` and `README:end` marker lines; and every file of tests/clients with markers
must have its block. Prints one line per snippet; exit 1 naming each difference.
"""
import difflib
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SECTION = "## Publishing from your web tier"


def excerpt(path):
    lines, inside, found = [], False, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "README:begin" in line:
                inside, found = True, True
            elif "README:end" in line:
                inside = False
            elif inside:
                lines.append(line.rstrip("\n"))
    return textwrap.dedent("\n".join(lines)).splitlines() if found else None


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n" + SECTION + "\n")
    if start < 0:
        sys.exit("check-readme: no section '%s' in %s" % (SECTION, readme))
    body = text[start + 1:]
    end = body.find("\n## ", len(SECTION))
    body = body[:end] if end >= 0 else body

    bad, named = 0, set()
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
            print("check-readme: %s: no such file with README:begin/README:end markers" % rel)
            bad += 1
            continue
        got = textwrap.dedent("\n".join(lines[1:])).splitlines()
        if got != want:
            print("check-readme: %s: the README's snippet differs from the file's excerpt:" % rel)
            for d in difflib.unified_diff(want, got, "the file", "README.md", lineterm=""):
                print("    " + d)
            bad += 1
        else:
            print("check-readme: ok %s (%d lines)" % (rel, len(got)))
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
                print("check-readme: %s has README markers but no snippet in the section" % rel)
                bad += 1
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
