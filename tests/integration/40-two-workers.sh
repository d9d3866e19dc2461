#!/usr/bin/env bash
# Two workers in one group, a 4-partition intents topic, 8 SKUs with different stock: each
# SKU sells exactly its stock.
. "$(dirname "$0")/lib.sh"
it_setup 4
start_worker w1
start_worker w2
# The load takes about a second now: let the group settle with both members first, or one of
# them may still be joining when the last record is decided.
for w in w1 w2; do
	wait_until 60 "$w to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/$w.log'"
done
for i in 1 2 3 4 5 6 7 8; do
	fs sale open "SKU-$i" --stock $((i * 25)) >/dev/null
done
pids=()
for i in 1 2 3 4 5 6 7 8; do
	fs load "SKU-$i" --buyers 400 --dup-ratio 0.05 --seed "4$i" >/dev/null &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "load failed"; done
fs wait --timeout 120 --quiet || die "records not decided in time"

for i in 1 2 3 4 5 6 7 8; do
	assert_eq "$((i * 25))|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU-$i'")" "SKU-$i held|available"
	assert_eq "$((i * 25))" "$(sql "SELECT count(*) FROM decisions WHERE sku = 'SKU-$i' AND outcome = 'held'")" "SKU-$i held decisions"
done
assert_eq 3200 "$(sql "SELECT count(*) FROM decisions")" "one decision per intent"
# Both workers took part: each was assigned partitions (range assignment splits 4 in 2+2).
for w in w1 w2; do
	grep -q 'partition [0-9]* assigned' "$IT_DIR/$w.log" || fail "$w was never assigned a partition"
done
used=$(sql "SELECT count(DISTINCT part) FROM skus")
[ "$used" -ge 2 ] && say "ok: SKUs spread over $used partitions" || fail "SKUs on $used partition(s)"
audit_ok
stop_worker w1
stop_worker w2
it_done
