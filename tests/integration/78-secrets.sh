#!/usr/bin/env bash
# Secrets (issue 48, item 6), as an attacker on the same machine and a careless operator would
# meet them: the gateway's admin token comes from a private file (mode 0600, owned by the
# gateway's user) and nowhere else: `--set admin.token=...` (readable by every user in
# /proc/PID/cmdline) is refused, and so are a world-readable token file, a token file that is a
# symbolic link, a short token, and a config file others can read that holds the token; the
# token file works (open 202, a wrong token 401); the token is in no log and no metric; and a
# room's draw seed under 128 bits is refused by `flashsale sale open` with nothing published.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
it_admin_token
GWBIN=$IT_BUILD/flashsale-gateway
CONF=$IT_DIR/flashsale.conf

# refused WHAT EXPECTED-ERROR-PART ARGS...: the gateway exits 2 at start, saying why, and
# never echoing the token.
refused() {
	local what=$1 want=$2 out rc=0
	shift 2
	out=$(timeout 20 "$GWBIN" -c "$CONF" --set listen=127.0.0.1:0 "$@" 2>&1 </dev/null) || rc=$?
	if [ "$rc" -eq 2 ] && [[ "$out" == *"$want"* ]] && [[ "$out" != *"$TOKEN"* ]]; then
		say "ok: $what refused: $(printf '%s' "$out" | head -n 1)"
	else
		fail "$what: exit $rc, $out"
	fi
}

refused "--set admin.token" "admin.token is a secret, and a command line is readable by every user" \
	--set "admin.token=$TOKEN"
(umask 022 && printf '%s\n' "$TOKEN" >"$IT_DIR/open-token")
refused "a world-readable token file" "readable or writable by group or others (mode 644): chmod 600 it" \
	--set "admin.token.file=$IT_DIR/open-token"
ln -s "$IT_DIR/admin-token" "$IT_DIR/token-link"
refused "a token file that is a symbolic link" "a symbolic link" --set "admin.token.file=$IT_DIR/token-link"
(umask 077 && printf 's3cret\n' >"$IT_DIR/short-token")
refused "a short token" "admin.token: too weak: shorter than 32 characters" \
	--set "admin.token.file=$IT_DIR/short-token"
(umask 022 && { cat "$CONF"; printf 'admin.token = %s\n' "$TOKEN"; } >"$IT_DIR/shared.conf")
out=$(timeout 20 "$GWBIN" -c "$IT_DIR/shared.conf" --set listen=127.0.0.1:0 2>&1 </dev/null) && fail "a shared config file with the token: started"
case "$out" in
*"admin.token is a secret, and the config file"*"(mode 644)"*) say "ok: a config file others can read holding the token refused" ;;
*) fail "a shared config file with the token: $out" ;;
esac
out=$(timeout 20 "$GWBIN" -c "$CONF" --set listen=127.0.0.1:0 --set "kafka.sasl.password=$TOKEN" 2>&1 </dev/null) && fail "--set kafka.sasl.password: started"
[[ "$out" == *"kafka.sasl.password is a secret"* ]] && say "ok: --set kafka.sasl.password refused" || fail "--set kafka.sasl.password: $out"

# The token file (0600, ours) works; the administration answers only to it.
assert_eq 600 "$(stat -c %a "$IT_DIR/admin-token")" "the token file's mode"
start_gateway gw --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0
J='Content-Type: application/json'
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
assert_eq 401 "$(req POST /v1/skus/SEC/open -H "$J" -H @<(printf 'Authorization: Bearer x%s\n' "$TOKEN") -d '{"stock":2}')" "open with a wrong token"
assert_eq 202 "$(req POST /v1/skus/SEC/open -H "$J" -H @<(printf 'Authorization: Bearer %s\n' "$TOKEN") -d '{"stock":2}')" "open with the token from the file"
wait_until 30 "the open applied" "[ \"\$(sql \"SELECT count(*) FROM skus WHERE sku = 'SEC'\")\" = 1 ]"
curl -s --max-time 5 "http://127.0.0.1:$(metrics_port gw)/metrics" >"$IT_DIR/gw.metrics"
[ -s "$IT_DIR/gw.metrics" ] || fail "no metrics from the gateway"
if grep -rqF -- "$TOKEN" "$IT_DIR"/*.log "$IT_DIR/gw.metrics"; then
	fail "the admin token is in a log or a metric: $(grep -rlF -- "$TOKEN" "$IT_DIR"/*.log "$IT_DIR/gw.metrics")"
else
	say "ok: the admin token is in no log ($(ls "$IT_DIR"/*.log | wc -l) files) and no metric"
fi

# A room's draw seed: 128 bits at least, or `sale open` refuses it and publishes nothing.
before=$(kcat -b "$(grep '^brokers' "$CONF" | cut -d' ' -f3)" -C -q -e -t "it.$IT_ID.intents" -o beginning -f '%s\n' | wc -l)
for seed in abc pX-2026-12-05-7f3a 0123456789abcdef0123456789abcde aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; do
	rc=0
	out=$(fs sale open ROOM --stock 5 --admission-rate 10 --token-seconds 60 --draw random --draw-seed "$seed" 2>&1) || rc=$?
	if [ "$rc" -eq 2 ] && [[ "$out" == *"the draw's seed is too weak"* ]]; then
		say "ok: seed '$seed' refused: $out"
	else
		fail "seed '$seed': exit $rc, $out"
	fi
done
after=$(kcat -b "$(grep '^brokers' "$CONF" | cut -d' ' -f3)" -C -q -e -t "it.$IT_ID.intents" -o beginning -f '%s\n' | wc -l)
assert_eq "$before" "$after" "records on the intents topic after the refused opens"
seed=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
fs sale open ROOM --stock 5 --admission-rate 10 --token-seconds 60 --draw random --draw-seed "$seed" >/dev/null ||
	fail "a 128-bit seed was refused"
wait_until 30 "the 128-bit seed's open decided" "fs wait --quiet --timeout 1 >/dev/null 2>&1"
assert_eq 1 "$(results_dump | grep -c '"sku":"ROOM"')" "the 128-bit seed's open was published and answered"
audit_ok
stop_worker w1
it_done
