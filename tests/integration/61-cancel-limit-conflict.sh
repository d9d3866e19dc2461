#!/usr/bin/env bash
# A cancel returns units that a later buyer then wins; the per-buyer limit holds under many
# intents and retries; the same intent id with another body is a conflict with no effect; a
# confirm or cancel that found no hold does not use up its id.
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
# A confirm or cancel that found nothing does not use up its intent id (issue 28, item 3).
# A confirm sent with the wrong SKU, then the right one: the payment takes effect. A cancel
# before its buy, then after it: the hold is cancelled. Each time the worker is restarted in
# between, so that the second is decided from Postgres, not from the worker's memory.
restart() { stop_worker w1; start_worker w1; }
fs sale open W1 --stock 5 >/dev/null
fs sale open W2 --stock 5 >/dev/null
x=$(fs buy W1 --buyer wanda)
fs result "$x" --wait 30 | grep -q ' held ' || die "wanda's buy was not held"
out=$(fs confirm "$x" --sku W2 --wait 30)
case "$out" in *' unknown_intent (sku_mismatch)'*) say "ok: a confirm with the wrong SKU: $out" ;; *) fail "wrong-SKU confirm: $out" ;; esac
restart
out=$(fs confirm "$x" --sku W1 --wait 30)
case "$out" in *' confirmed '*) say "ok: the right confirm after it: $out" ;; *) fail "the right confirm after a wrong one: $out" ;; esac
# The wrong one again, after the right one: a conflict (answered on the topic; no row keeps it).
fs confirm "$x" --sku W2 >/dev/null
wait_until 30 "the conflict answer to the wrong confirm" "results_dump | grep -q '\"type\":\"confirm\",\"intent_id\":\"$x\",\"sku\":\"W2\",\"outcome\":\"conflict\"'"
y=$(cat /proc/sys/kernel/random/uuid)
out=$(fs cancel "$y" --sku W1 --wait 30)
case "$out" in *' unknown_intent (no_hold)'*) say "ok: a cancel before its buy: $out" ;; *) fail "early cancel: $out" ;; esac
out=$(fs cancel "$y" --sku W1 --wait 30)
case "$out" in *' unknown_intent (no_hold)'*) say "ok: its retry, still before the buy: $out" ;; *) fail "early cancel's retry: $out" ;; esac
fs buy W1 --buyer yuri --intent "$y" >/dev/null
fs result "$y" --wait 30 | grep -q ' held ' || die "yuri's buy was not held"
restart
out=$(fs cancel "$y" --sku W1 --wait 30)
case "$out" in *' cancelled '*) say "ok: the cancel after the buy: $out" ;; *) fail "the cancel after its buy: $out" ;; esac
assert_eq "4|0|1" "$(sql "SELECT available, held, sold FROM skus WHERE sku = 'W1'")" "W1 available|held|sold"
assert_eq "confirmed|cancelled" "$(sql "SELECT string_agg(status, '|' ORDER BY buyer_id) FROM reservations WHERE sku = 'W1'")" "the two holds' ends"
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || { cat "$IT_DIR/replay.txt"; fail "replay --dry-run found differences"; }
audit_ok
stop_worker w1
it_done
