#!/usr/bin/env bash
# bench/point_quick.sh RATE [SECONDS]: one point of S13's latency curve, with the worker's
# account of each batch (trace.batches), a quick probe beside scripts/bench (issue 32;
# docs/PERFORMANCE.md item 47). On the local services (scripts/services up), with build/: a
# fresh database and topic, one worker on one partition, a sale of 500 units, then an open
# loop of RATE intents/s for 1 + SECONDS s (default 10; the first second not timed); prints
# `flashsale timing` and bench/batch_account.py's table for the timed part.
# RATE 0: SECONDS is then a count, that many intents published at once (a burst, as S1 and
# S4), timed whole.
# WORKER_ARGS: more arguments for the worker (--set KEY=VALUE ...); PGOPTIONS reaches its
# sessions too (PGOPTIONS='-c synchronous_commit=off': the same without the WAL flush's wait).
# WORKER: another worker binary (an A/B against an older build; TRACE=0 for one without
# trace.batches, which then goes unset and unaccounted).
# Drops its database and topics at the end (KEEP=1 keeps them, for a look).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rate=${1:?usage: bench/point_quick.sh RATE [SECONDS]} secs=${2:-10}
# shellcheck disable=SC1091
. .local/env
# shellcheck source=bench/quick_lib.sh
. bench/quick_lib.sh
worker=${WORKER:-build/flashsale-worker}
if [ "${TRACE:-1}" = 0 ]; then
	quick_run point 1
else
	quick_run point 1 "trace.batches = $root/.local/bench/point/trace.txt"
fi
rm -f "$dir/trace.txt"
fs sale open S5 --stock 500 >/dev/null
# shellcheck disable=SC2086
"$worker" -c "$dir/flashsale.conf" ${WORKER_ARGS:-} >"$dir/worker.log" 2>&1 &
wpid=$!
fs wait --timeout 60 --quiet
start=$(($(date +%s%N) / 1000000))
if [ "$rate" = 0 ]; then
	fs load S5 --buyers "$secs" --seed 501 >/dev/null
	timed=$start
else
	fs load S5 --buyers $((rate * (secs + 1))) --rate "$rate" --seed 501 >/dev/null
	timed=$((start + 1000))
fi
fs wait --timeout 120 --quiet
fs timing --since "$timed" --timeout 120
kill "$wpid"; wait "$wpid" || true; wpid=
[ "${TRACE:-1}" = 0 ] || python3 bench/batch_account.py --since-ms "$timed" "$dir/trace.txt"
