#!/usr/bin/env bash
# Ended holds leave the worker's memory (issue 28, item 12): 1,200 holds expire, the next batch
# drops them (they live in Postgres), and the confirms and cancels that name them later are
# decided from their looked-up rows exactly as a worker that kept them would: a late payment
# gets a fresh unit, a cancel after the expiry is told `expired`, a repeat its first answer;
# the audit's replay (which keeps every hold) agrees. A restart loads the live holds only.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
fs sale open H --stock 1500 --per-buyer 1 --hold 1 --wait 30 >/dev/null || die "open"
fs load H --buyers 1200 --ids "$IT_DIR/ids" >/dev/null
fs wait --quiet --timeout 60 || die "the buys not decided"
wait_until 60 "the 1,200 holds to expire" "[ \$(sql \"SELECT count(*) FROM reservations WHERE status = 'expired'\") -eq 1200 ]"
# The next batch forgets them.
t=$(fs buy H --buyer trigger)
fs result "$t" --wait 30 | grep -q ' held ' || die "the trigger buy"
late=$(sed -n 1p "$IT_DIR/ids")
gone=$(sed -n 2p "$IT_DIR/ids")
out=$(fs confirm "$late" --sku H --wait 30)
case "$out" in *' confirmed_late '*) say "ok: a late payment for a forgotten hold: $out" ;; *) fail "late confirm: $out" ;; esac
out=$(fs cancel "$gone" --sku H --wait 30)
case "$out" in *' expired'*) say "ok: a cancel of a forgotten expired hold: $out" ;; *) fail "cancel after expiry: $out" ;; esac
out=$(fs confirm "$late" --sku H --wait 30)
case "$out" in *' confirmed_late '*) say "ok: the payment again: $out" ;; *) fail "repeated late confirm: $out" ;; esac
assert_eq "1|1" "$(sql "SELECT count(*) FILTER (WHERE status = 'confirmed' AND late), count(*) FILTER (WHERE status = 'held') FROM reservations")" "confirmed late|held"
stop_worker w1
grep -Eo 'holds_forgotten=[0-9]+' "$IT_DIR/w1.log" | tail -1 | grep -q 'holds_forgotten=1200' &&
	say "ok: $(grep -Eo 'holds_forgotten=[0-9]+' "$IT_DIR/w1.log" | tail -1)" || fail "the worker did not forget the 1,200 ended holds: $(grep -Eo 'holds_forgotten=[0-9]+' "$IT_DIR/w1.log" | tail -1)"
# A restart loads the live holds only, and still decides a follow-up of an ended one.
start_worker w2
other=$(sed -n 3p "$IT_DIR/ids")
out=$(fs confirm "$other" --sku H --wait 30)
case "$out" in *' confirmed_late '*) say "ok: after a restart, a late payment: $out" ;; *) fail "late confirm after restart: $out" ;; esac
stop_worker w2 # idle for the audit: its live hold would expire and tick meanwhile
audit_ok
it_done
