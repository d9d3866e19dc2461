#!/usr/bin/env bash
# Rotating the waiting room's keys (issue 47 items 1 and 9) on the real services, step by step,
# under a steady stream of admitted buyers' buys:
#   0. Two workers (one partition: one decides, the other stands by) and a gateway, each with
#      its own ring file: k-a, signing with k-a.
#   1. Every verifier learns k-b (still signing k-a): the gateway, then each worker, restarted
#      one at a time.
#   2. The signers switch to k-b: each worker restarted one at a time (the gateway first too:
#      it signs nothing, so its ring only checks tokens at the edge).
# Throughout, buyers join, get their token from `flashsale queue` (Postgres) and buy with it:
# every buy is held or sold_out on its merits; the token a buyer is handed is the worker's own
# (the admission result's on the results topic), by the CLI and by the gateway alike, never one
# their process minted. After each step `flashsale replay --dry-run` is clean with a ring that
# holds every key, and after step 2 a replay with a ring that lacks k-b refuses, naming k-b.
# A buy with a bad token, retried under the same intent id with the buyer's valid token, is
# decided on its merits (held), before and after the switch; so is one with a token past its
# end (what the gateway's 1 s of slack lets through, item 9). Before the fix: the retry was
# `rejected bad_token` again (the refusal used up the id), the gateway's and the CLI's tokens
# were signed with their own ring's key, and the replay without k-b listed differences.
. "$(dirname "$0")/lib.sh"

it_setup 1
KA=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
KB=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
# ring FILE LINE...: a key ring file (mode 0600).
ring() {
	local f=$1
	shift
	printf '%s\n' "$@" >"$f"
	chmod 600 "$f"
}
for p in w1 w2 gw cli; do ring "$IT_DIR/ring.$p" "k-a $KA" "sign k-a"; done
ring "$IT_DIR/ring.old" "k-a $KA" "sign k-a" # a replaying process that never learnt k-b
echo "admission.keys = $IT_DIR/ring.cli" >>"$IT_DIR/flashsale.conf"

# start_w NAME: a worker with its own ring ($IT_DIR/ring.NAME); waits for its ring's line.
start_w() {
	local n=$1
	"$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" --set "admission.keys=$IT_DIR/ring.$n" \
		>>"$IT_DIR/$n.log" 2>&1 &
	eval "IT_PID_$n=$!"
	IT_PIDS+=($!)
	local sign
	sign=$(sed -n 's/^sign //p' "$IT_DIR/ring.$n")
	eval "${n}_starts=\$((${n}_starts + 1))"
	wait_until 30 "$n to load its ring" "[ \$(grep -c 'admission.keys: .* signing with' '$IT_DIR/$n.log') -ge \$${n}_starts ]"
	assert_eq "signing with $sign" "$(grep -o 'admission.keys: .* signing with .*' "$IT_DIR/$n.log" | tail -n 1 | grep -o 'signing with .*')" "$n's ring"
}
w1_starts=0
w2_starts=0
start_w w1
wait_until 60 "w1 to be assigned the partition" "grep -q 'partition 0 assigned' '$IT_DIR/w1.log'"
start_w w2
start_gateway gw --set "admission.keys=$IT_DIR/ring.gw"
wait_until 30 "the gateway ready" "[ \$(req GET /readyz) = 200 ]"

STOCK=20
fs sale open ROT --stock $STOCK --per-buyer 1 --hold 600 --admission-rate 50 --token-seconds 60 \
	--draw fifo --wait 30 >/dev/null || die "the sale"
fs sale open RB --stock 5 --per-buyer 1 --hold 600 --admission-rate 50 --token-seconds 60 \
	--draw fifo --wait 30 >/dev/null || die "the retries' sale"
fs sale open SLACK --stock 5 --per-buyer 2 --hold 600 --admission-rate 50 --token-seconds 60 \
	--draw fifo --wait 30 >/dev/null || die "the second sale"

# The stream: one buyer after another joins, waits for its admission, takes its token from
# `flashsale queue` (Postgres) and buys with it; "id buyer token" per line in stream.txt.
# It pauses while $IT_DIR/pause exists (saying so in $IT_DIR/paused), so that a replay
# compares a log and a database that stand still.
stream() {
	local i=0 b tok id
	while [ ! -e "$IT_DIR/stop" ]; do
		if [ -e "$IT_DIR/pause" ]; then
			touch "$IT_DIR/paused"
			sleep 0.1
			continue
		fi
		rm -f "$IT_DIR/paused"
		i=$((i + 1))
		b=s-$i
		fs join ROT --buyer "$b" >/dev/null || continue
		tok=$(fs queue ROT --buyer "$b" --wait 30 --json 2>/dev/null |
			python3 -c 'import json,sys; print(json.load(sys.stdin).get("token", ""))' 2>/dev/null) || tok=""
		id=$(python3 -c 'import uuid; print(uuid.uuid4())')
		fs buy ROT --buyer "$b" --token "$tok" --intent "$id" >/dev/null || continue
		echo "$id $b $tok" >>"$IT_DIR/stream.txt"
	done
}
stream &
STREAM_PID=$!
IT_PIDS+=($STREAM_PID)
touch "$IT_DIR/stream.txt"
buys() { wc -l <"$IT_DIR/stream.txt"; }
# more_buys N: wait for N more buys of the stream, all decided.
more_buys() {
	local want=$(($(buys) + $1))
	wait_until 60 "$1 more buys of the stream" "[ \$(buys) -ge $want ]"
	wait_until 30 "the stream's buys decided" "[ \$(sql \"SELECT count(*) FROM decisions WHERE sku = 'ROT' AND buyer_id LIKE 's-%'\") -ge $want ]"
}

# results_now: the results topic (one partition) up to its end offset at the call. Not
# results_dump's `kcat -e`: while the stream runs, results keep coming and kcat never sees the
# partition's end (a CI run waited 14 minutes, and the 60 s token it then read had expired).
results_now() {
	local brokers end
	brokers=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)
	end=$(timeout 30 kcat -b "$brokers" -Q -t "it.$IT_ID.results:0:-1" | awk '{ print $NF }')
	[ "${end:-0}" -gt 0 ] 2>/dev/null || return 0
	timeout 60 kcat -b "$brokers" -C -q -t "it.$IT_ID.results" -p 0 -o beginning -c "$end" \
		-f '%s\n'
}

# admission_token SKU BUYER [FILE]: the token the worker's admission result carried (from
# the results topic, or FILE: a dump of it).
admission_token() {
	{ if [ -n "${3:-}" ]; then cat "$3"; else results_now; fi; } | python3 -c '
import json, sys
sku, buyer = sys.argv[1], sys.argv[2]
tok = ""
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("sku") == sku and r.get("buyer_id") == buyer and r.get("token"):
        tok = r["token"]
print(tok)' "$1" "$2"
}

# quiet / resume: the stream paused with every record decided (a replay reads the log to its
# end and compares it with the database: both must stand still), and started again.
quiet() {
	touch "$IT_DIR/pause"
	wait_until 60 "the stream to pause" "[ -e '$IT_DIR/paused' ]"
	decided_past "the pause"
}
resume() { rm -f "$IT_DIR/pause"; }

# replay_clean WHEN: `flashsale replay --dry-run` with the CLI's ring (every key so far), the
# stream paused.
replay_clean() {
	quiet
	if fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1; then
		say "ok: replay --dry-run clean $1 ($(tail -n 1 "$IT_DIR/replay.txt"))"
	else
		head -n 20 "$IT_DIR/replay.txt"
		fail "replay --dry-run $1"
	fi
	resume
}

# decided_past ID: waits until the partition has decided every record before a marker
# published after ID's last record (a buy without a token: rejected no_token), so that a
# retry that left no row of its own (a repeat) is known to have been decided all the same.
decided_past() {
	local m
	m=$(fs buy ROT --buyer marker)
	wait_until 30 "the marker after $1 decided" "[ -n \"\$(sql \"SELECT 1 FROM decisions WHERE intent_id = '$m'\")\" ]"
}

# admit BUYER: BUYER joins RB and is admitted.
admit() {
	fs join RB --buyer "$1" >/dev/null || die "join $1"
	fs queue RB --buyer "$1" --wait 30 >/dev/null || die "$1 not admitted"
}

# retry_check WHEN BUYER: BUYER (admitted to RB) takes its token from the gateway (Postgres,
# or the results topic: the worker's, whatever the gateway's ring), buys with it altered, then
# under the same intent id with it: rejected bad_token, then held.
retry_check() {
	local when=$1 b=$2 tok id
	assert_eq 200 "$(req GET "/v1/skus/RB/queue/$b")" "$b's place through the gateway"
	tok=$(body_field token)
	assert_eq "$(admission_token RB "$b")" "$tok" "$when: the gateway's token for $b is the worker's"
	id=$(python3 -c 'import uuid; print(uuid.uuid4())')
	fs buy RB --buyer "$b" --token "${tok%?}x" --intent "$id" >/dev/null
	wait_until 30 "the bad-token buy decided" "[ -n \"\$(sql \"SELECT 1 FROM decisions WHERE intent_id = '$id'\")\" ]"
	assert_eq "rejected bad_token" "$(sql "SELECT outcome || ' ' || reason FROM decisions WHERE intent_id = '$id'")" "$when: a buy with an altered token"
	fs buy RB --buyer "$b" --token "$tok" --intent "$id" >/dev/null
	decided_past "$id"
	local got
	got=$(sql "SELECT outcome FROM decisions WHERE intent_id = '$id' AND kind = 1")
	case "$got" in
	held) say "ok: $when: the bad-token buy retried with the valid token under the same id: $got" ;;
	*) fail "$when: the retry with the valid token under the same intent id: '${got:-no decision of its own}' ($(sql "SELECT string_agg(kind || ':' || outcome || ' ' || coalesce(reason, ''), ', ') FROM decisions WHERE intent_id = '$id'"))" ;;
	esac
}

# ---- 0. k-a everywhere -------------------------------------------------------------------------
more_buys 5
admit rb-0
retry_check "k-a" rb-0
replay_clean "with k-a"

# ---- 1. every verifier learns k-b (still signing k-a) ------------------------------------------
ring "$IT_DIR/ring.cli" "k-a $KA" "k-b $KB" "sign k-a"
ring "$IT_DIR/ring.gw" "k-a $KA" "k-b $KB" "sign k-a"
kill -TERM "$IT_PID_gw" && wait "$IT_PID_gw" 2>/dev/null || true
start_gateway gw1 --set "admission.keys=$IT_DIR/ring.gw"
wait_until 30 "the gateway ready" "[ \$(req GET /readyz) = 200 ]"
for w in w2 w1; do
	ring "$IT_DIR/ring.$w" "k-a $KA" "k-b $KB" "sign k-a"
	stop_worker $w
	start_w $w
	more_buys 3
done
replay_clean "after every verifier learnt k-b"

# ---- 2. the signers switch to k-b --------------------------------------------------------------
# The gateway first, as the old procedure did: it signs nothing now, so this changes no token.
# rb-1 is admitted before it restarts: the new gateway did not see the admission and finds it
# in Postgres (before the fix it minted a token of its own there, with k-b).
admit rb-1
ring "$IT_DIR/ring.gw" "k-a $KA" "k-b $KB" "sign k-b"
kill -TERM "$IT_PID_gw1" && wait "$IT_PID_gw1" 2>/dev/null || true
start_gateway gw2 --set "admission.keys=$IT_DIR/ring.gw"
wait_until 30 "the gateway ready" "[ \$(req GET /readyz) = 200 ]"
more_buys 3
retry_check "gateway signing k-b, workers k-a" rb-1
for w in w2 w1; do
	ring "$IT_DIR/ring.$w" "k-a $KA" "k-b $KB" "sign k-b"
	stop_worker $w
	start_w $w
	more_buys 3
done
ring "$IT_DIR/ring.cli" "k-a $KA" "k-b $KB" "sign k-b"
admit rb-2
retry_check "k-b" rb-2
replay_clean "after the switch to k-b"

# Item 9: the gateway's 1 s of slack forwards a buy whose token ends, or starts, within a
# second of the worker's clock; the worker refuses it (token_expired, token_not_yet_valid),
# and the refusal no longer uses up the id: the same id with the buyer's own live token is
# held. The two edge tokens are the buyer's claims signed with k-b (Python's hmac, token.h's
# format), one already ended, one not started yet.
fs join SLACK --buyer sl-1 >/dev/null
fs queue SLACK --buyer sl-1 --wait 30 >/dev/null || die "sl-1 not admitted"
own=$(admission_token SLACK sl-1)
[ -n "$own" ] || die "no admission result for sl-1"
edge_token() {
	python3 - "$KB" sl-1 "$1" <<'EOF2'
import base64, hashlib, hmac, sys, time
key, buyer, shift = bytes.fromhex(sys.argv[1]), sys.argv[2], int(sys.argv[3])
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
now = int(time.time() * 1000)
nbf, exp = now + shift, now + shift + 30000
dig = b64(hashlib.sha256(buyer.encode()).digest()[:16])
msg = f"fs-token-v1\nk-b\nSLACK\n{dig}\n{nbf}\n{exp}".encode()
print(f"v1.k-b.{nbf}.{exp}.{dig}.{b64(hmac.new(key, msg, hashlib.sha256).digest())}")
EOF2
}
for edge in "-60000 token_expired" "30000 token_not_yet_valid"; do
	set -- $edge
	id=$(python3 -c 'import uuid; print(uuid.uuid4())')
	fs buy SLACK --buyer sl-1 --token "$(edge_token "$1")" --intent "$id" >/dev/null
	wait_until 30 "the $2 buy decided" "[ -n \"\$(sql \"SELECT 1 FROM decisions WHERE intent_id = '$id'\")\" ]"
	assert_eq "rejected $2" "$(sql "SELECT outcome || ' ' || reason FROM decisions WHERE intent_id = '$id'")" "a buy with a token at the edge ($2)"
	fs buy SLACK --buyer sl-1 --token "$own" --intent "$id" >/dev/null
	decided_past "$id"
	assert_eq "held" "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$id' AND kind = 1")" "the $2 buy's id retried with the buyer's own token"
done

# Through a gateway that checks no token at the edge (no key ring): a buy with an altered
# token reaches the worker and is refused; the same Idempotency-Key with the buyer's own
# token is published again and held (the gateway kept the refusal as provisional).
start_gateway gwn --set "admission.keys="
wait_until 30 "the keyless gateway ready" "[ \$(req GET /readyz) = 200 ]"
admit rb-3
tok=$(admission_token RB rb-3)
key=$(python3 -c 'import uuid; print(uuid.uuid4())')
J='Content-Type: application/json'
assert_eq 202 "$(req POST /v1/skus/RB/buys -H "$J" -H "Idempotency-Key: $key" -d "{\"buyer_id\":\"rb-3\",\"qty\":1,\"token\":\"${tok%?}x\"}")" "a buy with an altered token through the keyless gateway"
assert_eq 200 "$(req GET "/v1/intents/$key?wait=20")" "its decision"
assert_eq "rejected bad_token" "$(body_field outcome) $(body_field reason)" "the altered token's buy through the gateway"
code=$(req POST /v1/skus/RB/buys -H "$J" -H "Idempotency-Key: $key" -d "{\"buyer_id\":\"rb-3\",\"qty\":1,\"token\":\"$tok\"}")
say "the retry with the valid token under the same Idempotency-Key: $code $(cat "$IT_DIR/body")"
wait_until 30 "the retry's decision at the gateway" "[ \$(req GET '/v1/intents/$key?wait=5') = 200 ] && [ \"\$(body_field outcome)\" = held ] || [ \"\$(body_field outcome)\" = rejected ]"
assert_eq "held" "$(body_field outcome)" "the retry with the valid token through the gateway, same Idempotency-Key"
assert_eq "held" "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$key' AND kind = 1")" "its decision in Postgres"

more_buys 3
touch "$IT_DIR/stop"
wait "$STREAM_PID" 2>/dev/null || true

# ---- the stream: every buy on its merits, with the worker's token ------------------------------
n=$(buys)
say "the stream: $n buys across the rotation"
bad=0
results_dump >"$IT_DIR/results.txt"
while read -r id b tok; do
	w=$(admission_token ROT "$b" "$IT_DIR/results.txt")
	if [ "$tok" != "$w" ]; then
		say "buyer $b was handed ${tok:0:12}..., the worker's admission carried ${w:0:12}..."
		bad=$((bad + 1))
	fi
done <"$IT_DIR/stream.txt"
assert_eq 0 "$bad" "buyers handed a token that is not the worker's"
sql "SELECT d.off, d.outcome, coalesce(d.reason, '') FROM decisions d WHERE d.sku = 'ROT' AND d.buyer_id LIKE 's-%' ORDER BY d.off" >"$IT_DIR/stream_decisions.txt"
python3 - "$IT_DIR/stream_decisions.txt" "$n" "$STOCK" <<'EOF' || fail "the stream's decisions (above)"
import sys
rows = [l.split("|") for l in open(sys.argv[1]).read().splitlines() if l]
n, stock = int(sys.argv[2]), int(sys.argv[3])
held = [r for r in rows if r[1] == "held"]
other = [r for r in rows if r[1] not in ("held", "sold_out")]
print(f"stream: {len(rows)} decisions, {len(held)} held, {len(rows) - len(held) - len(other)} sold_out, {len(other)} other")
for r in other[:5]:
    print("  not on its merits:", r)
ok = len(rows) == n and not other
# sold_out only once the stock (less the retry checks' holds) is gone: none before a held
last_held = max((int(r[0]) for r in held), default=-1)
ok &= all(int(r[0]) > last_held for r in rows if r[1] == "sold_out") or len(held) == 0
sys.exit(0 if ok else 1)
EOF

# A replay whose ring never learnt k-b refuses, naming the key.
decided_past "the stream's end"
if fs --set "admission.keys=$IT_DIR/ring.old" replay --dry-run >"$IT_DIR/replay-old.txt" 2>&1; then
	fail "a replay without k-b said the log was clean"
fi
if grep -q "refused: .*signed with key k-b.*lacks: add key k-b" "$IT_DIR/replay-old.txt"; then
	say "ok: a replay without k-b refuses, naming k-b"
else
	fail "a replay without k-b did not name it: $(grep -v '^DIFF' "$IT_DIR/replay-old.txt" | head -5)"
fi
touch "$IT_DIR/pause" "$IT_DIR/paused"
replay_clean "at the end"
audit_ok
it_done
