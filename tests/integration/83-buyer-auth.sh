#!/usr/bin/env bash
# Buyers are proven (issue 48, item 2), played as an attacker would on the real services: one
# gateway with auth.mode = jwt (an HS256 key ring, an Ed25519 public key, an audience).
#   1. A buy with no token, or a forged one (the wrong key, alg none, HS256 signed with the
#      public key's bytes, expired, the wrong aud, an unknown kid): 401 with WWW-Authenticate:
#      Bearer, and nothing published (the intents topic holds no record of them).
#   2. A buy for another buyer id than the token's sub: 403, nothing published.
#   3. A limit of 1 per buyer: one client with one account takes 1 unit, whatever five names
#      it puts in the body (403 each); five real accounts (five tokens) are five buyers.
#   4. Reading another buyer's intent, queue place or admission token: the same 404 as a
#      missing one, byte for byte; the owner still reads them.
#   5. Honest buyers (HS256 and EdDSA tokens) behind the same gateway get their answers; a
#      second gateway learns whose an intent or cart is from Postgres; the README's curl
#      examples (tests/clients/gateway_curl.sh) work with buyers proven.
. "$(dirname "$0")/lib.sh"
it_setup 1
python3 -c 'import secrets; print("ak", secrets.token_hex(32)); print("sign ak")' >"$IT_DIR/room-keys"
chmod 600 "$IT_DIR/room-keys"
echo "admission.keys = $IT_DIR/room-keys" >>"$IT_DIR/flashsale.conf"
start_worker w1
it_admin_token
it_jwt_keys
openssl genpkey -algorithm ed25519 -out "$IT_DIR/ed.pem" 2>/dev/null
{ echo "# the shop's public key"; echo "kid e1"; openssl pkey -in "$IT_DIR/ed.pem" -pubout; } >"$IT_DIR/jwt-pub"
openssl pkey -in "$IT_DIR/ed.pem" -pubout >"$IT_DIR/ed-pub.pem"
start_gateway gw --set auth.mode=jwt --set auth.jwt.keys="$IT_DIR/jwt-keys" \
	--set auth.jwt.pubkeys="$IT_DIR/jwt-pub" --set auth.jwt.audience=shop \
	--set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0
grep -q 'auth.mode = jwt: 2 key(s)' "$IT_DIR/gw.log" || fail "the gateway did not load its 2 keys: $(tail -3 "$IT_DIR/gw.log")"
J='Content-Type: application/json'
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
assert_eq 202 "$(req POST /v1/skus/AUTH/open -H "$J" -H @<(printf 'Authorization: Bearer %s\n' "$TOKEN") -d '{"stock":20,"per_buyer_limit":1}')" "open"
wait_until 30 "the stock record" "[ \$(req GET /v1/skus/AUTH) = 200 ]"
intents() { # intents TYPE: the records of that type on the intents topic
	kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
		-t "it.$IT_ID.intents" -o beginning -f '%s\n' | grep -c "\"type\":\"$1\"" || true
}
tok() { mint_jwt "$1" --aud shop "${@:2}"; }
buy() { # buy TOKEN BUYER: the status of a POST of a buy of 1 unit (body in $IT_DIR/body)
	req POST /v1/skus/AUTH/buys -H "$J" -H "Authorization: Bearer $1" -d "{\"buyer_id\":\"$2\",\"qty\":1}"
}

# ---- 1. no token, forged tokens: 401, nothing published -----------------------------------
assert_eq 401 "$(req POST /v1/skus/AUTH/buys -H "$J" -d '{"buyer_id":"alice","qty":1}')" "a buy with no token"
assert_eq "Bearer" "$(header_value WWW-Authenticate)" "the challenge of a buy with no token"
forged() { # forged WHAT REASON TOKEN
	assert_eq 401 "$(buy "$3" alice)" "a buy with $1"
	case "$(header_value WWW-Authenticate)" in
	"Bearer error=\"invalid_token\""*) ;;
	*) fail "$1: the challenge is '$(header_value WWW-Authenticate)'" ;;
	esac
	assert_eq "$2" "$(body_field error)" "the error of a buy with $1"
}
other=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
forged "a token signed with another key" bad_signature "$(python3 "$IT_ROOT/tests/clients/jwt_mint.py" alice --aud shop --secret-hex "$other")"
forged "alg none" bad_alg "$(tok alice --alg none)"
forged "HS256 signed with the public key's bytes" bad_alg "$(python3 "$IT_ROOT/tests/clients/jwt_mint.py" alice --aud shop --kid e1 --alg HS256 --secret-file "$IT_DIR/ed-pub.pem")"
forged "HS256 signed with the public key file's bytes" bad_alg "$(python3 "$IT_ROOT/tests/clients/jwt_mint.py" alice --aud shop --kid e1 --alg HS256 --secret-file "$IT_DIR/jwt-pub")"
forged "an expired token (past the 30 s leeway)" token_expired "$(tok alice --exp-in -31)"
forged "another audience" bad_audience "$(mint_jwt alice --aud other-shop)"
forged "no audience" bad_audience "$(mint_jwt alice)"
forged "an unknown kid" unknown_key "$(tok alice --kid k9)"
forged "no exp" bad_claims "$(tok alice --claims '{"exp":null}')"
forged "a token cut short" malformed_token "$(tok alice | cut -d. -f1,2)"
say "ok: no token and 10 forged ones: 401 with the Bearer challenge"

# ---- 2. another buyer id than sub: 403 -------------------------------------------------------
MAL=$(tok mallory)
assert_eq 403 "$(buy "$MAL" alice)" "mallory's buy for alice"
assert_eq other_buyer "$(body_field error)" "the error of a buy for another buyer"
assert_eq 403 "$(req POST /v1/skus/AUTH/queue -H "$J" -H "Authorization: Bearer $MAL" -d '{"buyer_id":"alice"}')" "mallory joins for alice"
assert_eq 403 "$(req POST /v1/carts -H "$J" -H "Authorization: Bearer $MAL" -d '{"buyer_id":"alice","lines":[{"sku":"AUTH","qty":1}]}')" "mallory's cart for alice"
say "ok: a buy, a join and a cart for another buyer than the token's: 403"

# ---- 3. one account, five names: 1 unit ----------------------------------------------------
for i in 1 2 3 4 5; do
	assert_eq 403 "$(buy "$MAL" "mallory-$i")" "mallory's buy as mallory-$i"
done
for i in 1 2 3 4 5; do
	st=$(buy "$MAL" mallory)
	[ "$st" = 202 ] || [ "$st" = 200 ] || fail "mallory's own buy $i: $st $(cat "$IT_DIR/body")"
done
wait_until 30 "mallory's 5 buys decided" "[ \$(sql \"SELECT count(*) FROM decisions WHERE buyer_id LIKE 'mallory%'\") -ge 5 ]"
assert_eq "1" "$(sql "SELECT coalesce(sum(qty), 0) FROM reservations WHERE buyer_id LIKE 'mallory%'")" "units mallory holds with one account"
assert_eq "mallory" "$(sql "SELECT string_agg(DISTINCT buyer_id, ',') FROM decisions WHERE buyer_id LIKE 'mallory%'")" "the buyers mallory's buys were for"
# Five real accounts are five buyers (the limit is per proven buyer).
for i in 1 2 3 4 5; do
	st=$(buy "$(tok "acct-$i")" "acct-$i")
	[ "$st" = 202 ] || [ "$st" = 200 ] || fail "acct-$i's buy: $st"
done
wait_until 30 "the 5 accounts' buys decided" "[ \$(sql \"SELECT count(*) FROM reservations WHERE buyer_id LIKE 'acct-%'\") -ge 5 ]"
say "ok: one account, five names: 1 unit; five accounts: 5"

# ---- 4. another buyer's intent, queue place, admission token: 404 as a missing one ----------
ALICE=$(tok alice)
assert_eq 202 "$(buy "$ALICE" alice)" "alice's buy"
aid=$(body_field intent_id)
assert_eq 200 "$(req GET "/v1/intents/$aid?wait=10" -H "Authorization: Bearer $ALICE")" "alice reads her intent"
assert_eq held "$(body_field outcome)" "alice's outcome"
missing=$(python3 -c 'import uuid; print(uuid.uuid4())')
assert_eq 404 "$(req GET "/v1/intents/$missing" -H "Authorization: Bearer $MAL")" "a missing intent"
cp "$IT_DIR/body" "$IT_DIR/missing.body"
for path in "/v1/intents/$aid" "/v1/intents/$aid/events" "/v1/intents/$aid/cancel"; do
	assert_eq 404 "$(req GET "$path" -H "Authorization: Bearer $MAL")" "mallory reads $path"
	cmp -s "$IT_DIR/body" "$IT_DIR/missing.body" || fail "mallory's $path: $(cat "$IT_DIR/body") is not the missing one's $(cat "$IT_DIR/missing.body")"
done
assert_eq 404 "$(req POST "/v1/intents/$aid/cancel" -H "$J" -H "Authorization: Bearer $MAL" -d '{}')" "mallory cancels alice's hold"
assert_eq 401 "$(req GET "/v1/intents/$aid")" "a read with no token"
assert_eq 200 "$(req GET "/v1/intents/$aid" -H "Authorization: Bearer $ALICE")" "alice reads her intent after"
assert_eq 1 "$(sql "SELECT count(*) FROM decisions WHERE intent_id = '$aid'")" "decisions of alice's intent after mallory's cancel (the buy alone)"
# A cart: alice's, read by mallory as a missing one; alice reads it.
assert_eq 202 "$(req POST /v1/skus/CART1/open -H "$J" -H @<(printf 'Authorization: Bearer %s\n' "$TOKEN") -d '{"stock":5}')" "open CART1"
wait_until 30 "CART1's stock record" "[ \$(req GET /v1/skus/CART1) = 200 ]"
cid=$(python3 -c 'import uuid; print(uuid.uuid4())')
st=$(req POST /v1/carts -H "$J" -H "Idempotency-Key: $cid" -H "Authorization: Bearer $ALICE" -d '{"buyer_id":"alice","lines":[{"sku":"CART1","qty":1}]}')
[ "$st" = 202 ] || [ "$st" = 200 ] || fail "alice's cart: $st $(cat "$IT_DIR/body")"
assert_eq 200 "$(req GET "/v1/carts/$cid?wait=20" -H "Authorization: Bearer $ALICE")" "alice reads her cart"
assert_eq 404 "$(req GET "/v1/carts/$missing" -H "Authorization: Bearer $MAL")" "a missing cart"
cp "$IT_DIR/body" "$IT_DIR/missing-cart.body"
for path in "/v1/carts/$cid" "/v1/carts/$cid/events"; do
	assert_eq 404 "$(req GET "$path" -H "Authorization: Bearer $MAL")" "mallory reads $path"
	cmp -s "$IT_DIR/body" "$IT_DIR/missing-cart.body" || fail "mallory's $path: $(cat "$IT_DIR/body") is not the missing one's"
done
assert_eq 404 "$(req POST "/v1/carts/$cid/cancel" -H "Authorization: Bearer $MAL")" "mallory cancels alice's cart"
# A second gateway learns whose they are from Postgres (it never saw the POSTs).
GW1=$GW
start_gateway gw2 --set auth.mode=jwt --set auth.jwt.keys="$IT_DIR/jwt-keys" \
	--set admin.token.file="$IT_DIR/admin-token"
wait_until 30 "gw2 ready" "[ \$(req GET /readyz) = 200 ]"
assert_eq 200 "$(req GET "/v1/intents/$aid" -H "Authorization: Bearer $ALICE")" "alice reads her intent at gw2"
assert_eq 200 "$(req GET "/v1/carts/$cid" -H "Authorization: Bearer $ALICE")" "alice reads her cart at gw2"
assert_eq 404 "$(req GET "/v1/intents/$aid" -H "Authorization: Bearer $MAL")" "mallory reads alice's intent at gw2"
cmp -s "$IT_DIR/body" "$IT_DIR/missing.body" || fail "mallory's read at gw2: $(cat "$IT_DIR/body")"
assert_eq 404 "$(req GET "/v1/carts/$cid" -H "Authorization: Bearer $MAL")" "mallory reads alice's cart at gw2"
# The README's curl examples, as they are, with buyers proven (gw2 checks no audience).
(cd "$IT_ROOT" && GW=$GW TOKEN=$TOKEN PAYMENT_KEYS=$IT_PAY_KEYS BUYER_KEYS=$IT_DIR/jwt-keys bash tests/clients/gateway_curl.sh) >"$IT_DIR/readme.out" 2>&1 || fail "the README's examples failed: $(cat "$IT_DIR/readme.out")"
for want in '"status":"queued"' '"outcome":"held"' 'event: decided' '"outcome":"confirmed"'; do
	grep -qF "$want" "$IT_DIR/readme.out" && say "ok: the README's examples print $want" || fail "the README's examples: no $want in $(cat "$IT_DIR/readme.out")"
done
GW=$GW1
# The waiting room: alice joins, is admitted; mallory asks for her place and token.
fs sale open ROOM --stock 5 --per-buyer 1 --hold 600 --admission-rate 100 --token-seconds 60 \
	--draw fifo --wait 30 >/dev/null || die "the room's sale"
wait_until 30 "the room's stock record" "[ \$(req GET /v1/skus/ROOM) = 200 ]"
assert_eq 202 "$(req POST /v1/skus/ROOM/queue -H "$J" -H "Authorization: Bearer $ALICE" -d '{"buyer_id":"alice"}')" "alice joins"
wait_until 30 "alice admitted" "[ \"\$(req GET /v1/skus/ROOM/queue/alice -H 'Authorization: Bearer $ALICE'; body_field status)\" = 200admitted ]"
[ -n "$(body_field token)" ] || fail "alice's admission has no token"
assert_eq 404 "$(req GET /v1/skus/ROOM/queue/nobody -H "Authorization: Bearer $MAL")" "a buyer who never joined"
cp "$IT_DIR/body" "$IT_DIR/nobody.body"
for path in /v1/skus/ROOM/queue/alice /v1/skus/ROOM/queue/alice/events; do
	assert_eq 404 "$(req GET "$path" --max-time 5 -H "Authorization: Bearer $MAL")" "mallory reads $path"
	cmp -s "$IT_DIR/body" "$IT_DIR/nobody.body" || fail "mallory's $path: $(cat "$IT_DIR/body") is not the missing one's"
done
say "ok: another buyer's intent, cancel, queue place and admission token: the missing one's 404"

# ---- 5. honest buyers: an EdDSA token ------------------------------------------------------
BOB=$(python3 "$IT_ROOT/tests/clients/jwt_mint.py" bob --aud shop --kid e1 --ed25519-key "$IT_DIR/ed.pem")
assert_eq 202 "$(buy "$BOB" bob)" "bob's buy (EdDSA)"
bid=$(body_field intent_id)
assert_eq 200 "$(req GET "/v1/intents/$bid?wait=10" -H "Authorization: Bearer $BOB")" "bob reads his intent"
assert_eq held "$(body_field outcome)" "bob's outcome"
assert_eq 404 "$(req GET "/v1/intents/$bid" -H "Authorization: Bearer $ALICE")" "alice reads bob's intent"

# The refusals, counted by reason at the first gateway.
M=http://127.0.0.1:$(metrics_port gw)
for want in missing_token=2 bad_alg=3 bad_audience=2 token_expired=1 unknown_key=1 bad_signature=1 bad_claims=1 malformed_token=1 other_buyer=8; do
	assert_eq "${want#*=}" "$(metric_sum "$M" "flashsale_gateway_auth_refusals_total[{]reason=\"${want%=*}\"[}]")" "refusals counted as ${want%=*}"
done
# Nothing of the refused requests reached the log: the buys on it are mallory's 5, the
# accounts' 5, alice's, the README's (alice's) and bob's.
assert_eq 13 "$(intents buy)" "buy records on the intents topic"
assert_eq 0 "$(intents cancel)" "cancel records on the intents topic"
assert_eq 1 "$(intents cart)" "cart records on the intents topic (alice's)"
assert_eq 1 "$(intents join)" "join records on the intents topic (alice's)"
audit_ok
it_done
