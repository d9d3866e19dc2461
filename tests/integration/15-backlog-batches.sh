#!/usr/bin/env bash
# Batch sizes follow the backlog (batch.max.behind, docs/PERFORMANCE.md item 34): a crowd
# published before the worker starts is decided in batches past batch.max, up to
# batch.max.behind; a stream the worker keeps up with stays within batch.max. Either way the
# stock is sold exactly and the audit passes. A backlog only a little larger than
# batch.max.behind still goes past batch.max: the batch's own records count. A batch is one transaction: the decision rows
# of one batch share their xmin.
. "$(dirname "$0")/lib.sh"
it_setup 1
echo "batch.max = 200" >>"$IT_DIR/flashsale.conf"
echo "batch.max.behind = 2000" >>"$IT_DIR/flashsale.conf"

stat_of() { grep -o " $2=[0-9]*" "$IT_DIR/$1.log" | tail -n 1 | cut -d= -f2; }
# the largest batch (decision rows of one transaction) among the buys of a SKU
largest_batch() {
	sql "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM decisions
	     WHERE sku = '$1' GROUP BY xmin) t"
}

# 1. A backlog: 20,000 intents wait before any worker reads them.
fs sale open BACK --stock 300 >/dev/null
fs load BACK --buyers 20000 --seed 15 | grep -q '20000 records' || die "load did not publish 20000 records"
start_worker w1
fs wait --timeout 120 --quiet || die "the backlog was not decided in time"
stop_worker w1
big=$(largest_batch BACK)
say "backlog: $(stat_of w1 batches) batches, $(stat_of w1 batches_behind) past batch.max, the largest $big decisions"
[ "$big" -gt 200 ] || fail "no batch of the backlog went past batch.max (200): the largest has $big decisions"
[ "$big" -le 2000 ] || fail "a batch went past batch.max.behind (2000): $big decisions"
[ "$(stat_of w1 batches_behind)" -ge 1 ] || fail "the exit line counts no batch past batch.max"
assert_eq "300|0" "$(sql "SELECT sold + held, available FROM skus WHERE sku = 'BACK'")" "sold+held|available after the backlog"
assert_eq 300 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'BACK' AND outcome = 'held'")" "held decisions"

# 2. A stream the worker keeps up with: 2,000 intents at 1,000/s to a running worker.
start_worker w2
fs sale open PACED --stock 100 >/dev/null
fs load PACED --buyers 2000 --rate 1000 --seed 16 | grep -q '2000 records' || die "paced load did not publish 2000 records"
fs wait --timeout 60 --quiet || die "the paced stream was not decided in time"
stop_worker w2
small=$(largest_batch PACED)
say "paced: $(stat_of w2 batches) batches, the largest $small decisions"
[ "$small" -le 200 ] || fail "a batch of a stream the worker kept up with went past batch.max (200): $small decisions"
assert_eq 0 "$(stat_of w2 batches_behind)" "batches past batch.max while keeping up"
assert_eq "100|0" "$(sql "SELECT sold + held, available FROM skus WHERE sku = 'PACED'")" "sold+held|available after the stream"
# 3. A backlog a little past batch.max.behind: 2,100 intents, so that once the first batch has
# its 200 records fewer than 2,000 still wait in the queue. The batch's own records count
# towards batch.max.behind (docs/PERFORMANCE.md item 36): it goes on filling, and the backlog
# is not cut into batch.max pieces.
fs sale open TAIL --stock 50 >/dev/null
fs load TAIL --buyers 2100 --seed 17 | grep -q '2100 records' || die "load did not publish 2100 records"
start_worker w3
fs wait --timeout 60 --quiet || die "the small backlog was not decided in time"
stop_worker w3
tail_big=$(largest_batch TAIL)
say "small backlog: $(stat_of w3 batches) batches, the largest $tail_big decisions"
[ "$tail_big" -gt 200 ] || fail "a backlog of 2,100 went in batches of batch.max (200): the batch's own records did not count towards batch.max.behind"
[ "$tail_big" -le 2000 ] || fail "a batch went past batch.max.behind (2000): $tail_big decisions"
assert_eq "50|0" "$(sql "SELECT sold + held, available FROM skus WHERE sku = 'TAIL'")" "sold+held|available after the small backlog"
audit_ok
it_done
