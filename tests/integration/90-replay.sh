#!/usr/bin/env bash
# Replay and rebuild (DESIGN.md INV-4): the intents topic rebuilds Postgres exactly.
#   1. `replay --dry-run` on the live database finds no difference, and finds one when a
#      decision is tampered with (the check can fail).
#   2. A full rebuild into an empty database gives byte-identical tables.
#   3. An older dump restored and resumed converges to the same final state.
#   4. A stored offset below the log's start stops with a clear error, never a silent skip.
. "$(dirname "$0")/lib.sh"
it_setup 2
echo "tick.interval.ms = 200" >>"$IT_DIR/flashsale.conf"
start_worker w1
BROKERS=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)

# A sale with everything in it: repeats, bad records, confirms, cancels, expiries, a restock.
traffic() { # traffic ROUND
	fs sale open "A$1" --stock 300 --per-buyer 2 --hold 1 >/dev/null
	fs sale open "B$1" --stock 50 --hold 600 >/dev/null
	fs load "A$1" --buyers 2000 --dup-ratio 0.1 --seed "9$1" >/dev/null
	fs load "B$1" --buyers 500 --qty 1 --dup-ratio 0.2 --seed "8$1" --ids "$IT_DIR/b-ids-$1" >/dev/null
	printf '{"v":1,"type":"buy","intent_id":' | fs publish --key "A$1" >/dev/null
	fs wait --quiet --timeout 60 || die "round $1 not decided"
	head -n 20 "$IT_DIR/b-ids-$1" | while read -r id; do fs confirm "$id" --sku "B$1" >/dev/null; done
	sed -n '21,30p' "$IT_DIR/b-ids-$1" | while read -r id; do fs cancel "$id" --sku "B$1" >/dev/null; done
	fs sale restock "B$1" --add 5 >/dev/null
	fs load "B$1" --buyers 20 --buyer-prefix "late$1" >/dev/null
	# Let the A holds expire through ticks before the round ends.
	wait_until 30 "round $1 holds to expire" "[ \$(sql \"SELECT count(*) FROM reservations WHERE sku = 'A$1' AND status = 'held'\") -eq 0 ]"
	fs wait --quiet --timeout 60 || die "round $1 not decided"
}

dump_tables() { # dump_tables CONNINFO FILE: every table, ordered, as text
	local t
	: >"$2"
	for t in "decisions ORDER BY part, off" "rejects ORDER BY part, off" "sale_log ORDER BY part, off" \
		"reservations ORDER BY intent_id" "buyers ORDER BY sku, buyer_id" "skus ORDER BY sku" \
		"(SELECT part, next_offset, first_offset, clock_ms, n_records, n_fresh, n_repeats, n_conflicts, n_invalid, n_sale, n_ticks FROM partitions) p ORDER BY part"; do
		echo "== $t" >>"$2"
		psql "$1" -X -q -A -t -c "SELECT * FROM $t" >>"$2"
	done
}
new_db() { # new_db NAME: an empty database with the schema; prints its conninfo
	psql "$IT_ADMIN_PG" -X -q -c "CREATE DATABASE $1" >/dev/null
	local c
	c="$(printf '%s' "$IT_ADMIN_PG" | sed -E 's/dbname=[^ ]+//') dbname=$1"
	for f in "$IT_ROOT"/sql/*.sql; do psql "$c" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
	printf '%s' "$c"
}
conf_for() { # conf_for CONNINFO FILE: the test's configuration pointed at CONNINFO's database
	sed "s|^pg = .*|pg = $IT_APP_BASE ${1##* }|" "$IT_DIR/flashsale.conf" >"$2" # the app role, that database
}

traffic 1
pg_dump "$IT_PG" >"$IT_DIR/round1.sql"
traffic 2
stop_worker w1
audit_ok
[ "$(sql "SELECT count(*) FROM reservations WHERE status = 'expired'")" -gt 0 ] || fail "no expiry happened"
[ "$(sql "SELECT count(*) FROM decisions WHERE outcome IN ('confirmed', 'cancelled')")" -gt 0 ] || fail "no confirm or cancel"

# 1. The dry run agrees with what the worker recorded, and notices a tampered row.
fs replay --dry-run >"$IT_DIR/dry.txt" 2>&1 && grep -q ' 0 differences' "$IT_DIR/dry.txt" &&
	say "ok: dry run: $(tail -n 1 "$IT_DIR/dry.txt")" || { cat "$IT_DIR/dry.txt"; fail "dry run found differences"; }
sql "UPDATE decisions SET outcome = 'sold_out' WHERE ctid = (SELECT ctid FROM decisions WHERE outcome = 'held' LIMIT 1)" >/dev/null
if fs replay --dry-run >"$IT_DIR/dry2.txt" 2>&1; then
	fail "dry run missed a tampered decision"
else
	grep -q "outcome: Postgres says 'sold_out', the replay says 'held'" "$IT_DIR/dry2.txt" &&
		say "ok: dry run names the tampered decision" || { cat "$IT_DIR/dry2.txt"; fail "tamper not named"; }
fi
sql "UPDATE decisions SET outcome = 'held' WHERE outcome = 'sold_out' AND intent_id IN (SELECT intent_id FROM reservations)" >/dev/null
dump_tables "$IT_PG" "$IT_DIR/live.txt"

# 2. A full rebuild into an empty database: byte-identical tables.
pg2=$(new_db "${IT_DB}_r")
conf_for "$pg2" "$IT_DIR/rebuild.conf"
"$IT_BUILD/flashsale" -c "$IT_DIR/rebuild.conf" replay >"$IT_DIR/rebuild.log" 2>&1 || { tail "$IT_DIR/rebuild.log"; die "rebuild failed"; }
grep -q 'replay \[#*\] [0-9]*/[0-9]* records, [0-9]* records/s' "$IT_DIR/rebuild.log" && say "ok: progress bar: $(grep -o 'replay \[.*' "$IT_DIR/rebuild.log" | tail -n 1)" || fail "no progress bar"
dump_tables "$pg2" "$IT_DIR/rebuilt.txt"
if cmp -s "$IT_DIR/live.txt" "$IT_DIR/rebuilt.txt"; then
	say "ok: rebuilt tables identical ($(wc -l <"$IT_DIR/live.txt") lines)"
else
	diff "$IT_DIR/live.txt" "$IT_DIR/rebuilt.txt" | head -n 20
	fail "rebuilt tables differ"
fi

# 3. An older dump (after round 1), restored and resumed, converges to the same state.
pg3=$(new_db "${IT_DB}_d")
psql "$pg3" -X -q -c "DROP SCHEMA public CASCADE; CREATE SCHEMA public" >/dev/null
psql "$pg3" -X -q -v ON_ERROR_STOP=1 -f "$IT_DIR/round1.sql" >/dev/null
conf_for "$pg3" "$IT_DIR/resume.conf"
"$IT_BUILD/flashsale" -c "$IT_DIR/resume.conf" replay >"$IT_DIR/resume.log" 2>&1 || { tail "$IT_DIR/resume.log"; die "resume failed"; }
grep -q 'replay: partition 0 from [1-9]' "$IT_DIR/resume.log" && say "ok: resumed from the dump's offsets" || fail "did not resume from the dump"
dump_tables "$pg3" "$IT_DIR/resumed.txt"
cmp -s "$IT_DIR/live.txt" "$IT_DIR/resumed.txt" && say "ok: resumed tables identical" || {
	diff "$IT_DIR/live.txt" "$IT_DIR/resumed.txt" | head -n 20
	fail "resumed tables differ"
}

# 4. The log loses its first records (delete-records); a database behind that point must
#    stop with a clear error: the rebuild, and a worker.
cat >"$IT_DIR/delete.json" <<JSON
{"partitions":[{"topic":"it.$IT_ID.intents","partition":0,"offset":5}],"version":1}
JSON
java -cp "$IT_ROOT/.local/cache/kafka-3.9.1/libs/*" -Dlog4j.configuration=file:/dev/null \
	org.apache.kafka.tools.DeleteRecordsCommand --bootstrap-server "$BROKERS" \
	--offset-json-file "$IT_DIR/delete.json" >"$IT_DIR/delete.log" 2>&1 || die "delete-records failed"
pg4=$(new_db "${IT_DB}_e")
conf_for "$pg4" "$IT_DIR/empty.conf"
rc=0
"$IT_BUILD/flashsale" -c "$IT_DIR/empty.conf" replay >"$IT_DIR/gone.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q 'below the log.s start' "$IT_DIR/gone.log" &&
	say "ok: rebuild refuses a log that lost its start (exit $rc): $(grep -o 'partition 0: the database needs.*' "$IT_DIR/gone.log" | head -n 1)" ||
	{ cat "$IT_DIR/gone.log"; fail "rebuild over a truncated log did not stop"; }
psql "$pg4" -X -q -c "UPDATE partitions SET next_offset = 2, first_offset = 0 WHERE part = 0" >/dev/null 2>&1 ||
	psql "$pg4" -X -q -c "INSERT INTO partitions (grp, topic, part, next_offset, first_offset) VALUES ('it-$IT_ID', 'it.$IT_ID.intents', 0, 2, 0)" >/dev/null
rc=0
timeout 60 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/empty.conf" >"$IT_DIR/gone-worker.log" 2>&1 || rc=$?
[ "$rc" -eq 3 ] && grep -q 'stored offset is outside the log' "$IT_DIR/gone-worker.log" &&
	say "ok: the worker stops with exit 3 on a stored offset below the log start" ||
	{ tail -n 5 "$IT_DIR/gone-worker.log"; fail "worker over a truncated log: exit $rc"; }
for d in "${IT_DB}_r" "${IT_DB}_d" "${IT_DB}_e"; do
	[ "$IT_FAILED" -eq 0 ] && psql "$IT_ADMIN_PG" -X -q -c "DROP DATABASE $d" >/dev/null
done
it_done
