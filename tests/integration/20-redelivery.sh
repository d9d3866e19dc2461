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
it_done
