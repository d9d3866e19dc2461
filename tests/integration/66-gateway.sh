#!/usr/bin/env bash
# flashsale-gateway end to end, on the real services: every endpoint (buys, long-polls, event
# streams with Last-Event-ID and heartbeats, confirm and cancel, the SKU and its stream, the
# sale administration, healthz and readyz), idempotency (same key same body, same key other
# body), the sold-out flag at the edge and its flip back, the fan-out of 200 waiting buyers
# from one consumer, and bad input and limits (bodies, JSON, content types, ids, paths,
# methods, connections, slow clients). The README's curl examples are run by 45's snippet
# check; this test asserts the outcomes.
. "$(dirname "$0")/lib.sh"
it_setup 2
start_worker w1
it_admin_token
start_gateway gw --set admin.token.file="$IT_DIR/admin-token" --set http.heartbeat.ms=500 --set http.body.max=1024
gwpid=$(worker_pid gw)
J='Content-Type: application/json'

# ---- health, readiness, one consumer ----
assert_eq 200 "$(req GET /healthz)" "healthz"
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
assert_eq 2 "$(body_field kafka_clients)" "librdkafka handles of the gateway (one producer, one consumer)"

# ---- the sale administration ----
assert_eq 401 "$(req POST /v1/skus/HOT/open -H "$J" -d '{"stock":3}')" "open without a token"
assert_eq Bearer "$(header_value WWW-Authenticate)" "WWW-Authenticate"
assert_eq 401 "$(req POST /v1/skus/HOT/open -H "$J" -H "Authorization: Bearer x$TOKEN" -d '{"stock":3}')" "open with a wrong token"
assert_eq 400 "$(req POST /v1/skus/HOT/open -H "$J" -H "Authorization: Bearer $TOKEN" -d '{"stock":-3}')" "open with a bad stock"
assert_eq bad_stock "$(body_field error)" "its error"
assert_eq 202 "$(req POST /v1/skus/HOT/open -H "$J" -H "Authorization: Bearer $TOKEN" -d '{"stock":3,"per_buyer_limit":1}')" "open"
assert_eq queued "$(body_field status)" "open's status"
assert_eq 202 "$(req POST /v1/skus/COLD/open -H "$J" -H "Authorization: Bearer $TOKEN" -d '{"stock":100}')" "open COLD"
assert_eq 202 "$(req POST /v1/skus/FAN/open -H "$J" -H "Authorization: Bearer $TOKEN" -d '{"stock":1000}')" "open FAN"
wait_until 30 "the SKU's stock record" "[ \$(req GET /v1/skus/HOT) = 200 ]"
assert_eq "open 3" "$(body_field status) $(body_field available)" "GET /v1/skus/HOT"
assert_eq 404 "$(req GET /v1/skus/NOPE)" "an unknown SKU"

# The SKU's stream, from now on, in the background.
curl -s -N --max-time 60 "$GW/v1/skus/HOT/events" >"$IT_DIR/sku-events" &
sku_stream=$!

# ---- a buy, its retries, its decision ----
K1=$(python3 -c 'import uuid; print(uuid.uuid4())')
B1='{"buyer_id":"alice","qty":1}'
assert_posted "$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K1" -d "$B1")" "buy"
assert_eq "/v1/intents/$K1" "$(header_value Location)" "its Location"
assert_eq "$K1 queued" "$(body_field intent_id) $(body_field status)" "its body"
st=$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K1" -d "$B1")
case $st in 200 | 202) say "ok: the same key and body again: $st ($(body_field intent_id))" ;; *) fail "retry: $st" ;; esac
assert_eq 422 "$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K1" -d '{"buyer_id":"alice","qty":2}')" "the same key with another body"
assert_eq idempotency_key_reused "$(body_field error)" "its error"
assert_eq 200 "$(req GET "/v1/intents/$K1?wait=20")" "long-poll for the decision"
assert_eq "held decided" "$(body_field outcome) $(body_field status)" "the decision"
assert_eq 200 "$(req POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K1" -d "$B1")" "a retry after the decision"
assert_eq held "$(body_field outcome)" "it carries the decision"
assert_eq held "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$K1'")" "Postgres agrees"
# Prefer: wait=N (RFC 7240) and a plain GET.
assert_eq 200 "$(req GET "/v1/intents/$K1" -H 'Prefer: wait=5')" "GET with Prefer: wait"
# A buy without a key: the gateway mints a version-7 id.
assert_posted "$(req POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"bob","qty":1}')" "a buy without Idempotency-Key"
K2=$(body_field intent_id)
assert_eq 7 "${K2:14:1}" "the minted id's version"
# A pending intent answers 202 with Retry-After (the GET right after the POST may also find
# it decided: both are right; the long-poll then settles it).
st=$(req GET "/v1/intents/$K2")
case $st in 200 | 202) say "ok: GET right after the buy: $st" ;; *) fail "GET pending: $st" ;; esac
[ "$st" = 200 ] || assert_eq 1 "$(header_value Retry-After)" "Retry-After while pending"
assert_eq 200 "$(req GET "/v1/intents/$K2?wait=20")" "bob's decision"

# ---- fan-out: 200 buyers waiting at once, one consumer ----
wait_until 30 "FAN's stock record" "[ \$(req GET /v1/skus/FAN) = 200 ]"
python3 "$IT_ROOT/tests/clients/gateway_load.py" --url "$GW" --sku FAN --buyers 200 --threads 200 \
	--wait 30 --out "$IT_DIR/fan.jsonl" --prefix fan >"$IT_DIR/fan.out" &
fan=$!
wait_until 30 "200 connections at the gateway" "[ \$(req GET /readyz) = 200 ] && [ \$(body_field connections) -ge 150 ] || ! alive $fan"
threads=$(cat /proc/"$gwpid"/task/*/comm | grep -c '^rdk:main' || true)
assert_eq 2 "$threads" "librdkafka main threads in the gateway while 150+ buyers wait"
wait "$fan" || fail "gateway_load failed"
say "fan-out: $(tail -n 1 "$IT_DIR/fan.out")"
assert_eq "buyers=200 accepted=200 decided=200 failed=0" "$(tail -n 1 "$IT_DIR/fan.out" | cut -d' ' -f1-4)" "every waiting buyer answered"
# Each answer is Postgres's decision (those the edge answered were never published).
python3 - "$IT_DIR/fan.jsonl" >"$IT_DIR/fan.ids" <<-'EOF'
	import json, sys
	for line in open(sys.argv[1]):
	    r = json.loads(line)
	    print(r["id"], r["outcome"], "published" if r["published"] else "edge")
EOF
awk '$3 == "published"' "$IT_DIR/fan.ids" | sort >"$IT_DIR/fan.published"
ids=$(awk '{ printf "%s\x27%s\x27", (NR > 1 ? "," : ""), $1 }' "$IT_DIR/fan.published")
sql "SELECT intent_id, outcome FROM decisions WHERE intent_id IN ($ids)" | tr '|' ' ' | sort >"$IT_DIR/fan.pg"
assert_eq "$(wc -l <"$IT_DIR/fan.pg")" "$(wc -l <"$IT_DIR/fan.published")" "published fan buys decided in Postgres"
assert_eq 0 "$(cut -d' ' -f1,2 "$IT_DIR/fan.published" | comm -3 - "$IT_DIR/fan.pg" | wc -l)" "answers that differ from Postgres"
assert_eq 200 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'FAN' AND outcome = 'held'")" "FAN held (stock 1000)"
# ---- the sell-out of HOT (stock 3: alice and bob hold two) through the gateway ----
python3 "$IT_ROOT/tests/clients/gateway_load.py" --url "$GW" --sku HOT --buyers 20 --threads 20 \
	--wait 30 --out "$IT_DIR/hot.jsonl" --prefix hot >"$IT_DIR/hot.out" || fail "gateway_load failed"
assert_eq "buyers=20 accepted=20 decided=20 failed=0" "$(tail -n 1 "$IT_DIR/hot.out" | cut -d' ' -f1-4)" "20 more buyers of HOT answered"
assert_eq 3 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'HOT' AND outcome = 'held'")" "HOT held (stock 3)"

# ---- the sold-out flag at the edge ----
wait_until 30 "the edge to see HOT sold out" "[ \$(req GET /v1/skus/HOT) = 200 ] && [ \$(body_field status) = sold_out ]"
fs wait --timeout 60 --quiet || die "records not decided"
before=$(decided)
assert_eq 200 "$(req POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"late","qty":1}')" "a buy after the sell-out"
assert_eq "sold_out edge" "$(body_field outcome) $(body_field source)" "answered at the edge"
fs wait --timeout 60 --quiet || die "records not decided"
assert_eq "$before" "$(decided)" "records decided after the edge answer (nothing published)"

# ---- cancel: the unit returns, the flag flips back ----
assert_posted "$(req POST "/v1/intents/$K1/cancel")" "cancel alice's hold (the SKU from memory)"
assert_eq "/v1/intents/$K1/cancel" "$(header_value Location)" "the cancel's Location"
t0=$(date +%s%3N)
assert_eq 200 "$(req GET "/v1/intents/$K1/cancel?wait=20")" "the cancel's decision"
assert_eq cancelled "$(body_field outcome)" "the cancel's outcome"
wait_until 30 "the edge to see HOT open again" "[ \$(req GET /v1/skus/HOT) = 200 ] && [ \$(body_field status) = open ]"
say "ok: the flag flipped back $(($(date +%s%3N) - t0)) ms after the cancel's answer"
assert_posted "$(req POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"carol","qty":1}')" "a buy is published again"
K3=$(body_field intent_id)
assert_eq 200 "$(req GET "/v1/intents/$K3?wait=20")" "carol's decision"
assert_eq held "$(body_field outcome)" "carol won the returned unit"
assert_eq 200 "$(req GET "/v1/intents/$K1")" "alice's buy after the cancel"
assert_eq cancelled "$(body_field hold)" "its hold"

# ---- confirm: by the payment provider ----
b3="{\"intent_id\":\"$K3\",\"sku\":\"HOT\"}" # signed, as the provider does (issue 48)
assert_posted "$(req POST "/v1/intents/$K3/confirm" -H "$J" -H "$(sign_confirm "$b3")" -d "$b3")" "confirm carol's hold"
assert_eq 200 "$(req GET "/v1/intents/$K3/confirm?wait=20")" "the confirm's decision"
assert_eq confirmed "$(body_field outcome)" "the confirm's outcome"
assert_eq confirmed "$(sql "SELECT status FROM reservations WHERE intent_id = '$K3'")" "Postgres: carol's hold"

# ---- the intent's event stream, Last-Event-ID, heartbeats ----
curl -s -N --max-time 2 "$GW/v1/intents/$K1/events" >"$IT_DIR/ev1" || true
grep -q '^event: decided' "$IT_DIR/ev1" && grep -q '^event: cancelled' "$IT_DIR/ev1" && say "ok: alice's stream: decided, cancelled" || fail "alice's stream: $(cat "$IT_DIR/ev1")"
first_id=$(grep -m1 '^id: ' "$IT_DIR/ev1" | cut -d' ' -f2)
grep -q '^: heartbeat' "$IT_DIR/ev1" && say "ok: a heartbeat in 2 s (http.heartbeat.ms = 500)" || fail "no heartbeat"
curl -s -N --max-time 2 -H "Last-Event-ID: $first_id" "$GW/v1/intents/$K1/events" >"$IT_DIR/ev2" || true
assert_eq "cancelled" "$(grep '^event: ' "$IT_DIR/ev2" | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//')" "events after Last-Event-ID $first_id"
# A stream opened before the decision gets it when it lands.
K4=$(python3 -c 'import uuid; print(uuid.uuid4())')
curl -s -N --max-time 20 "$GW/v1/intents/$K4/events" >"$IT_DIR/ev4" &
ev4=$!
wait_until 10 "the stream to open" "grep -q ': open' '$IT_DIR/ev4'"
assert_posted "$(req POST /v1/skus/COLD/buys -H "$J" -H "Idempotency-Key: $K4" -d '{"buyer_id":"dave","qty":1}')" "dave's buy"
wait_until 20 "dave's decision on his stream" "grep -q '^event: decided' '$IT_DIR/ev4'"
kill "$ev4" 2>/dev/null || true
# The SKU's stream saw the sell-out and the return.
kill "$sku_stream" 2>/dev/null || true
grep -q '"status":"sold_out"' "$IT_DIR/sku-events" && grep -q '"status":"open"' "$IT_DIR/sku-events" &&
	say "ok: the SKU's stream: $(grep -c '^event: stock' "$IT_DIR/sku-events") stock events, sold_out and open" ||
	fail "SKU stream: $(head -c 600 "$IT_DIR/sku-events")"

# ---- the README's curl examples, as they are ----
it_jwt_keys
(cd "$IT_ROOT" && GW=$GW TOKEN=$TOKEN PAYMENT_KEYS=$IT_PAY_KEYS BUYER_KEYS=$IT_DIR/jwt-keys bash tests/clients/gateway_curl.sh) >"$IT_DIR/readme.out" 2>&1 || fail "the README's examples failed: $(cat "$IT_DIR/readme.out")"
for want in '"status":"queued"' '"outcome":"held"' 'event: decided' '"outcome":"confirmed"' '"sku":"PHONE"'; do
	grep -qF "$want" "$IT_DIR/readme.out" && say "ok: the README's examples print $want" || fail "the README's examples: no $want in $(cat "$IT_DIR/readme.out")"
done

# ---- bad input ----
chk() { # chk STATUS ERROR WHAT METHOD PATH [CURL ARGS]
	local want=$1 err=$2 what=$3
	shift 3
	assert_eq "$want $err" "$(req "$@") $(body_field error)" "$what"
}
chk 400 bad_idempotency_key "a key that is not a UUID" POST /v1/skus/HOT/buys -H "$J" -H 'Idempotency-Key: nope' -d "$B1"
chk 400 bad_json "malformed JSON" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":'
chk 400 not_object "a JSON array" POST /v1/skus/HOT/buys -H "$J" -d '[1]'
chk 400 duplicate_key "a duplicate key" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"a","buyer_id":"b","qty":1}'
chk 415 not_json "a form body" POST /v1/skus/HOT/buys -d 'buyer_id=a&qty=1'
chk 400 bad_sku "a bad SKU" POST '/v1/skus/H%20T/buys' -H "$J" -d "$B1"
chk 400 bad_sku "a SKU of 65 characters" POST "/v1/skus/$(printf 'S%.0s' $(seq 65))/buys" -H "$J" -d "$B1"
chk 400 bad_buyer_id "a bad buyer id" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"a b","qty":1}'
chk 400 bad_qty "qty 0" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"a","qty":0}'
chk 400 bad_qty "qty 1.5" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"a","qty":1.5}'
chk 400 missing_qty "no qty" POST /v1/skus/HOT/buys -H "$J" -d '{"buyer_id":"a"}'
chk 413 too_large "a body over http.body.max" POST /v1/skus/HOT/buys -H "$J" -d "{\"buyer_id\":\"a\",\"qty\":1,\"pad\":\"$(head -c 2000 /dev/zero | tr '\0' x)\"}"
chk 404 not_found "an unknown path" GET /v1/nothing
chk 405 method_not_allowed "a wrong method" DELETE /v1/skus/HOT/buys
assert_eq POST "$(header_value Allow)" "Allow"
chk 400 bad_intent_id "a bad intent id" GET /v1/intents/not-a-uuid
chk 400 bad_wait "a bad wait" GET "/v1/intents/$K1?wait=soon"
chk 404 unknown_intent "an intent nobody sent" GET "/v1/intents/$(python3 -c 'import uuid; print(uuid.uuid4())')"
K0=$(python3 -c 'import uuid; print(uuid.uuid4())')
b0="{\"intent_id\":\"$K0\"}"
chk 404 unknown_intent "a confirm for a buy nobody sent, without its SKU" POST "/v1/intents/$K0/confirm" -H "$J" -H "$(sign_confirm "$b0")" -d "$b0"
# Nothing the checks refused reached the log.
fs wait --timeout 60 --quiet || die "records not decided"
assert_eq "0 0" "$(sql "SELECT count(*) FROM decisions WHERE outcome = 'rejected'") $(sql "SELECT count(*) FROM rejects")" "rejected records (decisions, rejects)"

# ---- limits, on a second gateway: too many connections, a slow client; and no admin token ----
gw1=$GW
start_gateway gw2 --set http.timeout.s=2 --set http.connections.max=40
assert_eq "403 admin_disabled" "$(req POST /v1/skus/HOT/close -H "Authorization: Bearer $TOKEN") $(body_field error)" "administration is off by default"
python3 - "$GW" <<-'EOF' >"$IT_DIR/limits.out" || fail "limits: $(cat "$IT_DIR/limits.out")"
	import socket, sys, time, urllib.parse
	u = urllib.parse.urlparse(sys.argv[1])
	held = []
	for _ in range(45):  # over http.connections.max = 40
	    s = socket.create_connection((u.hostname, u.port))
	    held.append(s)
	time.sleep(0.3)
	s = socket.create_connection((u.hostname, u.port))
	s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	answer = s.recv(4096).decode()
	print(answer.splitlines()[0])
	assert " 503 " in answer.splitlines()[0], answer
	assert "Retry-After: 1" in answer, answer
	for h in held:
	    h.close()
	# A slow client: half a request line, then nothing: closed after http.timeout.s = 2.
	s = socket.create_connection((u.hostname, u.port))
	s.sendall(b"GET /heal")
	t0 = time.monotonic()
	s.settimeout(20)
	assert s.recv(4096) == b"", "a slow client got an answer"
	took = time.monotonic() - t0
	print("slow client closed after %.1f s" % took)
	assert 1.5 <= took <= 10, took
EOF
say "ok: limits: $(tr '\n' ';' <"$IT_DIR/limits.out")"
wait_until 20 "the connections to be gone" "[ \$(req GET /readyz) = 200 ]"
assert_eq 200 "$(req GET /healthz)" "served again after the overload"

kill -TERM "$(worker_pid gw2)"
wait_until 30 "gateway 2 to exit" "! alive $(worker_pid gw2)"
GW=$gw1

# ---- a clean stop ----
kill -TERM "$gwpid"
wait_until 30 "the gateway to exit" "! alive $gwpid"
wait "$gwpid" && say "ok: the gateway exited 0 on SIGTERM" || fail "the gateway exited $?"
stop_worker w1
audit_ok
it_done
