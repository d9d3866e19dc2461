#!/usr/bin/env bash
# The gateway's cache of answers tells every buyer the true answer (issue 47, items 2, 6, 7 and
# 10), on the real services, with two SKUs on two partitions and the CLI as "another door":
#   2  a follow-up answered unknown_intent is published again when retried (a cancel that
#      overtook its buy; a confirm sent first with the wrong SKU, then with the right one or
#      none: its body names the intent alone; each confirm signed, issue 48), and a decision made through another door replaces the provisional answer;
#   6  a decision learned from the results topic or Postgres is checked against a POST's body
#      with its own record (SKU, buyer, qty), not stamped with the first POST's;
#   7  one intent id on buys of two SKUs on two partitions: the buyer sees her own buy's
#      events and answers only, never the other's cancel;
#  10  a queued buy whose result the gateway's consumer never gets (here: a gateway that follows
#      another results topic) is answered from Postgres within a bounded time.
. "$(dirname "$0")/lib.sh"
it_setup 2
start_worker w1
it_admin_token
start_gateway gw --set admin.token.file="$IT_DIR/admin-token"
GW1=$GW
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"
uuid() { python3 -c 'import uuid; print(uuid.uuid4())'; }
# poll SECONDS CONDITION: true once CONDITION holds, false when the time is up (no exit).
poll() {
	local deadline=$((SECONDS + $1))
	while ! eval "$2"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"

# Two SKUs on two partitions (the partitioner decides: open four, take one of each).
for s in P1 P2 P3 P4 P5 P6; do
	assert_eq 202 "$(req POST /v1/skus/$s/open -H "$J" -H "$A" -d '{"stock":20,"per_buyer_limit":5}')" "open $s"
done
wait_until 30 "the sales" "[ \$(sql 'SELECT count(*) FROM skus') = 6 ]"
X=$(sql "SELECT sku FROM skus WHERE part = 0 ORDER BY sku LIMIT 1")
Y=$(sql "SELECT sku FROM skus WHERE part = 1 ORDER BY sku LIMIT 1")
[ -n "$X" ] && [ -n "$Y" ] || die "no SKU on one of the partitions"
say "X=$X (partition 0), Y=$Y (partition 1)"
buy() { # buy SKU KEY BUYER: through the gateway, until held
	assert_posted "$(req POST "/v1/skus/$1/buys" -H "$J" -H "Idempotency-Key: $2" -d "{\"buyer_id\":\"$3\",\"qty\":1}")" "buy $2 of $1"
	assert_eq 200 "$(req GET "/v1/intents/$2?wait=10")" "its decision"
	assert_eq held "$(body_field outcome)" "held"
}

# ---- item 2: a cancel that overtook its buy ----
K=$(uuid)
assert_posted "$(req POST "/v1/intents/$K/cancel" -H "$J" -d "{\"sku\":\"$X\"}")" "2a: a cancel before its buy"
assert_eq 200 "$(req GET "/v1/intents/$K/cancel?wait=10")" "2a: its answer"
assert_eq unknown_intent "$(body_field outcome)" "2a: no hold yet"
buy "$X" "$K" alice
st=$(req POST "/v1/intents/$K/cancel" -H "$J" -d "{\"sku\":\"$X\"}")
say "2a: the cancel retried: $st $(body_field outcome)"
poll 10 "[ \$(req GET '/v1/intents/$K/cancel?wait=2') = 200 ] && [ \$(body_field outcome) = cancelled ]" &&
	say "ok: 2a: the retried cancel was published and decided: cancelled" ||
	fail "2a: the retried cancel: $(cat "$IT_DIR/body")"
assert_eq cancelled "$(sql "SELECT status FROM reservations WHERE intent_id = '$K'")" "2a: the hold in Postgres"

# signed_confirm ID [SKU]: the payment provider's confirm (signed, issue 48), its body naming
# the intent and, if given, the SKU; prints the status.
signed_confirm() {
	local b="{\"intent_id\":\"$1\"${2:+,\"sku\":\"$2\"}}"
	req POST "/v1/intents/$1/confirm" -H "$J" -H "$(sign_confirm "$b")" -d "$b"
}

# ---- item 2: a confirm sent with the wrong SKU, then the right one, or none ----
for how in right nobody; do
	K=$(uuid)
	buy "$X" "$K" "bea-$how"
	assert_eq 202 "$(signed_confirm "$K" "$Y")" "2b ($how): a confirm with the wrong SKU"
	assert_eq 200 "$(req GET "/v1/intents/$K/confirm?wait=10")" "2b ($how): its answer"
	assert_eq unknown_intent "$(body_field outcome)" "2b ($how): no hold on that SKU's partition"
	if [ "$how" = right ]; then
		st=$(signed_confirm "$K" "$X")
	else
		st=$(signed_confirm "$K")
	fi
	case $st in 200 | 202) say "ok: 2b ($how): the confirm again: $st" ;; *) fail "2b ($how): the confirm again: $st $(cat "$IT_DIR/body")" ;; esac
	poll 10 "[ \$(req GET '/v1/intents/$K/confirm?wait=2') = 200 ] && [ \$(body_field outcome) = confirmed ]" &&
		say "ok: 2b ($how): confirmed" || fail "2b ($how): the confirm: $(cat "$IT_DIR/body")"
	assert_eq confirmed "$(sql "SELECT status FROM reservations WHERE intent_id = '$K'")" "2b ($how): the hold in Postgres"
done

# ---- item 2: the right confirm decided through another door ----
K=$(uuid)
buy "$X" "$K" cleo
assert_eq 202 "$(signed_confirm "$K" "$Y")" "2c: a confirm with the wrong SKU"
assert_eq 200 "$(req GET "/v1/intents/$K/confirm?wait=10")" "2c: its answer"
assert_eq unknown_intent "$(body_field outcome)" "2c: unknown_intent"
fs confirm "$K" --sku "$X" --wait 10 >"$IT_DIR/cli-confirm" || fail "2c: the CLI's confirm: $(cat "$IT_DIR/cli-confirm")"
poll 10 "[ \$(req GET '/v1/intents/$K/confirm?wait=2') = 200 ] && [ \$(body_field outcome) = confirmed ]" &&
	say "ok: 2c: GET .../confirm says confirmed" || fail "2c: GET .../confirm: $(cat "$IT_DIR/body")"

# ---- item 6: decided through another door, then POSTed with other bodies ----
K=$(uuid)
fs buy "$X" --buyer carol --qty 1 --intent "$K" >/dev/null
wait_until 10 "carol's decision in Postgres" "[ \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$K'\")\" = held ]"
assert_eq 200 "$(req GET "/v1/intents/$K?wait=10")" "6: the gateway knows carol's decision"
say "6: learned from: $(body_field source)"
assert_eq 422 "$(req POST "/v1/skus/$Y/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"carol","qty":1}')" "6: the same key for another SKU"
assert_eq 422 "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"carol","qty":2}')" "6: another qty"
assert_eq 422 "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"mallory","qty":1}')" "6: another buyer"
assert_eq 200 "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"carol","qty":1}')" "6: carol's own body"
assert_eq held "$(body_field outcome)" "6: gets her decision"
# The same, learned from Postgres (a decision made before this gateway asked, never in memory).
K=$(uuid)
fs buy "$X" --buyer dora --qty 1 --intent "$K" >/dev/null
wait_until 10 "dora's decision in Postgres" "[ \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$K'\")\" = held ]"
start_gateway gw2
wait_until 30 "gw2 ready" "[ \$(req GET /readyz) = 200 ]"
assert_eq 200 "$(req GET "/v1/intents/$K")" "6: gw2 learns dora's decision"
assert_eq postgres "$(body_field source)" "6: from Postgres"
assert_eq 422 "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"mallory","qty":1}')" "6: gw2 (Postgres): another buyer"
assert_eq 200 "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"dora","qty":1}')" "6: gw2: dora's own body"
assert_eq held "$(body_field outcome)" "6: gw2: her decision"

# ---- item 7: one intent id, two SKUs on two partitions, two buyers ----
GW=$GW1
K=$(uuid)
buy "$X" "$K" alice7
fs buy "$Y" --buyer bob7 --qty 1 --intent "$K" >/dev/null
wait_until 10 "bob's buy" "[ \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$K' AND sku = '$Y'\")\" = held ]"
fs cancel "$K" --sku "$Y" --wait 10 >"$IT_DIR/cli-cancel" || fail "7: bob's cancel: $(cat "$IT_DIR/cli-cancel")"
grep -q cancelled "$IT_DIR/cli-cancel" || fail "7: bob's cancel: $(cat "$IT_DIR/cli-cancel")"
# alice's stream: her decision only (read until a heartbeat-free second passes).
curl -s -N --max-time 2 "$GW/v1/intents/$K/events" >"$IT_DIR/events7" || true
assert_eq "decided" "$(sed -n 's/^event: //p' "$IT_DIR/events7" | tr '\n' ' ' | sed 's/ $//')" "7: alice's events"
assert_eq 200 "$(req GET "/v1/intents/$K")" "7: alice's intent"
assert_eq "held $X " "$(body_field outcome) $(body_field sku) $(body_field hold)" "7: her buy, no hold ended"
assert_eq 404 "$(req GET "/v1/intents/$K/cancel")" "7: alice has no cancel"
# Her own cancel then is hers.
assert_posted "$(req POST "/v1/intents/$K/cancel")" "7: alice cancels"
assert_eq 200 "$(req GET "/v1/intents/$K/cancel?wait=10")" "7: her cancel's answer"
assert_eq "cancelled $X" "$(body_field outcome) $(body_field sku)" "7: her cancel"

# ---- item 10: a queued buy whose result this gateway never gets ----
fs --set topic.results="it.$IT_ID.results2" topics create --partitions 2 >/dev/null
start_gateway gwm --set topic.results="it.$IT_ID.results2"
wait_until 30 "gwm ready" "[ \$(req GET /readyz) = 200 ]"
K=$(uuid)
assert_posted "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"erin","qty":1}')" "10: a buy"
wait_until 10 "erin's decision in Postgres" "[ \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$K'\")\" = held ]"
t0=$SECONDS
assert_eq 200 "$(req GET "/v1/intents/$K?wait=8")" "10: the long-poll on a queued buy"
assert_eq "held postgres" "$(body_field outcome) $(body_field source)" "10: answered from Postgres"
[ $((SECONDS - t0)) -le 5 ] && say "ok: 10: within $((SECONDS - t0)) s" || fail "10: after $((SECONDS - t0)) s"
K=$(uuid)
assert_posted "$(req POST "/v1/skus/$X/buys" -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"fred","qty":1}')" "10: another buy"
poll 8 "[ \$(req GET '/v1/intents/$K') = 200 ]" && say "ok: 10: a plain GET gets it from Postgres" ||
	fail "10: plain GETs: still $(cat "$IT_DIR/body")"
assert_eq held "$(body_field outcome)" "10: fred's decision"

audit_ok
if [ "$IT_FAILED" -eq 0 ]; then # the extra topic (it_cleanup deletes the test's three)
	for pid in "${IT_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	fs --set topic.results="it.$IT_ID.results2" topics delete >/dev/null 2>&1 || true
fi
it_done
