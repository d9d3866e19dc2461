#!/usr/bin/env bash
# A cancel returns units that a later buyer then wins; the per-buyer limit holds under many
# intents and retries; the same intent id with another body is a conflict with no effect.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
fs sale open C1 --stock 1 >/dev/null
fs sale open L1 --stock 100 --per-buyer 3 --max-qty 2 >/dev/null

# Cancel: A holds the only unit, B is told sold_out, A gives up, C wins the returned unit.
a=$(fs buy C1 --buyer anna)
fs result "$a" --wait 30 | grep -q ' held ' || die "anna's buy was not held"
b=$(fs buy C1 --buyer ben)
fs result "$b" --wait 30 | grep -q ' sold_out ' || fail "ben should be sold_out"
fs cancel "$a" --wait 30 | grep -q ' cancelled ' && say "ok: anna cancelled" || fail "cancel"
c=$(fs buy C1 --buyer cleo)
fs result "$c" --wait 30 | grep -q ' held ' && say "ok: cleo won the returned unit" || fail "cleo not held"
assert_eq "0|1|0" "$(sql "SELECT available, held, sold FROM skus WHERE sku = 'C1'")" "C1 available|held|sold"
assert_eq 0 "$(sql "SELECT units FROM buyers WHERE sku = 'C1' AND buyer_id = 'anna'")" "anna's units after cancel"
# Paying for the cancelled hold: a refund. Cancelling twice: the same answer.
fs confirm "$a" --wait 30 | grep -q ' refund_required (cancelled)' && say "ok: payment after cancel: refund" || fail "confirm after cancel"
fs cancel "$a" --wait 30 | grep -q ' cancelled ' && say "ok: second cancel, same answer" || fail "second cancel"
assert_eq 1 "$(sql "SELECT count(*) FROM decisions WHERE intent_id = '$a' AND kind = 3")" "one cancel decision"

# Limit: one buyer, 12 intents of 1 unit (each sent twice), limit 3: exactly 3 held.
for i in $(seq 1 12); do
	id=$(cat /proc/sys/kernel/random/uuid)
	fs buy L1 --buyer greedy --intent "$id" >/dev/null
	fs buy L1 --buyer greedy --intent "$id" >/dev/null # a double click: same id, same body
done
# qty over the per-intent cap (2), and a qty that fits the cap but passes the limit.
fs buy L1 --buyer other --qty 3 >/dev/null
fs buy L1 --buyer other --qty 2 >/dev/null
fs buy L1 --buyer other --qty 2 >/dev/null
fs wait --quiet --timeout 60 || die "not decided"
assert_eq 3 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'L1' AND buyer_id = 'greedy' AND outcome = 'held'")" "greedy held intents"
assert_eq 9 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'L1' AND buyer_id = 'greedy' AND outcome = 'limit_exceeded'")" "greedy limit_exceeded"
assert_eq 3 "$(sql "SELECT units FROM buyers WHERE sku = 'L1' AND buyer_id = 'greedy'")" "greedy units"
assert_eq "rejected:qty_over_cap held limit_exceeded " "$(sql "SELECT outcome || coalesce(':' || reason, '') FROM decisions WHERE sku = 'L1' AND buyer_id = 'other' ORDER BY off" | tr '\n' ' ')" "other's three buys"
assert_eq "95|5" "$(sql "SELECT available, held FROM skus WHERE sku = 'L1'")" "L1 available|held"

# Conflict: the same intent id with another qty: answered conflict, no effect.
k=$(cat /proc/sys/kernel/random/uuid)
fs buy L1 --buyer kim --intent "$k" >/dev/null
printf '{"v":1,"type":"buy","intent_id":"%s","sku":"L1","buyer_id":"kim","qty":2}' "$k" | fs publish --key L1 >/dev/null
fs wait --quiet --timeout 60 || die "not decided"
assert_eq 1 "$(sql "SELECT sum(n_conflicts) FROM partitions")" "conflicts counted"
wait_until 30 "the conflict reply" "results_dump | grep -q '\"intent_id\":\"$k\",\"sku\":\"L1\",\"outcome\":\"conflict\",\"reason\":\"intent_id_reused\",\"qty\":2'"
say "ok: conflict answered"
assert_eq "1|1" "$(sql "SELECT count(*), sum(qty) FROM reservations WHERE intent_id = '$k'")" "kim's one hold, of 1 unit"
assert_eq "94|6" "$(sql "SELECT available, held FROM skus WHERE sku = 'L1'")" "L1 after the conflict"
audit_ok
stop_worker w1
it_done
