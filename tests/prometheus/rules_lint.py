#!/usr/bin/python3
"""What promtool does not check in config/prometheus (tests/prometheus/check.sh runs it).

    rules_lint.py RULES TESTS METRICS_DOC PROMETHEUS_YML

- every alert has `for:`, a `severity` label of critical or warning, and `summary` and
  `description` annotations;
- every flashsale_ metric the rules name is in docs/reference/metrics.md (a misspelt name
  matches no series, and its alert never fires: promtool would not say so);
- every `job="..."` the rules name is a job of prometheus.yml;
- every alert has a test in TESTS where it fires and one where it must not (promtool test
  rules only checks the alerts its tests name).

Needs PyYAML (Debian's python3-yaml, which scripts/setup installs). Prints one line per problem
and exits 1, or a one-line summary and exits 0.
"""

import re
import sys

import yaml

SEVERITIES = {"critical", "warning"}


def documented_metrics(path):
    with open(path, encoding="utf-8") as f:
        return set(re.findall(r"^\|\s*`(flashsale_[a-z0-9_]+)`", f.read(), re.M))


def metric_names(expr):
    """flashsale_ names in an expression, histogram suffixes taken off (recording rules'
    names, level:metric:operations, are not metrics of the page and are skipped)."""
    names = set()
    for m in re.finditer(r"(?<![:\w])(flashsale_[a-z0-9_]+)(?![:\w])", expr):
        names.add(re.sub(r"_(bucket|sum|count)$", "", m.group(1)))
    return names


def main():
    if len(sys.argv) != 5:
        print("usage: rules_lint.py RULES TESTS METRICS_DOC PROMETHEUS_YML", file=sys.stderr)
        return 2
    rules_path, tests_path, doc_path, prom_path = sys.argv[1:]
    with open(rules_path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    with open(tests_path, encoding="utf-8") as f:
        tests = yaml.safe_load(f)
    with open(prom_path, encoding="utf-8") as f:
        jobs = {c["job_name"] for c in yaml.safe_load(f)["scrape_configs"]}
    documented = documented_metrics(doc_path)
    problems, alerts = [], []
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            for metric in sorted(metric_names(rule["expr"])):
                if metric.replace("_bucket", "") not in documented and metric not in documented:
                    problems.append(f"{name}: {metric} is not in docs/reference/metrics.md")
            for job in re.findall(r'job\s*=~?\s*"([^"]*)"', rule["expr"]):
                if job not in jobs:
                    problems.append(f"{name}: job \"{job}\" is not a job of prometheus.yml")
            if "alert" not in rule:
                continue
            alerts.append(name)
            if "for" not in rule:
                problems.append(f"{name}: no for:")
            severity = rule.get("labels", {}).get("severity")
            if severity not in SEVERITIES:
                problems.append(f"{name}: severity {severity!r}, not one of {sorted(SEVERITIES)}")
            for key in ("summary", "description"):
                if not rule.get("annotations", {}).get(key, "").strip():
                    problems.append(f"{name}: no {key} annotation")
    fires, quiet = set(), set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    for name in alerts:
        if name not in fires:
            problems.append(f"{name}: no test in {tests_path} where it fires")
        if name not in quiet:
            problems.append(f"{name}: no test in {tests_path} where it must not fire")
    for name in sorted((fires | quiet) - set(alerts)):
        problems.append(f"{tests_path}: tests {name}, which is not an alert of the rules")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{len(alerts)} alerts: for, severity, summary and description on each, the metrics "
          f"documented, each tested firing and not firing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
