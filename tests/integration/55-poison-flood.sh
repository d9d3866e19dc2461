#!/usr/bin/env bash
# A poison flood: 100,000 bad records between 20,000 valid buys. Every bad record is still
# decided (rejected, counted, answered), a run of alike ones is one rejects row, the valid buys
# are decided exactly, the replay check and the audit pass. The slowdown of the valid buys is
# measured and printed (each phase's records published while no worker runs, timed from the
# worker's start to the last record decided); the 2x target is a speed target, so it is
# reported, not judged here (TESTING.md: speed targets live in benchmarks, not timed tests).
. "$(dirname "$0")/lib.sh"
it_setup 1
ms() { echo $(($(date +%s%N) / 1000000)); }
phase() { # phase SKU POISON: prints the milliseconds the worker took
	fs sale open "$1" --stock 1000 >/dev/null
	fs load "$1" --buyers 20000 --poison "$2" --seed 55 >/dev/null
	local t0
	t0=$(ms)
	start_worker "w_$1"
	fs wait --quiet --timeout 300 || die "$1 not decided"
	echo $(($(ms) - t0))
	stop_worker "w_$1"
}
clean=$(phase CLEAN 0)
flood=$(phase FLOOD 100000)
say "20,000 buys alone: $clean ms; with 100,000 bad records between them: $flood ms"
assert_eq 100000 "$(sql "SELECT sum(n_invalid) FROM partitions")" "bad records decided"
rows=$(sql "SELECT count(*) FROM rejects")
[ "$rows" -lt 10000 ] && say "ok: $rows rejects rows for 100,000 bad records" || fail "$rows rejects rows"
for sku in CLEAN FLOOD; do
	assert_eq "1000|19000" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = '$sku'")" "$sku held|sold_out"
done
ratio=$(awk -v a="$clean" -v b="$flood" 'BEGIN { printf "%.2f", b / a }')
say "slowdown of the valid buys under the flood: ${ratio}x (target: at most 2x, issue 4)"
# The replay check covers the ranges too.
fs replay --dry-run >"$IT_DIR/dry.txt" && say "ok: $(tail -n 1 "$IT_DIR/dry.txt")" || { tail "$IT_DIR/dry.txt"; fail "replay check"; }
audit_ok
it_done
