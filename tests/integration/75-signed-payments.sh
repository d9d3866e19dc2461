#!/usr/bin/env bash
# Payments are signed (issue 48, item 3), tried as an attacker would on the real services. A
# confirm (of a buy or a cart) is the payment provider's call: accepted only with
# Flashsale-Signature (HMAC-SHA256 of "t.body" with payment.secret.file's key, t within 300 s).
# Against two holds: a confirm with no signature, a malformed one, one made with another key,
# a stale t (both ways), a body changed after signing, a genuine signature of the other hold's
# confirm replayed, the path spelt %63onfirm, an unsigned cart confirm: each refused 401 with
# its error code, nothing published (the intents topic has no confirm record, Postgres's holds
# stay held), each counted by reason in the metrics; 500 more forged confirms while 300 honest
# buyers buy through the same gateway: every buyer answered. Then the honest, signed confirm
# is `confirmed`; a rotation's two v1 entries pass a gateway holding either key; a gateway
# without payment.secret.file refuses every confirm (403 payments_disabled); one whose key file
# others may read does not start. On a gateway that does not check (before issue 48) the
# unsigned confirm is accepted and the test fails there.
. "$(dirname "$0")/lib.sh"

it_setup 1
start_worker w1
it_admin_token
start_gateway gw --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0
GWM=http://127.0.0.1:$(metrics_port gw)
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
uuid() { python3 -c 'import uuid; print(uuid.uuid4())'; }
intents_dump() {
	kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
		-t "it.$IT_ID.intents" -o beginning -f '%s\n'
}
confirms_published() { intents_dump | grep -cE '"type":"(cart_)?confirm"' || true; }
hold() { sql "SELECT status FROM reservations WHERE intent_id = '$1'"; }
refusals() { metric_sum "$GWM" "flashsale_gateway_payment_refusals_total.reason=\"$1\"."; }

assert_eq 202 "$(req POST /v1/skus/PAY/open -H "$J" -H "$A" -d '{"stock":5,"hold_seconds":600}')" "open PAY"
assert_eq 202 "$(req POST /v1/skus/CROWD/open -H "$J" -H "$A" -d '{"stock":100}')" "open CROWD"
for s in PAY CROWD; do
	wait_until 30 "$s open on the gateway" "[ \$(req GET /v1/skus/$s) = 200 ]"
done
K1=$(uuid) K2=$(uuid)
for k in "$K1:alice" "$K2:bob"; do
	assert_posted "$(req POST /v1/skus/PAY/buys -H "$J" -H "Idempotency-Key: ${k%%:*}" -d "{\"buyer_id\":\"${k#*:}\",\"qty\":1}")" "${k#*:}'s buy"
	assert_eq "200 held" "$(req GET "/v1/intents/${k%%:*}?wait=20") $(body_field outcome)" "${k#*:} holds"
done
b1="{\"intent_id\":\"$K1\",\"sku\":\"PAY\"}"
b2="{\"intent_id\":\"$K2\",\"sku\":\"PAY\"}"
now=$(date +%s)

# ---- the attacks, one by one: each 401 with its reason ----
attack() { # attack STATUS ERROR WHAT PATH [CURL ARGS]
	local want="$1 $2" what=$3 path=$4
	shift 4
	assert_eq "$want" "$(req POST "$path" -H "$J" "$@") $(body_field error)" "$what"
}
attack 401 missing_signature "a confirm with no signature" "/v1/intents/$K1/confirm" -d "$b1"
assert_eq Flashsale-Signature "$(header_value WWW-Authenticate)" "its WWW-Authenticate"
attack 401 missing_signature "an empty signature" "/v1/intents/$K1/confirm" -H 'Flashsale-Signature;' -d "$b1"
attack 401 bad_signature "a malformed signature" "/v1/intents/$K1/confirm" -H "Flashsale-Signature: t=$now,v1=zz" -d "$b1"
attack 401 bad_signature "a signature of 2000 bytes" "/v1/intents/$K1/confirm" -H "Flashsale-Signature: t=$now,v1=$(head -c 2000 /dev/zero | tr '\0' a)" -d "$b1"
# The attacker's own key: a ring the gateway does not hold.
(umask 077 && printf 'evil %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$IT_DIR/evil.keys")
evil=$(python3 "$IT_ROOT/scripts/payment-stub" sign --keys "$IT_DIR/evil.keys" -- "$b1")
attack 401 bad_signature "a signature made with another key" "/v1/intents/$K1/confirm" -H "Flashsale-Signature: $evil" -d "$b1"
# (the window's exact edges are tests/unit/test_payment.c's: here the clock moves on meanwhile)
attack 401 stale_signature "a genuine signature 310 s old" "/v1/intents/$K1/confirm" -H "$(sign_confirm "$b1" $(($(date +%s) - 310)))" -d "$b1"
attack 401 stale_signature "a genuine signature 310 s ahead" "/v1/intents/$K1/confirm" -H "$(sign_confirm "$b1" $(($(date +%s) + 310)))" -d "$b1"
sig1=$(sign_confirm "$b1" "$now")
attack 401 bad_signature "a body changed after signing (another SKU)" "/v1/intents/$K1/confirm" -H "$sig1" -d "${b1/PAY/PAZ}"
attack 401 bad_signature "a body changed after signing (a space)" "/v1/intents/$K1/confirm" -H "$sig1" -d "$b1 "
attack 401 bad_signature "a genuine signature with another t" "/v1/intents/$K1/confirm" -H "${sig1/t=$now/t=$((now - 1))}" -d "$b1"
# A genuine signature of bob's confirm (as a provider sent it), replayed on alice's hold.
sig2=$(sign_confirm "$b2")
attack 401 wrong_intent "bob's signed confirm replayed to alice's hold" "/v1/intents/$K1/confirm" -H "$sig2" -d "$b2"
b1bare="{\"sku\":\"PAY\"}"
attack 401 wrong_intent "a signed body that names no intent" "/v1/intents/$K1/confirm" -H "$(sign_confirm "$b1bare")" -d "$b1bare"
attack 401 missing_signature "an unsigned cart confirm" "/v1/carts/$(uuid)/confirm" -d '{}'

# ---- a flood of forged confirms while honest buyers buy through the same gateway ----
/usr/bin/python3 "$IT_ROOT/tests/clients/gateway_load.py" --url "$GW" --sku CROWD --buyers 300 \
	--threads 4 --wait 30 --prefix honest --out "$IT_DIR/crowd.jsonl" >"$IT_DIR/crowd.out" &
crowd=$!
python3 - "$GW" "$K1" "$b1" "$b2" "$sig2" "$now" >"$IT_DIR/flood.out" <<-'EOF'
	import collections, http.client, sys, urllib.parse
	gw, k1, b1, b2, sig2, now = sys.argv[1:]
	u = urllib.parse.urlparse(gw)
	c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
	# (header, body): none, a MAC of zeros, bob's genuine confirm, garbage, an old t
	forged = [(None, b1), ("t=%s,v1=%s" % (now, "0" * 64), b1), (sig2.split(": ", 1)[1], b2),
	          ("garbage", b1), ("t=1,v1=" + "ab" * 32, b1)]
	seen = collections.Counter()
	for i in range(500):
	    sig, body = forged[i % 5]
	    h = {"Content-Type": "application/json"}
	    if sig:
	        h["Flashsale-Signature"] = sig
	    c.request("POST", "/v1/intents/%s/confirm" % k1, body=body, headers=h)
	    r = c.getresponse()
	    r.read()
	    seen[r.status] += 1
	print(" ".join("%d:%d" % kv for kv in sorted(seen.items())))
EOF
assert_eq "401:500" "$(cat "$IT_DIR/flood.out")" "500 forged confirms: statuses"
wait "$crowd" || fail "the honest buyers' load failed: $(tail -n 3 "$IT_DIR/crowd.out")"
summary=$(tail -n 1 "$IT_DIR/crowd.out")
assert_eq "buyers=300 accepted=300 decided=300 failed=0" "${summary%% seconds=*}" "the honest buyers, meanwhile"

# ---- nothing was published, nothing changed ----
fs wait --timeout 60 --quiet || die "records not decided"
assert_eq 0 "$(confirms_published)" "confirm records on the intents topic"
assert_eq "held held" "$(hold "$K1") $(hold "$K2")" "Postgres: alice's and bob's holds"
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE outcome IN ('confirmed', 'confirmed_late')")" "confirms decided"
assert_eq "103 306 2 102" "$(refusals missing_signature) $(refusals bad_signature) $(refusals stale_signature) $(refusals wrong_intent)" "refusals counted (missing, bad, stale, wrong_intent)"
prom_check_metrics "$GWM/metrics"
assert_eq 100 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'CROWD' AND kind = 1 AND outcome = 'held'")" "CROWD: the honest buyers took the 100 units"
# However the path is spelt (libmicrohttpd decodes it), what reaches confirm is checked.
st=$(req POST "/v1/intents/$K1/%63onfirm" -H "$J" -d "$b1")
case $st in 2*) fail "the path spelt %63onfirm: $st $(cat "$IT_DIR/body")" ;; *) say "ok: the path spelt %63onfirm: $st $(body_field error)" ;; esac

# ---- the provider's honest confirm ----
assert_posted "$(req POST "/v1/intents/$K1/confirm" -H "$J" -H "$(sign_confirm "$b1")" -d "$b1")" "alice's signed confirm"
assert_eq "200 confirmed" "$(req GET "/v1/intents/$K1/confirm?wait=20") $(body_field outcome)" "its decision"
assert_eq "confirmed held" "$(hold "$K1") $(hold "$K2")" "Postgres: alice paid, bob still holds"
assert_eq 1 "$(confirms_published)" "confirm records on the intents topic"
# The provider sends it again (its retry, a new t): the same answer, nothing new published.
assert_eq "200 confirmed" "$(req POST "/v1/intents/$K1/confirm" -H "$J" -H "$(sign_confirm "$b1")" -d "$b1") $(body_field outcome)" "the provider's retry"

# ---- a rotation: the provider signs with the old and the new secret ----
(umask 077 && cp "$IT_PAY_KEYS" "$IT_DIR/both.keys" &&
	printf 'pay2 %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >>"$IT_DIR/both.keys" &&
	grep pay2 "$IT_DIR/both.keys" >"$IT_DIR/new.keys")
start_gateway gw2 --set payment.secret.file="$IT_DIR/new.keys"
wait_until 30 "gw2 ready" "[ \$(req GET /readyz) = 200 ]"
rot=$(python3 "$IT_ROOT/scripts/payment-stub" sign --keys "$IT_DIR/both.keys" --all -- "$b2")
case $rot in t=*,v1=*,v1=*) say "ok: the provider's header in a rotation: two v1" ;; *) fail "rotation header: $rot" ;; esac
attack 401 bad_signature "the old secret alone, at a gateway that holds only the new" "/v1/intents/$K2/confirm" -H "$(sign_confirm "$b2")" -d "$b2"
assert_posted "$(req POST "/v1/intents/$K2/confirm" -H "$J" -H "Flashsale-Signature: $rot" -d "$b2")" "both secrets' v1 at the new key's gateway"
assert_eq "200 confirmed" "$(req GET "/v1/intents/$K2/confirm?wait=20") $(body_field outcome)" "bob's confirm"
kill_worker gw2

# ---- no payment.secret.file: payments off; a key file others may read: no start ----
start_gateway gw3 --set payment.secret.file=
wait_until 30 "gw3 ready" "[ \$(req GET /readyz) = 200 ]"
grep -q 'payments are off' "$IT_DIR/gw3.log" && say "ok: gw3 warns that payments are off" || fail "gw3's log: no warning"
attack 403 payments_disabled "a signed confirm at a gateway with no payment key" "/v1/intents/$K2/confirm" -H "$(sign_confirm "$b2")" -d "$b2"
kill_worker gw3
cp "$IT_PAY_KEYS" "$IT_DIR/open.keys" && chmod 644 "$IT_DIR/open.keys"
rc=0
timeout 30 "$IT_BUILD/flashsale-gateway" -c "$IT_DIR/flashsale.conf" --set listen=127.0.0.1:0 \
	--set payment.secret.file="$IT_DIR/open.keys" >"$IT_DIR/gw4.log" 2>&1 || rc=$?
assert_eq 2 "$rc" "a gateway whose payment key file is mode 644: exit status"
grep -q 'chmod 600' "$IT_DIR/gw4.log" && say "ok: it says: $(grep -o 'payment.secret.file.*' "$IT_DIR/gw4.log")" || fail "gw4's log: $(cat "$IT_DIR/gw4.log")"
grep -q "$(cut -d' ' -f2 "$IT_PAY_KEYS")" "$IT_DIR"/gw*.log "$IT_DIR/w1.log" && fail "a secret in a log" || say "ok: no secret in the logs"

stop_worker w1
audit_ok
it_done
