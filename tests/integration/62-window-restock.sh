#!/usr/bin/env bash
# A sale window on the log clock (not_open before, closed after), `sale close`, and a restock
# after a sell-out that later buyers win.
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
audit_ok
stop_worker w1
it_done
