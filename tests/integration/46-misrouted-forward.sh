#!/usr/bin/env bash
# The partitioning rule, forward mode (the default): buys published with librdkafka's own
# default partitioner (consistent_random, CRC32 of the key) land on partitions the rule
# (murmur2, Kafka's Java default) does not name. Each is forwarded to the SKU's partition
# and decided there: every SKU sells exactly its stock, no buy is unknown_sku. A worker killed
# after a batch of forwards committed and before they were sent forwards them again after
# the restart, and the second copies are answered as repeats. One intent id on buys of two
# SKUs of two partitions is decided by each partition alone. Audit and replay clean.
. "$(dirname "$0")/lib.sh"
it_setup 4
# On 4 partitions: SKU1 murmur2 3 / CRC32 2; SKU6 murmur2 0 / CRC32 1; SKU2 0 under both.
crc() { fs --set kafka.producer.partitioner=consistent_random "$@"; }
start_worker w0
wait_until 60 "w0 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w0.log'"
fs sale open SKU1 --stock 60 >/dev/null
fs sale open SKU6 --stock 40 >/dev/null
fs sale open SKU2 --stock 50 >/dev/null
wait_until 60 "the sale records decided" "[ \$(decided) -ge 3 ]"
assert_eq "SKU1|3 SKU2|0 SKU6|0" "$(sql "SELECT string_agg(sku || '|' || part, ' ' ORDER BY sku) FROM skus")" "each SKU on its murmur2 partition"
# Our CLI publishes by the rule: its sale records are decided where they landed.
assert_eq "0|0" "$(sql "SELECT count(*), coalesce(sum(n_forwarded), 0) FROM forwards, partitions")" "sale records forwarded"
assert_eq "0 0 3" "$(sql "SELECT string_agg(part::text, ' ' ORDER BY part) FROM sale_log")" "partitions of the sale records"
stop_worker w0

# Only misrouted buys while no worker runs: whichever batch commits first carries forwards.
crc load SKU1 --buyers 150 --dup-count 10 --seed 461 --ids "$IT_DIR/ids1" >/dev/null
crc load SKU6 --buyers 150 --dup-count 10 --seed 462 --ids "$IT_DIR/ids6" >/dev/null
start_worker w1 FLASHSALE_CRASH=after_commit
wait_until 60 "w1 to die after its first commit" "! alive \$(worker_pid w1)"
kill_worker w1
crashed=$(sql "SELECT count(*) FROM forwards")
say "forwards committed before the crash: $crashed"
[ "$crashed" -gt 0 ] || fail "the crash came before any forward was committed; the test proves nothing"

start_worker w2
wait_until 60 "w2 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w2.log'"
# Now a live mix: misrouted buys and rightly routed ones (our CLI's own partitioner).
crc load SKU1 --buyers 100 --dup-count 5 --seed 463 --ids "$IT_DIR/ids1b" >/dev/null
fs load SKU2 --buyers 120 --dup-count 5 --seed 464 --ids "$IT_DIR/ids2" >/dev/null
fs wait --timeout 120 --quiet || die "records not decided in time"
# The last forwards' copies are decided after the originals: wait for every intent.
intents=$(cat "$IT_DIR"/ids1 "$IT_DIR"/ids6 "$IT_DIR"/ids1b "$IT_DIR"/ids2 | sort -u | wc -l)
wait_until 60 "every intent decided" "[ \$(sql 'SELECT count(*) FROM decisions') -ge $intents ] && fs wait --timeout 5 --quiet"

assert_eq "60|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU1'")" "SKU1 held|available"
assert_eq "40|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU6'")" "SKU6 held|available"
assert_eq "50|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU2'")" "SKU2 held|available"
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE reason = 'unknown_sku'")" "buys answered unknown_sku"
assert_eq "$intents" "$(sql "SELECT count(*) FROM decisions")" "one decision per intent"
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE part <> CASE sku WHEN 'SKU1' THEN 3 ELSE 0 END")" "decisions off their SKU's partition"
# Partitions 1 and 2 hold only misrouted records: every one is forwarded, none decided there.
assert_eq "$(sql "SELECT sum(n_records) FROM partitions WHERE part IN (1, 2)")" \
	"$(sql "SELECT sum(n_forwarded) FROM partitions WHERE part IN (1, 2)")" "records of partitions 1, 2 all forwarded"
assert_eq "$(sql "SELECT sum(n_forwarded) FROM partitions")" "$(sql "SELECT count(*) FROM forwards")" "a forwards row per forwarded record"
assert_eq 0 "$(sql "SELECT count(*) FROM forwards WHERE to_part <> CASE WHEN part = 2 THEN 3 ELSE 0 END")" "forwards to the rule's partition"
# The crashed batch's forwards were sent again: more repeats at the targets than the loads sent.
repeats=$(sql "SELECT sum(n_repeats) FROM partitions WHERE part IN (0, 3)")
[ "$repeats" -gt 25 ] && say "ok: $repeats repeats at the targets (25 sent by the loads)" ||
	fail "repeats at the targets: $repeats, not more than the 25 the loads sent"
grep -q 'arrived on the wrong partition.*set the producer.s partitioner to murmur2' "$IT_DIR/w2.log" ||
	fail "no misrouted-records warning in the worker's log"
wait_until 120 "every intent answered" "[ \$(results_keys | sort -u | wc -l) -ge $intents ]"
say "ok: every intent answered"

# One intent id on buys of two SKUs that live on two partitions (issue 28, item 6): each
# partition dedupes its own log, so both are decided, each alone, whatever the timing (before,
# the second to commit was answered conflict, and the replay, deciding each partition's log
# alone, disagreed). Both held, both confirmed on their own SKU.
fs sale restock SKU1 --add 1 --wait 30 >/dev/null || die "restock SKU1"
fs sale restock SKU2 --add 1 --wait 30 >/dev/null || die "restock SKU2"
twice=$(cat /proc/sys/kernel/random/uuid)
fs buy SKU1 --buyer twice --intent "$twice" >/dev/null
fs buy SKU2 --buyer twice --intent "$twice" >/dev/null
wait_until 60 "both buys decided" "[ \$(sql \"SELECT count(*) FROM decisions WHERE intent_id = '$twice'\") -ge 2 ]"
assert_eq "0|held 3|held" "$(sql "SELECT string_agg(part || '|' || outcome, ' ' ORDER BY part) FROM decisions WHERE intent_id = '$twice'")" "the two buys of one intent id: partition|outcome"
fs confirm "$twice" >"$IT_DIR/twice.txt" 2>&1 && fail "a confirm naming only the reused intent id was published" ||
	grep -q 'used by buys of 2 SKUs (SKU2, SKU1): name the SKU' "$IT_DIR/twice.txt" || fail "confirm without --sku: $(cat "$IT_DIR/twice.txt")"
fs confirm "$twice" --sku SKU1 >/dev/null
fs confirm "$twice" --sku SKU2 >/dev/null
wait_until 60 "both confirms decided" "[ \$(sql \"SELECT count(*) FROM reservations WHERE intent_id = '$twice' AND status = 'confirmed'\") -eq 2 ]"
assert_eq "SKU1|0|1 SKU2|0|1" "$(sql "SELECT string_agg(sku || '|' || available || '|' || sold, ' ' ORDER BY sku) FROM skus WHERE sku IN ('SKU1', 'SKU2')")" "SKU1, SKU2 available|sold"
wait_until 60 "the two confirms answered" "[ \$(results_dump | grep -c '\"type\":\"confirm\",\"intent_id\":\"$twice\",\"sku\":\"SKU[12]\",\"outcome\":\"confirmed\"') -eq 2 ]"
say "ok: one intent id, two SKUs on two partitions: two holds, two confirms"
audit_ok
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || { cat "$IT_DIR/replay.txt"; fail "replay --dry-run found differences"; }
stop_worker w2
grep -Eo 'forwarded=[0-9]+ forwards_sent=[0-9]+' "$IT_DIR/w2.log" | tail -1 | sed "s/^/$IT_NAME: w2 exit: /"
it_done
