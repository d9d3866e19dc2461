#!/usr/bin/env bash
# A web tier that publishes in Kafka transactions (issue 28, item 9): each transaction leaves a
# control record (its commit or abort marker) at an offset no consumer is given, and an aborted
# one leaves its records too, which a read_committed consumer skips. Those offsets are gaps in
# what the worker decides: it counts them (partitions.n_gaps), the audit accepts them and the
# replay counts them alike; `flashsale wait` returns once every record a consumer can read is
# decided, though the log ends with a marker; the aborted buys are never decided.
. "$(dirname "$0")/lib.sh"
it_setup 2
fs sale open T1 --stock 30 --per-buyer 1 >/dev/null
brokers=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)
txn() { /usr/bin/python3 "$IT_ROOT/tests/clients/txn_producer.py" "$brokers" "it.$IT_ID.intents" T1 "$@"; }

# With no worker running: its first batch starts after gaps and has gaps inside.
fs buy T1 --buyer plain-1 >/dev/null
txn 3 5 3 >"$IT_DIR/ids1" || die "the transactional producer failed"
echo "metrics.listen = 127.0.0.1:0" >>"$IT_DIR/flashsale.conf"
start_worker w1
W1=http://127.0.0.1:$(metrics_port w1)
fs wait --quiet --timeout 60 || die "flashsale wait: the log ends with a marker, every record decided"
say "ok: wait returned with the log ending in an abort marker"
# Live: transactions while the worker runs, the last one committed (the log ends with its marker).
txn 5 8 2 >"$IT_DIR/ids2" || die "the transactional producer failed"
fs buy T1 --buyer plain-2 >/dev/null
txn 1 4 0 >>"$IT_DIR/ids2" || die "the transactional producer failed"
fs wait --quiet --timeout 60 || die "flashsale wait after the live transactions"
say "ok: wait returned with the log ending in a commit marker"
# The worker's lag gauge (issue 30): a marker at the log's end is no record waiting.
wait_until 20 "the worker's lag to be 0 on every partition" \
	"[ \$(metric_count $W1 'flashsale_partition_lag_records.*') = 2 ] && [ \$(metric_sum $W1 'flashsale_partition_lag_records.*') = 0 ]"
assert_eq "$(sql "SELECT sum(n_records) FROM partitions")" "$(metric_sum "$W1" 'flashsale_partition_records_total.*')" "records decided (Postgres, the metrics)"

committed=$(cat "$IT_DIR"/ids1 "$IT_DIR"/ids2 | grep -c '^committed ')
aborted=$(cat "$IT_DIR"/ids1 "$IT_DIR"/ids2 | grep -c '^aborted ')
say "$committed buys committed, $aborted aborted"
assert_eq "$((committed + 2))" "$(sql "SELECT count(*) FROM decisions WHERE sku = 'T1'")" "decisions of T1 (the committed buys and two plain ones)"
cut -d' ' -f2 <(grep -h '^aborted ' "$IT_DIR"/ids1 "$IT_DIR"/ids2) | sort >"$IT_DIR/aborted"
sql "SELECT intent_id FROM decisions" | sort >"$IT_DIR/decided"
assert_eq 0 "$(comm -12 "$IT_DIR/aborted" "$IT_DIR/decided" | wc -l)" "aborted buys decided"
assert_eq "30|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'T1'")" "T1 held|available"
# Every transaction's marker and every aborted record is a gap, but for the marker the log
# ends with (no record after it has been decided).
markers=$((3 + 5 + 1))
assert_eq "$((markers + aborted - 1))" "$(sql "SELECT sum(n_gaps) FROM partitions")" "offsets counted as gaps"
grep -q 'offset gap' "$IT_DIR/w1.log" && fail "the worker warned of gaps"
audit_ok
stop_worker w1

# A rebuild into an empty database (flashsale replay) ends though the log ends with a marker,
# and counts the same gaps.
pg2="$(printf '%s' "$IT_PG" | sed -E 's/dbname=[^ ]+//') dbname=${IT_DB}_r"
psql "$IT_ADMIN_PG" -X -q -c "CREATE DATABASE ${IT_DB}_r" >/dev/null
for f in "$IT_ROOT"/sql/*.sql; do psql "$pg2" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null 2>&1; done
sed "s|^pg = .*|pg = $IT_APP_BASE dbname=${IT_DB}_r|" "$IT_DIR/flashsale.conf" >"$IT_DIR/rebuild.conf"
timeout 120 "$IT_BUILD/flashsale" -c "$IT_DIR/rebuild.conf" replay >"$IT_DIR/rebuild.log" 2>&1 || { tail "$IT_DIR/rebuild.log"; die "rebuild failed"; }
state="SELECT string_agg(part || ':' || next_offset || ':' || n_records || ':' || n_gaps, ' ' ORDER BY part) || ' ' || (SELECT md5(string_agg(d::text, '|' ORDER BY part, off, kind)) FROM decisions d) FROM partitions"
assert_eq "$(sql "$state")" "$(psql "$pg2" -X -q -t -A -c "$state")" "the rebuilt partitions (next:records:gaps) and decisions"
psql "$IT_ADMIN_PG" -X -q -c "DROP DATABASE ${IT_DB}_r" >/dev/null
it_done
