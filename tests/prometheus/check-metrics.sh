#!/usr/bin/env bash
# Checks a live /metrics endpoint of flashsale-worker or flashsale-gateway:
#
#   tests/prometheus/check-metrics.sh [--no-doc] URL
#
#   1. GET URL (curl, 10 s at most) answers 200 with Content-Type text/plain; version=0.0.4
#      (http and https URLs; a file:// URL has no headers and skips this);
#   2. `promtool check metrics` finds the text valid, with no lint problem (HELP on every
#      family, _total on counters, base units, histogram series in order...);
#   3. unless --no-doc, the families, types and label names are those of its process's table
#      in docs/reference/metrics.md (tests/prometheus/metrics_doc.py: the process is told by
#      flashsale_worker_info or flashsale_gateway_info).
#
# promtool is Debian's, unpacked by scripts/setup into .local/cache/prometheus ($FS_PROMTOOL).
# Prints one line when all is well; otherwise what is wrong on stderr. Exit 0 ok, 1 a check
# failed (or promtool is missing), 2 usage. The text fetched is kept for a look in
# ${TMPDIR:-/tmp} only when a check fails.
set -euo pipefail

FS_PROG=check-metrics
# shellcheck source=scripts/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

doc=yes
if [ "${1:-}" = --no-doc ]; then
	doc=no
	shift
fi
if [ "$#" -ne 1 ] || [[ "$1" == -* ]]; then
	sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
fi
url=$1

[ -x "$FS_PROMTOOL" ] || fs_die "promtool not found at $FS_PROMTOOL: run scripts/setup (it unpacks Debian's prometheus package there)"
fs_have curl || fs_die "curl not found"

work=$(mktemp -d "${TMPDIR:-/tmp}/check-metrics.XXXXXX")
keep=no
cleanup() { [ "$keep" = yes ] || rm -rf "$work"; }
trap cleanup EXIT
failed() {
	keep=yes
	printf '%s: error: %s (the text: %s)\n' "$FS_PROG" "$1" "$work/metrics.txt" >&2
	exit 1
}

if ! code=$(curl -sS --max-time 10 -o "$work/metrics.txt" -D "$work/headers" -w '%{http_code}' "$url" 2>"$work/curl.err"); then
	fs_die "GET $url failed: $(head -n 1 "$work/curl.err")"
fi
case "$url" in
http://* | https://*)
	[ "$code" = 200 ] || failed "GET $url answered $code, not 200"
	ctype=$(tr -d '\r' <"$work/headers" | awk -F': *' 'tolower($1) == "content-type" { v = $2 } END { print v }')
	case "$ctype" in
	text/plain*version=0.0.4*) ;;
	*) failed "GET $url: Content-Type is '$ctype', not text/plain; version=0.0.4" ;;
	esac
	;;
esac
[ -s "$work/metrics.txt" ] || failed "GET $url: an empty body"

# promtool: 0 valid, 3 lint problems, 1 a text it cannot parse; the problems on stdout/stderr.
# Both checks run, so that one run names every problem.
bad=""
if ! "$FS_PROMTOOL" check metrics <"$work/metrics.txt" >"$work/promtool.out" 2>&1; then
	sed 's/^/  promtool: /' "$work/promtool.out" >&2
	bad="promtool check metrics finds the text invalid"
fi
summary="promtool check metrics ok"
if [ "$doc" = yes ]; then
	if python3 "$(dirname "${BASH_SOURCE[0]}")/metrics_doc.py" \
		"$FLASHSALE_HOME/docs/reference/metrics.md" "$work/metrics.txt" >"$work/doc.out" 2>&1; then
		summary+="; $(tail -n 1 "$work/doc.out")"
	else
		sed 's/^/  metrics.md: /' "$work/doc.out" >&2
		bad="${bad:+$bad; }the text differs from docs/reference/metrics.md"
	fi
fi
[ -z "$bad" ] || failed "$url: $bad"
printf '%s: %s: %s\n' "$FS_PROG" "$url" "$summary"
