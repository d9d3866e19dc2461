#!/usr/bin/env bash
# Two batch transactions in flight (commit.overlap = 2, the default). A backlog is decided in
# batches stacked on the one committing (the exit line counts them), every record once and
# the stock exact. Then a retry storm reaches a restarted worker, whose memory of decided ids
# is empty: every batch of repeats is taken for new and its decisions COPY fails on the
# stored ids, while the batch after it, decided on top of it, is already in flight. That one
# must not commit, and is decided again once the first is redone (stacked_redone): every
# repeat answered with its first decision, nothing decided twice.
# The first worker also writes trace.batches (issue 32): a line per batch, every record in one,
# each batch's moments in order, and bench/batch_account.py's account of them.
. "$(dirname "$0")/lib.sh"
it_setup 1
echo "batch.max = 100" >>"$IT_DIR/flashsale.conf"
trace="$IT_DIR/trace.txt"
stat_of() { grep ' exit: ' "$IT_DIR/$1.log" | tail -n 1 | grep -o " $2=[0-9]*" | cut -d= -f2; }
stock=500
buyers=3000

fs sale open T2 --stock "$stock" >/dev/null
fs load T2 --buyers "$buyers" --seed 22 --ids "$IT_DIR/ids" >/dev/null
cp "$IT_DIR/flashsale.conf" "$IT_DIR/flashsale.conf.plain"
echo "trace.batches = $trace" >>"$IT_DIR/flashsale.conf"
start_worker w1
fs wait --timeout 120 --quiet || die "the backlog was not decided in time"
# The last batch's line comes once its answers are delivered.
wait_until 30 "every decided record traced" "[ \"\$(awk '{ split(\$3, a, \"=\"); n += a[2] } END { print n + 0 }' '$trace')\" = \"\$(decided)\" ]"
stop_worker w1
cp "$IT_DIR/flashsale.conf.plain" "$IT_DIR/flashsale.conf"
assert_eq "$(stat_of w1 batches)" "$(wc -l <"$trace")" "traced batches (a line each)"
# Each line: read <= decide <= handed <= start <= prepared <= phase <= committed <= finished
# <= produced <= delivered, the answers stamped by the broker no earlier than the first record.
disorder=$(python3 - "$trace" <<'PY'
import sys
order = ("read_first", "decide", "handed", "start", "prepared", "phase", "committed",
         "finished", "produced", "delivered")
bad = 0
for line in open(sys.argv[1]):
    t = {k: int(v) for k, v in (f.split("=") for f in line.split())}
    marks = [t[k] for k in order]
    if t["inline"] or any(m <= 0 for m in marks) or marks != sorted(marks) \
            or t["appended_ms"] < t["append_first_ms"] or t["read_last"] < t["read_first"] \
            or not 0 < t["poll_start"] <= t["read_first"]:
        bad += 1
print(bad)
PY
)
assert_eq 0 "$disorder" "trace lines out of order or incomplete"
[ "$(grep -c ' after=1 ' "$trace")" -ge 1 ] || fail "no traced batch was stacked on one in flight"
python3 "$IT_ROOT/bench/batch_account.py" "$trace" >"$IT_DIR/account" || fail "batch_account.py failed on the trace"
grep -q "^$(stat_of w1 batches) batches, $(decided) records" "$IT_DIR/account" || fail "the account's counts: $(head -n 1 "$IT_DIR/account")"
say "backlog: $(stat_of w1 batches) batches, $(stat_of w1 stacked) stacked on one in flight"
[ "$(stat_of w1 stacked)" -ge 1 ] || fail "no batch was decided while another was in flight"
# Nothing failed here: every stacked compare-and-set must match its predecessor's commit (the
# offset and the token it left in the partition row), none decided again.
assert_eq "0|0" "$(stat_of w1 stacked_redone)|$(stat_of w1 fenced)" "stacked_redone|fenced (one worker, no fault)"
assert_eq "$stock|$((buyers - stock))" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = 'T2'")" "held|sold_out"
assert_eq "0|$stock" "$(sql "SELECT available, held FROM skus WHERE sku = 'T2'")" "available|held"
sql "SELECT intent_id FROM decisions WHERE sku = 'T2'" | sort >"$IT_DIR/decided"
assert_eq 0 "$(sort -u "$IT_DIR/ids" | comm -3 - "$IT_DIR/decided" | wc -l)" "ids sent vs decided"

# The retry storm: the same buy records again, verbatim (offsets 1.. are the buys).
brokers="$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)"
kcat -b "$brokers" -C -q -e -t "it.$IT_ID.intents" -o 1 -c "$buyers" -f '%s\n' >"$IT_DIR/buys"
assert_eq "$buyers" "$(grep -c '"type":"buy"' "$IT_DIR/buys")" "buy records read back"
kcat -b "$brokers" -P -t "it.$IT_ID.intents" -p 0 -k T2 <"$IT_DIR/buys"
start_worker w2
fs wait --timeout 120 --quiet || die "the repeats were not decided in time"
stop_worker w2
say "repeats: $(stat_of w2 batches) batches, redo=$(stat_of w2 redo), stacked=$(stat_of w2 stacked), stacked_redone=$(stat_of w2 stacked_redone)"
[ "$(stat_of w2 redo)" -ge 1 ] || fail "no batch of repeats was redone (were the ids remembered?)"
[ "$(stat_of w2 stacked_redone)" -ge 1 ] || fail "no batch stacked on a failed one was decided again"
assert_eq "$buyers" "$(sql "SELECT sum(n_repeats) FROM partitions")" "repeats counted"
assert_eq "$stock|$((buyers - stock))" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = 'T2'")" "held|sold_out after the storm"
assert_eq "0|$stock|$stock" "$(sql "SELECT available, held, (SELECT count(*) FROM reservations) FROM skus WHERE sku = 'T2'")" "available|held|reservations after the storm"

# Every intent has two replies (the first, and the repeat's duplicate:true), the same but for
# that flag.
wait_until 60 "every repeat answered" "[ \$(results_dump | grep -c '\"duplicate\":true') -ge $buyers ]"
results_dump | grep '"type":"buy"' >"$IT_DIR/results"
assert_eq "$buyers" "$(grep -c '"duplicate":true' "$IT_DIR/results")" "duplicate replies"
sed 's/,"duplicate":true//' "$IT_DIR/results" | sort -u >"$IT_DIR/unique"
assert_eq "$buyers" "$(wc -l <"$IT_DIR/unique")" "distinct replies after removing the flag"
audit_ok
it_done
