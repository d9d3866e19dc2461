#!/usr/bin/env bash
# bench/point_quick.sh RATE [SECONDS]: one point of S13's latency curve, with the worker's
# account of each batch (trace.batches), a quick probe beside scripts/bench (issue 32;
# docs/PERFORMANCE.md item 47). On the local services (scripts/services up), with build/: a
# fresh database and topic, one worker on one partition, a sale of 500 units, then an open
# loop of RATE intents/s for 1 + SECONDS s (default 10; the first second not timed); prints
# `flashsale timing` and bench/batch_account.py's table for the timed part.
# WORKER_ARGS: more arguments for the worker (--set KEY=VALUE ...); PGOPTIONS reaches its
# sessions too (PGOPTIONS='-c synchronous_commit=off': the same without the WAL flush's wait).
# Drops its database and topics at the end (KEEP=1 keeps them, for a look).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rate=${1:?usage: bench/point_quick.sh RATE [SECONDS]} secs=${2:-10}
# shellcheck disable=SC1091
. .local/env
dir=.local/bench/point
mkdir -p "$dir"
db=fs_point_quick_$$
topic=point-quick-$$
admin="$(printf '%s' "$FLASHSALE_PG_ADMIN" | sed -E 's/dbname=[^ ]+//') dbname=$db"
psql "$FLASHSALE_PG_ADMIN" -X -q -c "CREATE DATABASE $db"
for f in sql/*.sql; do PGOPTIONS='-c client_min_messages=warning' psql "$admin" -X -q -v ON_ERROR_STOP=1 -f "$f"; done
psql "$admin" -X -q -c "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO flashsale"
rm -f "$dir/trace.txt"
cat >"$dir/flashsale.conf" <<EOC
topic.intents = $topic.intents
topic.results = $topic.results
topic.stock = $topic.stock
group = $topic
trace.batches = $root/$dir/trace.txt
pg = $(printf '%s' "$FLASHSALE_PG" | sed -E 's/dbname=[^ ]+//') dbname=$db
EOC
unset FLASHSALE_PG
fs() { build/flashsale -c "$dir/flashsale.conf" "$@"; }
cleanup() {
	[ -n "${wpid:-}" ] && kill "$wpid" 2>/dev/null && wait "$wpid" 2>/dev/null
	[ -n "${KEEP:-}" ] && { echo "kept: database $db, topics $topic.*"; return; }
	fs topics delete >/dev/null 2>&1 || true
	psql "$FLASHSALE_PG_ADMIN" -X -q -c "DROP DATABASE IF EXISTS $db" || true
}
trap cleanup EXIT
fs topics create --partitions 1 >/dev/null
fs sale open S5 --stock 500 >/dev/null
# shellcheck disable=SC2086
build/flashsale-worker -c "$dir/flashsale.conf" ${WORKER_ARGS:-} >"$dir/worker.log" 2>&1 &
wpid=$!
fs wait --timeout 60 --quiet
start=$(($(date +%s%N) / 1000000))
fs load S5 --buyers $((rate * (secs + 1))) --rate "$rate" --seed 501 >/dev/null
fs wait --timeout 120 --quiet
fs timing --since $((start + 1000)) --timeout 120
kill "$wpid"; wait "$wpid" || true; wpid=
python3 bench/batch_account.py --since-ms $((start + 1000)) "$dir/trace.txt"
