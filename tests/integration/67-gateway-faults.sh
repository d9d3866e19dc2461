#!/usr/bin/env bash
# flashsale-gateway under faults, on the real services. (1) The gateway is killed (-9) while
# 16 connections of buyers hammer it, and restarted on the same port; the buyers retry with
# their keys. Every buy answered 202 is decided exactly once, the sale sells its stock, the
# audit is clean, and the restarted gateway finds decisions made before it started in
# Postgres, with the hold's later events on a stream resumed with Last-Event-ID. (2) The broker
# is killed: readyz and the buys answer 503 (nothing is answered 202 that is not on the log),
# and once it is back the same key is published and decided. Before that, the broker stopped
# (SIGSTOP): a buy whose POST waits for its delivery report is "publishing", not "queued".
. "$(dirname "$0")/lib.sh"
ROOT=$IT_ROOT
it_setup 2
start_worker w1
stock=2000
buyers=4000
fs sale open HOT --stock "$stock" >/dev/null
start_gateway gw --set publish.timeout.ms=3000
port=${GW##*:}
J='Content-Type: application/json'
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"

# ---- 1. kill -9 under load ----
python3 "$ROOT/tests/clients/gateway_load.py" --url "$GW" --sku HOT --buyers "$buyers" --threads 16 \
	--retry-until 90 --out "$IT_DIR/load.jsonl" >"$IT_DIR/load.out" 2>&1 &
load=$!
wait_until 60 "300 buys decided" "[ \$(sql \"SELECT count(*) FROM decisions WHERE sku = 'HOT'\") -ge 300 ]"
kill -KILL "$(worker_pid gw)"
say "gateway killed with $(sql "SELECT count(*) FROM decisions WHERE sku = 'HOT'") buys decided"
start_gateway gw2 --set listen="127.0.0.1:$port" --set publish.timeout.ms=3000
assert_eq "http://127.0.0.1:$port" "$GW" "the restarted gateway's address"
wait "$load" || die "load failed: $(cat "$IT_DIR/load.out")"
say "load: $(tail -n 1 "$IT_DIR/load.out")"
assert_eq "buyers=$buyers accepted=$buyers" "$(tail -n 1 "$IT_DIR/load.out" | cut -d' ' -f1-2)" "every buyer answered 202 or 200 (retrying with its key)"
fs wait --timeout 120 --quiet || die "records not decided"
python3 - "$IT_DIR/load.jsonl" >"$IT_DIR/accepted" <<-'EOF'
	import json, sys
	for line in open(sys.argv[1]):
	    r = json.loads(line)
	    if r["published"]:
	        print(r["id"])
EOF
sort -u "$IT_DIR/accepted" -o "$IT_DIR/accepted"
sql "SELECT intent_id FROM decisions WHERE sku = 'HOT' AND kind = 1" | sort >"$IT_DIR/decided"
assert_eq 0 "$(comm -23 "$IT_DIR/accepted" "$IT_DIR/decided" | wc -l)" "buys answered 202 and not decided"
assert_eq 0 "$(sql "SELECT count(*) FROM (SELECT intent_id FROM decisions WHERE sku = 'HOT' GROUP BY intent_id, kind HAVING count(*) > 1) x")" "intents decided twice"
assert_eq "$stock" "$(sql "SELECT count(*) FROM decisions WHERE sku = 'HOT' AND outcome = 'held'")" "held"
retried=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)["tries"] > 1))' "$IT_DIR/load.jsonl")
[ "$retried" -gt 0 ] && say "ok: $retried buyers retried across the kill" || fail "no buyer met the kill"

# The restarted gateway has none of these in memory: Postgres answers.
held=$(sql "SELECT intent_id FROM decisions WHERE sku = 'HOT' AND outcome = 'held' ORDER BY off LIMIT 1")
assert_eq 200 "$(req GET "/v1/intents/$held")" "a decision made before the restart"
assert_eq "held postgres" "$(body_field outcome) $(body_field source)" "from Postgres"
curl -s -N --max-time 2 "$GW/v1/intents/$held/events" >"$IT_DIR/ev1" || true
last=$(grep '^id: ' "$IT_DIR/ev1" | tail -n 1 | cut -d' ' -f2)
[ -n "$last" ] && say "ok: its stream after the restart starts with $(grep -m1 '^event: ' "$IT_DIR/ev1")" || fail "no event: $(cat "$IT_DIR/ev1")"
# Resumed with Last-Event-ID: only what came after, as it comes.
curl -s -N --max-time 30 -H "Last-Event-ID: $last" "$GW/v1/intents/$held/events" >"$IT_DIR/ev2" &
ev=$!
wait_until 10 "the resumed stream to open" "grep -q ': open' '$IT_DIR/ev2'"
assert_posted "$(req POST "/v1/intents/$held/cancel")" "cancel it (its SKU from Postgres)"
wait_until 20 "the cancel on the resumed stream" "grep -q '^event: cancelled' '$IT_DIR/ev2'"
kill "$ev" 2>/dev/null || true
assert_eq 0 "$(grep -c '^event: decided' "$IT_DIR/ev2")" "events repeated after Last-Event-ID"

# ---- 2. a buy being published: the broker stopped (SIGSTOP, its connections stay open), a
# POST waits for its delivery report; meanwhile the intent is "publishing", never "queued"
# (queued says "on the log"). The broker is let go again whatever happened. (A SKU the stock
# topic does not name: HOT is sold out, and the edge would answer its buys unpublished.)
KP=$(python3 -c 'import uuid; print(uuid.uuid4())')
kpid=$(cat "$ROOT/.local/run/kafka.pid")
kill -STOP "$kpid"
curl -s -o "$IT_DIR/pbody" -w '%{http_code}' -m 60 -X POST "$GW/v1/skus/NOEDGE/buys" -H "$J" \
	-H "Idempotency-Key: $KP" -d '{"buyer_id":"slowpub","qty":1}' >"$IT_DIR/pcode" &
pc=$!
seen=""
for _ in $(seq 50); do # 10 s
	if [ "$(req GET "/v1/intents/$KP")" = 202 ]; then
		seen=$(body_field status)
		break
	fi
	sleep 0.2
done
kill -CONT "$kpid"
assert_eq publishing "$seen" "a buy waiting for its delivery report, while the broker is stopped"
wait "$pc" || true
assert_eq 202 "$(cat "$IT_DIR/pcode")" "its POST once the broker runs again"
st=$(req GET "/v1/intents/$KP")
case "$st $(body_field status)" in "202 queued" | "200 decided") say "ok: then $st $(body_field status)" ;; *) fail "after the delivery report: $st $(cat "$IT_DIR/body")" ;; esac

# ---- 3. the broker down ----
K=$(python3 -c 'import uuid; print(uuid.uuid4())')
"$ROOT/scripts/services" kill-kafka >/dev/null
say "broker killed"
wait_until 30 "readyz to say the broker is gone" "[ \$(req GET /readyz) = 503 ]"
assert_eq false "$(body_field producer_connected)" "readyz: producer_connected"
st=$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"late","qty":1}')
assert_eq "503 log_unavailable 1" "$st $(body_field error) $(header_value Retry-After)" "a buy while the broker is down"
"$ROOT/scripts/services" up >/dev/null
say "broker back"
wait_until 60 "readyz" "[ \$(req GET /readyz) = 200 ]"
st=$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"late","qty":1}')
case $st in 200 | 202) say "ok: the same key once the broker is back: $st" ;; *) fail "after the broker: $st $(cat "$IT_DIR/body")" ;; esac
assert_eq 200 "$(req GET "/v1/intents/$K?wait=30")" "its decision"
assert_eq 1 "$(sql "SELECT count(*) FROM decisions WHERE intent_id = '$K'")" "decided once"

kill -TERM "$(worker_pid gw2)"
wait_until 30 "the gateway to exit" "! alive $(worker_pid gw2)"
stop_worker w1
audit_ok
it_done
