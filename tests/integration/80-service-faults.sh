#!/usr/bin/env bash
# Real faults under load, on the real services: the broker killed (-9) and restarted,
# Postgres restarted (fast, then immediate), the worker's Postgres sessions terminated. The
# worker never exits on these transient faults; afterwards every record is decided exactly
# once and the checker passes. Each fault shows that its recovery path ran (a counter moved).
. "$(dirname "$0")/lib.sh"
ROOT=$IT_ROOT
it_setup 2
echo "stats.interval.ms = 500" >>"$IT_DIR/flashsale.conf"
start_worker w1
pid=$(worker_pid w1)
stock=2000
buyers=20000

# last_stat NAME: the latest value of a counter in the worker's stats lines.
last_stat() { grep -o " $1=[0-9]*" "$IT_DIR/w1.log" | tail -n 1 | cut -d= -f2; }
wait_for_stats_after() { # a fresh stats line after a fault
	local n
	n=$(grep -c 'stats:' "$IT_DIR/w1.log")
	wait_until 30 "a new stats line" "[ \$(grep -c 'stats:' '$IT_DIR/w1.log') -gt $n ]"
}
phase() { # phase SKU: a sale running at a steady rate while the fault strikes
	fs sale open "$1" --stock "$stock" >/dev/null
	fs load "$1" --buyers "$buyers" --rate 4000 --seed "${#1}$RANDOM" --ids "$IT_DIR/ids-$1" \
		>"$IT_DIR/load-$1.out" 2>&1 &
	load=$!
	wait_until 30 "the $1 sale to start" "[ \$(sql \"SELECT count(*) FROM decisions WHERE sku = '$1'\") -gt 1000 ]"
}
finish_phase() { # finish_phase SKU
	wait "$load" || die "$1: load failed: $(cat "$IT_DIR/load-$1.out")"
	fs wait --quiet --timeout 180 || die "$1: records not decided after the fault"
	alive "$pid" && say "ok: $1: the worker is still running" || die "$1: the worker exited"
	assert_eq "$stock|$((buyers - stock))" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = '$1'")" "$1 held|sold_out"
	sql "SELECT intent_id FROM decisions WHERE sku = '$1'" | sort >"$IT_DIR/decided"
	assert_eq 0 "$(sort -u "$IT_DIR/ids-$1" | comm -3 - "$IT_DIR/decided" | wc -l)" "$1 ids sent vs decided"
}

# 1. The broker dies (kill -9) mid-sale and comes back.
phase KAFKA
"$ROOT/scripts/services" kill-kafka >/dev/null
say "broker killed"
"$ROOT/scripts/services" up >/dev/null
say "broker back"
finish_phase KAFKA
wait_for_stats_after
grep -q 'kafka: .*\(TRANSPORT\|ALL_BROKERS_DOWN\)' "$IT_DIR/w1.log" && say "ok: the worker saw the broker go" || fail "no broker error logged"

# 2. Postgres restarts, fast then immediate, mid-sale.
for mode in fast immediate; do
	before=$(last_stat retries)
	phase "PG-$mode"
	"$ROOT/scripts/services" restart-pg "$mode" >/dev/null
	say "postgres restarted ($mode)"
	finish_phase "PG-$mode"
	wait_for_stats_after
	[ "$(last_stat retries)" -gt "$before" ] && say "ok: retries went from $before to $(last_stat retries)" || fail "$mode: no retry counted"
done

# 3. The worker's Postgres sessions are terminated, three times, mid-sale.
before=$(last_stat retries)
phase TERM
for _ in 1 2 3; do
	n=$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'flashsale-worker' AND datname = current_database()")
	say "terminated $n worker session(s)"
	sleep 0.5
done
finish_phase TERM
wait_for_stats_after
[ "$(last_stat retries)" -gt "$before" ] && say "ok: retries went from $before to $(last_stat retries)" || fail "terminate: no retry counted"

audit_ok
stop_worker w1
it_done
