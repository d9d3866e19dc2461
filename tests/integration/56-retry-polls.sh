#!/usr/bin/env bash
# The consumer is polled while a partition waits on a transient retry (issue 28, item 1): a
# session holding the partition's row lock for 25 s makes every commit of the worker time out
# on its lock (lock_timeout 5 s) and retry; with max.poll.interval.ms at 10 s, a worker that
# did not poll while it waits would be put out of the group ("maximum poll interval
# exceeded") and its partition moved. Here it stays, keeps the partition, and decides the
# buys once the lock is gone; the records polled during the waits are decided in order. A
# rebalance that comes during such a wait is run after the retry.
. "$(dirname "$0")/lib.sh"
IT_CONF_EXTRA="kafka.consumer.max.poll.interval.ms = 10000"
it_setup 1
start_worker w1
fs sale open P1 --stock 50 --wait 30 >/dev/null || die "open"
first=$(fs buy P1 --buyer before)
fs result "$first" --wait 30 | grep -q ' held ' || die "the first buy"
# The lock: held 25 s by a session that is not a worker's (the worker ends only its own
# stalled sessions).
psql "$IT_PG" -X -q -c "BEGIN; SELECT 1 FROM partitions WHERE part = 0 FOR UPDATE; SELECT pg_sleep(25); COMMIT;" >/dev/null 2>&1 &
locker=$!
wait_until 10 "the lock to be taken" "[ \$(sql \"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(25)%' AND pid <> pg_backend_pid()\") -ge 1 ]"
fs load P1 --buyers 20 --buyer-prefix during >/dev/null
wait_until 30 "a commit to time out on the lock" "grep -q 'not committed' '$IT_DIR/w1.log'"
wait "$locker" || true
fs wait --quiet --timeout 60 || die "the buys were not decided after the lock"
assert_eq "21|0" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome <> 'held') FROM decisions WHERE sku = 'P1'")" "P1 held|other"
retries=$(grep -c 'not committed' "$IT_DIR/w1.log")
[ "$retries" -ge 2 ] && say "ok: $retries commits timed out on the lock and were retried" || fail "only $retries retries: the test proves less than it says"
if grep -Eqi 'max(imum)? ?poll.?interval|MAXPOLL' "$IT_DIR/w1.log"; then
	fail "the worker exceeded max.poll.interval.ms: $(grep -Ei 'max(imum)? ?poll.?interval|MAXPOLL' "$IT_DIR/w1.log" | head -1)"
else
	say "ok: polled throughout the waits (no max.poll.interval.ms exceeded)"
fi
assert_eq 1 "$(grep -c 'partition 0 assigned' "$IT_DIR/w1.log")" "assignments of partition 0 (kept throughout)"
assert_eq 0 "$(grep -c 'partition 0 revoked' "$IT_DIR/w1.log")" "revokes of partition 0"

# A rebalance while the worker waits on a retry (a second worker joins): it is run once the
# retry is over, between records, not inside the batch it may revoke.
psql "$IT_PG" -X -q -c "BEGIN; SELECT 1 FROM partitions WHERE part = 0 FOR UPDATE; SELECT pg_sleep(15); COMMIT;" >/dev/null 2>&1 &
locker=$!
wait_until 10 "the lock to be taken again" "[ \$(sql \"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(15)%' AND pid <> pg_backend_pid()\") -ge 1 ]"
fs load P1 --buyers 10 --buyer-prefix joined >/dev/null
wait_until 30 "a commit to time out on the lock again" "[ \$(grep -c 'not committed' '$IT_DIR/w1.log') -gt $retries ]"
start_worker w2
wait "$locker" || true
wait_until 60 "the deferred rebalance to run" "grep -q 'partition 0 revoked' '$IT_DIR/w1.log'"
grep -q 'a rebalance during a retry.s wait' "$IT_DIR/w1.log" && say "ok: the rebalance during the wait was deferred" ||
	fail "no deferred rebalance in w1's log (the test proves less than it says)"
fs wait --quiet --timeout 60 || die "the buys were not decided after the rebalance"
assert_eq "31|0" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome <> 'held') FROM decisions WHERE sku = 'P1'")" "P1 held|other after the rebalance"
audit_ok
stop_worker w2
stop_worker w1
it_done
