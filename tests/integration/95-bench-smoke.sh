#!/usr/bin/env bash
# The benchmark end to end, small (scripts/bench --quick, issue 5): every peer and every
# flashsale run, S5's floor included, runs to the end and passes its own check, and the report
# and chart are written where --out says, leaving the committed docs/BENCHMARKS.md alone.
# Speed is reported by the benchmark, not judged here (TESTING.md: targets live in benchmarks,
# not in timed tests); what is judged is that every figure it prints comes from a correct run.
#   1. scripts/bench --quick --out DIR exits 0.
#   2. S1 and S2 have a row for every approach, flashsale's included. Every approach but
#      read-then-write (whose overselling is what it shows) sells no more than its stock, and
#      sells no order key twice. The conditional statements and flashsale sell exactly their
#      stock.
#   3. S3 .. S7 and S5's two floors pass their checks (every intent answered), the durable one
#      counted its flushes, S5's disk probe flushed and gave its percentiles in order, S6's
#      rebuilt decisions are identical to the fresh ones, and S7 forwarded every buy of its
#      misrouted run and measured its routed one. S12 (carts): both sizes have a row for
#      both lock-based peers; cart-sorted and flashsale on 1 and 4 partitions pass their
#      checks with no oversell, 3 units per held cart within the supply, cart-sorted without
#      a deadlock, and every one of the seed table's 120 carts held. S13 (the latency curve)
#      found a capacity, and each quick point has the worker and both floors, checked, at
#      that fraction of it, their percentiles in order, and the account of the worker's
#      batches (trace.batches): every timed record in a traced batch, the steps' p50s within
#      the p50 batch's total, and the server's WAL flushes counted. S14 (the waiting room):
#      every part passes its check, every joined buyer drawn and admitted, none faster than
#      the rate, each with its admission result.
#   4. DIR has the report, with every section, the two charts and the rows (the run's own,
#      .local/bench/rows.jsonl), and `scripts/bench report --check` finds that the rows give
#      that report again; docs/ is untouched.
# It runs the benchmark as a user does (build/, not the build under test, and .local/bench/ for
# its raw rows and logs, which a real benchmark run also rewrites). The rows are JSON lines
# (bench/rows.py), read here with python3.
. "$(dirname "$0")/lib.sh"
out=$(mktemp -d "${TMPDIR:-/tmp}/flashsale-bench.XXXXXX")
rows=$IT_ROOT/.local/bench/rows.jsonl
docs=(docs/BENCHMARKS.md docs/benchmarks.png docs/benchmarks.jsonl docs/latency-curve.png)
docs_md5() { (cd "$IT_ROOT" && for f in "${docs[@]}"; do [ ! -f "$f" ] || cat "$f"; done) | md5sum; }
docs_before=$(docs_md5)

# 1. (rows.jsonl goes first: a bench that stopped before its runs must not leave an older
# run's rows for the checks below to find)
rm -f "$rows"
rc=0
(cd "$IT_ROOT" && scripts/bench --quick --out "$out") >"$out/bench.log" 2>&1 </dev/null || rc=$?
grep -E '^\[ *[0-9]+/[0-9]+\]|^bench:' "$out/bench.log" || true
assert_eq 0 "$rc" "scripts/bench --quick exit status"

row() { # row SCENARIO APPROACH: that run's row of rows.jsonl, one JSON object (empty when none)
	python3 -c '
import json, sys
found = ""
try:
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            if r.get("scenario") == sys.argv[2] and r.get("approach") == sys.argv[3]:
                found = line.strip()
except (OSError, ValueError):
    pass
print(found)' "$rows" "$1" "$2"
}
val() { # val ROW KEY: the row's KEY (empty when the row or the key is missing)
	python3 -c 'import json, sys; print(json.loads(sys.argv[1] or "{}").get(sys.argv[2], ""))' "$1" "$2"
}

# 2.
approaches=(read-then-write conditional-update idempotent-reserve for-update optimistic flashsale)
# The Redis gate runs unless the benchmark said why not (no hiredis, no redis-server, its port
# taken): scripts/setup installs both, so on a clean machine it runs.
if skip=$(grep -m1 '^bench: redis-gate: .*skipped' "$out/bench.log"); then
	say "redis-gate not expected: ${skip#bench: }"
else
	approaches+=(redis-gate)
fi
for sc in S1 S2; do
	for ap in "${approaches[@]}"; do
		line=$(row "$sc" "$ap")
		if [ -z "$line" ]; then
			fail "$sc $ap: no row"
			continue
		fi
		sold=$(val "$line" sold) stock=$(val "$line" stock) dup=$(val "$line" dup_orders)
		[ "$ap" = read-then-write ] && { say "ok: $sc $ap ran (oversell $(val "$line" oversell))"; continue; }
		[ "$sold" -le "$stock" ] 2>/dev/null || fail "$sc $ap: sold $sold of $stock"
		[ "$dup" = 0 ] || [ "$dup" = - ] || fail "$sc $ap: $dup order keys sold twice"
		case "$ap" in
		optimistic) say "ok: $sc $ap sold $sold of $stock (check $(val "$line" check))" ;;
		*) assert_eq "ok $stock" "$(val "$line" check) $sold" "$sc $ap check and units sold" ;;
		esac
	done
done

# 3.
for sc in S3 S4 S5 S6 S7; do
	assert_eq ok "$(val "$(row "$sc" flashsale)" check)" "$sc check"
done
for f in S5-floor S5-floor-durable; do
	floor=$(row "$f" echo)
	assert_eq ok "$(val "$floor" check)" "$f check"
	[ "$(val "$floor" requests)" -gt 0 ] 2>/dev/null || fail "$f timed no record"
done
[ "$(val "$(row S5-floor-durable echo)" flushes)" -gt 0 ] 2>/dev/null ||
	fail "S5-floor-durable: no flush counted"
disk=$(row S5-disk probe)
assert_eq ok "$(val "$disk" check)" "S5-disk check"
[ "$(val "$disk" requests)" -gt 0 ] 2>/dev/null || fail "S5-disk: no flush counted"
awk -v a="$(val "$disk" p50_ms)" -v b="$(val "$disk" p99_ms)" -v c="$(val "$disk" p999_ms)" \
	-v d="$(val "$disk" max_ms)" 'BEGIN { exit !(a >= 0 && a <= b && b <= c && c <= d) }' ||
	fail "S5-disk: percentiles out of order: $disk"
assert_eq yes "$(val "$(row S6 flashsale)" same_decisions)" "S6 rebuilt decisions identical"
s7=$(row S7 flashsale)
assert_eq "$(val "$s7" requests)" "$(val "$s7" forwarded)" "S7 buys forwarded (all of them)"
[ "$(val "$s7" routed_per_s)" -gt 0 ] 2>/dev/null || fail "S7: no rate for the routed run: $s7"
# S12, carts: the peers ran (cart order may stop at the time limit); the sorted one and both
# flashsale runs sold within the supply, 3 units per held cart, without a deadlock; the seed's
# carts all fit in its stock, so every one of them is held.
for sc in S12-seed S12; do
	[ -n "$(row "$sc" cart-for-update)" ] || fail "$sc cart-for-update: no row"
	for ap in cart-sorted flashsale-1p flashsale-4p; do
		line=$(row "$sc" "$ap")
		[ -n "$line" ] || { fail "$sc $ap: no row"; continue; }
		won=$(val "$line" won) sold=$(val "$line" sold)
		supply=$(awk -v a="$(val "$line" stock)" -v b="$(val "$line" skus)" 'BEGIN { print a * b }')
		assert_eq "ok 0" "$(val "$line" check) $(val "$line" oversell)" "$sc $ap check, oversell"
		[ "$won" -gt 0 ] 2>/dev/null && [ "$sold" = $((3 * won)) ] && [ "$sold" -le "$supply" ] ||
			fail "$sc $ap: $won carts held, $sold units of $supply: $line"
		[ "$ap" != cart-sorted ] || assert_eq 0 "$(val "$line" deadlocks)" "$sc cart-sorted deadlocks"
		[ "$sc" != S12-seed ] || assert_eq 120 "$won" "$sc $ap carts held"
	done
done

# S13, the latency curve: a capacity was found; each quick point (10, 50, 90%) has the worker's
# row and both floors', checked, at the same offered rate, their percentiles in order.
cap=$(val "$(row S13-capacity flashsale)" capacity_per_s)
[ "$cap" -gt 0 ] 2>/dev/null || fail "S13: no capacity: $(row S13-capacity flashsale)"
[ -n "$(row S13-probe flashsale)" ] || fail "S13: no probe row"
for pct in 10 50 90; do
	rate=""
	for sc in S13 S13-floor S13-floor-durable; do
		line=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("scenario") == sys.argv[2] and r.get("fraction") == sys.argv[3]:
        print(l.strip())' "$rows" "$sc" "$pct")
		assert_eq ok "$(val "$line" check)" "$sc at $pct% check"
		[ -z "$rate" ] && rate=$(val "$line" offered_per_s)
		assert_eq "$rate" "$(val "$line" offered_per_s)" "$sc at $pct%: the worker's offered rate"
		awk -v a="$(val "$line" p50_ms)" -v b="$(val "$line" p99_ms)" -v c="$(val "$line" p999_ms)" \
			'BEGIN { exit !(a >= 0 && a <= b && b <= c) }' || fail "$sc at $pct%: percentiles: $line"
	done
	# (bench/curve_runs.py: max(capacity * pct // 100, 100))
	want=$(awk -v c="$cap" -v p="$pct" 'BEGIN { w = int(c * p / 100); print (w < 100 ? 100 : w) }')
	[ "$rate" = "$want" ] || fail "S13 at $pct%: offered $rate, not $pct% of $cap"
	# The account: the batches first appended from the timed start on hold the timed records
	# (the worker's row's requests) but those of the batch that straddles it (at most
	# batch.max.behind, 10,000); no step's p50 exceeds the p50 batch's total; WAL flushes
	# were counted.
	acc=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("scenario") == "S13-account" and r.get("fraction") == sys.argv[2]:
        print(l.strip())' "$rows" "$pct")
	assert_eq ok "$(val "$acc" check)" "S13-account at $pct% check"
	timed=$(val "$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("scenario") == "S13" and r.get("fraction") == sys.argv[2]:
        print(l.strip())' "$rows" "$pct")" requests)
	awk -v t="$timed" -v r="$(val "$acc" records)" 'BEGIN { exit !(t > 0 && r <= t && r >= t - 10000) }' ||
		fail "S13-account at $pct%: $(val "$acc" records) records traced for $timed timed"
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
steps = ("fetch", "queued", "gather", "decide", "wake", "render", "send1", "send2", "finish",
         "produce", "append")
total = float(r["total_p50"])
sys.exit(0 if total > 0 and all(0 <= float(r[s + "_p50"]) <= total for s in steps)
         and int(r["wal_syncs"]) > 0 else 1)' "$acc" || fail "S13-account at $pct%: $acc"
done

# S14, the waiting room: every part ran and passed its check; every buyer joined before the
# opening, was in the draw and was admitted, never more than the rate in a second of the log
# clock, the first at the opening, each with its result on the broker; the token runs sold
# exactly the stock with no token refused (their checks say so).
for r in "S14-micro room-micro" "S14-room flashsale-room" "S14-worker flashsale-plain" \
	"S14-worker flashsale-tokens" "S14-gateway gateway-plain" "S14-gateway gateway-tokens"; do
	line=$(row ${r% *} ${r#* })
	assert_eq ok "$(val "$line" check)" "$r check"
done
room=$(row S14-room flashsale-room)
n=$(val "$room" buyers)
assert_eq "$n $n $n $n" "$(val "$room" draw_buyers) $(val "$room" admitted) $(val "$room" results) $n" \
	"S14: buyers in the draw, admitted, admission results"
[ "$(val "$room" log_per_s_max)" -le "$(val "$room" rate)" ] 2>/dev/null || fail "S14: faster than the rate: $room"
assert_eq 0 "$(val "$room" first_slot_ms)" "S14: the first admission at the opening"

# 4.
for section in '## The machine' '## S1 hot SKU' '## S2 all winners' '## flashsale alone' \
	'| S5 floor |' '| S5 floor, durable |' '| S5 disk alone |' '| S6 |' '| S7 |' \
	'## Carts: S12' '| flashsale-4p (worker) |' '## The latency curve: S13' '| 50% |' \
	"### Where a batch's time goes" '## The waiting room: S14' '| gateway and worker (S8'"'"'s run, buyers/s) |'; do
	grep -qF "$section" "$out/BENCHMARKS.md" 2>/dev/null || fail "report: no '$section'"
done
[ -s "$out/benchmarks.png" ] || fail "no chart in $out"
[ -s "$out/latency-curve.png" ] || fail "no latency curve in $out"
cmp -s "$rows" "$out/benchmarks.jsonl" || fail "$out/benchmarks.jsonl is not the run's rows ($rows)"
rc=0
(cd "$IT_ROOT" && scripts/bench report --rows "$out/benchmarks.jsonl" --out "$out" --check) || rc=$?
assert_eq 0 "$rc" "scripts/bench report --check: the rows give the report again"
assert_eq "$docs_before" "$(docs_md5)" \
	"docs/BENCHMARKS.md, its charts and docs/benchmarks.jsonl untouched"

[ "$IT_FAILED" -eq 0 ] && rm -rf "$out" || say "kept $out"
it_done
