#!/usr/bin/env bash
# PostgreSQL over TLS with sslmode=verify-full (issue 48, item 4; docs/reference/operations.md,
# "The database role"): a throw-away PostgreSQL cluster of the test's own (the shared one is
# left alone: turning TLS on there would move every other client onto it), on a free loopback
# port, that takes SCRAM over TLS only (hostssl; hostnossl rejected), its certificate for
# 127.0.0.1 signed by a throw-away CA made here. Then:
#   1. psql with sslmode=verify-full and the CA: connected, over TLS (pg_stat_ssl);
#   2. refused, each with libpq's reason: another CA ("certificate verify failed"), a host name
#      the certificate does not name (localhost: "does not match host name"), no TLS at all
#      (pg_hba: "no encryption");
#   3. a worker and the CLI whose conninfo says sslmode=verify-full decide a sale (the shared
#      broker, the test's own topics): every buy decided, the stock held exactly, audit clean;
#   4. the CLI with the other CA fails with "certificate verify failed"; a worker with it
#      reports the same in its log (and retries, as for any Postgres that is not there yet).
. "$(dirname "$0")/lib.sh"
PG_BIN=$(pg_config --bindir 2>/dev/null || true)
[ -x "$PG_BIN/initdb" ] || PG_BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
[ -x "$PG_BIN/initdb" ] || die "no PostgreSQL server binaries (initdb)"
D=$(mktemp -d "${TMPDIR:-/tmp}/flashsale-pgtls.XXXXXX")
chmod 755 "$D"
PG_DATA=$D/data
# The server refuses to run as root: then it runs as the OS user postgres (scripts/services too).
as_pg() { if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
PG_PORT=
cleanup() {
	local rc=$?
	for pid in "${IT_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	[ ! -f "$PG_DATA/postmaster.pid" ] || as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -s stop >/dev/null 2>&1 || true
	[ -z "${CONF:-}" ] || "$IT_BUILD/flashsale" -c "$CONF" topics delete >/dev/null 2>&1 || true
	if [ "$rc" -eq 0 ] && [ "$IT_FAILED" -eq 0 ]; then rm -rf "$D"; else say "kept $D"; tail -n 20 "$D"/*.log 2>/dev/null || true; fi
}
trap cleanup EXIT

# ---- a throw-away CA, another one, and the server's certificate (127.0.0.1 only) -----------
(
	cd "$D" && umask 077 && set -e
	for ca in ca other-ca; do
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$ca.key" \
			-out "$ca.pem" -days 2 -subj "/CN=flashsale test $ca" -addext basicConstraints=critical,CA:TRUE
	done
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
		-out server.csr -subj "/CN=flashsale-pg"
	openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 8)" \
		-out server.pem -days 2 -extfile <(echo 'subjectAltName=IP:127.0.0.1')
	chmod 644 ca.pem other-ca.pem server.pem
) >"$D/tls.log" 2>&1 || die "openssl failed (see $D/tls.log)"

# ---- the cluster: SCRAM over TLS only ----------------------------------------------------
PW=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
(umask 077 && printf '%s\n' "$PW" >"$D/initdb.pw")
mkdir -m 700 "$PG_DATA"
[ "$(id -u)" -ne 0 ] || chown postgres: "$D/initdb.pw" "$D/server.key" "$PG_DATA"
touch "$D/postgres.log"
[ "$(id -u)" -ne 0 ] || chown postgres: "$D/postgres.log"
as_pg "$PG_BIN/initdb" -D "$PG_DATA" -A scram-sha-256 --pwfile="$D/initdb.pw" -U postgres -E UTF8 \
	--no-locale --nosync >"$D/initdb.log" 2>&1 || die "initdb failed (see $D/initdb.log)"
rm -f "$D/initdb.pw"
for _ in 1 2 3 4 5 6 7 8 9 10; do # a free port
	p=$((20000 + RANDOM % 20000))
	(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { PG_PORT=$p; break; }
done
[ -n "$PG_PORT" ] || die "no free port"
as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
max_connections = 40
ssl = on
ssl_cert_file = '$D/server.pem'
ssl_key_file = '$D/server.key'
EOF
printf '%s\n' 'hostssl   all all 127.0.0.1/32 scram-sha-256' 'hostnossl all all 127.0.0.1/32 reject' |
	as_pg tee "$PG_DATA/pg_hba.conf" >/dev/null
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$D/postgres.log" -w -t 30 -s start || die "pg_ctl start failed (see $D/postgres.log)"
(umask 077 && printf '127.0.0.1:%s:*:postgres:%s\n' "$PG_PORT" "$PW" >"$D/pgpass")
BASE="host=127.0.0.1 port=$PG_PORT user=postgres passfile=$D/pgpass"
GOOD="$BASE sslmode=verify-full sslrootcert=$D/ca.pem"
say "a cluster on 127.0.0.1:$PG_PORT, TLS only, its certificate for 127.0.0.1 from a throw-away CA"

# ---- 1, 2: psql ----------------------------------------------------------------------------
assert_eq t "$(psql "$GOOD dbname=postgres" -X -At -c 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')" \
	"verify-full with the CA: connected over TLS"
refused() { # refused WHAT CONNINFO TEXT
	local out
	if out=$(psql "$2 dbname=postgres" -X -At -c 'SELECT 1' 2>&1); then
		fail "$1: connected"
	elif grep -q "$3" <<<"$out"; then
		say "ok: $1 refused: $(grep -o "$3.*" <<<"$out" | head -n 1 | cut -c1-120)"
	else
		printf '%s\n' "$out"
		fail "$1: refused, but not saying '$3'"
	fi
}
refused "another CA" "$BASE sslmode=verify-full sslrootcert=$D/other-ca.pem" "certificate verify failed"
refused "a host name the certificate does not name" \
	"host=localhost port=$PG_PORT user=postgres passfile=$D/pgpass sslmode=verify-full sslrootcert=$D/ca.pem" \
	"does not match host name"
refused "no TLS" "$BASE sslmode=disable" "no encryption"

# ---- 3: a worker and the CLI over verify-full --------------------------------------------------
DB=fs_pgtls_$RANDOM$RANDOM
psql "$GOOD dbname=postgres" -X -q -c "CREATE DATABASE $DB" || die "create database"
for f in "$IT_ROOT"/sql/*.sql; do
	PGOPTIONS='-c client_min_messages=warning' psql "$GOOD dbname=$DB" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null ||
		die "applying $f"
done
ID=pgtls_$(date +%s)_$RANDOM
CONF=$D/flashsale.conf
cat >"$CONF" <<EOF
brokers = $FLASHSALE_KAFKA
pg = $GOOD dbname=$DB
group = it-$ID
topic.intents = it.$ID.intents
topic.results = it.$ID.results
topic.stock = it.$ID.stock
EOF
chmod 600 "$CONF"
unset FLASHSALE_PG FLASHSALE_KAFKA
fs() { "$IT_BUILD/flashsale" -c "$CONF" "$@"; }
fs topics create --partitions 2 >/dev/null || die "topics create"
"$IT_BUILD/flashsale-worker" -c "$CONF" >"$D/w1.log" 2>&1 &
W1=$!
IT_PIDS+=("$W1")
wait_until 60 "w1 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$D/w1.log'"
fs sale open TLS1 --stock 5 --wait 30 >/dev/null || die "sale open"
for i in $(seq 1 12); do fs buy TLS1 --buyer "b$i" >/dev/null || die "buy $i"; done
fs wait --timeout 60 --quiet || die "records not decided in time"
sqlg() { psql "$GOOD dbname=$DB" -X -q -t -A -c "$1"; }
assert_eq 12 "$(sqlg "SELECT count(*) FROM decisions WHERE sku = 'TLS1'")" "buys decided through a worker on verify-full"
assert_eq "5|0" "$(sqlg "SELECT held, available FROM skus WHERE sku = 'TLS1'")" "TLS1 held|available"
# The worker's sessions (its own and its committers') are there, each over TLS.
sessions=$(sqlg "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = '$DB' AND a.pid <> pg_backend_pid()")
[ "${sessions% *}" -ge 1 ] && [ "${sessions#* }" = 0 ] && say "ok: the worker's ${sessions% *} sessions all over TLS" ||
	fail "the worker's sessions over TLS / not: $sessions"
kill -TERM "$W1"
wait_until 30 "w1 to stop" "! alive $W1"
wait "$W1" || fail "the worker exited non-zero (see $D/w1.log)"
if fs audit >"$D/audit.txt" 2>&1; then say "ok: audit (over verify-full)"; else cat "$D/audit.txt"; fail "audit"; fi

# ---- 4: the other CA ----------------------------------------------------------------------
WRONG=(--set "pg=$BASE sslmode=verify-full sslrootcert=$D/other-ca.pem dbname=$DB")
if out=$(fs "${WRONG[@]}" summary 2>&1); then
	fail "the CLI with another CA connected"
elif grep -q "certificate verify failed" <<<"$out"; then
	say "ok: the CLI with another CA refused: $(grep -o 'certificate verify failed' <<<"$out" | head -n 1)"
else
	printf '%s\n' "$out"
	fail "the CLI with another CA failed without saying why"
fi
"$IT_BUILD/flashsale-worker" -c "$CONF" "${WRONG[@]}" >"$D/w2.log" 2>&1 &
IT_PIDS+=($!)
wait_until 30 "the worker with another CA to report it" "grep -q 'certificate verify failed' '$D/w2.log'"
say "ok: a worker with another CA reports: $(grep -o 'certificate verify failed.*' "$D/w2.log" | head -n 1 | cut -c1-100)"
it_done
