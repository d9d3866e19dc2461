#!/usr/bin/env bash
# The sale page (GET /sale/{sku}) in real headless Chromium browsers, on the real services.
# Over HTTP: the page and its files (types, nosniff, CSP, HEAD, 400/404/405). In five
# browsers (tests/browser/sale_page.py: each its own profile and buyer) against 3 units
# while a crowd of 8,000 buyers POSTs through tests/clients/gateway_load.py: a double click
# and a reload during the buy each buy once; the pages show held or sold out; one pays, one
# cancels, and a page told sold out wins the returned unit with a new click-through; the
# live counters reach 0, 1 and 0 (Pay through the payment provider's page: scripts/payment-stub
# signs the confirm, issue 48); a hold of 1 s expires on a page; a sale not open yet and a
# closed one say so. Then Postgres: every
# outcome a page showed is the decision recorded for its intent id (an edge answer has
# none), the holds ended as the pages said, one buy per click-through per buyer; and the
# crowd's answers are Postgres's too. A browser that cannot start fails the test.
. "$(dirname "$0")/lib.sh"

for f in "${FLASHSALE_CHROMIUM:-/usr/bin/chromium}" "${FLASHSALE_CHROMEDRIVER:-/usr/bin/chromedriver}"; do
	[ -x "$f" ] || die "$f is not installed (scripts/setup installs chromium, chromium-driver and python3-selenium): the sale page cannot be tested"
done
it_setup 2
start_worker w1
it_admin_token
# The payment provider (scripts/payment-stub, a demo part): the page's Pay goes to its checkout
# page, which confirms the hold with the gateway, signed with the test's payment key ring.
PAY_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PAY=http://127.0.0.1:$PAY_PORT
start_gateway gw --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0 \
	--set payment.checkout.url="$PAY/checkout"
python3 "$IT_ROOT/scripts/payment-stub" serve --gateway "$GW" --keys "$IT_PAY_KEYS" \
	--listen "127.0.0.1:$PAY_PORT" >>"$IT_DIR/payment-stub.log" 2>&1 &
IT_PIDS+=($!)
wait_until 30 "the payment stub" "curl -sf '$PAY/healthz' >/dev/null"
GWM=http://127.0.0.1:$(metrics_port gw)
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"

# ---- the page and its files ----
assert_eq 200 "$(req GET /sale/PAGE)" "GET /sale/PAGE"
assert_eq "text/html; charset=utf-8" "$(header_value Content-Type)" "its Content-Type"
assert_eq nosniff "$(header_value X-Content-Type-Options)" "X-Content-Type-Options"
csp=$(header_value Content-Security-Policy)
case $csp in "default-src 'self';"*) say "ok: Content-Security-Policy: $csp" ;; *) fail "Content-Security-Policy: '$csp'" ;; esac
grep -q '<script src="/assets/sale.js"' "$IT_DIR/body" && say "ok: the page loads /assets/sale.js" || fail "the page: $(head -c 300 "$IT_DIR/body")"
grep -qF "data-checkout=\"$PAY/checkout\"" "$IT_DIR/body" && say "ok: the page's Pay goes to $PAY/checkout" || fail "the page's data-checkout: $(grep -o 'data-checkout="[^"]*"' "$IT_DIR/body")"
html_len=$(wc -c <"$IT_DIR/body")
assert_eq 200 "$(req HEAD /sale/PAGE -I)" "HEAD /sale/PAGE"
assert_eq "$html_len" "$(header_value Content-Length | tr -d ' ')" "HEAD's Content-Length"
for f in "sale.js text/javascript; charset=utf-8" "sale.css text/css; charset=utf-8" "icon.svg image/svg+xml"; do
	assert_eq "200 ${f#* }" "$(req GET "/assets/${f%% *}") $(header_value Content-Type)" "GET /assets/${f%% *}"
done
chk() { # chk STATUS ERROR WHAT METHOD PATH [CURL ARGS]
	local want=$1 err=$2 what=$3
	shift 3
	assert_eq "$want $err" "$(req "$@") $(body_field error)" "$what"
}
chk 404 not_found "an unknown file" GET /assets/nope.js
chk 404 not_found "a file name longer than any" GET "/assets/$(printf 'a%.0s' $(seq 100)).js"
chk 404 not_found "a path below a file" GET /assets/sale.js/x
chk 400 bad_sku "the page of a bad SKU" GET '/sale/P%20X'
chk 400 bad_sku "the page of a SKU of 65 characters" GET "/sale/$(printf 'S%.0s' $(seq 65))"
chk 404 not_found "a path below the page" GET /sale/PAGE/x
chk 405 method_not_allowed "POST to the page" POST /sale/PAGE
assert_eq "GET, HEAD" "$(header_value Allow)" "its Allow"
page_metric() { metric_sum "$GWM" "flashsale_gateway_requests_total.route=\"page\",code=\"$1\"."; }
assert_eq "5 2 2" "$(page_metric 200) $(page_metric 404) $(page_metric 400)" "the gateway's metrics: requests of route=\"page\" answered 200, 404, 400"

# ---- the sale: 3 units, one per buyer; one unit held for 1 s; one not open, one closed ----
assert_eq 202 "$(req POST /v1/skus/PAGE/open -H "$J" -H "$A" -d '{"stock":3,"per_buyer_limit":1}')" "open PAGE"
assert_eq 202 "$(req POST /v1/skus/PAGE-EXP/open -H "$J" -H "$A" -d '{"stock":1,"hold_seconds":1}')" "open PAGE-EXP"
# A sale whose window opens in an hour (log clock), and one closed.
assert_eq 202 "$(req POST /v1/skus/PAGE-SOON/open -H "$J" -H "$A" -d "{\"stock\":5,\"opens_at\":$(($(date +%s%3N) + 3600000))}")" "open PAGE-SOON in an hour"
assert_eq 202 "$(req POST /v1/skus/PAGE-SHUT/open -H "$J" -H "$A" -d '{"stock":5}')" "open PAGE-SHUT"
wait_until 30 "PAGE-SHUT's stock record" "[ \$(req GET /v1/skus/PAGE-SHUT) = 200 ]"
assert_eq 202 "$(req POST /v1/skus/PAGE-SHUT/close -H "$A")" "close PAGE-SHUT"
for s in PAGE:open PAGE-EXP:open PAGE-SOON:not_open PAGE-SHUT:closed; do
	wait_until 30 "${s%%:*} ${s#*:} on the gateway" "[ \$(req GET /v1/skus/${s%%:*}) = 200 ] && [ \$(body_field status) = ${s#*:} ]"
done

t0=$(date +%s%3N)
/usr/bin/python3 "$IT_ROOT/tests/browser/sale_page.py" --url "$GW" --sku PAGE --stock 3 \
	--expiry-sku PAGE-EXP --not-open-sku PAGE-SOON --closed-sku PAGE-SHUT --crowd 8000 \
	--load "$IT_DIR/crowd.jsonl" --out "$IT_DIR/pages.json" |
	tee "$IT_DIR/browser.out" || die "the browsers: $(sed -n 's/^FAIL: //p' "$IT_DIR/browser.out" | head -n 1 | grep . || echo 'see above')"
say "ok: the browsers' part took $(($(date +%s%3N) - t0)) ms"
# Eleven page loads (five pages, three reloads, three other sales), each the page and its
# script and style at least.
n=$(page_metric 200)
[ "$n" -ge $((5 + 11 * 3)) ] && say "ok: the gateway's metrics: $n page requests answered 200" || fail "page requests answered 200: $n, fewer than $((5 + 11 * 3))"
fs wait --timeout 60 --quiet || die "records not decided"

# ---- what the pages showed, against Postgres ----
# One line per click-through: buyer, intent id, the buy's decision shown, its source (log or
# edge), what the page showed last.
/usr/bin/python3 - "$IT_DIR/pages.json" >"$IT_DIR/attempts" <<-'EOF'
	import json, sys
	for p in json.load(open(sys.argv[1])):
	    for a in p["attempts"]:
	        print(p["buyer"], a["id"], a["decision"], a["source"], a["last"])
EOF
n=0
while read -r buyer id decision source last; do
	n=$((n + 1))
	pg=$(sql "SELECT outcome FROM decisions WHERE intent_id = '$id' AND kind = 1")
	if [ "$source" = edge ]; then
		assert_eq "" "$pg" "$buyer's $decision at the edge: no decision recorded for $id"
	else
		assert_eq "$decision" "$pg" "$buyer showed $decision for $id: Postgres"
	fi
	if [ "$decision" = held ]; then
		assert_eq "$last" "$(sql "SELECT status FROM reservations WHERE intent_id = '$id'")" "$buyer's hold ended as it showed"
	fi
done <"$IT_DIR/attempts"
[ "$n" -ge 9 ] || fail "only $n click-throughs recorded"
for b in $(cut -d' ' -f1 "$IT_DIR/attempts" | sort -u); do
	want=$(awk -v b="$b" '$1 == b && $4 == "log"' "$IT_DIR/attempts" | wc -l)
	assert_eq "$want" "$(sql "SELECT count(*) FROM decisions WHERE kind = 1 AND buyer_id = '$b'")" "buys recorded for $b (one per click-through)"
done
assert_eq "1 confirmed" "$(sql "SELECT count(*), min(r.status) FROM decisions d JOIN reservations r USING (intent_id) WHERE d.kind = 1 AND d.buyer_id = 'page0'" | tr '|' ' ')" "page0: the double click bought once, and paid"
assert_eq "1 cancelled" "$(sql "SELECT count(*), min(r.status) FROM decisions d JOIN reservations r USING (intent_id) WHERE d.kind = 1 AND d.buyer_id = 'page1'" | tr '|' ' ')" "page1: the reload during the buy bought once, and cancelled"
assert_eq "4 1 2 0" "$(sql "SELECT (SELECT count(*) FROM decisions WHERE sku = 'PAGE' AND kind = 1 AND outcome = 'held'), sold, held, available FROM skus WHERE sku = 'PAGE'" | tr '|' ' ')" "PAGE: holds, sold, held, available"

# ---- the crowd's answers are Postgres's ----
# Published (a 202, or a 200 whose decision is not the edge flag's: the result can reach the
# gateway before the delivery report): the decision it was given is Postgres's. Answered at
# the edge (200, "source": "edge"): sold out, and nothing recorded.
/usr/bin/python3 - "$IT_DIR/crowd.jsonl" >"$IT_DIR/crowd.ids" <<-'EOF'
	import json, sys
	for line in open(sys.argv[1]):
	    r = json.loads(line)
	    print(r["id"], r["outcome"], r["post"], "published" if r["published"] else "edge")
EOF
awk '$4 == "published" { print $1, $2 }' "$IT_DIR/crowd.ids" | sort >"$IT_DIR/crowd.published"
sql "SELECT intent_id, outcome FROM decisions WHERE kind = 1 AND buyer_id LIKE 'crowd%'" | tr '|' ' ' | sort >"$IT_DIR/crowd.pg"
assert_eq 0 "$(comm -3 "$IT_DIR/crowd.published" "$IT_DIR/crowd.pg" | wc -l)" "differences between the crowd's published buys with their answers ($(wc -l <"$IT_DIR/crowd.published")) and Postgres's decisions ($(wc -l <"$IT_DIR/crowd.pg"))"
assert_eq "" "$(awk '$4 == "edge" && !($3 == 200 && $2 == "sold_out")' "$IT_DIR/crowd.ids" | head -n 3)" "crowd answers neither published nor sold out at the edge"

stop_worker w1
audit_ok
it_done
