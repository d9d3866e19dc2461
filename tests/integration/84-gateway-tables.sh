#!/usr/bin/env bash
# Abuse bounded at the gateway: its tables and Postgres (issue 48, item 5, second half), on
# the real services, the test playing the attacker from 127.0.0.1 (every loop bounded in
# count and time):
#   1. Junk SKU names (event streams of 5,000 SKUs no sale has, against a SKU table of
#      skus.max = 6): the table keeps only the SKUs the stock topic named, /readyz stays 200;
#      a sale opened after it still gets its counter (a stream opened before its sale gets
#      the first stock record), its edge sold-out flag and its waiting room's flag.
#   2. Junk rooms (16 waiting rooms no sale has, read between every read of the real room's
#      place): the real room is read from Postgres about twice a second as before, not once a
#      read (counted on Postgres: scans of room_joins, after the gateway's session ended).
#   3. Random intent ids: the Postgres lookups stay within lookups.unknown.rate (the bucket's
#      second plus the rate over the time taken), the others are answered 503 busy with
#      Retry-After; an honest buyer's POST and its GET meanwhile get their answers.
#   4. The SKU table full (as many real sales as skus.max): /readyz 503 naming
#      sku_table_full, the metrics say which.
# TABLES_SKUS_MAX (6; empty: the gateway's default) and TABLES_JUNK (5000) size phase 1.
. "$(dirname "$0")/lib.sh"
it_setup 1
python3 -c 'import secrets; print("k1", secrets.token_hex(32)); print("sign k1")' >"$IT_DIR/keys"
chmod 600 "$IT_DIR/keys"
echo "admission.keys = $IT_DIR/keys" >>"$IT_DIR/flashsale.conf"
SKUS_MAX=${TABLES_SKUS_MAX-6}
JUNK=${TABLES_JUNK:-5000}
RATE=20
start_worker w1
wait_until 60 "w1 to be assigned its partition" "grep -q 'partition 0 assigned' '$IT_DIR/w1.log'"
it_admin_token
set -- --set admin.token.file="$IT_DIR/admin-token" --set metrics.listen=127.0.0.1:0 \
	--set lookups.unknown.rate=$RATE
[ -z "$SKUS_MAX" ] || set -- "$@" --set skus.max="$SKUS_MAX"
start_gateway gw "$@"
M=http://127.0.0.1:$(metrics_port gw)
J='Content-Type: application/json'
A="Authorization: Bearer $TOKEN"
wait_until 30 "readyz" "[ \$(req GET /readyz) = 200 ]"
now_ms() { date +%s%3N; }
seed() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
uuid() { python3 -c 'import uuid; print(uuid.uuid4())'; }
status_of() { req GET "/v1/skus/$1" >/dev/null; body_field status; }
HOST=${GW#http://}

# The attacker: raw requests on many connections, from Python (curl per request is too slow).
cat >"$IT_DIR/attack.py" <<'EOF'
import http.client, socket, sys, threading, time, uuid
host, port = sys.argv[2].rsplit(":", 1)
port = int(port)
deadline = time.time() + 40
def streams(n):  # GET /v1/skus/{junk}/events: open, read the headers, close
    def run(lo, hi):
        for i in range(lo, hi):
            if time.time() > deadline:
                return
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(b"GET /v1/skus/JUNK-%d/events HTTP/1.1\r\nHost: t\r\n\r\n" % i)
            try:
                s.recv(512)
            except OSError:
                pass
            s.close()
    ts = [threading.Thread(target=run, args=(k * n // 4, (k + 1) * n // 4)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
def rooms(sku, buyer, n):  # each read of the real room's place after 16 junk rooms
    c = http.client.HTTPConnection(host, port, timeout=10)
    bad = 0
    for i in range(n):
        for k in range(16):
            c.request("GET", "/v1/skus/JROOM-%d/queue/%s" % (k, buyer))
            c.getresponse().read()
        c.request("GET", "/v1/skus/%s/queue/%s" % (sku, buyer))
        r = c.getresponse()
        r.read()
        bad += r.status != 200
        if time.time() > deadline:
            break
    print(bad)
def ids(n):  # GET /v1/intents/{random}: prints counts by status, and Retry-After seen
    counts, retry = {}, set()
    lock = threading.Lock()
    def run(m):
        c = http.client.HTTPConnection(host, port, timeout=10)
        for _ in range(m):
            c.request("GET", "/v1/intents/%s" % uuid.uuid4())
            r = c.getresponse()
            r.read()
            with lock:
                counts[r.status] = counts.get(r.status, 0) + 1
                if r.status == 503:
                    retry.add(r.getheader("Retry-After"))
            if time.time() > deadline:
                return
    ts = [threading.Thread(target=run, args=(n // 4,)) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(" ".join("%d=%d" % kv for kv in sorted(counts.items())), "retry-after=" + ",".join(sorted(str(x) for x in retry)))
mode = sys.argv[1]
if mode == "streams":
    streams(int(sys.argv[3]))
elif mode == "rooms":
    rooms(sys.argv[3], sys.argv[4], int(sys.argv[5]))
else:
    ids(int(sys.argv[3]))
EOF

# Two sales before the attack: PLAIN, and ROOM behind a waiting room that opens in 10 minutes
# (no admission during the test: the room's rows are only read).
assert_eq 202 "$(req POST /v1/skus/PLAIN/open -H "$J" -H "$A" -d '{"stock":100,"per_buyer_limit":5}')" "open PLAIN"
fs sale open ROOM --stock 5 --per-buyer 1 --opens-at $(($(now_ms) + 600000)) \
	--admission-rate 10 --token-seconds 60 --draw-seed "$(seed)" --wait 30 >/dev/null || die "the room's sale"
assert_eq 202 "$(req POST /v1/skus/ROOM/queue -H "$J" -d '{"buyer_id":"rb-1"}')" "rb-1 joins"
wait_until 30 "the join" "[ \$(sql \"SELECT count(*) FROM room_joins WHERE sku = 'ROOM'\") = 1 ]"
wait_until 30 "the gateway to know both sales" "[ \"\$(status_of PLAIN)\" = open ] && [ -n \"\$(status_of ROOM)\" ]"

# ---- 1. junk SKU names ------------------------------------------------------------------------
# A page waiting for a sale not open yet: its stream must get the sale's first record.
curl -s -N --max-time 60 "$GW/v1/skus/NEWS/events" >"$IT_DIR/news-stream" &
t0=$SECONDS
python3 "$IT_DIR/attack.py" streams "$HOST" "$JUNK" || die "the junk streams"
say "$JUNK junk SKU streams opened and closed in $((SECONDS - t0)) s"
assert_eq 200 "$(req GET /readyz)" "1: readyz after the junk SKUs ($(cat "$IT_DIR/body"))"
skus=$(metric_sum "$M" 'flashsale_gateway_skus')
if [ "$(metric_count "$M" 'flashsale_gateway_skus')" = 1 ] && [ "$skus" = 2 ]; then
	say "ok: 1: the SKU table holds the 2 real SKUs only"
else
	fail "1: the SKU table holds $skus SKUs after $JUNK junk names (want 2, the real ones)"
fi
# A new sale after it: its counter, its edge sold-out flag, its room's flag.
assert_eq 202 "$(req POST /v1/skus/NEWS/open -H "$J" -H "$A" -d '{"stock":1,"per_buyer_limit":1}')" "open NEWS"
wait_until 20 "NEWS's first stock record on the stream opened before its sale" "grep -q '^event: stock' '$IT_DIR/news-stream'"
assert_eq 202 "$(req POST /v1/skus/NEWS/buys -H "$J" -H "Idempotency-Key: $(uuid)" -d '{"buyer_id":"nb-1","qty":1}')" "1: the one unit's buy"
wait_until 20 "NEWS sold out at the gateway" "[ \"\$(status_of NEWS)\" = sold_out ]"
assert_eq 200 "$(req POST /v1/skus/NEWS/buys -H "$J" -H "Idempotency-Key: $(uuid)" -d '{"buyer_id":"nb-2","qty":1}')" "1: a buy after the sell-out"
assert_eq "edge|sold_out" "$(body_field source)|$(body_field outcome)" "1: a buy after the sell-out answered at the edge"
fs sale open NEWR --stock 5 --per-buyer 1 --opens-at $(($(now_ms) + 600000)) \
	--admission-rate 10 --token-seconds 60 --draw-seed "$(seed)" --wait 30 >/dev/null || die "NEWR's sale"
wait_until 20 "NEWR known at the gateway" "[ -n \"\$(status_of NEWR)\" ]"
edge0=$(metric_sum "$M" 'flashsale_gateway_edge_answers_total\{outcome="sold_out"\}')
st=$(req POST /v1/skus/NEWR/buys -H "$J" -H "Idempotency-Key: $(uuid)" -d '{"buyer_id":"nr-1","qty":1}')
[ "$st" = 403 ] || fail "1: a buy of NEWR without a token: $st $(cat "$IT_DIR/body") (want 403 at the edge: the room's flag)"
say "ok: 1: the new sales' counter, sold-out flag ($edge0 at the edge) and room flag ($(body_field error)) work"

# ---- 2. junk rooms ------------------------------------------------------------------------------
scans() { sql "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'room_joins'"; }
gw_sessions() { sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'flashsale-gateway'"; }
# The gateway's session ends, so that Postgres counts its reads so far (a backend's table
# counters reach pg_stat_user_tables when it leaves; the gateway connects again on its next
# lookup).
# The lookup that finds its connection gone is answered 503 store_unavailable (Retry-After),
# and the next connects again: a read of rb-1's place, retried as a client would, does that.
end_sessions() {
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'flashsale-gateway'" >/dev/null
	wait_until 10 "the gateway's Postgres session to end" "[ \$(gw_sessions) = 0 ]"
}
reconnect() { wait_until 10 "a lookup again" "sleep 0.6; [ \$(req GET /v1/skus/ROOM/queue/rb-1) = 200 ]"; }
end_sessions
reconnect
s0=$(scans)
t0=$(now_ms)
N=100
bad=$(python3 "$IT_DIR/attack.py" rooms "$HOST" ROOM rb-1 $N) || die "the junk rooms"
ms=$(($(now_ms) - t0))
end_sessions
reads=$(($(scans) - s0))
reconnect
# Cached, the room is read once per GW_ROOM_REFRESH_MS (500 ms) at most, plus the first and
# the reconnecting read before s0 (counted when its session ends).
max=$((ms / 500 + 4))
say "2: $N reads of the real room's place among $((N * 16)) of junk rooms in $ms ms: $reads reads of room_joins (at most $max allowed), $bad not 200"
[ "$reads" -le "$max" ] || fail "2: junk rooms pushed the real room out of the cache: $reads Postgres reads for $N place reads in $ms ms"
[ "$bad" = 0 ] || fail "2: $bad of the real room's place reads not answered 200"
# Junk rooms did reach Postgres (the bucket's second's worth), and still pushed nothing out.
other=$(metric_sum "$M" 'flashsale_gateway_room_reads_total\{room="other"\}')
[ "$other" -ge 16 ] || fail "2: only $other junk rooms were read: the cache's admission was not tried"
st=$(req GET /v1/skus/ROOM/queue/rb-1)
assert_eq "200|waiting" "$st|$(body_field status)" "2: rb-1's place"

# ---- 3. random intent ids -----------------------------------------------------------------------
# The bucket is full again after a quiet second or more.
sleep 1.5
l0=$(metric_sum "$M" 'flashsale_gateway_lookups_total')
t0=$(now_ms)
python3 "$IT_DIR/attack.py" ids "$HOST" 800 >"$IT_DIR/ids.out" &
apid=$!
# An honest buyer behind the same gateway meanwhile: her POST, then her GET, answered.
K=$(uuid)
assert_eq 202 "$(req POST /v1/skus/PLAIN/buys -H "$J" -H "Idempotency-Key: $K" -d '{"buyer_id":"honest","qty":1}')" "3: the honest buy"
st=$(req GET "/v1/intents/$K?wait=10")
assert_eq "200|held" "$st|$(body_field outcome)" "3: the honest buyer's answer during the attack"
wait "$apid" || die "the random ids"
ms=$(($(now_ms) - t0))
l1=$(metric_sum "$M" 'flashsale_gateway_lookups_total')
out=$(cat "$IT_DIR/ids.out")
# One second's worth at once, then RATE a second; +5 for the honest buyer's own.
max=$((RATE + RATE * ms / 1000 + 5))
say "3: 800 random ids in $ms ms: $((l1 - l0)) Postgres lookups (at most $max allowed); answers: $out"
[ $((l1 - l0)) -le "$max" ] || fail "3: random ids drove $((l1 - l0)) Postgres lookups in $ms ms (bound $max)"
case "$out" in *"503="*"retry-after=1"*) ;; *) fail "3: no 503 busy with Retry-After: $out" ;; esac
refused=$(metric_sum "$M" 'flashsale_gateway_unknown_lookups_total\{verdict="refused"\}')
if [ "$refused" -gt 0 ]; then
	say "ok: 3: unknown ids bounded ($refused refused), the honest buyer answered"
else
	fail "3: no refusal counted (flashsale_gateway_unknown_lookups_total)"
fi

# ---- 4. the SKU table full ----------------------------------------------------------------------
if [ -n "$SKUS_MAX" ]; then
	n=$(metric_sum "$M" 'flashsale_gateway_skus')
	i=0
	while [ "$n" -lt "$SKUS_MAX" ] && [ $i -lt 20 ]; do
		i=$((i + 1))
		assert_eq 202 "$(req POST /v1/skus/FILL$i/open -H "$J" -H "$A" -d '{"stock":1}')" "open FILL$i"
		wait_until 20 "FILL$i at the gateway" "[ \$(metric_sum \"$M\" 'flashsale_gateway_skus') -gt $n ]"
		n=$(metric_sum "$M" 'flashsale_gateway_skus')
	done
	assert_eq 503 "$(req GET /readyz)" "4: readyz with the SKU table full"
	assert_eq sku_table_full "$(body_field full)" "4: readyz names the table"
	assert_eq 1 "$(metric_sum "$M" 'flashsale_gateway_full\{table="sku_table_full"\}')" "4: the metric names it"
	assert_eq 0 "$(metric_sum "$M" 'flashsale_gateway_ready')" "4: not ready"
	# One more sale: its stock is not kept, and counted.
	assert_eq 202 "$(req POST /v1/skus/OVER/open -H "$J" -H "$A" -d '{"stock":1}')" "open OVER"
	wait_until 20 "OVER refused by the full table" "[ \$(metric_sum \"$M\" 'flashsale_gateway_skus_refused_total') -ge 1 ]"
	say "ok: 4: a full SKU table fails readyz (sku_table_full) and is counted"
fi
audit_ok
it_done
