#!/usr/bin/env bash
# The broker's own defence, for real (issue 48, item 4; docs/reference/operations.md, "A secured
# broker"): `scripts/services secure-up` runs a second local broker that takes SASL/SCRAM-SHA-512
# over TLS only, with ACLs: the web tier's principal (web) may write the intents topic and read
# results and stock, the workers' (worker) what a worker needs, admin (operators) is a super
# user. Against it, each with its own principal and a password from a 0600 file:
#   1. a password file others may read is refused at start, naming the file; a wrong password
#      stops the worker and the gateway within seconds, non-zero, with "kafka authentication
#      failed" (librdkafka alone would retry it for ever, like an outage), and fails the CLI's
#      buy at once (not after its 60 s publish timeout);
#   2. a worker (worker), the CLI (admin: sale open; web: buy), the gateway (web) and the web-tier
#      clients of test 45 (web) sell 3 SKUs: each holds exactly its stock, every client's buys
#      delivered, the CLI's and the gateway's buys answered `held`;
#   3. web is refused writing the results and stock topics and reading intents (the broker's
#      "Topic authorization failed"), and joining the workers' consumer group;
#   4. the worker stops cleanly and the audit (with its replay of the log) is clean.
# The secured broker is started if down and left running for the next run (scripts/services
# secure-down or down stops it); the test's topics and ACLs are its own (it.ID.*).
. "$(dirname "$0")/lib.sh"
SERVICES=$IT_ROOT/scripts/services
CLIENTS=$IT_ROOT/tests/clients
SKUS=(SKU1 SKU2 SKU5)
declare -A STOCK=([SKU1]=20 [SKU2]=15 [SKU5]=10)
PER_SKU=10 # buyers per SKU from each web-tier client

"$SERVICES" secure-up >"${TMPDIR:-/tmp}/79-secure-up.$$" 2>&1 || {
	cat "${TMPDIR:-/tmp}/79-secure-up.$$"
	die "scripts/services secure-up failed"
}
rm -f "${TMPDIR:-/tmp}/79-secure-up.$$"
# shellcheck disable=SC1091
. "$IT_ROOT/.local/kafka-secure/env"
SKC=$FLASHSALE_SECURE_KAFKA_DIR/clients
SKS=$FLASHSALE_SECURE_KAFKA_DIR/secrets
CA=$FLASHSALE_SECURE_KAFKA_DIR/ca.pem
kc() { timeout 30 kcat -F "$SKC/$1.kcat" "${@:2}" 2>&1; } # kc USER KCAT_ARGS...: kcat as USER
# `services secure-up` made the three topics on the secured cluster.
assert_eq 3 "$(kc admin -L | grep -cE '^ *topic "(intents|results|stock)" with 4 partitions')" \
	"topics intents, results and stock (4 partitions each) that secure-up made"

# The operators' principal for the CLI (the configuration's own); the worker and the web tier
# get theirs with --set.
FLASHSALE_KAFKA=$FLASHSALE_SECURE_KAFKA
GROUP=flashsale-workers-it79-$RANDOM$RANDOM
IT_CONF_EXTRA="$(grep -v '^brokers\|^#' "$SKC/admin.conf")
group = $GROUP"
it_setup 4
"$SERVICES" secure-up "it.$IT_ID." >"$IT_DIR/secure-up.log" 2>&1 || die "secure-up it.$IT_ID. failed (see $IT_DIR/secure-up.log)"
say "$(grep -c 'granted' "$IT_DIR/secure-up.log") ACL grant on it.$IT_ID.*: $(grep granted "$IT_DIR/secure-up.log" | sed 's/.*granted //')"
# as USER [PASSWORD_FILE]: the options that make a flashsale program USER, one a line.
as() { printf '%s\n' --set "kafka.sasl.username=$1" --set "kafka.sasl.password.file=${2:-$SKS/$1.password}"; }
mapfile -t AS_WORKER < <(as worker)
mapfile -t AS_WEB < <(as web)
mapfile -t AS_OPEN < <(as worker "$IT_DIR/open.password")
mapfile -t AS_WRONG_W < <(as worker "$IT_DIR/wrong.password")
mapfile -t AS_WRONG_WEB < <(as web "$IT_DIR/wrong.password")

# ---- 1. refused credentials ---------------------------------------------------------------
cp "$SKS/worker.password" "$IT_DIR/open.password"
chmod 644 "$IT_DIR/open.password"
rc=0
timeout 20 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" "${AS_OPEN[@]}" >"$IT_DIR/w-open.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'kafka.sasl.password.file .*/open.password: readable or writable by group or others (mode 644)' "$IT_DIR/w-open.log" &&
	say "ok: a password file of mode 0644 refused at start (exit $rc): $(grep -o 'kafka.sasl.password.file.*' "$IT_DIR/w-open.log" | head -n 1)" ||
	{ cat "$IT_DIR/w-open.log"; fail "a worker with a password file of mode 0644 did not refuse to start naming the file and its mode (exit $rc)"; }

(umask 077 && echo wrong-password >"$IT_DIR/wrong.password")
t0=$(date +%s%3N)
rc=0
timeout 40 "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" "${AS_WRONG_W[@]}" >"$IT_DIR/w-wrong.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'kafka authentication failed: .*SCRAM-SHA-512' "$IT_DIR/w-wrong.log" &&
	say "ok: a worker with a wrong password stopped in $(($(date +%s%3N) - t0)) ms (exit $rc): $(grep -o 'kafka authentication failed.*' "$IT_DIR/w-wrong.log" | head -n 1 | cut -c1-160)" ||
	{ tail -n 20 "$IT_DIR/w-wrong.log"; fail "a worker with a wrong password did not stop saying 'kafka authentication failed' (exit $rc after $(($(date +%s%3N) - t0)) ms)"; }
t0=$(date +%s%3N)
rc=0
timeout 40 "$IT_BUILD/flashsale-gateway" -c "$IT_DIR/flashsale.conf" --set listen=127.0.0.1:0 "${AS_WRONG_WEB[@]}" >"$IT_DIR/gw-wrong.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'kafka authentication failed: .*SCRAM-SHA-512' "$IT_DIR/gw-wrong.log" &&
	say "ok: a gateway with a wrong password stopped in $(($(date +%s%3N) - t0)) ms (exit $rc)" ||
	{ tail -n 20 "$IT_DIR/gw-wrong.log"; fail "a gateway with a wrong password did not stop saying 'kafka authentication failed' (exit $rc after $(($(date +%s%3N) - t0)) ms)"; }
t0=$(date +%s%3N)
rc=0
out=$(timeout 40 "$IT_BUILD/flashsale" -c "$IT_DIR/flashsale.conf" "${AS_WRONG_WEB[@]}" buy SKU1 --buyer wrong-1 2>&1) || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q '^flashsale: buy: kafka authentication failed: .*SCRAM-SHA-512' <<<"$out" &&
	say "ok: the CLI with a wrong password failed in $(($(date +%s%3N) - t0)) ms (exit $rc)" ||
	{ printf '%s\n' "$out" | tail -n 5; fail "the CLI with a wrong password did not fail saying 'kafka authentication failed' (exit $rc after $(($(date +%s%3N) - t0)) ms)"; }

# ---- 2. a sale through the secured broker ----------------------------------------------------
"$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" "${AS_WORKER[@]}" >>"$IT_DIR/w1.log" 2>&1 &
IT_PID_w1=$!
IT_PIDS+=($!)
wait_until 60 "w1 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w1.log'"
for s in "${SKUS[@]}"; do
	fs sale open "$s" --stock "${STOCK[$s]}" --wait 30 >/dev/null || die "sale open $s (as admin) failed"
done
say "ok: the CLI (admin) opened ${SKUS[*]}"
CLI_ID=$(fs "${AS_WEB[@]}" buy SKU1 --buyer cli-1) || die "the CLI's buy (as web) failed"
fs result "$CLI_ID" --wait 30 --json >"$IT_DIR/cli-result.json" || die "no result for the CLI's buy"
assert_eq held "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["outcome"])' "$IT_DIR/cli-result.json")" "the CLI's buy (as web)"

start_gateway gw "${AS_WEB[@]}"
wait_until 30 "the gateway (as web) to be ready" "[ \"\$(req GET /readyz)\" = 200 ]"
GW_IDS=()
for i in 1 2 3; do
	assert_eq 202 "$(req POST /v1/skus/SKU2/buys -H 'Content-Type: application/json' -d "{\"buyer_id\":\"gw-$i\",\"qty\":1}")" "the gateway's buy $i"
	GW_IDS+=("$(body_field intent_id)")
done
for id in "${GW_IDS[@]}"; do
	assert_eq 200 "$(req GET "/v1/intents/$id?wait=20")" "the gateway's answer to $id"
	assert_eq held "$(body_field outcome)" "the gateway's buy $id"
done

CLIENTS_RUN=()
for c in confluent kafka-python java kafkajs sarama franz-go; do
	if "$CLIENTS/run" --have "$c"; then CLIENTS_RUN+=("$c"); else say "SKIP: client $c is not set up here (scripts/setup says why)"; fi
done
total=$((1 + ${#GW_IDS[@]}))
for c in "${CLIENTS_RUN[@]}"; do
	t0=$(date +%s%3N)
	CLIENT_SASL_USERNAME=web CLIENT_SASL_PASSWORD_FILE=$SKS/web.password CLIENT_SSL_CA=$CA \
		"$CLIENTS/run" "$c" "$FLASHSALE_SECURE_KAFKA" "it.$IT_ID.intents" "$c" "$PER_SKU" "${SKUS[@]}" \
		>"$IT_DIR/$c.out" 2>"$IT_DIR/$c.log" || { tail -n 5 "$IT_DIR/$c.log"; fail "$c (as web) failed"; }
	assert_eq $((PER_SKU * ${#SKUS[@]})) "$(wc -l <"$IT_DIR/$c.out")" "$c (as web, SCRAM over TLS): buys delivered in $(($(date +%s%3N) - t0)) ms"
	total=$((total + $(wc -l <"$IT_DIR/$c.out")))
done
fs wait --timeout 60 --quiet || die "records not decided in time"
wait_until 60 "$total buys decided" "[ \$(sql 'SELECT count(*) FROM decisions') -ge $total ]"
for s in "${SKUS[@]}"; do
	assert_eq "${STOCK[$s]}|0" "$(sql "SELECT held, available FROM skus WHERE sku = '$s'")" "$s held|available ($total buys in all)"
done

# ---- 3. what the web tier's principal may not do ---------------------------------------------
refused() { # refused WHAT OUTPUT: the broker's authorization error, not a timeout
	grep -q "$3" <<<"$2" && say "ok: web is refused $1: $(grep -o "$3" <<<"$2" | head -n 1)" ||
		{ printf '%s\n' "$2" | tail -n 3; fail "web was not refused $1"; }
}
for t in results stock; do
	refused "writing $t" "$(echo '{"forged":1}' | kc web -P -t "it.$IT_ID.$t" -k SKU1)" "Topic authorization failed"
done
refused "reading intents" "$(kc web -C -t "it.$IT_ID.intents" -o beginning -e -q)" "Topic authorization failed"
refused "joining the workers' group" "$(kc web -C -G "$GROUP" "it.$IT_ID.results" -e -q -c 1)" "Group authorization failed"
assert_eq 0 "$(kc admin -C -t "it.$IT_ID.results" -o beginning -e -q -f '%s\n' | grep -c forged || true)" "forged records on the results topic"
assert_eq 0 "$(kc admin -C -t "it.$IT_ID.stock" -o beginning -e -q -f '%s\n' | grep -c forged || true)" "forged records on the stock topic"

# ---- 4. a clean end --------------------------------------------------------------------------
kill -TERM "$IT_PID_gw" 2>/dev/null || true
stop_worker w1
audit_ok
it_done
