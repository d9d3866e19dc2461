#!/usr/bin/env bash
# The partitioning rule, reject mode (misrouted = reject): buys published with librdkafka's
# default partitioner (CRC32) on a partition the rule (murmur2) does not name are rejected
# wrong_partition, each answered with the expected partition; rightly routed buys are
# unaffected. Then the rule's inputs are fixed for the topic: a worker configured with the
# other mode or another record size cap, and a worker on the topic grown to 8 partitions,
# refuse to start, naming both; a replay decides with the recorded cap, not its own.
IT_CONF_EXTRA="misrouted = reject"
. "$(dirname "$0")/lib.sh"
it_setup 4
crc() { fs --set kafka.producer.partitioner=consistent_random "$@"; }
start_worker w1
wait_until 60 "w1 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w1.log'"
fs sale open SKU1 --stock 30 >/dev/null # murmur2 3, CRC32 2
fs sale open SKU2 --stock 50 >/dev/null # 0 under both
crc load SKU1 --buyers 80 --dup-count 4 --seed 471 --ids "$IT_DIR/ids1" >/dev/null
crc load SKU2 --buyers 100 --dup-count 4 --seed 472 --ids "$IT_DIR/ids2" >/dev/null
fs wait --timeout 120 --quiet || die "records not decided in time"

assert_eq 84 "$(sql "SELECT count(*) FROM rejects WHERE reason = 'wrong_partition' AND part = 2")" "SKU1's misrouted buys rejected wrong_partition"
assert_eq 0 "$(sql "SELECT count(*) FROM rejects WHERE reason <> 'wrong_partition' OR part <> 2")" "other rejects"
assert_eq 80 "$(sql "SELECT count(DISTINCT intent_id) FROM rejects")" "each misrouted intent named in its reject"
assert_eq "0|30" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU1'")" "SKU1 held|available (nothing decided off its partition)"
assert_eq "50|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU2'")" "SKU2 held|available (rightly routed, unaffected)"
assert_eq 100 "$(sql "SELECT count(*) FROM decisions")" "decisions: SKU2's buys only"
assert_eq 0 "$(sql "SELECT count(*) FROM forwards")" "nothing forwarded"
id=$(head -n 1 "$IT_DIR/ids1")
wait_until 60 "the result of $id" "results_dump | grep -q '\"intent_id\":\"$id\"'"
line=$(results_dump | grep "\"intent_id\":\"$id\"" | head -n 1)
case "$line" in
*'"outcome":"rejected","reason":"wrong_partition","expected_partition":3,"partitioner":"murmur2"'*) say "ok: the answer names the rule: $line" ;;
*) fail "the answer to a misrouted buy does not name the rule: $line" ;;
esac
grep -q '84 record(s) arrived on the wrong partition.*rejected wrong_partition' "$IT_DIR/w1.log" ||
	fail "no misrouted-records warning with the count in the worker's log"
audit_ok
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || { cat "$IT_DIR/replay.txt"; fail "replay --dry-run found differences"; }
stop_worker w1

# The other mode: refused, the process exits 1 at once with one line naming both.
rc=0
timeout 60 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" --set misrouted=forward \
	>"$IT_DIR/mode.log" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a worker with the other misrouted mode"
grep -q 'misrouted = forward, but this database decided topic .* with misrouted = reject' "$IT_DIR/mode.log" ||
	fail "no error naming both modes: $(cat "$IT_DIR/mode.log")"

# The record size cap is recorded with the rule (issue 28, item 10): a record of 3,000 bytes,
# under the worker's 4,096, was decided; a replay run with a cap of 1,024 decides it with the
# recorded cap (no difference), and a worker with that cap refuses to start, naming both.
pad=$(head -c 2900 /dev/zero | tr '\0' 'p')
big=$(cat /proc/sys/kernel/random/uuid)
start_worker w2
printf '{"v":1,"type":"buy","intent_id":"%s","sku":"SKU2","buyer_id":"big","qty":1,"pad":"%s"}' "$big" "$pad" | fs publish --key SKU2 >/dev/null
fs wait --timeout 60 --quiet || die "the large record not decided in time"
stop_worker w2
assert_eq "sold_out" "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$big'")" "the 3,000-byte buy's decision"
fs --set record.max.bytes=1024 replay --dry-run >"$IT_DIR/replay-cap.txt" 2>&1 ||
	{ cat "$IT_DIR/replay-cap.txt"; fail "replay --dry-run with another cap found differences"; }
rc=0
timeout 60 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" --set record.max.bytes=1024 \
	>"$IT_DIR/cap.log" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a worker with another record.max.bytes"
grep -q 'record.max.bytes = 1024, but this database decided topic .* with record.max.bytes = 4096' "$IT_DIR/cap.log" ||
	fail "no error naming both caps: $(cat "$IT_DIR/cap.log")"

# The topic grown to 8 partitions (Kafka's own tool): refused, naming both counts.
java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$IT_ROOT/.local/cache/kafka-3.9.1/libs/*" \
	org.apache.kafka.tools.TopicCommand --bootstrap-server "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" \
	--alter --topic "it.$IT_ID.intents" --partitions 8 >"$IT_DIR/grow.log" 2>&1 </dev/null ||
	die "could not grow the topic: $(tail -n 3 "$IT_DIR/grow.log")"
wait_until 30 "the topic to have 8 partitions" \
	"[ \$(kcat -b '$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)' -L -t it.$IT_ID.intents 2>/dev/null | grep -c 'partition [0-9]*,') -eq 8 ]"
rc=0
timeout 60 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" >"$IT_DIR/grown.log" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a worker on the grown topic"
grep -q 'has 8 partitions, but this database recorded 4 at its first start' "$IT_DIR/grown.log" ||
	fail "no error naming both counts: $(cat "$IT_DIR/grown.log")"
it_done
