#!/usr/bin/env bash
# The unit test of the Prometheus side (meson test prometheus, suite unit; no services):
#
#   1. promtool check config on config/prometheus/prometheus.yml, laid out as
#      scripts/services prometheus-up lays it out (rules and a targets/ folder beside it), and
#      promtool check service-discovery: each job takes its own targets files and no other;
#   2. promtool check rules on config/prometheus/flashsale-rules.yml, and what promtool does
#      not check (tests/prometheus/rules_lint.py: for, severity, summary, description, the
#      metric names against docs/reference/metrics.md, a test firing and not firing per alert);
#   3. promtool test rules tests/prometheus/rules_test.yml;
#   4. tests/prometheus/check-metrics.sh on the sample texts worker.prom and gateway.prom,
#      and on broken copies of them, which it must refuse.
#
# promtool is Debian's, unpacked by scripts/setup into .local/cache/prometheus: without it
# the test fails (scripts/setup installs it; a skipped check would pass unseen).
set -euo pipefail

FS_PROG=prometheus-check
# shellcheck source=scripts/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

here=$FLASHSALE_HOME/tests/prometheus
conf=$FLASHSALE_HOME/config/prometheus
py=/usr/bin/python3

[ -x "$FS_PROMTOOL" ] || fs_die "promtool not found at $FS_PROMTOOL: run scripts/setup (it unpacks Debian's prometheus package there)"
"$py" -c 'import yaml' 2>/dev/null || fs_die "PyYAML missing for $py: run scripts/setup (python3-yaml)"

work=$(mktemp -d "${TMPDIR:-/tmp}/prometheus-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

# step WHAT CMD...: runs CMD, its output indented; stops at the first failure.
step() {
	local what=$1
	shift
	if "$@" >"$work/out" 2>&1; then
		printf 'ok   %s\n' "$what"
		sed 's/^/     /' "$work/out"
	else
		printf 'FAIL %s\n' "$what"
		sed 's/^/     /' "$work/out"
		exit 1
	fi
}

# 1. The layout of .local/prometheus/: the files side by side, a targets file per job.
mkdir -p "$work/prom/targets"
cp "$conf/prometheus.yml" "$conf/flashsale-rules.yml" "$work/prom/"
printf '[{"targets": ["127.0.0.1:9464", "127.0.0.1:9466"], "labels": {"sale": "phone-x"}}]\n' \
	>"$work/prom/targets/flashsale-worker-a.json"
printf '[{"targets": ["127.0.0.1:9465"]}]\n' >"$work/prom/targets/flashsale-gateway.json"
printf '[{"targets": ["127.0.0.1:1"]}]\n' >"$work/prom/targets/other.json"
step "promtool check config prometheus.yml" "$FS_PROMTOOL" check config "$work/prom/prometheus.yml"

# sd_targets JOB: the instances promtool discovers for JOB, sorted, on one line. promtool
# watches for the whole --timeout before it prints; the files are read at once.
sd_targets() {
	"$FS_PROMTOOL" check service-discovery --timeout=2s "$work/prom/prometheus.yml" "$1" 2>/dev/null |
		"$py" -c 'import json, sys; print(" ".join(sorted(t["labels"]["instance"] + "/" + t["labels"]["job"] for t in json.load(sys.stdin))))'
}
expect_targets() {
	local got
	got=$(sd_targets "$1")
	[ "$got" = "$2" ] || {
		echo "job $1 discovers '$got', expected '$2'"
		return 1
	}
	echo "job $1: $got"
}
step "service discovery: flashsale-worker*.json" expect_targets flashsale-worker \
	"127.0.0.1:9464/flashsale-worker 127.0.0.1:9466/flashsale-worker"
step "service discovery: flashsale-gateway*.json" expect_targets flashsale-gateway \
	"127.0.0.1:9465/flashsale-gateway"

# 2. The rules.
step "promtool check rules flashsale-rules.yml" "$FS_PROMTOOL" check rules "$conf/flashsale-rules.yml"
step "rules_lint.py" "$py" "$here/rules_lint.py" "$conf/flashsale-rules.yml" "$here/rules_test.yml" \
	"$FLASHSALE_HOME/docs/reference/metrics.md" "$conf/prometheus.yml"

# 3. Each alert firing and not firing on synthetic series.
step "promtool test rules rules_test.yml" "$FS_PROMTOOL" test rules "$here/rules_test.yml"

# 4. check-metrics.sh, which the integration tests run on the live endpoints.
step "check-metrics.sh worker.prom" "$here/check-metrics.sh" "file://$here/worker.prom"
step "check-metrics.sh gateway.prom" "$here/check-metrics.sh" "file://$here/gateway.prom"
# refused NAME SED: a copy of worker.prom edited by SED must be refused.
refused() {
	sed "$2" "$here/worker.prom" >"$work/$1.prom"
	if TMPDIR=$work "$here/check-metrics.sh" "file://$work/$1.prom"; then
		echo "check-metrics.sh took a broken text ($1)"
		return 1
	fi
}
step "check-metrics.sh refuses a counter without _total" refused no-total \
	's/flashsale_holds_live gauge/flashsale_holds_live counter/'
step "check-metrics.sh refuses a family the page does not have" refused undocumented \
	's/flashsale_expiries_total/flashsale_expired_total/g'
step "check-metrics.sh refuses a label the page does not name" refused sku-label \
	's/^flashsale_assigned_partitions 2/flashsale_assigned_partitions{sku="PHONE-X"} 2/'
step "check-metrics.sh refuses a text it cannot parse" refused unparsable \
	's/^flashsale_records_total 100001/flashsale_records_total{ 100001/'
echo "prometheus-check: ok"
