#!/usr/bin/env bash
# kill -9 at every named point inside the batch (FLASHSALE_CRASH=point:n), then a restart:
# every record decided exactly once, no oversell, every intent answered; plus a connection
# cut with COMMIT in flight (the process lives, the outcome is resolved by reading the stored
# offset back) and a crash inside the revoke callback. Each case checks that its fault path
# really ran (the crash line, or the counter).
. "$(dirname "$0")/lib.sh"
it_setup 1
# Small batches, so that the n-th batch comes while records are still in flight.
echo "batch.max = 100" >>"$IT_DIR/flashsale.conf"
echo "stats.interval.ms = 300" >>"$IT_DIR/flashsale.conf"
stock=300
buyers=3000

check_sku() { # check_sku SKU IDS_FILE
	assert_eq "$stock|$((buyers - stock))" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = '$1'")" "$1 held|sold_out"
	assert_eq "0|$stock" "$(sql "SELECT available, held FROM skus WHERE sku = '$1'")" "$1 available|held"
	sql "SELECT intent_id FROM decisions WHERE sku = '$1'" | sort >"$IT_DIR/decided"
	assert_eq 0 "$(sort -u "$2" | comm -3 - "$IT_DIR/decided" | wc -l)" "$1 ids sent vs decided"
	results_keys | sort -u >"$IT_DIR/answered"
	assert_eq 0 "$(sort -u "$2" | comm -23 - "$IT_DIR/answered" | wc -l)" "$1 intents never answered"
}

n=0
for point in after_poll after_lookup after_cas_sent idle_in_tx in_copy before_commit commit_sent after_commit after_publish; do
	n=$((n + 1))
	sku="CP-$n"
	fs sale open "$sku" --stock "$stock" >/dev/null
	fs load "$sku" --buyers "$buyers" --seed "7$n" --ids "$IT_DIR/ids-$n" >/dev/null
	start_worker "crash_$n" FLASHSALE_CRASH="$point:3"
	pid=$(worker_pid "crash_$n")
	wait_until 60 "the worker to die at $point" "! alive $pid"
	rc=0
	wait "$pid" || rc=$?
	assert_eq 137 "$rc" "exit status at $point (SIGKILL)"
	grep -q "crash point $point reached" "$IT_DIR/crash_$n.log" || fail "$point: the crash point never ran"
	start_worker "run_$n"
	fs wait --quiet --timeout 120 || die "$point: records not decided after the restart"
	wait_until 60 "every $sku intent answered" "[ \$(results_keys | sort -u | comm -12 - <(sort -u '$IT_DIR/ids-$n') | wc -l) -ge $buyers ]"
	stop_worker "run_$n"
	check_sku "$sku" "$IT_DIR/ids-$n"
done

# commit_cut: the connection dies after COMMIT is sent; the worker lives, reads the stored
# offset back, and goes on without deciding anything twice.
n=$((n + 1))
sku="CP-$n"
fs sale open "$sku" --stock "$stock" >/dev/null
fs load "$sku" --buyers "$buyers" --seed "7$n" --ids "$IT_DIR/ids-$n" >/dev/null
start_worker "cut" FLASHSALE_CRASH="commit_cut:3"
fs wait --quiet --timeout 120 || die "commit_cut: records not decided"
wait_until 30 "the stats line" "grep -q 'unknown=1 ' '$IT_DIR/cut.log'"
grep -q 'commit outcome unknown, stored offset [0-9]*: \(committed\|not committed\)' "$IT_DIR/cut.log" &&
	say "ok: commit_cut resolved: $(grep -o 'commit outcome unknown.*' "$IT_DIR/cut.log" | head -n 1)" ||
	fail "commit_cut: no resolution logged"
wait_until 60 "every $sku intent answered" "[ \$(results_keys | sort -u | comm -12 - <(sort -u '$IT_DIR/ids-$n') | wc -l) -ge $buyers ]"
stop_worker cut
check_sku "$sku" "$IT_DIR/ids-$n"

# in_revoke: a second worker joins, the group rebalances, the first dies in its revoke
# callback; the second ends up with the partition and decides the rest.
n=$((n + 1))
sku="CP-$n"
fs sale open "$sku" --stock "$stock" >/dev/null
start_worker "revoke_a" FLASHSALE_CRASH="in_revoke:1"
wait_until 30 "worker a to own the partition" "grep -q 'partition 0 assigned' '$IT_DIR/revoke_a.log'"
fs load "$sku" --buyers "$buyers" --rate 3000 --seed "7$n" --ids "$IT_DIR/ids-$n" >/dev/null &
load=$!
wait_until 30 "some records decided" "[ \$(decided) -gt 0 ]"
start_worker "revoke_b"
pid=$(worker_pid revoke_a)
wait_until 60 "worker a to die in its revoke callback" "! alive $pid"
wait "$pid" 2>/dev/null || true
grep -q 'crash point in_revoke reached' "$IT_DIR/revoke_a.log" || fail "in_revoke: the crash point never ran"
wait "$load" || die "load failed"
fs wait --quiet --timeout 120 || die "in_revoke: records not decided"
wait_until 60 "every $sku intent answered" "[ \$(results_keys | sort -u | comm -12 - <(sort -u '$IT_DIR/ids-$n') | wc -l) -ge $buyers ]"
stop_worker revoke_b
check_sku "$sku" "$IT_DIR/ids-$n"
audit_ok
it_done
