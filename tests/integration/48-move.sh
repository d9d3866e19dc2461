#!/usr/bin/env bash
# Moving a sale to an intents topic with more partitions, by replay (flashsale move,
# docs/reference/operations.md: Growing the intents topic). A sale on 2 partitions (holds
# that expire through ticks, confirms, a cancel, repeats, buys forwarded from a CRC32
# publisher) is moved to 5 partitions with a new
# database: the move refuses while a record is undecided; then the new topic's replay decides
# every intent as the old log did, its holds end as the old ones did once the new worker ticks,
# the stock counters agree, each SKU lives on its murmur2 partition of 5, the audit (with its
# replay) is clean on the new database, and the sale goes on there.
. "$(dirname "$0")/lib.sh"
it_setup 2
crc() { fs --set kafka.producer.partitioner=consistent_random "$@"; }
start_worker w1
wait_until 60 "w1 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w1.log'"
# On 2 partitions: SKU1 and SKU3 on 1 (SKU3 on 0 under CRC32), SKU2 on 0; on 5: 1, 0 and 3.
fs sale open SKU1 --stock 40 --hold 1s >/dev/null
fs sale open SKU2 --stock 30 >/dev/null
fs sale open SKU3 --stock 25 --per-buyer 2 >/dev/null
fs load SKU1 --buyers 100 --dup-count 5 --seed 481 >/dev/null
fs load SKU2 --buyers 80 --dup-count 4 --seed 482 >/dev/null
crc load SKU3 --buyers 60 --seed 483 >/dev/null
fs wait --timeout 60 --quiet || die "records not decided in time"
held=$(sql "SELECT intent_id FROM decisions WHERE sku = 'SKU2' AND outcome = 'held' ORDER BY intent_id LIMIT 3")
set -- $held
fs confirm "$1" --sku SKU2 >/dev/null
fs confirm "$2" --sku SKU2 >/dev/null
fs cancel "$3" --sku SKU2 >/dev/null
# SKU1's holds (1 s) expire on the old log through the worker's ticks.
wait_until 60 "SKU1's holds to expire" "[ \$(sql \"SELECT count(*) FROM reservations WHERE sku = 'SKU1' AND status = 'held'\") -eq 0 ]"
fs wait --timeout 60 --quiet || die "records not decided in time"
assert_eq "2|1" "$(sql "SELECT count(*) FILTER (WHERE status = 'confirmed'), count(*) FILTER (WHERE status = 'cancelled') FROM reservations WHERE sku = 'SKU2'")" "SKU2 confirmed|cancelled"
[ "$(sql "SELECT count(*) FROM forwards")" -gt 0 ] || fail "no forwarded record: the test proves less than it says"
stop_worker w1

# The second configuration: other topics, another database.
IT_DB2="${IT_DB}_b"
psql "$IT_ADMIN_PG" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $IT_DB2" >/dev/null
IT_PG2="$(printf '%s' "$IT_ADMIN_PG" | sed -E 's/dbname=[^ ]+//') dbname=$IT_DB2"
for f in "$IT_ROOT"/sql/*.sql; do psql "$IT_PG2" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
sed -e "s|^pg = .*|pg = $IT_APP_BASE dbname=$IT_DB2|" -e "s|it\.$IT_ID\.|it.$IT_ID.b.|" -e "s|^group = .*|group = it-$IT_ID-b|" \
	"$IT_DIR/flashsale.conf" >"$IT_DIR/b.conf"
fs2() { "$IT_BUILD/flashsale" -c "$IT_DIR/b.conf" "$@"; }
sql2() { psql "$IT_PG2" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
cleanup2() {
	fs2 topics delete >/dev/null 2>&1 || true
	psql "$IT_ADMIN_PG" -X -q -c "DROP DATABASE IF EXISTS $IT_DB2 (FORCE)" >/dev/null 2>&1 || true
}

# Refused while a record is undecided (no worker runs): nothing is created.
fs buy SKU2 --buyer late-one >/dev/null
rc=0
fs move --to "$IT_DIR/b.conf" --partitions 5 >"$IT_DIR/refused.txt" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a move with a record undecided"
grep -q '1 records of .* are not decided yet' "$IT_DIR/refused.txt" || fail "no reason given: $(cat "$IT_DIR/refused.txt")"
start_worker w2
fs wait --timeout 60 --quiet || die "records not decided in time"
stop_worker w2

fs move --to "$IT_DIR/b.conf" --partitions 5 >"$IT_DIR/move.txt" 2>&1 || { cat "$IT_DIR/move.txt"; die "the move failed"; }
say "$(cat "$IT_DIR/move.txt")"
grep -q '^moved [0-9]* of [0-9]* records' "$IT_DIR/move.txt" || fail "no summary line"
parts=$(kcat -b "$(grep '^brokers' "$IT_DIR/b.conf" | cut -d' ' -f3)" -L -t "it.$IT_ID.b.intents" 2>/dev/null | grep -c 'partition [0-9]*,')
assert_eq 5 "$parts" "partitions of the new intents topic"
timeout 120 "$IT_BUILD/flashsale" -c "$IT_DIR/b.conf" replay >"$IT_DIR/replay2.txt" 2>&1 || { tail -n 5 "$IT_DIR/replay2.txt"; die "the rebuild on the new topic failed"; }

# The new worker ticks its partitions: the holds that expired on the old log expire here too.
"$IT_BUILD/flashsale-worker" -c "$IT_DIR/b.conf" >>"$IT_DIR/w3.log" 2>&1 &
w3=$!
IT_PIDS+=("$w3")
wait_until 60 "the moved holds to expire" "[ \$(sql2 \"SELECT count(*) FROM reservations WHERE status = 'held' AND sku = 'SKU1'\") -eq 0 ]"

q_dec="SELECT intent_id, kind, sku, outcome, coalesce(reason, ''), qty FROM decisions ORDER BY 1, 2"
q_res="SELECT intent_id, sku, status, late, qty FROM reservations ORDER BY 1"
q_sku="SELECT sku, status, supply, available, held, sold FROM skus ORDER BY 1"
q_buy="SELECT sku, buyer_id, units FROM buyers ORDER BY 1, 2"
for q in "$q_dec" "$q_res" "$q_sku" "$q_buy"; do
	sql "$q" >"$IT_DIR/old.txt"
	sql2 "$q" >"$IT_DIR/new.txt"
	what=$(printf '%s' "$q" | sed -E 's/.* FROM ([a-z]+).*/\1/')
	if cmp -s "$IT_DIR/old.txt" "$IT_DIR/new.txt"; then
		say "ok: $what identical ($(wc -l <"$IT_DIR/new.txt") rows)"
	else
		fail "$what differ after the move: $(diff "$IT_DIR/old.txt" "$IT_DIR/new.txt" | head -n 6 | tr '\n' ' ')"
	fi
done
want=$(/usr/bin/python3 "$IT_ROOT/tests/clients/partitions.py" 5 SKU1 SKU2 SKU3 | awk '{ printf "%s%s|%s", (NR > 1 ? " " : ""), $1, $2 }')
assert_eq "$want" "$(sql2 "SELECT string_agg(sku || '|' || part, ' ' ORDER BY sku) FROM skus")" "each SKU on its murmur2 partition of 5"
assert_eq 0 "$(sql2 "SELECT count(*) FROM forwards")" "forwards on the new topic (the copies went where the rule says)"
# The sale goes on on the new topic.
fs2 sale restock SKU2 --add 5 >/dev/null
id=$(fs2 buy SKU2 --buyer after-the-move)
wait_until 60 "the buy after the move decided" "[ \$(sql2 \"SELECT count(*) FROM decisions WHERE intent_id = '$id'\") -eq 1 ]"
assert_eq held "$(sql2 "SELECT outcome FROM decisions WHERE intent_id = '$id'")" "a buy on the new topic after the move"
if fs2 audit >"$IT_DIR/audit2.txt" 2>&1; then say "ok: audit of the new database"; else cat "$IT_DIR/audit2.txt"; fail "the new database's audit found violations"; fi
kill -TERM "$w3"
wait "$w3" || fail "the new topic's worker exited with $?"
audit_ok
[ "$IT_FAILED" -ne 0 ] || cleanup2
it_done
