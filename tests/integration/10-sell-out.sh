#!/usr/bin/env bash
# 5,000 buyers at once against stock 500: exactly 500 held, 4,500 sold_out, available 0.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
fs sale open HOT --stock 500 >/dev/null
load_start=$(date +%s%3N) # after the sale record's stamp: the window below holds the buys only
fs load HOT --buyers 5000 --seed 10 --ids "$IT_DIR/ids" >/dev/null
fs wait --timeout 120 --quiet || die "records not decided in time"

assert_eq 5001 "$(decided)" "records decided (open + 5000 buys)"
assert_eq 500 "$(sql "SELECT count(*) FROM decisions WHERE outcome = 'held'")" "held decisions"
assert_eq 4500 "$(sql "SELECT count(*) FROM decisions WHERE outcome = 'sold_out'")" "sold_out decisions"
assert_eq "0|500|500" "$(sql "SELECT available, held, supply FROM skus WHERE sku = 'HOT'")" "available|held|supply"
assert_eq 500 "$(sql "SELECT count(*) FROM reservations WHERE status = 'held'")" "reservations"
# Every intent the load generator sent has exactly one decision.
assert_eq 5000 "$(sort -u "$IT_DIR/ids" | wc -l)" "distinct intent ids sent"
assert_eq 7 "$(cut -c15 "$IT_DIR/ids" | sort -u)" "the load generator's id versions"
sql "SELECT intent_id FROM decisions" | sort >"$IT_DIR/decided"
assert_eq 0 "$(sort -u "$IT_DIR/ids" | comm -3 - "$IT_DIR/decided" | wc -l)" "ids sent but not decided, or decided but not sent"
# At least one reply per intent on the results topic (INV-2).
wait_until 60 "5000 distinct results" "[ \$(results_keys | wc -l) -ge 5000 ]"
assert_eq 5000 "$(results_keys | sort -u | wc -l)" "distinct intents answered"
# flashsale timing: every record has its answer, both topics on the broker's clock (no
# warning), latencies in order; a window that starts in the future holds no record.
t=$(fs timing --timeout 60 2>"$IT_DIR/timing.err") || fail "timing: exit $? ($(cat "$IT_DIR/timing.err"))"
case "$t" in "TIMING records=5001 answered=5001 "*) say "ok: ${t#TIMING }" ;; *) fail "timing: $t" ;; esac
[ -s "$IT_DIR/timing.err" ] && fail "timing said: $(cat "$IT_DIR/timing.err")"
awk -v t="$t" 'BEGIN { n = split(t, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); f[p[1]] = p[2] }
	exit !(f["p50_ms"] <= f["p99_ms"] && f["p99_ms"] <= f["p999_ms"] && f["p999_ms"] <= f["max_ms"] && f["per_s"] > 0) }' &&
	say "ok: timing percentiles in order" || fail "timing percentiles: $t"
# From the publish call: every buy's id is version 7, minted just before it was published, so
# on this one clock each buy's latency from its id's time is at least its latency from the
# broker's stamp, and at most the whole load longer.
t=$(fs timing --since "$load_start" --timeout 60)
awk -v t="$t" 'BEGIN { n = split(t, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); f[p[1]] = p[2] }
	exit !(f["records"] == 5000 && f["client_timed"] == 5000 && f["client_p50_ms"] >= f["p50_ms"] &&
		f["client_p99_ms"] >= f["p99_ms"] && f["client_p999_ms"] >= f["p999_ms"] &&
		f["client_max_ms"] >= f["max_ms"] && f["client_max_ms"] <= f["max_ms"] + 60000) }' &&
	say "ok: timing from the publish call, for all 5000 buys" || fail "timing from the publish call: $t"
assert_eq "TIMING records=0 answered=0" "$(fs timing --since $(($(date +%s%3N) + 3600000)) | cut -d' ' -f1-3)" "timing, empty window"
# The web tier's flag: the compacted stock topic says sold_out.
stock=$(kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e -t "it.$IT_ID.stock" -o beginning -f '%s\n' | tail -n 1)
case "$stock" in *'"status":"sold_out"'*'"available":0'*) say "ok: stock topic says sold_out" ;; *) fail "stock topic: $stock" ;; esac
# The same flag through the API: `stock --follow` reads the compacted topic and stops at the
# first state that is not open.
fs stock HOT --follow --until-sold-out --timeout 30 | tail -n 1 | grep -q '^HOT sold_out supply=500 available=0 held=500' &&
	say "ok: stock --follow sees sold_out" || fail "stock --follow"
# A single buy's answer, through the API: a late buyer is told sold_out.
id=$(fs buy HOT --buyer late-1)
fs result "$id" --wait 30 | grep -q ' sold_out ' && say "ok: late buyer sold_out" || fail "late buyer result"
audit_ok
stop_worker w1
it_done
