#!/usr/bin/env bash
# Carts' answers (issue 47 items 3 and 8) on the real services: three partitions, carts whose
# coordinator is partition 0 and whose lines live on 1 and 2 (visited in that order).
#   1. Item 3: a record with the cart's id and other lines, read while the cart's round runs,
#      is answered `conflict` (type cart_conflict, at its own offset); the cart id's answer is
#      the cart's own (`held`) at a gateway that followed the results topic, at a gateway that
#      asks Postgres, in `flashsale cart show` and `flashsale result`.
#   2. Item 8: a cancel read while the cart's group at partition 1 is in flight stops the
#      round: that group is released when it answers, nothing is ever reserved at partition 2,
#      the cart's answer is `cancelled`, every unit is back on sale for plain buyers.
# Both records of each case are published while no worker runs, so the coordinator reads the
# second one right after the cart, before any answer can come back: the order is the log's,
# not a race. Audit (INV-8) and replay clean.
. "$(dirname "$0")/lib.sh"
it_setup 3

start_worker w1
wait_until 60 "w1 to be assigned partitions" "[ \$(grep -c 'partition [0-9]* assigned' '$IT_DIR/w1.log') -ge 3 ]"
# murmur2 over 3 partitions (71-carts.sh): RACE-0 on 1, RACE-1 on 2.
fs sale open RACE-0 --stock 3 --per-buyer 3 --hold 600 >/dev/null
fs sale open RACE-1 --stock 3 --per-buyer 3 --hold 600 >/dev/null
wait_until 60 "the sale records decided" "[ \$(decided) -ge 2 ]"
assert_eq "RACE-0|1 RACE-1|2" "$(sql "SELECT string_agg(sku || '|' || part, ' ' ORDER BY sku) FROM skus")" "partitions of the SKUs"
start_gateway gw
wait_until 30 "the gateway ready" "[ \$(req GET /readyz) = 200 ]"

# A cart id whose coordinator (murmur2 of the id over 3 partitions) is partition 0.
cart_id_on_0() {
	python3 - <<'PY'
import uuid
def murmur2(d):
    m, h = 0x5bd1e995, (0x9747b28c ^ len(d)) & 0xffffffff
    for i in range(len(d) // 4):
        k = int.from_bytes(d[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xffffffff
        k ^= k >> 24
        h = ((h * m) & 0xffffffff) ^ ((k * m) & 0xffffffff)
    t = len(d) & ~3
    if len(d) % 4 >= 3: h ^= d[t + 2] << 16
    if len(d) % 4 >= 2: h ^= d[t + 1] << 8
    if len(d) % 4 >= 1: h = ((h ^ d[t]) * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    return h ^ (h >> 15)
while True:
    u = str(uuid.uuid4())
    if (murmur2(u.encode()) & 0x7fffffff) % 3 == 0:
        print(u)
        break
PY
}
coordinator() { sql "SELECT part FROM carts WHERE cart_id = '$1'"; }
settled() { [ "$(sql "SELECT count(*) FROM carts WHERE state IN ('reserving', 'late_round')") $(sql "SELECT count(*) FROM cart_groups WHERE state IN ('waiting', 'pending')")" = "0 0" ]; }

# ---- 1. a conflicting record during the round (item 3) ------------------------------------------
stop_worker w1
k=$(cart_id_on_0)
fs cart --cart "$k" --buyer b1 RACE-0:1 RACE-1:1 >/dev/null || die "the cart not published"
fs cart --cart "$k" --buyer b1 RACE-0:2 >/dev/null || die "the conflicting record not published"
start_worker w2
wait_until 60 "the cart answered" "[ -n \"\$(sql \"SELECT answer FROM carts WHERE cart_id = '$k'\")\" ]"
wait_until 60 "the protocol to settle" settled
assert_eq 0 "$(coordinator "$k")" "the cart's coordinator"
assert_eq held "$(sql "SELECT answer FROM carts WHERE cart_id = '$k'")" "the cart's decision"
# The conflicting record's own answer: conflict, of its own type, at its own offset (the one
# after the cart's), decided before the cart's answer.
cart_off=$(sql "SELECT off FROM carts WHERE cart_id = '$k'")
assert_eq "conflict intent_id_reused $((cart_off + 1))" "$(sql "SELECT string_agg(payload->>'outcome' || ' ' || (payload->>'reason') || ' ' || (payload->>'offset'), ',') FROM cart_out WHERE msg_key = '$k' AND to_topic = 'results' AND payload->>'outcome' = 'conflict'")" "the conflicting record's answer"
assert_eq cart_conflict "$(sql "SELECT payload->>'type' FROM cart_out WHERE msg_key = '$k' AND to_topic = 'results' AND payload->>'outcome' = 'conflict'")" "its type"
# On the results topic too: the conflict under its own type, every `cart` result the cart's.
# (a bounded wait that fails rather than dies: on main the type is `cart` and the test goes on)
on_topic() { results_dump | grep -q "\"type\":\"cart_conflict\",\"intent_id\":\"$k\""; }
deadline=$((SECONDS + 30))
until on_topic || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
on_topic && say "ok: the conflict on the results topic as cart_conflict" || fail "no cart_conflict result for $k on the results topic"
assert_eq "" "$(results_dump | grep "\"type\":\"cart\",\"intent_id\":\"$k\"" | grep -v '"outcome":"held"' || true)" "results of type cart for the cart id that are not its answer"
# The cart id's answer, everywhere: the gateway that followed the results topic ...
assert_eq 200 "$(req GET "/v1/carts/$k?wait=20")" "the cart at the live gateway"
assert_eq held "$(body_field outcome)" "the cart's answer at the live gateway"
# ... a gateway that never saw it (Postgres) ...
start_gateway gw2
wait_until 30 "the second gateway ready" "[ \$(req GET /readyz) = 200 ]"
assert_eq 200 "$(req GET "/v1/carts/$k")" "the cart at a gateway that asks Postgres"
assert_eq held "$(body_field outcome)" "the cart's answer from Postgres"
# ... the CLI and the C API.
out=$(fs cart show "$k" --json)
case "$out" in *'"outcome":"held"'*) say "ok: cart show: $out" ;; *) fail "cart show: $out" ;; esac
assert_eq "$out" "$(fs result "$k" --json)" "flashsale result of the cart id"
# The units the cart holds are held for it: the buyer can pay.
fs cart confirm "$k" --wait 30 >"$IT_DIR/confirm.txt" || die "cart confirm"
grep -q "state confirmed" "$IT_DIR/confirm.txt" || fail "confirm: $(cat "$IT_DIR/confirm.txt")"
wait_until 60 "the confirm to reach both groups" settled
assert_eq "2|0|1 2|0|1" "$(sql "SELECT string_agg(available || '|' || held || '|' || sold, ' ' ORDER BY sku) FROM skus")" "available|held|sold of RACE-0 RACE-1"

# ---- 2. a cancel during the round (item 8) --------------------------------------------------------
stop_worker w2
x=$(cart_id_on_0)
fs cart --cart "$x" --buyer b2 RACE-0:1 RACE-1:2 >/dev/null || die "the cart not published"
fs cart cancel "$x" >/dev/null || die "the cancel not published"
start_worker w3
wait_until 60 "the cancel answered" "[ \"\$(sql \"SELECT payload->>'outcome' FROM cart_out WHERE msg_key = '$x' AND payload->>'type' = 'cart_cancel'\")\" = cancelled ]"
wait_until 60 "the cart answered" "[ -n \"\$(sql \"SELECT answer FROM carts WHERE cart_id = '$x'\")\" ]"
wait_until 60 "the protocol to settle" settled
assert_eq 0 "$(coordinator "$x")" "the cancelled cart's coordinator"
assert_eq "cancelled cancelled" "$(sql "SELECT state || ' ' || answer FROM carts WHERE cart_id = '$x'")" "the cancelled cart's state and answer"
# The round stopped: its group at 1 (in flight when the cancel came) released, nothing ever
# reserved at 2 (before: the round went on and held RACE-1's units pending meanwhile).
assert_eq "1:released" "$(sql "SELECT string_agg(part || ':' || state, ' ' ORDER BY part) FROM cart_groups WHERE cart_id = '$x'")" "the cancelled cart's groups"
assert_eq 0 "$(sql "SELECT count(*) FROM cart_out WHERE payload->>'type' = 'cart_reserve' AND payload->>'cart_id' = '$x' AND (payload->>'part')::int = 2")" "reserves sent to partition 2 after the cancel"
assert_eq 200 "$(req GET "/v1/carts/$x?wait=20")" "the cancelled cart at the gateway"
assert_eq cancelled "$(body_field outcome)" "its answer at the gateway"
case "$(fs cart show "$x" --json)" in *'"outcome":"cancelled"'*) ;; *) fail "cart show: $(fs cart show "$x" --json)" ;; esac
# Every unit is back: plain buyers get them all.
wait_until 30 "the cancelled cart's units back" "[ \"\$(sql \"SELECT string_agg(available::text, ' ' ORDER BY sku) FROM skus\")\" = '2 2' ]"
for s in RACE-0 RACE-1; do
	for i in 1 2; do
		id=$(fs buy "$s" --buyer "p-$s-$i") || die "buy $s not published"
		out=$(fs result "$id" --wait 30 2>&1) || fail "buy $s: $out"
		case "$out" in *" held "*) ;; *) fail "a plain buy of $s after the cancel: $out" ;; esac
	done
done
kill_worker gw
kill_worker gw2
audit_ok
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || { cat "$IT_DIR/replay.txt"; fail "replay differs"; }
grep -q '0 differences' "$IT_DIR/replay.txt" && say "ok: replay" || { cat "$IT_DIR/replay.txt"; fail "replay: no '0 differences'"; }
it_done
