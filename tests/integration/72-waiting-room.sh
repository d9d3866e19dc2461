#!/usr/bin/env bash
# The waiting room (issue 33) on the real services:
#   1. A key ring that group or others may read is refused: the worker does not start.
#   2. 20,000 buyers join a sale behind a waiting room before its opening; a join again is
#      answered as the first (one entry per buyer).
#   3. At the opening, the draw: a permutation of the joiners, the order the keyed hash of
#      (seed, buyer id) gives (computed here independently, with Python's hmac), not the join
#      order (Spearman's rho near 0); then admission at the set rate on the broker's clock
#      (no two admissions closer than the rate allows, and all of them within the time the
#      rate needs).
#   4. Buys: without a token (no_token), with another buyer's (token_other_buyer), with a
#      forged one (bad_token), before the token's not-before (token_not_yet_valid), after its
#      end (token_expired): refused; with the buyer's own: held. A sale behind a room takes no
#      cart line (admission_required).
#   5. Through the gateway: joins, the queue's GET and long-poll, the token at the edge; the
#      queue's event stream (curl -N: its place going down, then admitted, then heartbeats;
#      a client that leaves frees it; the GET's refusals); the sale page's queue view in two
#      headless Chromium browsers (tests/browser/queue_page.py: one on the stream, one on the
#      long-poll with the stream blocked), each showing the number ahead going down, then the
#      Buy page, and held with the token it was given (Postgres and the intents topic say so).
#   6. A restart: the room loads from its rows (the same queue, the slots the schedule gave).
# Audit (INV-9: no buy won without a live admission, no room faster than its rate) and the
# replay (every join, admission and token verdict) clean.
. "$(dirname "$0")/lib.sh"

for f in "${FLASHSALE_CHROMIUM:-/usr/bin/chromium}" "${FLASHSALE_CHROMEDRIVER:-/usr/bin/chromedriver}"; do
	[ -x "$f" ] || die "$f is not installed (scripts/setup installs chromium, chromium-driver and python3-selenium): the sale page's queue cannot be tested"
done
it_setup 1

python3 -c 'import secrets; print("# test keys\nk-old", secrets.token_hex(32)); print("k-new", secrets.token_hex(32)); print("sign k-new")' >"$IT_DIR/keys"
chmod 644 "$IT_DIR/keys"
echo "admission.keys = $IT_DIR/keys" >>"$IT_DIR/flashsale.conf"

# ---- 1. a key ring others may read --------------------------------------------------------
start_worker w0
wait_until 30 "the worker to refuse the key ring" "! kill -0 \$IT_PID_w0 2>/dev/null"
grep -q "readable or writable by group or others (mode 644): chmod 600 it" "$IT_DIR/w0.log" || fail "w0 did not name the key ring's mode: $(tail -3 "$IT_DIR/w0.log")"
grep -q "$(sed -n 2p "$IT_DIR/keys" | cut -c7-20)" "$IT_DIR/w0.log" && fail "a secret in the log"
say "ok: a key ring others may read is refused"
chmod 600 "$IT_DIR/keys"

start_worker w1
wait_until 60 "w1 to be assigned its partition" "grep -q 'partition 0 assigned' '$IT_DIR/w1.log'"
grep -q "admission.keys: 2 key(s), signing with k-new" "$IT_DIR/w1.log" || fail "w1: the key ring not loaded"

# ---- 2. joins before the opening -----------------------------------------------------------
N=20000
RATE=4000
now_ms() { date +%s%3N; }
opens=$(($(now_ms) + 30000))
fs sale open ROOM --stock 50 --per-buyer 1 --hold 600 --opens-at "$opens" \
	--admission-rate $RATE --token-seconds 60 --draw random --draw-seed it-72-seed-0b5f1c9e2d7a4e3f8c6b1a0d9e8f7a6b --wait 30 >/dev/null || die "the sale"
assert_eq "$RATE|60000|random|it-72-seed-0b5f1c9e2d7a4e3f8c6b1a0d9e8f7a6b" "$(sql "SELECT admit_rate || '|' || token_ms || '|' || draw || '|' || draw_seed FROM skus WHERE sku = 'ROOM'")" "the sale's admission"
fs load ROOM --buyers $N --join --buyer-prefix wr >/dev/null || die "the joins"
joined() { sql "SELECT count(*) FROM room_joins WHERE sku = 'ROOM'"; }
wait_until 60 "$N joins decided" "[ \$(joined) -ge $N ]"
[ "$(now_ms)" -lt "$opens" ] || die "the joins took past the opening: the machine is too slow for this test's 30 s"
assert_eq "$N|$N|0" "$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE early) || '|' || count(admitted_ms) FROM room_joins")" "joined|early|admitted before the opening"
out=$(fs queue ROOM --buyer wr-17)
say "before the draw: $out"
case "$out" in *"waiting (the draw is at the opening)"*) ;; *) fail "queue before the draw: $out" ;; esac
# A buy before the opening: not_open (the window first).
id=$(fs buy ROOM --buyer wr-1)
wait_until 30 "the early buy decided" "[ -n \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$id'\")\" ]"
assert_eq "not_open" "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$id'")" "a buy before the opening"
# A join again: the same entry.
fs join ROOM --buyer wr-5 >/dev/null
wait_until 30 "the repeat join decided" "[ \$(sql \"SELECT n_joins FROM partitions\") -ge $((N + 1)) ]"
assert_eq "$N" "$(joined)" "entries after a repeat join"

# ---- 3. the draw and the admissions ----------------------------------------------------------
# The worker's ticks move the clock past the opening once it is due (no record needed), and on
# to each next slot after admission.tick.ms (100) of idleness, not tick.interval.ms (1,000):
# over the 5 s of admissions, far more than one tick a second (the draw's and about 5 at 1 s).
ticks() { sql "SELECT sum(n_ticks) FROM partitions"; }
ticks0=$(ticks)
admitted() { sql "SELECT count(admitted_ms) FROM room_joins WHERE sku = 'ROOM'"; }
wait_until 90 "every buyer admitted" "[ \$(admitted) -ge $N ]"
ticks1=$(ticks)
say "ticks from before the opening to the last admission: $((ticks1 - ticks0))"
[ $((ticks1 - ticks0)) -ge 20 ] || fail "$((ticks1 - ticks0)) ticks while admitting for 5 s: admissions wait for tick.interval.ms"
sql "SELECT buyer_id, off, admitted_ms, decided_off FROM room_joins WHERE sku = 'ROOM' ORDER BY off" >"$IT_DIR/room.txt"
python3 - "$IT_DIR/room.txt" "$opens" "$RATE" <<'EOF' || fail "the draw or the rate (above)"
import hashlib, hmac, sys
rows = [l.split("|") for l in open(sys.argv[1]).read().split()]
opens, rate = int(sys.argv[2]), int(sys.argv[3])
buyers = [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in rows]
# The draw as room.c makes it: HMAC-SHA256(seed, buyer id), its first 8 bytes big-endian, ties
# by the join's offset. The admissions must come in that order (slots never go back).
def rank(b):
    return int.from_bytes(hmac.new(b"it-72-seed-0b5f1c9e2d7a4e3f8c6b1a0d9e8f7a6b", b.encode(), hashlib.sha256).digest()[:8], "big")
order = sorted(buyers, key=lambda b: (rank(b[0]), b[1]))
slots = [b[2] for b in order]
bad = sum(1 for a, b in zip(slots, slots[1:]) if b < a)
print(f"draw: {len(order)} buyers, {bad} admitted out of the draw's order")
ok = bad == 0
# Not the join order: Spearman's rho between join order and the draw's.
n = len(order)
pos = {b[0]: i for i, b in enumerate(order)}
by_join = sorted(buyers, key=lambda b: b[1])
d2 = sum((i - pos[b[0]]) ** 2 for i, b in enumerate(by_join))
rho = 1 - 6 * d2 / (n * (n * n - 1))
print(f"draw: Spearman's rho against the join order {rho:.4f}")
ok &= abs(rho) < 0.05
# The rate on the log clock: any two admissions i < j keep (j - i) * step <= (a_j - a_i) * 1000
# + 999 (us); and no slower: the first at the opening, the last where the schedule puts it.
step = (1000000 + rate - 1) // rate
lo, worst = None, -10**18
for j, a in enumerate(slots):
    x = j * step - a * 1000
    if lo is not None:
        worst = max(worst, x - lo)
    lo = x if lo is None else min(lo, x)
print(f"rate: worst pair {worst} us over the schedule (<= 999)")
ok &= worst <= 999
print(f"rate: first admission at opens_at + {slots[0] - opens} ms, last at + {slots[-1] - opens} ms (schedule: {(n - 1) * step // 1000} ms)")
ok &= slots[0] == opens and slots[-1] == opens + (n - 1) * step // 1000
per_s = {}
for a in slots:
    per_s[(a - opens) // 1000] = per_s.get((a - opens) // 1000, 0) + 1
print("admitted per second of the log clock:", [per_s[k] for k in sorted(per_s)])
sys.exit(0 if ok else 1)
EOF
say "ok: the draw, and admission at $RATE a second"
# The broker's clock: the admissions' results were appended no faster than the rate allows.
out=$(fs queue ROOM --buyer wr-17 --json)
say "wr-17: $out"
case "$out" in *'"status":"admitted"'*'"token":"v1.k-new.'*) ;; *) fail "queue after the draw: $out" ;; esac

# ---- 4. buys and their tokens ------------------------------------------------------------------
token_of() { fs queue ROOM --buyer "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
t17=$(token_of wr-17)
t18=$(token_of wr-18)
outcome_of() {
	local id=$1
	wait_until 30 "the buy $id decided" "[ -n \"\$(sql \"SELECT outcome FROM decisions WHERE intent_id = '$id'\")\" ]"
	sql "SELECT outcome || coalesce(' ' || reason, '') FROM decisions WHERE intent_id = '$id'"
}
assert_eq "rejected no_token" "$(outcome_of "$(fs buy ROOM --buyer wr-17)")" "a buy without a token"
assert_eq "rejected token_other_buyer" "$(outcome_of "$(fs buy ROOM --buyer wr-17 --token "$t18")")" "a buy with another buyer's token"
assert_eq "rejected bad_token" "$(outcome_of "$(fs buy ROOM --buyer wr-17 --token "${t17%?}x")")" "a buy with an altered token"
assert_eq "rejected bad_token" "$(outcome_of "$(fs buy ROOM --buyer wr-17 --token 'v1.k-new.1.2.aaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')")" "a buy with a forged token"
assert_eq "held" "$(outcome_of "$(fs buy ROOM --buyer wr-17 --token "$t17")")" "a buy with its own token"
# A cart line on a sale behind a room: refused.
cart=$(fs cart --buyer wr-19 ROOM:1) || die "the cart"
wait_until 30 "the cart answered" "[ -n \"\$(sql \"SELECT answer FROM carts WHERE cart_id = '$cart'\")\" ]"
assert_eq "rejected admission_required" "$(sql "SELECT answer || ' ' || coalesce(answer_reason, reason) FROM carts WHERE cart_id = '$cart'")" "a cart line behind a room"

# A second sale: fifo, a token of 2 s. A token signed here as the worker signs (Python's hmac,
# by the format in src/core/token.h: an independent check of it) with a not-before a minute
# ahead is not valid yet; s-1's own token, once its 2 s are over, has expired.
fs sale open SHORT --stock 5 --per-buyer 1 --hold 600 --admission-rate 1000 --token-seconds 2 --draw fifo --wait 30 >/dev/null || die "SHORT"
fs join SHORT --buyer s-1 >/dev/null
wait_until 30 "s-1 admitted" "[ \"\$(sql \"SELECT count(admitted_ms) FROM room_joins WHERE sku = 'SHORT' AND buyer_id = 's-1'\")\" = 1 ]"
ts1=$(fs queue SHORT --buyer s-1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
mint() { # SKU BUYER NBF EXP: a token signed with k-new
	python3 - "$IT_DIR/keys" "$@" <<'PY'
import base64, hashlib, hmac, sys
keys = dict(l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith(("#", "sign")))
sku, buyer, nbf, exp = sys.argv[2:6]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
digest = b64(hashlib.sha256(buyer.encode()).digest()[:16])
msg = "\n".join(["fs-token-v1", "k-new", sku, digest, nbf, exp]).encode()
print(f"v1.k-new.{nbf}.{exp}.{digest}." + b64(hmac.new(bytes.fromhex(keys["k-new"]), msg, hashlib.sha256).digest()))
PY
}
later=$(($(now_ms) + 60000))
assert_eq "rejected token_not_yet_valid" "$(outcome_of "$(fs buy SHORT --buyer s-2 --token "$(mint SHORT s-2 "$later" "$((later + 2000))")")")" "a buy before its token's not-before"
assert_eq "rejected bad_token" "$(outcome_of "$(fs buy SHORT --buyer s-2 --token "$(mint ROOM s-2 "$later" "$((later + 2000))")")")" "a buy with another SKU's token"
read -r nbf1 exp1 < <(sql "SELECT admitted_ms, decided_ms + 2000 FROM room_joins WHERE sku = 'SHORT' AND buyer_id = 's-1'" | tr '|' ' ')
assert_eq "$ts1" "$(mint SHORT s-1 "$nbf1" "$exp1")" "s-1's token, as Python signs it by the documented format"
wait_until 30 "s-1's token to end on the wall clock" "[ \$(now_ms) -gt $((exp1 + 500)) ]"
assert_eq "rejected token_expired" "$(outcome_of "$(fs buy SHORT --buyer s-1 --token "$ts1")")" "a buy after its token's end"
say "ok: every token refusal"

# ---- 5. through the gateway: join, the queue, the token at the edge, the stream, the page -------
# Heartbeats every 500 ms: a stream whose client left is noticed at the next one.
start_gateway gw --set http.heartbeat.ms=500 --set metrics.listen=127.0.0.1:0
GWM=http://127.0.0.1:$(metrics_port gw)
wait_until 30 "the gateway ready" "[ \$(req GET /readyz) = 200 ]"
grep -q "admission.keys: 2 key(s): tokens checked at the edge" "$IT_DIR/gw.log" || fail "gw: the key ring not loaded"
J="Content-Type: application/json"
assert_eq 400 "$(req POST /v1/skus/ROOM/queue -H "$J" -d '{"buyer":"x"}')" "a join without buyer_id"
assert_eq 404 "$(req GET "/v1/skus/ROOM/queue/nobody")" "the queue of a buyer who never joined"
assert_eq not_joined "$(body_field error)" "its error"
assert_eq 404 "$(req GET "/v1/skus/SLOWX/queue/nobody")" "the queue of a SKU without a room"
assert_eq 400 "$(req GET "/v1/skus/ROOM/queue/a%20b")" "a buyer id with a space"
assert_posted "$(req POST /v1/skus/ROOM/queue -H "$J" -d '{"buyer_id":"gw/1"}')" "a join through the gateway"
loc=$(header_value Location)
assert_eq "/v1/skus/ROOM/queue/gw%2F1" "$loc" "the join's Location"
wait_until 30 "gw/1 admitted, read through the gateway" "[ \$(req GET '$loc') = 200 ] && [ \"\$(body_field status)\" = admitted ]"
tgw=$(body_field token)
case "$tgw" in v1.k-new.*) ;; *) fail "the gateway's queue answer has no token: $(cat "$IT_DIR/body")" ;; esac
# The edge: no token, another buyer's, a forged one: 403 without publishing; the buyer's own: 202.
assert_eq 403 "$(req POST /v1/skus/ROOM/buys -H "$J" -d '{"buyer_id":"gw/1","qty":1}')" "a buy without a token at the edge"
assert_eq no_token "$(body_field error)" "its reason"
assert_eq 403 "$(req POST /v1/skus/ROOM/buys -H "$J" -d "{\"buyer_id\":\"wr-30\",\"qty\":1,\"token\":\"$tgw\"}")" "another buyer's token at the edge"
assert_eq token_other_buyer "$(body_field error)" "its reason"
code=$(req POST "/v1/skus/ROOM/buys?wait=20" -H "$J" -d "{\"buyer_id\":\"gw/1\",\"qty\":1,\"token\":\"$tgw\"}")
case "$code" in 200 | 202) ;; *) fail "a buy with its token through the gateway: $code $(cat "$IT_DIR/body")" ;; esac
wait_until 30 "gw/1's buy decided" "[ \"\$(sql \"SELECT outcome FROM decisions WHERE buyer_id = 'gw/1'\")\" = held ]"
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE buyer_id = 'wr-30'")" "the edge's refusals published nothing"
# The long-poll: GWSLOW admits one buyer a second; the third joiner asks with ?wait=20 while
# it waits, and is answered when its admission's result comes, with the worker's token.
fs sale open GWSLOW --stock 5 --per-buyer 1 --hold 600 --admission-rate 1 --token-seconds 60 --draw fifo --wait 30 >/dev/null || die "GWSLOW"
wait_until 30 "GWSLOW's stock record at the gateway" "[ \$(req GET /v1/skus/GWSLOW) = 200 ]"
for b in w1 w2 w3; do
	assert_posted "$(req POST /v1/skus/GWSLOW/queue -H "$J" -d "{\"buyer_id\":\"$b\"}")" "GWSLOW join $b"
done
wait_until 30 "w3's join decided" "[ \"\$(sql \"SELECT count(*) FROM room_joins WHERE sku = 'GWSLOW'\")\" = 3 ]"
assert_eq 200 "$(req GET /v1/skus/GWSLOW/queue/w3)" "w3's place"
say "w3 without waiting: $(cat "$IT_DIR/body")"
if [ "$(body_field status)" = waiting ]; then
	assert_eq 3 "$(body_field position)" "w3's position (fifo)"
	t0=$(now_ms)
	assert_eq 200 "$(req GET '/v1/skus/GWSLOW/queue/w3?wait=20')" "w3's long-poll"
	waited=$(($(now_ms) - t0))
	say "w3's long-poll answered after $waited ms: $(cat "$IT_DIR/body")"
	assert_eq admitted "$(body_field status)" "w3's long-poll, once admitted"
	case "$(body_field token)" in v1.k-new.*) ;; *) fail "the long-poll's answer has no token" ;; esac
else
	fail "w3 was admitted before the test could wait for it (one a second: the machine is too slow?)"
fi
assert_eq 400 "$(req GET '/v1/skus/GWSLOW/queue/w3?wait=x')" "a bad wait"
say "ok: the gateway's queue and edge"

# The queue's stream: GWSSE admits two buyers a second; the eighth joiner's stream shows its
# place (the GET's JSON) each time it changes, the number ahead going down, then admitted with
# the worker's token; then heartbeats. Closing it frees it.
fs sale open GWSSE --stock 5 --per-buyer 1 --hold 600 --admission-rate 2 --token-seconds 60 --draw fifo --wait 30 >/dev/null || die "GWSSE"
wait_until 30 "GWSSE's stock record at the gateway" "[ \$(req GET /v1/skus/GWSSE) = 200 ]"
for b in 1 2 3 4 5 6 7 8; do
	assert_posted "$(req POST /v1/skus/GWSSE/queue -H "$J" -d "{\"buyer_id\":\"e/$b\"}")" "GWSSE join e/$b"
done
wait_until 30 "GWSSE's joins decided" "[ \"\$(sql \"SELECT count(*) FROM room_joins WHERE sku = 'GWSSE'\")\" = 8 ]"
queue_200() { metric_sum "$GWM" 'flashsale_gateway_requests_total.route="queue",code="200".'; }
before=$(queue_200)
curl -s -N -D "$IT_DIR/sse.headers" --max-time 60 "$GW/v1/skus/GWSSE/queue/e%2F8/events" >"$IT_DIR/sse.out" &
sse_pid=$!
wait_until 30 "e/8's stream to say admitted" "grep -q '^event: admitted' '$IT_DIR/sse.out'"
wait_until 10 "a heartbeat after the admission" "sed -n '/^event: admitted/,\$p' '$IT_DIR/sse.out' | grep -q '^: heartbeat'"
assert_eq "text/event-stream" "$(tr -d '\r' <"$IT_DIR/sse.headers" | awk -F': ' 'tolower($1) == "content-type" { print $2 }')" "the stream's Content-Type"
python3 - "$IT_DIR/sse.out" <<'EOF2' || fail "e/8's stream (above)"
import json, sys
events, name = [], None
for line in open(sys.argv[1]).read().split("\n"):
    if line.startswith("event: "):
        name = line[7:]
    elif line.startswith("data: "):
        events.append((name, json.loads(line[6:])))
    elif line.startswith("id: "):
        sys.exit("an id on a waiting room's event: " + line)
print("e/8's stream:", [(n, d.get("ahead", d.get("token", "")[:12])) for n, d in events])
names = [n for n, _ in events]
ok = names[-1] == "admitted" and set(names[:-1]) == {"waiting"} and len(names) >= 3
ahead = [d["ahead"] for n, d in events if n == "waiting"]
ok &= all(a > b for a, b in zip(ahead, ahead[1:])) and ahead[0] > 0
ok &= all(d["buyer_id"] == "e/8" and d["status"] == "waiting" and d["drawn"] and d["position"] == 8
          and "estimated_wait_s" in d and "as_of" in d for n, d in events if n == "waiting")
adm = events[-1][1]
ok &= adm["status"] == "admitted" and adm["token"].startswith("v1.k-new.") and adm["buyer_id"] == "e/8"
sys.exit(0 if ok else 1)
EOF2
assert_eq $((before + 1)) "$(queue_200)" "the stream counted as route=\"queue\", 200"
# The stream's admitted is the GET's.
assert_eq 200 "$(req GET /v1/skus/GWSSE/queue/e%2F8)" "e/8's GET"
assert_eq "$(body_field token)" "$(sed -n 's/^data: \(.*"status":"admitted".*\)$/\1/p' "$IT_DIR/sse.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')" "the stream's token, the GET's"
kill "$sse_pid" 2>/dev/null || true
wait "$sse_pid" 2>/dev/null || true
wait_until 10 "the gateway to free the stream its client left" "[ \$(req GET /readyz) = 200 ] && [ \"\$(body_field streams)\" = 0 ]"
say "ok: a stream whose client left is freed"
# Its refusals are the GET's; hostile paths, the same checks.
chk() { # chk STATUS ERROR WHAT METHOD PATH
	assert_eq "$1 $2" "$(req "$4" "$5") $(body_field error)" "$3"
}
chk 404 not_joined "the stream of a buyer who never joined" GET /v1/skus/GWSSE/queue/nobody/events
chk 404 no_waiting_room "the stream of a SKU without a room" GET /v1/skus/NOROOM/queue/nobody/events
chk 400 bad_buyer_id "the stream of a buyer id with a space" GET "/v1/skus/GWSSE/queue/a%20b/events"
chk 400 bad_buyer_id "the stream of a buyer id of 65 characters" GET "/v1/skus/GWSSE/queue/$(printf 'b%.0s' $(seq 65))/events"
chk 400 bad_buyer_id "the GET of a buyer id of 65 characters" GET "/v1/skus/GWSSE/queue/$(printf 'b%.0s' $(seq 65))"
chk 400 bad_buyer_id "the stream of a buyer id of 100 characters" GET "/v1/skus/GWSSE/queue/$(printf 'b%.0s' $(seq 100))/events"
chk 400 bad_sku "the stream of a bad SKU" GET "/v1/skus/G%20X/queue/e1/events"
chk 405 method_not_allowed "POST to the stream" POST /v1/skus/GWSSE/queue/e1/events
assert_eq 200 "$(req GET /readyz)" "readyz"
assert_eq 0 "$(body_field streams)" "streams left open by the refusals"

# The sale page's queue view, in headless Chromium: QPAGE admits two buyers a second, 16 join
# ahead of the two pages.
fs sale open QPAGE --stock 5 --per-buyer 1 --hold 600 --admission-rate 2 --token-seconds 120 --draw fifo --wait 30 >/dev/null || die "QPAGE"
wait_until 30 "QPAGE's stock record at the gateway" "[ \$(req GET /v1/skus/QPAGE) = 200 ]"
/usr/bin/python3 "$IT_ROOT/tests/browser/queue_page.py" --url "$GW" --sku QPAGE --ahead 16 \
	--out "$IT_DIR/queue_pages.json" | tee "$IT_DIR/browser.out" ||
	die "the browsers: $(sed -n 's/^FAIL: //p' "$IT_DIR/browser.out" | head -n 1 | grep . || echo 'see above')"
fs wait --timeout 60 --quiet || die "records not decided"
kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
	-t "it.$IT_ID.intents" -o beginning -f '%s\n' >"$IT_DIR/intents.jsonl"
while read -r buyer id token; do
	assert_eq held "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$id' AND buyer_id = '$buyer' AND kind = 1")" "$buyer's buy from the page, in Postgres"
	assert_eq "$token" "$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("intent_id") == sys.argv[2]: print(r.get("token", ""))' "$IT_DIR/intents.jsonl" "$id")" "$buyer's buy record carries the token the page was given"
	assert_eq 200 "$(req GET "/v1/skus/QPAGE/queue/$buyer")" "$buyer's queue GET"
	assert_eq "admitted $token" "$(body_field status) $(body_field token)" "$buyer's admission, the token it bought with"
done < <(python3 -c 'import json,sys
for p in json.load(open(sys.argv[1])): print(p["buyer"], p["intent"], p["token"])' "$IT_DIR/queue_pages.json")
assert_eq 2 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'QPAGE' AND kind = 1 AND outcome = 'held'")" "QPAGE's holds: one per page"
say "ok: the sale page's queue view"

# ---- 6. a restart: the room loads from its rows ----------------------------------------------------
# SLOW admits one buyer a second: the worker is killed after the first admission; the next one
# loads the room (queue, slots) from its rows and admits the rest a second apart or more: the
# slots the outage passed are not admitted at once, the schedule moves up to a second before
# the new worker's first tick (issue 47, item 4; test 77).
fs sale open SLOW --stock 5 --per-buyer 1 --hold 600 --admission-rate 1 --token-seconds 60 --draw fifo --wait 30 >/dev/null || die "SLOW"
for b in 1 2 3 4 5; do fs join SLOW --buyer "slow-$b" >/dev/null; done
slow_admitted() { sql "SELECT count(admitted_ms) FROM room_joins WHERE sku = 'SLOW'"; }
wait_until 30 "the first SLOW buyer admitted" "[ \$(slow_admitted) -ge 1 ]"
kill -9 "$IT_PID_w1"
wait "$IT_PID_w1" 2>/dev/null || true
say "w1 killed with $(slow_admitted) of 5 SLOW buyers admitted"
start_worker w2
wait_until 60 "w2 to be assigned its partition" "grep -q 'partition 0 assigned' '$IT_DIR/w2.log'"
wait_until 60 "every SLOW buyer admitted after the restart" "[ \$(slow_admitted) -eq 5 ]"
gaps=$(sql "SELECT string_agg(d::text, ' ') FROM (SELECT admitted_ms - lag(admitted_ms) OVER (ORDER BY admitted_ms) AS d FROM room_joins WHERE sku = 'SLOW') x WHERE d IS NOT NULL")
say "SLOW's admissions, ms apart: $gaps"
for d in $gaps; do [ "$d" -ge 1000 ] || fail "SLOW's admissions $d ms apart: faster than the rate"; done
assert_eq 4 "$(echo $gaps | wc -w)" "SLOW's gaps"
audit_ok
it_done
