#!/usr/bin/env bash
# Batch sizes follow the backlog (batch.max.behind): a crowd
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

# A backlog: BUYERS intents for SKU (STOCK units) published while no worker runs, then worker
# NAME decides them. The largest batch must be past batch.max (200; WHY says what it means if
# not) and within batch.max.behind (2000), and the stock sold exactly.
decide_backlog() {
	local sku=$1 stock=$2 buyers=$3 seed=$4 name=$5 why=$6
	fs sale open "$sku" --stock "$stock" >/dev/null
	fs load "$sku" --buyers "$buyers" --seed "$seed" | grep -q "$buyers records" ||
		die "load did not publish $buyers records"
	start_worker "$name"
	fs wait --timeout 120 --quiet || die "the backlog of $buyers was not decided in time"
	stop_worker "$name"
	local big
	big=$(largest_batch "$sku")
	say "backlog of $buyers: $(stat_of "$name" batches) batches, $(stat_of "$name" batches_behind) past batch.max, the largest $big decisions"
	[ "$big" -gt 200 ] || fail "backlog of $buyers: $why: the largest batch has $big decisions"
	[ "$big" -le 2000 ] || fail "a batch went past batch.max.behind (2000): $big decisions"
	[ "$(stat_of "$name" batches_behind)" -ge 1 ] || fail "the exit line counts no batch past batch.max"
	assert_eq "$stock|0" "$(sql "SELECT sold + held, available FROM skus WHERE sku = '$sku'")" \
		"sold+held|available after the backlog of $buyers"
}

# 1. A backlog: 20,000 intents wait before any worker reads them.
decide_backlog BACK 300 20000 15 w1 "no batch went past batch.max (200)"
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
# towards batch.max.behind: it goes on filling, and the backlog
# is not cut into batch.max pieces.
decide_backlog TAIL 50 2100 17 w3 \
	"it went in batches of batch.max (200): the batch's own records did not count towards batch.max.behind"
audit_ok
it_done
