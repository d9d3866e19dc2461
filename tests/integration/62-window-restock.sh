#!/usr/bin/env bash
# A sale window on the log clock (not_open before, closed after), `sale close`, and a restock
# after a sell-out that later buyers win. The stock topic follows the window (issue 28, item
# 8): not_open, open, closed, each record naming its partition and offset; a worker killed
# between a commit and its stock records publishes them on its next assignment.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
now_ms() { echo $(($(date +%s%N) / 1000000)); }
opens=$(($(now_ms) + 3000))
fs sale open W1 --stock 10 --opens-at "$opens" --closes-at $((opens + 3000)) >/dev/null
early=$(fs buy W1 --buyer early)
fs result "$early" --wait 30 | grep -q ' not_open ' && say "ok: before the window: not_open" || fail "early buy"
wait_until 30 "the window to open" "[ \$(now_ms) -gt $((opens + 200)) ]"
ontime=$(fs buy W1 --buyer ontime)
fs result "$ontime" --wait 30 | grep -q ' held ' && say "ok: inside the window: held" || fail "on-time buy"
wait_until 30 "the window to close" "[ \$(now_ms) -gt $((opens + 3200)) ]"
late=$(fs buy W1 --buyer late)
fs result "$late" --wait 30 | grep -q ' closed ' && say "ok: after the window: closed" || fail "late buy"
# The decisions follow the records' log timestamps, not when the worker ran.
assert_eq "true|true|true" "$(sql "SELECT bool_and(decided_at_ms < $opens) FILTER (WHERE buyer_id = 'early') || '|' || bool_and(decided_at_ms >= $opens) FILTER (WHERE buyer_id = 'ontime') || '|' || bool_and(decided_at_ms >= $((opens + 3000))) FILTER (WHERE buyer_id = 'late') FROM decisions")" "decision times against the window"

# Close: an open sale, then `sale close`: buys after it are closed.
fs sale open K1 --stock 10 >/dev/null
before=$(fs buy K1 --buyer before)
fs sale close K1 >/dev/null
after=$(fs buy K1 --buyer after)
fs result "$before" --wait 30 | grep -q ' held ' || fail "buy before close"
fs result "$after" --wait 30 | grep -q ' closed ' && say "ok: after sale close: closed" || fail "buy after close"

# Restock after a sell-out: 2 units, 3 buyers (1 sold_out), restock 2, 3 more buyers: 2 win.
fs sale open R1 --stock 2 >/dev/null
fs load R1 --buyers 3 --buyer-prefix first >/dev/null
fs wait --quiet --timeout 30
fs sale restock R1 --add 2 >/dev/null
fs load R1 --buyers 3 --buyer-prefix second >/dev/null
fs wait --quiet --timeout 30
assert_eq "2|1" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE buyer_id LIKE 'first-%'")" "first wave held|sold_out"
assert_eq "2|1" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE buyer_id LIKE 'second-%'")" "second wave held|sold_out"
assert_eq "4|0|4" "$(sql "SELECT supply, available, held FROM skus WHERE sku = 'R1'")" "R1 supply|available|held"
stock_of() { # stock_of SKU: STATUS@PARTITION/OFFSET of each stock record of SKU, in order
	stock_dump | awk -v k="$1" '$1 == k' | sed -E 's/.*"status":"([a-z_]+)".*"partition":([0-9]+),"offset":([0-9]+).*/\1@\2\/\3/' | tr '\n' ' '
}
w1=$(stock_of W1)
case "$w1" in
"not_open@0/"*" open@0/"*" closed@0/"*) say "ok: W1's stock records: $w1" ;;
*) fail "W1's stock records: '$w1', not not_open, open, closed" ;;
esac
# Their offsets never go down.
echo "$w1" | tr ' ' '\n' | sed -n 's|.*/||p' | sort -n -c 2>/dev/null || fail "W1's stock offsets go down: $w1"
assert_eq "W1 closed" "$(fs stock W1 | cut -d' ' -f1,2)" "flashsale stock W1 (Postgres, at the partition clock)"
stop_worker w1

# Killed after the commit of an open, before its stock record: the next assignment sends it.
start_worker w2 FLASHSALE_CRASH=after_commit
fs sale open C8 --stock 5 >/dev/null
wait_until 60 "w2 to die after its commit" "! alive \$(worker_pid w2)"
kill_worker w2
assert_eq 1 "$(sql "SELECT count(*) FROM skus WHERE sku = 'C8'")" "C8 committed"
assert_eq "" "$(stock_of C8)" "C8's stock records before the restart"
start_worker w3
wait_until 30 "C8's stock record" "[ -n \"\$(stock_of C8)\" ]"
case "$(stock_of C8)" in "open@0/"*) say "ok: C8's stock record sent on assignment: $(stock_of C8)" ;; *) fail "C8: $(stock_of C8)" ;; esac
audit_ok
stop_worker w3
it_done
