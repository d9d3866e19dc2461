#!/usr/bin/env bash
# The command line as a user meets it: every command (and the benchmark's flashsale-echo)
# answers --help, bad input is one line on stderr with exit 2 (flashsale-echo without -c: its
# usage, exit 2), a bad configuration stops the worker with file:line, and `result --wait`
# follows the results topic until a decision that did not exist yet arrives.
. "$(dirname "$0")/lib.sh"
it_setup 1
F="$IT_BUILD/flashsale"
W="$IT_BUILD/flashsale-worker"

expect_rc() { # expect_rc RC WHAT CMD...
	local want=$1 what=$2 rc=0
	shift 2
	"$@" >"$IT_DIR/out" 2>"$IT_DIR/err" || rc=$?
	if [ "$rc" = "$want" ]; then say "ok: $what (exit $rc)"; else fail "$what: exit $rc, wanted $want: $(cat "$IT_DIR/err")"; fi
}
one_line_err() { # the last command's stderr is one line mentioning $1
	if [ "$(wc -l <"$IT_DIR/err")" -eq 1 ] && grep -q -- "$1" "$IT_DIR/err"; then
		say "ok: one-line error: $(cat "$IT_DIR/err")"
	else
		fail "error output: $(cat "$IT_DIR/err")"
	fi
}

expect_rc 0 "flashsale --help" "$F" --help
expect_rc 0 "flashsale-worker --help" "$W" --help
expect_rc 0 "flashsale-worker --help-config" "$W" --help-config
grep -q 'batch.max' "$IT_DIR/out" || fail "--help-config lists no keys"
E="$IT_BUILD/bench/flashsale-echo" # the benchmark's S5 floor
expect_rc 0 "flashsale-echo --help" "$E" --help
grep -q 'usage: flashsale-echo' "$IT_DIR/out" || fail "flashsale-echo --help shows no usage"
expect_rc 2 "flashsale-echo without -c" "$E"
expect_rc 2 "flashsale-echo with a missing file" "$E" -c "$IT_DIR/none.conf"
one_line_err "none.conf"
for cmd in "sale" "buy" "result" "stock" "load" "wait" "summary" "audit" "topics" "publish"; do
	expect_rc 0 "flashsale $cmd --help" "$F" "$cmd" --help
	grep -q "usage: flashsale $cmd" "$IT_DIR/out" || fail "$cmd --help shows no usage"
done
expect_rc 2 "unknown command" "$F" frobnicate
one_line_err "unknown command 'frobnicate'"
expect_rc 2 "bad qty" fs buy SKU --buyer b --qty 0
one_line_err "qty"
expect_rc 2 "bad sku" fs sale open 'no spaces' --stock 1
one_line_err "invalid sku"
expect_rc 2 "bad intent id" fs result not-a-uuid
one_line_err "invalid intent id"
expect_rc 2 "missing --stock" fs sale open S1
one_line_err "--stock is required"
expect_rc 2 "bad --id-version" fs load SKU --buyers 1 --id-version 5
one_line_err "--id-version must be 7 or 4"
printf 'batch.max = 10\nbatch.wait.ms = soon\n' >"$IT_DIR/bad.conf"
expect_rc 2 "worker with a bad config" "$W" -c "$IT_DIR/bad.conf"
one_line_err "bad.conf:2: batch.wait.ms: 'soon' is not an integer"
printf 'no_such_key = 1\n' >"$IT_DIR/bad2.conf"
expect_rc 2 "worker with an unknown key" "$W" -c "$IT_DIR/bad2.conf"
one_line_err "bad2.conf:1: unknown key 'no_such_key'"
expect_rc 2 "a bad kafka.* key" "$W" -c "$IT_DIR/flashsale.conf" --set kafka.no.such.property=1
one_line_err "kafka.no.such.property"

# result --wait: the buy is published while no worker runs; the waiting client must get the
# decision from the results topic once a worker starts.
fs sale open W1 --stock 1 >/dev/null
before=$(date +%s%3N)
id=$(fs buy W1 --buyer early)
# The client library mints version-7 ids: the time in ms first.
[ "${id:14:1}" = 7 ] || fail "buy: intent id $id is not version 7"
id_ms=$((16#${id:0:8}${id:9:4}))
[ "$id_ms" -ge "$before" ] && [ "$id_ms" -le "$(date +%s%3N)" ] &&
	say "ok: a minted intent id carries the time it was minted" || fail "id $id: $id_ms ms, not between $before and now"
expect_rc 1 "result of an undecided buy" fs result "$id"
one_line_err "has no decision yet"
fs result "$id" --wait 60 --json >"$IT_DIR/waited" 2>&1 &
waiter=$!
wait_until 10 "the waiter to subscribe" "[ -n \"\$(ls /proc/$waiter 2>/dev/null)\" ]"
start_worker w1
wait "$waiter" || fail "result --wait failed: $(cat "$IT_DIR/waited")"
grep -q "\"intent_id\":\"$id\",\"sku\":\"W1\",\"outcome\":\"held\"" "$IT_DIR/waited" &&
	say "ok: result --wait got the decision" || fail "result --wait printed: $(cat "$IT_DIR/waited")"
expect_rc 0 "stock --json" fs stock W1 --json
grep -q '"status":"sold_out","supply":1,"available":0,"held":1' "$IT_DIR/out" && say "ok: stock --json" || fail "stock: $(cat "$IT_DIR/out")"
# sale --wait prints what the record did (issue 28, item 13): applied (exit 0), or why not
# (exit 1); without --wait it says it only published.
expect_rc 0 "sale open --wait" fs sale open W2 --stock 2 --wait 30
grep -qx "open W2 applied" "$IT_DIR/out" && say "ok: sale open --wait: applied" || fail "sale open --wait printed: $(cat "$IT_DIR/out")"
expect_rc 1 "sale open --wait of an open SKU" fs sale open W2 --stock 2 --wait 30
grep -qx "open W2 rejected (already_open)" "$IT_DIR/out" && say "ok: a second open: rejected (already_open)" || fail "second open printed: $(cat "$IT_DIR/out")"
expect_rc 1 "sale restock --wait of an unknown SKU" fs sale restock NOSUCH --add 1 --wait 30
grep -qx "restock NOSUCH rejected (unknown_sku)" "$IT_DIR/out" && say "ok: restock of an unknown SKU: rejected" || fail "restock printed: $(cat "$IT_DIR/out")"
expect_rc 0 "sale close" fs sale close W2
grep -q "^published close W2 (not decided yet" "$IT_DIR/out" && say "ok: without --wait: published, not decided" || fail "sale close printed: $(cat "$IT_DIR/out")"
fs wait --quiet --timeout 30 || die "the close not decided in time"
assert_eq "2|closed" "$(sql "SELECT supply, status FROM skus WHERE sku = 'W2'")" "W2 after the close (no second open)"
audit_ok
stop_worker w1
it_done
