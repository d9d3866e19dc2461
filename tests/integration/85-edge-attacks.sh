#!/usr/bin/env bash
# Abuse bounded at the gateway (issue 48, item 5, the HTTP findings), played as an attacker
# would on the real services, 127.0.0.1 only, bounded in count and time:
#   framing  two different Content-Lengths, and Content-Length with chunked: 400, the
#            connection closed, nothing published;
#   paths    POST /v1/intents/ID/confirm%00.css and /v1/intents/ID/%63onfirm do not reach
#            confirm: nothing published, the hold stays held;
#   trickle  a client sending one header line a second (never idle) is cut within
#            http.request.deadline.s (+ the timer's sweep), while an event stream open longer
#            than that stays open;
#   streams  2,000 event streams opened and closed: their slots are free again (the open
#            connections gauge back down) within a few seconds;
#   caps     one address over http.client.waits.max gets 429 with Retry-After, and one over
#            http.client.rate gets 429 with Retry-After, while an honest buyer on another
#            address behind the same gateway buys and long-polls; the attacker's slots come
#            back once its streams close.
# Run against a gateway that lacks the new keys, the checks fail on their merits (the keys
# are left out).
. "$(dirname "$0")/lib.sh"
it_setup 1
start_worker w1
it_admin_token
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"
DEADLINE=3
edge_keys() { # the new keys, when the gateway knows them
	# grep reads it all (with -q it may stop early, and pipefail then sees SIGPIPE).
	if "$IT_BUILD/flashsale-gateway" --help-config | grep http.request.deadline.s >/dev/null; then
		printf -- '--set\0%s\0' "$@"
	fi
}
mapfile -d '' KA < <(edge_keys "http.request.deadline.s=$DEADLINE")
start_gateway gwa --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0 "${KA[@]}"
GWA=$GW
MA=http://127.0.0.1:$(metrics_port gwa)
mapfile -d '' KB < <(edge_keys http.client.waits.max=10 http.client.rate=5 http.client.burst=40)
start_gateway gwb --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0 "${KB[@]}"
GWB=$GW
MB=http://127.0.0.1:$(metrics_port gwb)
GW=$GWA
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
GW=$GWB
wait_until 30 "readyz (b)" "[ \$(req GET /readyz) = 200 ]"
GW=$GWA
uuid() { python3 -c 'import uuid; print(uuid.uuid4())'; }
published() { metric_sum "$1" flashsale_gateway_published_total; }

cat >"$IT_DIR/edge.py" <<'EOF'
# edge.py PORT CMD ...: raw HTTP for the attacks (python3 sockets, 127.0.0.x only).
import socket, sys, time
port = int(sys.argv[1]); cmd = sys.argv[2]
def conn(src="127.0.0.1"):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(10); s.connect(("127.0.0.1", port)); return s
def read_all(s, limit=10.0):
    # Everything until the server closes (or limit seconds): (bytes, closed).
    data = b""; end = time.time() + limit
    while time.time() < end:
        s.settimeout(max(0.05, end - time.time()))
        try:
            b = s.recv(65536)
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True
        if not b:
            return data, True
        data += b
    return data, False
if cmd == "raw":  # raw FILE: send its bytes; print the status code and "closed" or "open"
    s = conn(); s.sendall(open(sys.argv[3], "rb").read())
    data, closed = read_all(s, 5.0)
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    print(line.split(" ")[1] if line.startswith("HTTP/") else "none", "closed" if closed else "open")
elif cmd == "trickle":  # one header line a second, never idle: seconds until the server cuts
    s = conn(); t0 = time.time(); s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    i = 0
    while time.time() - t0 < float(sys.argv[3]):
        try:
            s.sendall(b"X-Slow-%d: 1\r\n" % i); i += 1
        except OSError:
            break
        s.settimeout(1.0)
        try:
            if s.recv(4096) == b"":
                break
        except socket.timeout:
            continue
        except OSError:
            break
    print("%.1f" % (time.time() - t0))
elif cmd == "churn":  # churn N PATH: N streams opened (first bytes read) and closed at once
    n, path, ok = int(sys.argv[3]), sys.argv[4], 0
    for _ in range(n):
        s = conn(); s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        data = b""
        while b": open" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
        ok += b" 200 " in data.split(b"\r\n", 1)[0]
        s.close()
    print(ok)
elif cmd == "rate":  # rate SRC N PATH: N GETs on one keep-alive connection from SRC, at once
    import http.client
    src, n, path = sys.argv[3], int(sys.argv[4]), sys.argv[5]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(src, 0))
    counts, retry = {}, ""
    for _ in range(n):
        c.request("GET", path); r = c.getresponse(); r.read()
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status == 429:
            retry = r.getheader("Retry-After") or ""
    print(counts.get(200, 0), counts.get(429, 0), retry or "none")
elif cmd == "hold":  # hold SRC N PATH FLAG: N streams from SRC, statuses printed, held until FLAG
    import os
    src, n, path, flag = sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
    socks, codes = [], []
    for _ in range(n):
        s = conn(src); s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        data = b""
        while b"\r\n\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
        codes.append(data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none")
        socks.append(s)
    print(" ".join(codes), flush=True)
    while not os.path.exists(flag):
        time.sleep(0.1)
    for s in socks:
        s.close()
EOF
edge() { python3 "$IT_DIR/edge.py" "$@"; }
portof() { echo "${1##*:}"; }

# ---- a sale, and a buyer's hold ----
assert_eq 202 "$(req POST /v1/skus/EDGE/open -H "$J" -H "$A" -d '{"stock":50,"per_buyer_limit":5}')" "open EDGE"
wait_until 30 "the sale" "[ \$(sql 'SELECT count(*) FROM skus') = 1 ]"
H=$(uuid)
assert_posted "$(req POST /v1/skus/EDGE/buys -H "$J" -H "Idempotency-Key: $H" -d '{"buyer_id":"alice","qty":1}')" "alice's buy"
assert_eq 200 "$(req GET "/v1/intents/$H?wait=10")" "its decision"
assert_eq held "$(body_field outcome)" "alice holds"

# ---- framing: conflicting Content-Lengths, Content-Length with chunked ----
P0=$(published "$MA")
K1=$(uuid) K2=$(uuid)
BODY='{"buyer_id":"smuggler","qty":1}'
printf 'POST /v1/skus/EDGE/buys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s' \
	"$K1" "${#BODY}" $((${#BODY} + 5)) "$BODY" >"$IT_DIR/cl2"
assert_eq "400 closed" "$(edge "$(portof "$GWA")" raw "$IT_DIR/cl2")" "framing: two different Content-Lengths"
printf 'POST /v1/skus/EDGE/buys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n' \
	"$K2" "${#BODY}" "$BODY" >"$IT_DIR/clte"
assert_eq "400 closed" "$(edge "$(portof "$GWA")" raw "$IT_DIR/clte")" "framing: Content-Length with chunked"
# An honest chunked buy and a repeated equal Content-Length still go through.
K3=$(uuid)
printf 'POST /v1/skus/EDGE/buys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n' \
	"$K3" "${#BODY}" "$BODY" >"$IT_DIR/chunked"
assert_eq "202 closed" "$(edge "$(portof "$GWA")" raw "$IT_DIR/chunked")" "framing: a chunked buy alone"

# ---- paths: confirm%00.css and %63onfirm are not confirm ----
for p in "confirm%00.css" "%63onfirm" "confirm%2500" "c%6fnfirm/"; do
	st=$(req POST "/v1/intents/$H/$p" --path-as-is)
	case $st in 400 | 404) say "ok: path $p: $st $(body_field error)" ;; *) fail "path $p reached a handler: $st $(cat "$IT_DIR/body")" ;; esac
done
# Everything since P0: the one honest chunked buy, nothing else.
wait_until 10 "the chunked buy's publication" "[ \$(published '$MA') -ge $((P0 + 1)) ]"
assert_eq $((P0 + 1)) "$(published "$MA")" "published since the framing and path attacks (the honest buy only)"
assert_eq 0 "$(sql "SELECT count(*) FROM reservations WHERE intent_id IN ('$K1', '$K2')")" "smuggled buys in Postgres"
assert_eq 200 "$(req GET "/v1/intents/$K3?wait=10")" "the chunked buy's decision"
assert_eq held "$(sql "SELECT status FROM reservations WHERE intent_id = '$H'")" "alice's hold stays held"

# ---- trickle: cut within the deadline; a stream lives on past it ----
curl -s -N --max-time $((DEADLINE + 3)) "$GWA/v1/skus/EDGE/events" >"$IT_DIR/long.sse" 2>/dev/null &
longpid=$!
t=$(edge "$(portof "$GWA")" trickle $((DEADLINE + 8)))
if awk -v t="$t" -v d="$DEADLINE" 'BEGIN { exit !(t <= d + 2) }'; then
	say "ok: a trickling client was cut after $t s (deadline $DEADLINE s)"
else
	fail "a trickling client was still served after $t s (deadline $DEADLINE s)"
fi
set +e
wait "$longpid"
rc=$?
set -e
assert_eq 28 "$rc" "an event stream open past the deadline (curl's own timeout ends it)"

# ---- streams: 2,000 opened and closed, their slots free within seconds ----
assert_eq 2000 "$(edge "$(portof "$GWA")" churn 2000 /v1/skus/EDGE/events)" "streams opened"
t0=$SECONDS
while [ "$(metric_sum "$MA" flashsale_gateway_connections)" -gt 2 ] && [ $((SECONDS - t0)) -lt 5 ]; do sleep 0.2; done
left=$(metric_sum "$MA" flashsale_gateway_connections)
if [ "$left" -le 2 ]; then
	say "ok: the closed streams' connections were released within $((SECONDS - t0)) s"
else
	fail "$left connections still open 5 s after 2,000 streams were closed"
fi

# ---- caps: one address over its stream cap and its rate; an honest buyer still served ----
GW=$GWB
FLAG=$IT_DIR/release
edge "$(portof "$GWB")" hold 127.0.0.2 11 /v1/skus/EDGE/events "$FLAG" >"$IT_DIR/hold.out" &
holdpid=$!
wait_until 20 "the attacker's streams" "[ -s '$IT_DIR/hold.out' ]"
codes=$(cat "$IT_DIR/hold.out")
assert_eq "10 1" "$(tr ' ' '\n' <"$IT_DIR/hold.out" | sort | uniq -c | awk '{print $1}' | paste -sd' ')" "the attacker's 11 streams: 10 open, 1 refused ($codes)"
assert_eq 429 "$(echo "$codes" | awk '{print $NF}')" "the 11th stream"
st=$(req GET "/v1/intents/$H?wait=5" --interface 127.0.0.2)
assert_eq 429 "$st" "the attacker's long-poll"
assert_eq too_many_waits "$(body_field error)" "its error"
[ -n "$(header_value Retry-After)" ] && say "ok: Retry-After: $(header_value Retry-After)" || fail "no Retry-After"
# The attacker's rate: 100 requests at once from 127.0.0.3 (a burst of 40, 5 a second).
read -r n200 n429 retry <<<"$(edge "$(portof "$GWB")" rate 127.0.0.3 100 /v1/skus/EDGE)"
say "the attacker's 100 requests: $n200 answered 200, $n429 answered 429 (Retry-After: $retry)"
[ "$n429" -ge 30 ] && [ "$n200" -ge 40 ] || fail "rate: expected 429s past the burst of 40 ($n200 x 200, $n429 x 429)"
[ "$n429" -eq 0 ] || [ "$retry" != none ] || fail "rate_limited without Retry-After"
# The honest buyer, meanwhile, on 127.0.0.1.
B=$(uuid)
assert_posted "$(req POST /v1/skus/EDGE/buys -H "$J" -H "Idempotency-Key: $B" -d '{"buyer_id":"bob","qty":1}')" "bob's buy"
assert_eq 200 "$(req GET "/v1/intents/$B?wait=10")" "bob's long-poll"
assert_eq held "$(body_field outcome)" "bob holds"
curl -s -N --max-time 2 "$GWB/v1/intents/$B/events" >"$IT_DIR/bob.sse" 2>/dev/null || true
grep -q '"outcome":"held"' "$IT_DIR/bob.sse" && say "ok: bob's event stream" || fail "bob's event stream: $(head -c 300 "$IT_DIR/bob.sse")"
# The attacker closes its streams: its slots come back.
touch "$FLAG"
wait "$holdpid"
wait_until 5 "the attacker's slots back" "[ \$(req GET '/v1/intents/$H?wait=0.1' --interface 127.0.0.2) = 200 ]"
say "ok: the attacker's long-poll is served again once its streams closed"

# ---- the metrics ----
for m in "$MA bad_framing 2" "$MA bad_path 1" "$MA request_deadline 1" "$MB too_many_waits 2" "$MB rate_limited 30"; do
	set -- $m
	v=$(metric_sum "$1" "flashsale_gateway_refused_total\\{reason=\"$2\"\\}")
	[ "$v" -ge "$3" ] && say "ok: refused{reason=$2} = $v" || fail "refused{reason=$2} = $v, expected >= $3"
done
v=$(metric_sum "$MA" flashsale_gateway_clients_gone_total)
[ "$v" -ge 1000 ] && say "ok: clients_gone_total = $v" || fail "clients_gone_total = $v, expected >= 1000"
# Every family the gateway serves is on docs/reference/metrics.md, with its labels.
curl -s --max-time 5 "$MB/metrics" >"$IT_DIR/metrics.txt"
python3 "$IT_ROOT/tests/prometheus/metrics_doc.py" "$IT_ROOT/docs/reference/metrics.md" "$IT_DIR/metrics.txt" ||
	fail "the gateway's metrics and docs/reference/metrics.md differ"
audit_ok
it_done
