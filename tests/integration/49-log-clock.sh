#!/usr/bin/env bash
# The log clock is the broker's (issue 28, item 4). On an intents topic whose records keep
# their producers' timestamps (message.timestamp.type=CreateTime), one record stamped a
# century ahead would expire every hold and close every window. So:
#   1. a worker on such a topic refuses to start: exit 1, one line naming the topic's
#      timestamp type and the setting, and nothing decided;
#   2. `flashsale replay --dry-run` (and the audit's replay) refuses the same way;
#   3. set to LogAppendTime, the same worker starts and decides a sale.
. "$(dirname "$0")/lib.sh"
it_setup 1
brokers=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)
# topic_type [TYPE]: the intents topic's message.timestamp.type, set to TYPE first if given
# (the admin API, by confluent-kafka).
topic_type() {
	/usr/bin/python3 -c '
import sys
from confluent_kafka.admin import AdminClient, ConfigResource
a = AdminClient({"bootstrap.servers": sys.argv[1]})
if len(sys.argv) > 3:
    r = ConfigResource("topic", sys.argv[2], set_config={"message.timestamp.type": sys.argv[3]})
    for f in a.alter_configs([r]).values():
        f.result(timeout=30)
for f in a.describe_configs([ConfigResource("topic", sys.argv[2])]).values():
    print(f.result(timeout=30)["message.timestamp.type"].value)
' "$brokers" "it.$IT_ID.intents" "$@"
}
set_type() { topic_type "$1" >/dev/null; }
type_now() { topic_type; }
set_type CreateTime || die "could not set the topic to CreateTime"
wait_until 30 "the topic to be CreateTime" "[ \"\$(type_now)\" = CreateTime ]"
fs sale open SKU1 --stock 5 >/dev/null || true # (published; nobody may decide it)

# 1.
rc=0
timeout 60 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" >"$IT_DIR/refused.log" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a worker on a CreateTime topic"
grep -q "topic it.$IT_ID.intents has message.timestamp.type=CreateTime.*set it to LogAppendTime" "$IT_DIR/refused.log" ||
	fail "no error naming the timestamp type: $(cat "$IT_DIR/refused.log")"
assert_eq 0 "$(sql "SELECT coalesce(sum(n_records), 0) FROM partitions")" "records decided on the CreateTime topic"
assert_eq 0 "$(sql "SELECT count(*) FROM skus")" "SKUs opened on the CreateTime topic"

# 2.
rc=0
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of replay --dry-run on a CreateTime topic"
grep -q "replay: topic it.$IT_ID.intents has message.timestamp.type=CreateTime" "$IT_DIR/replay.txt" ||
	fail "replay --dry-run does not name the timestamp type: $(cat "$IT_DIR/replay.txt")"

# 3.
set_type LogAppendTime || die "could not set the topic back to LogAppendTime"
wait_until 30 "the topic to be LogAppendTime" "[ \"\$(type_now)\" = LogAppendTime ]"
start_worker w1
fs load SKU1 --buyers 20 --seed 49 >/dev/null
fs wait --timeout 60 --quiet || die "records not decided in time"
assert_eq "5|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU1'")" "SKU1 held|available"
if grep -q "message.timestamp.type" "$IT_DIR/w1.log"; then fail "the worker on a LogAppendTime topic complained: $(grep message.timestamp.type "$IT_DIR/w1.log")"; fi
audit_ok
stop_worker w1
it_done
