#!/usr/bin/env bash
# Bad input between valid intents: each bad record gets a `rejected` decision with its
# reason, changes no stock, and the next valid intent is still decided.
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
fs sale open B1 --stock 10 --per-buyer 2 >/dev/null

uuid() { cat /proc/sys/kernel/random/uuid; }
pub() { # pub KEY PAYLOAD
	printf '%s' "$2" | fs publish --key "$1" >/dev/null
}
buy() { # buy SKU BUYER QTY: a valid buy, written by hand
	printf '{"v":1,"type":"buy","intent_id":"%s","sku":"%s","buyer_id":"%s","qty":%s}' "$(uuid)" "$1" "$2" "$3"
}
expected=()
pub B1 "$(buy B1 good-1 1)"
pub B1 '{"v":1,"type":"buy","intent_id":'; expected+=(bad_json)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B1\",\"qty\":1}"; expected+=(missing_buyer_id)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B1\",\"buyer_id\":\"x\",\"qty\":\"1\"}"; expected+=(bad_qty)
pub B1 "$(buy B1 zero 0)"; expected+=(bad_qty)
pub B1 "$(buy B1 neg -3)"; expected+=(bad_qty)
pub B1 "$(buy B1 frac 1.0)"; expected+=(bad_qty)
pub B1 "$(buy B1 huge 99999999999999999999)"; expected+=(bad_json)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B1\",\"buyer_id\":\"x\",\"qty\":1,\"qty\":2}"; expected+=(duplicate_key)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B1\",\"buyer_id\":\"x\",\"qty\":1,\"pad\":\"$(head -c 5000 /dev/zero | tr '\0' a)\"}"; expected+=(too_large)
pub B1 "$(buy OTHER x 1)"; expected+=(key_mismatch)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"not-a-uuid\",\"sku\":\"B1\",\"buyer_id\":\"x\",\"qty\":1}"; expected+=(bad_intent_id)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B1\",\"buyer_id\":\"a\\u0000b\",\"qty\":1}"; expected+=(bad_json)
printf '{"v":1,"type":"buy","sku":"B1"\0}' | fs publish --key B1 >/dev/null; expected+=(bad_json)
pub B1 "$(head -c 3000 /dev/zero | tr '\0' '[')"; expected+=(bad_json)
pub B1 '"just a string"'; expected+=(bad_json) # jansson decodes only arrays and objects
pub B1 '[1,2]'; expected+=(not_object)
pub B1 "{\"v\":2,\"type\":\"buy\"}"; expected+=(bad_version)
pub B1 "{\"v\":1,\"type\":\"steal\"}"; expected+=(bad_type)
pub B1 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"$(uuid)\",\"sku\":\"B 1\",\"buyer_id\":\"x\",\"qty\":1}"; expected+=(bad_sku)
pub B1 ""; expected+=(empty)
pub NOPE "$(buy NOPE someone 1)" # valid record, unknown SKU: a decision, not a reject
pub B1 "$(buy B1 good-2 2)"
pub B1 "$(buy B1 good-3 3)" # over the per-buyer limit of 2 and the max qty: rejected
fs wait --timeout 60 --quiet || die "records not decided in time"

got=$(sql "SELECT reason FROM rejects, generate_series(off, off_end) ORDER BY generate_series" | tr '\n' ' ')
assert_eq "${expected[*]} " "$got" "reject reasons in order"
assert_eq "${#expected[@]}" "$(sql "SELECT sum(n_invalid) FROM partitions")" "invalid records counted"
assert_eq "rejected|unknown_sku" "$(sql "SELECT outcome, reason FROM decisions WHERE sku = 'NOPE'")" "unknown SKU"
assert_eq "rejected|qty_over_cap" "$(sql "SELECT outcome, reason FROM decisions WHERE buyer_id = 'good-3'")" "qty over the cap"
assert_eq "held held " "$(sql "SELECT outcome FROM decisions WHERE buyer_id IN ('good-1', 'good-2') ORDER BY off" | tr '\n' ' ')" "valid neighbours"
assert_eq "7|3|10" "$(sql "SELECT available, held, supply FROM skus WHERE sku = 'B1'")" "stock after the bad records"
# Every record got a reply, bad ones with outcome rejected and their reason.
total=$(( ${#expected[@]} + 4 ))
wait_until 30 "$total replies" "[ \$(results_dump | grep -vc '\"type\":\"open\"') -ge $total ]"
assert_eq "${#expected[@]}" "$(results_dump | grep -c '"type":"invalid","intent_id":[^,]*,\("sku":"[^"]*",\)\?"outcome":"rejected","reason"')" "rejected replies with a reason"
audit_ok
stop_worker w1
it_done
