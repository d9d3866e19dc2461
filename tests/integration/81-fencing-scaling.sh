#!/usr/bin/env bash
# A worker paused past its session timeout while a second one takes its partition, then
# resumed: its stale batch is fenced by the offset compare-and-set and counted, nothing is
# decided twice. Then workers joining and leaving mid-sale (scale out to 3, in to 1).
. "$(dirname "$0")/lib.sh"
it_setup 4
echo "batch.max = 100" >>"$IT_DIR/flashsale.conf"
echo "stats.interval.ms = 300" >>"$IT_DIR/flashsale.conf"

state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null; }
stat_of() { grep -o " $2=[0-9]*" "$IT_DIR/$1.log" | tail -n 1 | cut -d= -f2; }

# 1. Pause (SIGSTOP at a named point) with a batch read and looked up, not yet committed;
# idle_in_tx and in_copy with the batch's transaction open and holding locks.
for point in after_lookup idle_in_tx in_copy; do
	sku="F-$point"
	fs sale open "$sku" --stock 500 >/dev/null
	fs load "$sku" --buyers 5000 --seed 81 --ids "$IT_DIR/ids-$point" >/dev/null
	start_worker "p_$point" FLASHSALE_CRASH="stop:$point:3"
	pid=$(worker_pid "p_$point")
	wait_until 60 "the worker to stop at $point" "[ \"\$(state $pid)\" = T ]"
	say "worker paused at $point"
	start_worker "q_$point"
	fs wait --quiet --timeout 120 || die "$point: the second worker did not decide everything"
	kill -CONT "$pid"
	wait_until 60 "the paused worker to be fenced" "grep -q 'fenced' '$IT_DIR/p_$point.log'"
	wait_until 30 "the fenced counter" "[ \"\$(stat_of p_$point fenced)\" -ge 1 ] 2>/dev/null"
	if [ "$point" = idle_in_tx ]; then
		# With two batches in flight the stacked one may be fenced first ("fenced (expected
		# ...)"); the idle session's own outcome comes once the server has ended it and the
		# resumed worker has read the offset back, seconds later on a busy machine (a CI run
		# checked it before it came, and failed).
		wait_until 90 "the paused worker's unknown-then-fenced outcome" \
			"grep -q 'commit outcome unknown, stored offset [0-9]*: fenced' '$IT_DIR/p_$point.log'"
	fi
	say "ok: $point: stale batch fenced ($(grep -o 'fenced (expected offset [0-9]*, stored [0-9]*)' "$IT_DIR/p_$point.log" | head -n 1))"
	stop_worker "p_$point"
	stop_worker "q_$point"
	if [ "$point" = in_copy ]; then
		# Paused inside its COPY, the worker's session is busy in a statement with the
		# partition's row locked: the new owner's compare-and-set waited lock_timeout and
		# ended that session.
		grep -q 'stalled_broken=[1-9]' "$IT_DIR/q_$point.log" &&
			say "ok: the stalled session was ended by the new owner" ||
			fail "in_copy: the stalled worker's session was never ended"
	fi
	if [ "$point" = idle_in_tx ]; then
		# Paused between its statements and its rows, its session is idle in a transaction: the
		# server ends it (idle_in_transaction_session_timeout, 5 s) and the locks go with it;
		# on resuming the worker finds its COMMIT's outcome unknown and the offset moved.
		grep -q 'commit outcome unknown, stored offset [0-9]*: fenced' "$IT_DIR/p_$point.log" &&
			say "ok: the idle stalled session was ended; the resumed worker saw it fenced" ||
			fail "idle_in_tx: no unknown-then-fenced outcome in the paused worker's log"
	fi
	assert_eq "500|4500" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = '$sku'")" "$sku held|sold_out"
	sql "SELECT intent_id FROM decisions WHERE sku = '$sku'" | sort >"$IT_DIR/decided"
	assert_eq 0 "$(sort -u "$IT_DIR/ids-$point" | comm -3 - "$IT_DIR/decided" | wc -l)" "$sku ids sent vs decided"
done

# 2. Scale out and in while 6 SKUs sell at a steady rate.
for i in 1 2 3 4 5 6; do fs sale open "S-$i" --stock $((i * 40)) >/dev/null; done
start_worker s1
wait_until 30 "s1 to own partitions" "grep -q 'assigned' '$IT_DIR/s1.log'"
loads=()
for i in 1 2 3 4 5 6; do
	fs load "S-$i" --buyers 3000 --rate 500 --seed "8$i" >/dev/null &
	loads+=($!)
done
wait_until 30 "the sale to start" "[ \$(sql \"SELECT count(*) FROM decisions WHERE sku LIKE 'S-%'\") -gt 500 ]"
start_worker s2
wait_until 30 "s2 to own partitions" "grep -q 'assigned' '$IT_DIR/s2.log'"
start_worker s3
wait_until 30 "s3 to own partitions" "grep -q 'assigned' '$IT_DIR/s3.log'"
stop_worker s1
say "s1 left"
wait_until 30 "a rebalance after s1 left" "[ \$(grep -c 'assigned' '$IT_DIR/s2.log') -ge 2 ]"
stop_worker s2
say "s2 left"
for p in "${loads[@]}"; do wait "$p" || die "load failed"; done
fs wait --quiet --timeout 120 || die "records not decided after scaling"
for i in 1 2 3 4 5 6; do
	assert_eq "$((i * 40))|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'S-$i'")" "S-$i held|available"
done
assert_eq 18000 "$(sql "SELECT count(*) FROM decisions WHERE sku LIKE 'S-%'")" "one decision per intent"
stop_worker s3
audit_ok
it_done
