#!/usr/bin/env bash
# Holds that expire on an idle partition (the worker's ticks move the clock), and payments
# that arrive late: a fresh unit when one is left (confirmed_late), a refund when none is.
. "$(dirname "$0")/lib.sh"
it_setup 1
tick_ms=300
echo "tick.interval.ms = $tick_ms" >>"$IT_DIR/flashsale.conf"
start_worker w1
fs sale open E1 --stock 1 --hold 2 >/dev/null
fs sale open E2 --stock 5 --hold 2 >/dev/null

# E1: A holds the only unit, nobody else writes to the partition; the hold must expire by a
# tick, no later than one tick interval after expires_at (on the log clock).
a=$(fs buy E1 --buyer alice)
fs result "$a" --wait 30 | grep -q ' held ' || die "alice's buy was not held"
wait_until 30 "alice's hold to expire" "[ \"\$(sql \"SELECT status FROM reservations WHERE intent_id = '$a'\")\" = expired ]"
late=$(sql "SELECT ended_at_ms - expires_at_ms FROM reservations WHERE intent_id = '$a'")
[ "$late" -ge 0 ] && [ "$late" -le "$tick_ms" ] && say "ok: expired $late ms after expires_at (tick interval $tick_ms)" ||
	fail "expiry late by $late ms (tick interval $tick_ms)"
[ "$(sql "SELECT sum(n_ticks) FROM partitions")" -ge 1 ] && say "ok: a tick record moved the clock" || fail "no tick decided"
grep -q 'ticks_sent=[1-9]' "$IT_DIR/w1.log" || wait_until 10 "the stats line" "grep -q 'ticks_sent=[1-9]' '$IT_DIR/w1.log'"
assert_eq "1|0|0" "$(sql "SELECT available, held, sold FROM skus WHERE sku = 'E1'")" "E1 stock back after expiry"
wait_until 30 "the expired result" "results_dump | grep -q '\"type\":\"expire\",\"intent_id\":\"$a\",\"sku\":\"E1\",\"outcome\":\"expired\"'"
say "ok: expired result published"

# Late payment, a unit left: alice confirms after expiry and gets a fresh unit.
fs confirm "$a" --wait 30 >"$IT_DIR/c1"
grep -q ' confirmed_late ' "$IT_DIR/c1" && say "ok: late confirm with stock left: confirmed_late" || fail "late confirm: $(cat "$IT_DIR/c1")"
assert_eq "0|0|1" "$(sql "SELECT available, held, sold FROM skus WHERE sku = 'E1'")" "E1 sold after the late payment"
# Repeating the confirm (a gateway retry with the same body) gives the same answer, once.
printf '{"v":1,"type":"confirm","intent_id":"%s","sku":"E1"}' "$a" | fs publish --key E1 >/dev/null
fs wait --quiet --timeout 30
assert_eq 1 "$(sql "SELECT count(*) FROM decisions WHERE intent_id = '$a' AND kind = 2")" "one confirm decision"
assert_eq 1 "$(sql "SELECT sum(n_repeats) FROM partitions")" "the repeated confirm counted as a repeat"

# Late payment, no unit left: bob holds E2 units until they expire, carol and dave then take
# every unit, bob's payment arrives: refund_required.
b=$(fs buy E2 --buyer bob)
fs result "$b" --wait 30 | grep -q ' held ' || die "bob's buy was not held"
wait_until 30 "bob's hold to expire" "[ \"\$(sql \"SELECT status FROM reservations WHERE intent_id = '$b'\")\" = expired ]"
fs load E2 --buyers 5 --buyer-prefix later >/dev/null
fs wait --quiet --timeout 30
assert_eq "0|5" "$(sql "SELECT available, held FROM skus WHERE sku = 'E2'")" "E2 sold out to later buyers"
fs confirm "$b" --wait 30 >"$IT_DIR/c2"
grep -q ' refund_required (sold_out)' "$IT_DIR/c2" && say "ok: late confirm with nothing left: refund_required" || fail "late confirm: $(cat "$IT_DIR/c2")"
assert_eq "expired" "$(sql "SELECT status FROM reservations WHERE intent_id = '$b'")" "bob's hold stays expired"
# A confirm for an intent that never won anything.
fs confirm 6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab --sku E2 --wait 30 >"$IT_DIR/c3"
grep -q ' unknown_intent (no_hold)' "$IT_DIR/c3" && say "ok: confirm of an unknown intent" || fail "unknown confirm: $(cat "$IT_DIR/c3")"
# The audit checks an idle log: a worker whose holds expire appends ticks meanwhile (seen in
# CI: a tick decided between the audit's log ends and its snapshot of Postgres).
stop_worker w1
audit_ok
it_done
