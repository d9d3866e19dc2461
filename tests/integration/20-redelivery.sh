#!/usr/bin/env bash
# Redelivery: stock 200, 100 orders delivered as 125 records (25 re-sent verbatim): 100 held,
# the 25 repeats answered with their original outcome, available 100.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
fs sale open R1 --stock 200 >/dev/null
fs load R1 --buyers 100 --dup-count 25 --seed 20 --ids "$IT_DIR/ids" | grep -q '125 records' ||
	die "load did not publish 125 records"
fs wait --timeout 60 --quiet || die "records not decided in time"

assert_eq 126 "$(decided)" "records decided (open + 125)"
assert_eq 100 "$(sql "SELECT count(*) FROM decisions WHERE outcome = 'held'")" "held decisions"
assert_eq 25 "$(sql "SELECT sum(n_repeats) FROM partitions")" "repeats counted"
assert_eq "100|100" "$(sql "SELECT available, held FROM skus WHERE sku = 'R1'")" "available|held"
assert_eq 100 "$(sql "SELECT count(*) FROM reservations")" "one reservation per intent"

# Replies: 125 results; the 25 repeats carry duplicate:true and the same outcome and offset
# as the original's reply.
wait_until 60 "125 results" "[ \$(results_keys | wc -l) -ge 125 ]"
results_dump | grep '"type":"buy"' >"$IT_DIR/results"
assert_eq 125 "$(wc -l <"$IT_DIR/results")" "buy results"
assert_eq 25 "$(grep -c '"duplicate":true' "$IT_DIR/results")" "duplicate replies"
# Strip the duplicate flag: every intent's replies must then be identical.
sed 's/,"duplicate":true//' "$IT_DIR/results" | sort -u >"$IT_DIR/unique"
assert_eq 100 "$(wc -l <"$IT_DIR/unique")" "distinct replies after removing the flag"
assert_eq 100 "$(grep -c '"outcome":"held"' "$IT_DIR/unique")" "all replies held"
audit_ok
stop_worker w1

# A retry that reaches a restarted worker, whose memory of decided ids is empty, in one batch
# with a first-time buyer: the repeat is taken for new, the batch's rows go by COPY and the
# decisions COPY fails on the stored id; the batch is redone with a lookup (and every row by
# upsert), the repeat answered with its first decision, the new buy held once.
kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e -t "it.$IT_ID.intents" \
	-o 1 -c 1 -f '%s' >"$IT_DIR/first-buy.json"
grep -q '"type":"buy"' "$IT_DIR/first-buy.json" || die "offset 1 is not a buy: $(cat "$IT_DIR/first-buy.json")"
fs publish --key R1 --file "$IT_DIR/first-buy.json" >/dev/null
fresh=$(fs buy R1 --buyer after-restart)
start_worker w2
fs wait --timeout 60 --quiet || die "records after the restart not decided in time"
stop_worker w2
grep -q ' redo=1 .* lookups_forced=1' "$IT_DIR/w2.log" && say "ok: the batch was redone once, with a lookup" ||
	fail "no redo with a lookup: $(grep -o 'redo=[0-9]*.*lookups_forced=[0-9]*' "$IT_DIR/w2.log" | tail -n 1)"
assert_eq 26 "$(sql "SELECT sum(n_repeats) FROM partitions")" "repeats counted after the restart"
assert_eq "101|101|101" "$(sql "SELECT (SELECT count(*) FROM decisions WHERE outcome = 'held'), (SELECT count(*) FROM reservations), (SELECT count(*) FROM buyers)")" "held decisions|reservations|buyers"
assert_eq "held|1" "$(sql "SELECT d.outcome, b.units FROM decisions d JOIN buyers b ON b.buyer_id = d.buyer_id WHERE d.intent_id = '$fresh'")" "the new buy|its buyer's units"
audit_ok
it_done
