#!/usr/bin/env bash
# The shipped nginx front (config/nginx/, scripts/nginx-front; issue 48, item 7) on the real
# services: Debian's nginx with TLS (a throw-away CA made here) in front of a gateway, its own
# prefix, pid, temp paths and logs under the test's folder, 127.0.0.1 only. Through it: the
# sale page with its CSP; a sale opened and a buy; a 10 s long-poll answered at its deadline
# (nginx's read timeout, read from its configuration, is above the gateway's longest wait)
# and one answered the moment the decision comes; an event stream whose events arrive while it
# is open (unbuffered); a signed confirm. nginx's own bounds: a body over the gateway's cap is
# 413 at nginx; a client address past its request rate gets 429 with Retry-After while another
# address is served; past its requests in progress (streams) 429; a client trickling its
# header lines is cut at client_header_timeout. nginx's access log names each client address
# with the upstream's time. A second front of the same template before an echo: the headers
# the gateway gets (the client's address, a forged one replaced) and the target as sent, on a
# kept-alive connection. Then the sale page in headless Chromium through the front: buy, and
# pay through the payment provider's stub (which confirms through nginx too).
. "$(dirname "$0")/lib.sh"

NGINX=${FLASHSALE_NGINX:-/usr/sbin/nginx}
[ -x "$NGINX" ] || die "$NGINX is not installed (scripts/setup installs nginx-light): the front cannot be tested"
it_setup 1
start_worker w1
it_admin_token
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PAY_PORT=$(free_port)
start_gateway gw --set admin.token.file="$IT_DIR/admin-token" \
	--set payment.checkout.url="http://127.0.0.1:$PAY_PORT/checkout"
GW_DIRECT=$GW
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"

# ---- the front: certificates, configuration, nginx in the foreground ----
NG=$IT_DIR/nginx
NG_PORT=$(free_port)
"$IT_ROOT/scripts/nginx-front" certs --dir "$NG" >/dev/null
"$IT_ROOT/scripts/nginx-front" conf --dir "$NG" --upstream "${GW_DIRECT#http://}" \
	--listen "127.0.0.1:$NG_PORT" --gateway-conf "$IT_DIR/flashsale.conf" >/dev/null
"$IT_ROOT/scripts/nginx-front" run --dir "$NG" >>"$IT_DIR/nginx.log" 2>&1 &
NG_PID=$!
# nginx's workers outlive a master killed with -KILL (it_cleanup's way): TERM it first and
# wait for it, so that it ends its workers.
NG_PIDS=($NG_PID)
ng_stop() {
	local p i
	for p in "${NG_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || continue
		for i in $(seq 100); do alive "$p" || break; sleep 0.1; done
		alive "$p" && fail "nginx $p did not exit at SIGTERM within 10 s"
		kill -KILL "$p" 2>/dev/null || true
	done
}
# it_cleanup reads the test's status from $?: hand it on (without errexit, which would end the
# trap at a failing status before it_cleanup ran).
ng_cleanup() {
	local st=$?
	set +e
	ng_stop
	(exit "$st")
	it_cleanup
}
trap ng_cleanup EXIT
GW=https://127.0.0.1:$NG_PORT
CA=(--cacert "$NG/tls/ca.crt")
wait_until 30 "nginx to answer over TLS" "[ \$(req GET /healthz ${CA[*]}) = 200 ]"
assert_eq "$NG_PID" "$(cat "$NG/nginx.pid")" "nginx's pid file is its own ($NG/nginx.pid)"
# Started as root (CI), its worker is www-data's, with nothing of the test's folder to read.
[ "$(id -u)" != 0 ] || assert_eq www-data "$(ps -o user= --ppid "$NG_PID" | sort -u | tr -d ' ')" "the user of nginx's worker"
# Each curl below checks the certificate against the test's CA (no --insecure anywhere).
tls() { req "$@" "${CA[@]}"; }

# ---- the configuration: read timeout above the gateway's longest wait and heartbeat ----
gw_key() { # the gateway's value of KEY: the test's configuration, else its default
	local v
	v=$(sed -n "s/^$1 = //p" "$IT_DIR/flashsale.conf" | tail -n 1)
	[ -n "$v" ] || v=$("$IT_BUILD/flashsale-gateway" --help-config | sed -n "s/^ *$1 .*default \([0-9]*\).*/\1/p")
	echo "$v"
}
wait_max=$(gw_key http.wait.max.ms) beat=$(gw_key http.heartbeat.ms) body_max=$(gw_key http.body.max)
read_to=$(sed -n 's/^ *proxy_read_timeout \([0-9]*\)s;/\1/p' "$NG/nginx.conf")
[ -n "$read_to" ] && [ $((read_to * 1000)) -gt "$wait_max" ] && [ $((read_to * 1000)) -gt "$beat" ] &&
	say "ok: proxy_read_timeout ${read_to}s is above http.wait.max.ms $wait_max and http.heartbeat.ms $beat" ||
	fail "proxy_read_timeout '${read_to}s' against http.wait.max.ms $wait_max, http.heartbeat.ms $beat"
assert_eq "$body_max" "$(sed -n 's/^ *client_max_body_size \([0-9]*\);/\1/p' "$NG/nginx.conf")" "client_max_body_size is http.body.max"
grep -q '^ *proxy_buffering off;' "$NG/nginx.conf" && say "ok: proxy_buffering off" || fail "proxy_buffering is not off"
assert_eq "" "$(grep -v '^ *#' "$NG/nginx.conf" | grep '/etc/nginx\|/var/log\|/var/lib/nginx\|/run/')" "paths of the system nginx in the configuration"

# ---- the sale page and a sale through the front ----
assert_eq 200 "$(tls GET /sale/HOT)" "GET /sale/HOT through nginx"
csp=$(header_value Content-Security-Policy)
case $csp in "default-src 'self';"*) say "ok: its Content-Security-Policy through nginx: $csp" ;; *) fail "Content-Security-Policy: '$csp'" ;; esac
assert_eq nosniff "$(header_value X-Content-Type-Options)" "its X-Content-Type-Options"
assert_eq "max-age=31536000" "$(header_value Strict-Transport-Security)" "its Strict-Transport-Security (nginx's)"
assert_eq 202 "$(tls POST /v1/skus/HOT/open -H "$J" -H "$A" -d '{"stock":5,"per_buyer_limit":1}')" "open HOT through nginx"
wait_until 30 "HOT open through nginx" "[ \$(tls GET /v1/skus/HOT) = 200 ] && [ \$(body_field status) = open ]"
assert_eq 413 "$(tls POST /v1/skus/HOT/buys -H "$J" -d "{\"buyer_id\":\"$(head -c "$body_max" /dev/zero | tr '\0' a)\"}")" "a body over http.body.max: 413"
case $(header_value Content-Type) in text/html*) say "ok: ... answered by nginx (its HTML page), never sent to the gateway" ;; *) fail "the 413 came from upstream: $(head -c 200 "$IT_DIR/body")" ;; esac

# ---- a slow client: one header line every 2 s, cut at client_header_timeout (10 s) ----
python3 - "$NG_PORT" "$NG/tls/ca.crt" >"$IT_DIR/slow.out" 2>&1 <<-'EOF' &
	import socket, ssl, sys, time
	ctx = ssl.create_default_context(cafile=sys.argv[2])
	s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
	t0, n = time.monotonic(), 0
	s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
	s.settimeout(2)
	while time.monotonic() - t0 < 40:
	    try:
	        if s.recv(4096) == b"":
	            break
	    except socket.timeout:
	        try:
	            s.sendall(b"X-Slow-%d: 1\r\n" % n)
	            n += 1
	        except OSError:
	            break
	    except OSError:
	        break
	print("cut %.1f %d" % (time.monotonic() - t0, n))
EOF
SLOW_PID=$!
IT_PIDS+=($SLOW_PID)

# ---- a buy, its long-polls and its event stream through the front ----
K1=$(python3 -c 'import uuid; print(uuid.uuid4())')
B1='{"buyer_id":"alice","qty":1}'
# The stream is open before the buy: each event must come through while it stays open.
curl -s -N "${CA[@]}" --max-time 60 "$GW/v1/intents/$K1/events" >"$IT_DIR/events" &
EV_PID=$!
IT_PIDS+=($EV_PID)
wait_until 10 "the stream's opening through nginx" "grep -q '^retry: ' '$IT_DIR/events'"
# No worker while the first long-poll waits: it must be answered at its deadline, not by a
# 504 of nginx's.
stop_worker w1
assert_posted "$(tls POST /v1/skus/HOT/buys -H "$J" -H "Idempotency-Key: $K1" -d "$B1")" "alice's buy through nginx"
t0=$(date +%s%3N)
assert_eq 202 "$(tls GET "/v1/intents/$K1?wait=10" --http1.1)" "a 10 s long-poll with no worker: answered at its deadline"
el=$(($(date +%s%3N) - t0))
assert_eq queued "$(body_field status)" "its status"
[ "$el" -ge 9500 ] && [ "$el" -lt 15000 ] && say "ok: it waited ${el} ms through nginx" || fail "the 10 s long-poll took ${el} ms"
# The second one is answered the moment the decision reaches the gateway (a worker again).
(
	t=$(date +%s%3N)
	s=$(tls GET "/v1/intents/$K1?wait=10")
	echo "$s $(body_field outcome) $(($(date +%s%3N) - t))" >"$IT_DIR/lp2"
) &
IT_PIDS+=($!)
start_worker w2
wait_until 20 "the long-poll's answer" "[ -s '$IT_DIR/lp2' ]"
read -r s o el <"$IT_DIR/lp2"
assert_eq "200 held" "$s $o" "the long-poll answered with the decision through nginx (after ${el} ms)"
wait_until 20 "the decided event through nginx" "grep -q '^event: decided' '$IT_DIR/events'"
alive "$EV_PID" && say "ok: the decided event arrived while the stream is open (unbuffered)" || fail "the stream ended before its event"
b="{\"intent_id\":\"$K1\",\"sku\":\"HOT\"}"
assert_posted "$(tls POST "/v1/intents/$K1/confirm" -H "$J" -H "$(sign_confirm "$b")" -d "$b")" "the signed confirm through nginx"
wait_until 20 "the confirmed event through nginx" "grep -q '^event: confirmed' '$IT_DIR/events'"
alive "$EV_PID" && say "ok: the confirmed event arrived while the stream is open" || fail "the stream ended before its confirmed event"
kill "$EV_PID" 2>/dev/null || true

# ---- the slow client ----
wait_until 30 "the slow client's end" "! alive $SLOW_PID"
read -r w t n <"$IT_DIR/slow.out" || true
case "$w:${t%.*}" in
cut:9 | cut:10 | cut:11 | cut:12) say "ok: the client trickling header lines was cut after ${t} s ($n lines sent)" ;;
*) fail "the slow client: $(cat "$IT_DIR/slow.out")" ;;
esac
[ "${n:-0}" -ge 3 ] || fail "the slow client sent only ${n:-0} header lines before the cut"

# ---- nginx's per-address bounds ----
# Requests a second: 100 at once from 127.0.0.7 (one connection), burst 40: past it 429. The
# last one's answer is kept: its Retry-After and body.
urls=()
for i in $(seq 100); do urls+=(-o /dev/null "$GW/v1/skus/HOT"); done
curl -s "${CA[@]}" --interface 127.0.0.7 -w '%{http_code}\n' "${urls[@]}" \
	-o "$IT_DIR/body" -D "$IT_DIR/headers" "$GW/v1/skus/HOT" >"$IT_DIR/burst" || true
ok=$(head -n 100 "$IT_DIR/burst" | grep -c '^200$' || true) lim=$(head -n 100 "$IT_DIR/burst" | grep -c '^429$' || true)
[ "$ok" -ge 41 ] && [ "$lim" -ge 20 ] && [ $((ok + lim)) -eq 100 ] &&
	say "ok: 100 requests at once from 127.0.0.7: $ok served, $lim refused 429" ||
	fail "100 requests at once from 127.0.0.7: $ok 200, $lim 429, $((100 - ok - lim)) other"
assert_eq "429 1 rate_limited" "$(tail -n 1 "$IT_DIR/burst") $(header_value Retry-After | tail -n 1) $(body_field error)" "the 101st: its status, Retry-After and error"
assert_eq 200 "$(tls GET /v1/skus/HOT)" "another address (127.0.0.1) meanwhile"
# Requests in progress (--conn 32): 36 streams from 127.0.0.8, 4 refused 429.
for i in $(seq 36); do
	curl -s -N "${CA[@]}" --interface 127.0.0.8 --max-time 8 -o /dev/null -w '%{http_code}\n' \
		"$GW/v1/intents/$K1/events" >"$IT_DIR/conn.$i" &
	IT_PIDS+=($!)
done
wait_until 30 "the 36 streams' ends" "[ \$(cat '$IT_DIR'/conn.* | wc -l) -eq 36 ]"
assert_eq "32 4" "$(cat "$IT_DIR"/conn.* | grep -c '^200$') $(cat "$IT_DIR"/conn.* | grep -c '^429$')" "36 streams at once from 127.0.0.8: served, refused 429"

# ---- nginx's access log: the client address and the upstream's time ----
grep -q '^127\.0\.0\.7 .*" 200 .* urt=[0-9.]* ' "$NG/logs/access.log" &&
	grep -q '^127\.0\.0\.7 .*" 429 ' "$NG/logs/access.log" && grep -q '^127\.0\.0\.8 .*/events HTTP/[0-9.]*" 200 .* urt=[0-9.]* ' "$NG/logs/access.log" &&
	say "ok: the access log names 127.0.0.7 and 127.0.0.8 with the upstream's time, e.g. $(grep -m 1 '^127\.0\.0\.7 .*" 200 ' "$NG/logs/access.log")" ||
	fail "the access log: $(tail -n 3 "$NG/logs/access.log")"
grep -q "GET /v1/intents/$K1?wait=10 HTTP/1.1\" 202 .* urt=1[0-9]\." "$NG/logs/access.log" &&
	say "ok: the 10 s long-poll's line: upstream time 10 s" || fail "no 10 s long-poll line in the access log"

# ---- what the gateway is sent: a second front, the same configuration, before an echo ----
# The echo answers each request with what it received: its request line, its headers, and the
# port of nginx's connection to it.
ECHO_PORT=$(free_port) NG2_PORT=$(free_port)
python3 - "$ECHO_PORT" >>"$IT_DIR/echo.log" 2>&1 <<-'EOF' &
	import json, sys
	from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
	class H(BaseHTTPRequestHandler):
	    protocol_version = "HTTP/1.1"
	    def do_GET(self):
	        b = json.dumps({"line": self.requestline, "port": self.client_address[1],
	                        "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
	        self.send_response(200)
	        self.send_header("Content-Type", "application/json")
	        self.send_header("Content-Length", str(len(b)))
	        self.end_headers()
	        self.wfile.write(b)
	ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
IT_PIDS+=($!)
"$IT_ROOT/scripts/nginx-front" conf --dir "$IT_DIR/nginx2" --upstream "127.0.0.1:$ECHO_PORT" \
	--listen "127.0.0.1:$NG2_PORT" --cert "$NG/tls/server.crt" --key "$NG/tls/server.key" >/dev/null
"$IT_ROOT/scripts/nginx-front" run --dir "$IT_DIR/nginx2" >>"$IT_DIR/nginx2.log" 2>&1 &
NG2_PID=$!
NG_PIDS+=($NG2_PID)
wait_until 30 "the second front" "curl -sf ${CA[*]} https://127.0.0.1:$NG2_PORT/ >/dev/null"
echo_field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$IT_DIR/echo.$1" "$2"; }
curl -s "${CA[@]}" --interface 127.0.0.9 --http1.1 --path-as-is -H 'X-Forwarded-For: 6.6.6.6' -H 'X-Real-IP: 6.6.6.6' \
	-o "$IT_DIR/echo.1" "https://127.0.0.1:$NG2_PORT/v1/intents/x/%63onfirm" \
	-o "$IT_DIR/echo.2" "https://127.0.0.1:$NG2_PORT//sale/../sale//WEB%2F?wait=1" || true
assert_eq "127.0.0.9 127.0.0.9 https" "$(echo_field 1 'd["headers"].get("x-real-ip"), d["headers"].get("x-forwarded-for"), d["headers"].get("x-forwarded-proto")' | tr -d "(),'")" \
	"X-Real-IP, X-Forwarded-For (the client's forged 6.6.6.6 replaced) and X-Forwarded-Proto upstream"
assert_eq "GET /v1/intents/x/%63onfirm HTTP/1.1|GET //sale/../sale//WEB%2F?wait=1 HTTP/1.1" \
	"$(echo_field 1 'd["line"]')|$(echo_field 2 'd["line"]')" "the request targets upstream as sent (not decoded, not normalised), over HTTP/1.1"
assert_eq "None $(echo_field 1 'd["port"]')" "$(echo_field 2 'd["headers"].get("connection")') $(echo_field 2 'd["port"]')" \
	"no Connection: close upstream, and the second request on the same upstream connection (keep-alive)"
kill -TERM "$NG2_PID" 2>/dev/null || true
wait_until 20 "the second front to exit" "! alive $NG2_PID"

# ---- the sale page in headless Chromium through the front: buy, and pay ----
# The payment provider's stub confirms through nginx too (it trusts the test's CA).
SSL_CERT_FILE=$NG/tls/ca.crt python3 "$IT_ROOT/scripts/payment-stub" serve --gateway "$GW" \
	--keys "$IT_PAY_KEYS" --listen "127.0.0.1:$PAY_PORT" >>"$IT_DIR/payment-stub.log" 2>&1 &
IT_PIDS+=($!)
wait_until 30 "the payment stub" "curl -sf 'http://127.0.0.1:$PAY_PORT/healthz' >/dev/null"
assert_eq 202 "$(tls POST /v1/skus/WEB/open -H "$J" -H "$A" -d '{"stock":3,"per_buyer_limit":1}')" "open WEB through nginx"
wait_until 30 "WEB open" "[ \$(tls GET /v1/skus/WEB) = 200 ] && [ \$(body_field status) = open ]"
if [ -x "${FLASHSALE_CHROMIUM:-/usr/bin/chromium}" ] && [ -x "${FLASHSALE_CHROMEDRIVER:-/usr/bin/chromedriver}" ]; then
	/usr/bin/python3 "$IT_ROOT/tests/browser/nginx_front.py" --url "$GW" --sku WEB --stock 3 |
		tee "$IT_DIR/browser.out" || fail "the browser through nginx: $(grep -m 1 '^FAIL: ' "$IT_DIR/browser.out" || echo 'see above')"
	web=$(sed -n 's/.*"intent": "\([^"]*\)".*/\1/p' "$IT_DIR/browser.out")
	[ -n "$web" ] || fail "the browser named no intent"
else
	die "chromium or chromedriver is not installed (scripts/setup installs them): the page through nginx cannot be tested"
fi

fs wait --timeout 60 --quiet || die "records not decided"
assert_eq "confirmed" "$(sql "SELECT status FROM reservations WHERE intent_id = '$K1'")" "alice's hold in Postgres"
assert_eq "front0 confirmed" "$(sql "SELECT d.buyer_id, r.status FROM decisions d JOIN reservations r USING (intent_id) WHERE d.kind = 1 AND d.intent_id = '$web'" | tr '|' ' ')" "the browser's buy in Postgres: paid"
ng_stop
stop_worker w2
audit_ok
it_done
