#!/usr/bin/env bash
# A record the store refuses for good (issue 28, item 1): a constraint the worker cannot know
# of (here a trigger that refuses one buyer's decision with a data exception, SQLSTATE class
# 22, as a DBA's rule or a hostile record would) fails its batch the same way on every try. Before, the worker
# retried that batch forever on its main thread: every partition of the process stopped.
#   1. Between 300 buys on SKU1 (partition 1 of 2), one buy by buyer `poison`; 100 buys on
#      SKU2 (partition 0) at the same time. Every record is decided: the poison is rejected
#      store_refused (a rejects row with its intent id, answered on the results topic), its
#      neighbours are decided as usual (SKU1 sells exactly its stock, every other buy has its
#      decision), and SKU2's partition went on.
#   2. The worker says so, once, loudly, and counts it (refused=1); it is still running.
#   3. The audit passes: its replay takes the refused record as refused, as the live run did.
#   4. The metrics count the refused record, and its batch's failed attempts as redo, not as
#      sql_error (a refusal is the records', not Postgres's own: FlashsaleCommitsFailing, a
#      critical alert, must not fire for it).
#   5. A refusal that is no record's own (issue 47, item 5): a rule on buyers (a buyer's units
#      may not go down) and one on reservations (one hold may not expire) refuse rows that
#      expiries write, at whatever record moves the clock past them (a tick, a buy). Before,
#      the record alone was refused, then its reject too, and the partition stopped for good.
#      Now the refused expiries are recorded against their holds (store_refusals; the holds
#      stay held until confirmed or cancelled), the innocent hold due at the same record
#      expires, the record that moved the clock is decided on its merits, the partition goes
#      on, and the audit's replay agrees.
#   6. A cart whose cart_reserve the store refuses (a rule on buyers) ends rejected
#      store_refused; before, its coordinator waited for an answer for ever.
. "$(dirname "$0")/lib.sh"
IT_CONF_EXTRA="metrics.listen = 127.0.0.1:0"
it_setup 2
sql "CREATE FUNCTION it_refuse() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
	IF NEW.buyer_id = 'poison' THEN
		RAISE EXCEPTION 'a rule the worker cannot know' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN NEW;
END \$\$" >/dev/null
sql "CREATE TRIGGER it_refuse BEFORE INSERT ON decisions FOR EACH ROW EXECUTE FUNCTION it_refuse()" >/dev/null
start_worker w1
W1=http://127.0.0.1:$(metrics_port w1)
fs sale open SKU1 --stock 100 --wait 60 >/dev/null || die "SKU1 not opened"
fs sale open SKU2 --stock 50 --wait 60 >/dev/null || die "SKU2 not opened"

# 1.
fs load SKU1 --buyers 150 --seed 521 >/dev/null
poison=$(fs buy SKU1 --buyer poison)
fs load SKU1 --buyers 150 --seed 522 >/dev/null &
fs load SKU2 --buyers 100 --seed 523 >/dev/null
wait $! || die "load failed"
fs wait --timeout 90 --quiet || die "records not decided in time (the refused record stalled the worker)"
assert_eq "1|$poison" "$(sql "SELECT count(*), max(intent_id::text) FROM rejects WHERE reason = 'store_refused'")" "the refused record's reject"
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE intent_id = '$poison'")" "decisions of the refused record"
assert_eq 300 "$(sql "SELECT count(*) FROM decisions WHERE sku = 'SKU1' AND kind = 1")" "SKU1's other buys decided"
assert_eq "100|0" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU1'")" "SKU1 held|available"
assert_eq "100|50" "$(sql "SELECT count(*), sum(CASE WHEN outcome = 'held' THEN 1 ELSE 0 END) FROM decisions WHERE sku = 'SKU2'")" "SKU2's buys|held"
wait_until 30 "the refused record's answer" "results_dump | grep -q '\"intent_id\":\"$poison\",\"sku\":\"SKU1\",\"outcome\":\"rejected\",\"reason\":\"store_refused\"'"
say "ok: the refused record answered rejected store_refused"

# 2.
assert_eq 1 "$(grep -c 'the store refused the record at .* rejected store_refused' "$IT_DIR/w1.log")" "loud lines about the refused record"
alive "$(worker_pid w1)" || fail "the worker is not running"

# 4.
assert_eq 1 "$(metric_sum "$W1" flashsale_records_refused_total)" "flashsale_records_refused_total"
assert_eq 1 "$(metric_sum "$W1" 'flashsale_rejects_total\{reason="store_refused"\}')" "rejects store_refused"
redo=$(metric_sum "$W1" 'flashsale_transactions_failed_total\{cause="redo"\}')
[ "$redo" -ge 2 ] && say "ok: $redo attempts failed as redo" || fail "failed attempts counted as redo: $redo"
assert_eq 0 "$(metric_sum "$W1" 'flashsale_transactions_failed_total\{cause="(sql_error|transient|unknown_outcome)"\}')" "attempts counted as Postgres's own failures"
# 5.
sql "CREATE FUNCTION it_refuse_units() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
	IF NEW.buyer_id = 'stuck1' AND NEW.units < OLD.units THEN
		RAISE EXCEPTION 'units may not go down' USING ERRCODE = 'check_violation';
	END IF;
	RETURN NEW;
END \$\$" >/dev/null
sql "CREATE TRIGGER it_refuse_units BEFORE UPDATE ON buyers FOR EACH ROW EXECUTE FUNCTION it_refuse_units()" >/dev/null
sql "CREATE FUNCTION it_refuse_expiry() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
	IF NEW.buyer_id = 'stuck2' AND NEW.status = 'expired' THEN
		RAISE EXCEPTION 'this hold may not expire' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN NEW;
END \$\$" >/dev/null
sql "CREATE TRIGGER it_refuse_expiry BEFORE UPDATE ON reservations FOR EACH ROW EXECUTE FUNCTION it_refuse_expiry()" >/dev/null
fs sale open SKU3 --stock 10 --hold 2 --wait 60 >/dev/null || die "SKU3 not opened"
s1=$(fs buy SKU3 --buyer stuck1)
s2=$(fs buy SKU3 --buyer stuck2)
h1=$(fs buy SKU3 --buyer honest1)
wait_until 60 "SKU3's three holds" "[ \"\$(sql \"SELECT count(*) FROM reservations WHERE sku = 'SKU3'\")\" = 3 ]"
# The partition's ticks move its clock past the three holds' expiry (2 s).
wait_until 60 "the innocent hold's expiry" "[ \"\$(sql \"SELECT status FROM reservations WHERE intent_id = '$h1'\")\" = expired ]"
assert_eq "held|held" "$(sql "SELECT string_agg(status, '|' ORDER BY buyer_id) FROM reservations WHERE intent_id IN ('$s1', '$s2')")" "the holds whose expiry was refused"
assert_eq "$(printf '%s\n' "$s1" "$s2" | sort | paste -sd'|')" "$(sql "SELECT string_agg(intent_id::text, '|' ORDER BY intent_id::text) FROM store_refusals")" "store_refusals"
assert_eq 2 "$(grep -c 'the store refused the expiry of hold .* it stays held' "$IT_DIR/w1.log")" "loud lines about the refused expiries"
assert_eq 1 "$(grep -c 'rejected store_refused' "$IT_DIR/w1.log")" "records rejected store_refused (the poison alone)"
assert_eq 2 "$(metric_sum "$W1" flashsale_expiries_refused_total)" "flashsale_expiries_refused_total"
# The partition goes on: a later buy, a confirm of the one, a cancel of the other.
a1=$(fs buy SKU3 --buyer after1)
fs confirm "$s1" --wait 30 >/dev/null || fail "the confirm of the held hold whose expiry was refused"
fs cancel "$s2" --wait 30 >/dev/null || fail "the cancel of the held hold whose expiry was refused"
fs wait --timeout 60 --quiet || die "records not decided in time (a refused expiry stalled the partition)"
assert_eq "held" "$(sql "SELECT outcome FROM decisions WHERE intent_id = '$a1'")" "the later buy"
assert_eq "confirmed|cancelled" "$(sql "SELECT string_agg(status, '|' ORDER BY buyer_id) FROM reservations WHERE intent_id IN ('$s1', '$s2')")" "the refused-expiry holds, ended by their buyers"
assert_eq "1|9" "$(sql "SELECT sold, held + available FROM skus WHERE sku = 'SKU3'")" "SKU3 sold|held+available"
say "ok: refused expiries recorded against their holds, the partition went on"

# 6. A cart whose group the store refuses at another partition (a rule on buyers: this buyer
#    may take no unit): the refused cart_reserve still answers its coordinator, so the cart
#    ends rejected store_refused instead of reserving for ever. A cart coordinated on SKU4's
#    own partition is refused there, as a record; carts are tried until one is not.
sql "CREATE FUNCTION it_refuse_takes() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
	IF NEW.buyer_id = 'cartpoison' AND (TG_OP = 'INSERT' OR NEW.units > OLD.units) THEN
		RAISE EXCEPTION 'this buyer may take no unit' USING ERRCODE = 'check_violation';
	END IF;
	RETURN NEW;
END \$\$" >/dev/null
sql "CREATE TRIGGER it_refuse_takes BEFORE INSERT OR UPDATE ON buyers FOR EACH ROW EXECUTE FUNCTION it_refuse_takes()" >/dev/null
fs sale open SKU4 --stock 5 --wait 60 >/dev/null || die "SKU4 not opened"
p4=$(sql "SELECT part FROM skus WHERE sku = 'SKU4'")
remote=
for i in 1 2 3 4 5 6 7 8; do
	c=$(fs cart --buyer cartpoison SKU4:1) || die "cart $i not published"
	wait_until 60 "cart $i answered" "[ -n \"\$(sql \"SELECT 1 FROM carts WHERE cart_id = '$c' AND answer IS NOT NULL UNION ALL SELECT 1 FROM rejects WHERE intent_id = '$c'\")\" ]"
	coord=$(sql "SELECT part FROM carts WHERE cart_id = '$c'")
	if [ -n "$coord" ] && [ "$coord" != "$p4" ]; then
		remote=$c
		break
	fi
done
[ -n "$remote" ] || fail "no cart of 8 coordinated away from SKU4's partition"
assert_eq "rejected|store_refused" "$(sql "SELECT answer || '|' || answer_reason FROM carts WHERE cart_id = '$remote'")" "the cart whose reserve was refused"
assert_eq 0 "$(sql "SELECT count(*) FROM carts WHERE state IN ('reserving', 'late_round')")" "carts still reserving"
assert_eq "0|5" "$(sql "SELECT held, available FROM skus WHERE sku = 'SKU4'")" "SKU4 held|available"
say "ok: the refused cart_reserve answered its coordinator"
stop_worker w1
n_refused=$(sql "SELECT count(*) FROM rejects WHERE reason = 'store_refused'") # the poison and the carts refused as records (6.)
grep -q "exit: .* refused=$n_refused " "$IT_DIR/w1.log" || fail "the exit line does not count them ($n_refused): $(grep 'exit:' "$IT_DIR/w1.log")"

# 3.
audit_ok
it_done
