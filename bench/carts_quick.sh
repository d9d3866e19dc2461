#!/usr/bin/env bash
# bench/carts_quick.sh [PARTITIONS] [CARTS] [STOCK]: how long carts take to be answered, a
# quick probe beside scripts/bench S12 (issue 31; docs/PERFORMANCE.md item 45). On the local
# services (scripts/services up), with build/: a fresh database and topics, one worker, 20 SKUs of STOCK units (per buyer 1),
# then CARTS carts of 3 distinct lines over them from `flashsale load --cart-lines 3` (seed 1);
# prints the seconds from the first publish until every cart has its answer, the answers, and
# the worker's decide and commit times. Defaults: 4 partitions, 100,000 carts, 2,000 units.
# Drops its database and topics at the end (KEEP=1 keeps them, for a look).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
parts=${1:-4} carts=${2:-100000} stock=${3:-2000}
# shellcheck disable=SC1091
. .local/env
# shellcheck source=bench/quick_lib.sh
. bench/quick_lib.sh
quick_run carts "$parts" "stats.interval.ms = 2000" ${CONF_EXTRA:+"$CONF_EXTRA"}
build/flashsale-worker -c "$dir/flashsale.conf" >"$dir/worker.log" 2>&1 &
wpid=$!
skus=""
for i in $(seq 1 20); do
	fs sale open "S$i" --stock "$stock" --per-buyer 1 --hold 600s --wait 60 >/dev/null
	skus="$skus${skus:+,}S$i"
done
start=$(date +%s.%N)
fs load "$skus" --cart-lines 3 --buyers "$carts" --seed 1 >/dev/null
left=$carts
deadline=$(($(date +%s) + 600))
while [ "$left" -gt 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do
	left=$(psql "$admin" -X -A -t -c "SELECT $carts - count(*) FROM carts WHERE answer IS NOT NULL")
	[ "$left" -gt 0 ] && sleep 0.2
done
end=$(date +%s.%N)
echo "partitions=$parts carts=$carts stock=$stock: every cart answered $(echo "$end - $start" | bc) s after the first publish (unanswered: $left)"
echo "answers: $(psql "$admin" -X -A -t -c "SELECT string_agg(answer || ' ' || n, ', ') FROM (SELECT answer, count(*) n FROM carts GROUP BY 1 ORDER BY 2 DESC) x")"
echo "units: $(psql "$admin" -X -A -t -c "SELECT 'held ' || sum(held) || ', available ' || sum(available) || ', sold ' || sum(sold) FROM skus")"
build/flashsale -c "$dir/flashsale.conf" audit --no-replay >"$dir/audit.txt" 2>&1 && echo "audit: ok" || { echo "audit: FAILED ($dir/audit.txt)"; exit 1; }
sleep 2.5 # the stats line that covers the end (stats.interval.ms 2000 here)
echo "worker: $(grep -o 'batches=[0-9]* .*ms_decide=[0-9]* ms_commit=[0-9]*' "$dir/worker.log" | tail -1 | sed 's/ fenced.*ms_decide/ ms_decide/')"
