# tests/integration/lib.sh: shared helpers of the integration tests (sourced, bash).
#
# Each test gets its own database and its own three topics (names carry the test name and a
# random suffix), so tests never see each other's records and can be rerun at will. The
# services themselves are the ones `scripts/services up` started (or FLASHSALE_KAFKA /
# FLASHSALE_PG). Nothing sleeps and hopes: every wait is a condition with a deadline.
# A passing test drops its database and deletes its topics; IT_KEEP=1 keeps them and the logs.
# IT_CONF_EXTRA: more configuration lines for the test (e.g. "commit.overlap = 0").
set -euo pipefail

IT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IT_BUILD=${FLASHSALE_BUILD:-$IT_ROOT/build}
IT_NAME=$(basename "$0" .sh)
IT_FAILED=0
IT_PIDS=()

if [ -z "${FLASHSALE_KAFKA:-}" ] || [ -z "${FLASHSALE_PG:-}" ]; then
	# shellcheck disable=SC1091
	[ -f "$IT_ROOT/.local/env" ] && . "$IT_ROOT/.local/env"
fi
: "${FLASHSALE_KAFKA:?run scripts/services up first}"
: "${FLASHSALE_PG:?run scripts/services up first}"
# The role that creates the test's database and owns its schema (the test's own `sql` runs as
# it, so that a test may alter its schema), and the application's, which the worker and the
# CLI log in as (scripts/services: SELECT, INSERT, UPDATE on the tables, nothing else).
IT_ADMIN_PG=${FLASHSALE_PG_ADMIN:-$FLASHSALE_PG}
IT_APP_BASE=$(printf '%s' "$FLASHSALE_PG" | sed -E 's/dbname=[^ ]+//')
# The gateway's read-only role (issue 48), when the services made one (scripts/services).
IT_GW_BASE=$(printf '%s' "${FLASHSALE_PG_GATEWAY:-}" | sed -E 's/dbname=[^ ]+//')

say() { printf '%s: %s\n' "$IT_NAME" "$*"; }
fail() {
	say "FAIL: $*"
	IT_FAILED=1
}
die() {
	say "FAIL: $*"
	exit 1
}

# assert_posted STATUS WHAT: a POST that publishes (a buy, a join, a confirm, a cancel) answers
# 202 once the broker has it, or 200 when its decision came back before the delivery report (a
# busy machine): both are right.
assert_posted() {
	case $1 in
	200 | 202) say "ok: $2 = $1" ;;
	*) fail "$2: expected 202 (or 200, decided first), got $1" ;;
	esac
}

# assert_eq EXPECTED ACTUAL WHAT
assert_eq() {
	if [ "$1" = "$2" ]; then
		say "ok: $3 = $2"
	else
		fail "$3: expected $1, got $2"
	fi
}

# sql QUERY: one value or rows, unaligned, from the test's database.
sql() { psql "$IT_PG" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }

# fs ARGS: the CLI with the test's configuration.
fs() { "$IT_BUILD/flashsale" -c "$IT_DIR/flashsale.conf" "$@"; }

# it_setup [PARTITIONS]: a fresh database, fresh topics, a configuration file.
it_setup() {
	local parts=${1:-1}
	IT_ID="${IT_NAME//[^a-z0-9]/_}_$(date +%s)_$RANDOM"
	IT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/flashsale-it.XXXXXX")
	IT_DB="fs_$IT_ID"
	psql "$IT_ADMIN_PG" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $IT_DB" >/dev/null
	IT_PG="$(printf '%s' "$IT_ADMIN_PG" | sed -E 's/dbname=[^ ]+//') dbname=$IT_DB"
	IT_APP_PG="$IT_APP_BASE dbname=$IT_DB"
	IT_GW_PG=
	[ -z "$IT_GW_BASE" ] || IT_GW_PG="$IT_GW_BASE dbname=$IT_DB"
	for f in "$IT_ROOT"/sql/*.sql; do
		PGOPTIONS='-c client_min_messages=warning' psql "$IT_PG" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null
	done
	cat >"$IT_DIR/flashsale.conf" <<-EOF
		brokers = $FLASHSALE_KAFKA
		pg = $IT_APP_PG
		group = it-$IT_ID
		topic.intents = it.$IT_ID.intents
		topic.results = it.$IT_ID.results
		topic.stock = it.$IT_ID.stock
		stats.interval.ms = 2000
		# Tests kill workers: let the group notice within seconds (broker minimum is 6 s).
		kafka.consumer.session.timeout.ms = 6000
		kafka.consumer.heartbeat.interval.ms = 500
		# Buyers unproven (issue 48, item 2): the tests' gateways listen on 127.0.0.1 only;
		# a test of the buyers' tokens sets auth.mode = jwt and mints them (it_jwt_keys).
		auth.mode = off
	EOF
	[ -z "$IT_GW_PG" ] || printf 'gateway.pg = %s\n' "$IT_GW_PG" >>"$IT_DIR/flashsale.conf"
	[ -z "${IT_CONF_EXTRA:-}" ] || printf '%s\n' "$IT_CONF_EXTRA" >>"$IT_DIR/flashsale.conf"
	# The payment provider's secret (issue 48, item 3): every gateway of the test takes it
	# (start_gateway), and sign_confirm signs with it as the provider does.
	IT_PAY_KEYS=$IT_DIR/payment.keys
	(umask 077 && printf 'pay1 %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$IT_PAY_KEYS")
	# The environment must not override the test's own database.
	unset FLASHSALE_PG FLASHSALE_KAFKA FLASHSALE_PG_GATEWAY
	fs topics create --partitions "$parts" >/dev/null
	say "database $IT_DB, topics it.$IT_ID.*, $parts partition(s), logs in $IT_DIR"
	trap it_cleanup EXIT
}

# start_worker NAME [VAR=VALUE...]: a worker in the background, log in $IT_DIR/NAME.log.
start_worker() {
	local name=$1
	shift
	env "$@" "$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" \
		>>"$IT_DIR/$name.log" 2>&1 &
	eval "IT_PID_$name=$!"
	IT_PIDS+=($!)
}

worker_pid() { eval "echo \${IT_PID_$1}"; }

# start_gateway NAME [ARGS...]: a flashsale-gateway on a free port (listen = 127.0.0.1:0
# unless ARGS set it) with the test's payment key ring (payment.secret.file = $IT_PAY_KEYS
# unless ARGS set it), log in $IT_DIR/NAME.log; waits until it listens and sets GW (its
# base URL) and IT_PID_NAME.
start_gateway() {
	local name=$1 port
	shift
	"$IT_BUILD/flashsale-gateway" -c "$IT_DIR/flashsale.conf" --set listen=127.0.0.1:0 \
		--set payment.secret.file="$IT_PAY_KEYS" "$@" \
		>>"$IT_DIR/$name.log" 2>&1 &
	eval "IT_PID_$name=$!"
	IT_PIDS+=($!)
	# The HTTP line ("listening on ADDR (port N): brokers ..."), not the metrics' one.
	wait_until 30 "gateway $name to listen" "grep -q 'listening on .*: brokers' '$IT_DIR/$name.log'"
	port=$(sed -n 's/.*listening on .* (port \([0-9]*\)): brokers.*/\1/p' "$IT_DIR/$name.log" | tail -n 1)
	GW=http://127.0.0.1:$port
}

# it_admin_token: a fresh admin token (128 bits, hex) in TOKEN, and in the private file
# $IT_DIR/admin-token (mode 0600) that the gateway reads: start_gateway NAME
# --set admin.token.file="$IT_DIR/admin-token" (a token is never on a command line, issue 48).
it_admin_token() {
	TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	(umask 077 && printf '%s\n' "$TOKEN" >"$IT_DIR/admin-token")
}

# it_jwt_keys: an HS256 key ring for the buyers' tokens in the private file $IT_DIR/jwt-keys
# (kid k1), its secret in JWT_SECRET; a gateway proves buyers with it when started with
# --set auth.mode=jwt --set auth.jwt.keys="$IT_DIR/jwt-keys" (issue 48, item 2).
it_jwt_keys() {
	JWT_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
	(umask 077 && printf 'k1 %s\n' "$JWT_SECRET" >"$IT_DIR/jwt-keys")
}
# mint_jwt BUYER [jwt_mint.py ARGS...]: a token for BUYER (its sub), HS256 under JWT_SECRET
# (kid k1), valid 10 minutes, as a shop's login would issue it (tests/clients/jwt_mint.py).
mint_jwt() {
	local sub=$1
	shift
	python3 "$IT_ROOT/tests/clients/jwt_mint.py" "$sub" --secret-hex "$JWT_SECRET" "$@"
}

# req METHOD PATH [CURL ARGS...]: one request to $GW; prints the status, leaves the body in
# $IT_DIR/body and the headers in $IT_DIR/headers.
req() {
	local method=$1 path=$2
	shift 2
	curl -s -o "$IT_DIR/body" -D "$IT_DIR/headers" -w '%{http_code}' -X "$method" "$@" \
		"$GW$path" || true
}
# sign_confirm BODY [T]: the header "Flashsale-Signature: t=T,v1=HEX" of a confirm whose body
# is BODY (the exact bytes sent, as curl -d "$BODY" sends them), signed now (or at T, UNIX
# seconds) with the test's payment key ring, as the payment provider signs
# (scripts/payment-stub sign). E.g.
#   b="{\"intent_id\":\"$K\",\"sku\":\"HOT\"}"
#   req POST "/v1/intents/$K/confirm" -H "$J" -H "$(sign_confirm "$b")" -d "$b"
sign_confirm() {
	local v
	v=$(python3 "$IT_ROOT/scripts/payment-stub" sign --keys "$IT_PAY_KEYS" ${2:+--t "$2"} -- "$1") || die "sign_confirm: cannot sign"
	printf 'Flashsale-Signature: %s' "$v"
}
# body_field NAME: a top-level member of the last body (empty if none).
body_field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else json.dumps(v) if isinstance(v, bool) else v)' "$IT_DIR/body" "$1" 2>/dev/null || true; }
# header_value NAME: a header of the last answer.
header_value() { tr -d '\r' <"$IT_DIR/headers" | awk -v n="$(echo "$1" | tr 'A-Z' 'a-z')" -F': ' 'tolower($1) == n { print $2 }'; }

# alive PID: the process exists and has not exited (a zombie counts as exited).
alive() {
	local state
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ]
}

# stop_worker NAME: SIGTERM, and wait (bounded) for a clean exit 0.
stop_worker() {
	local pid rc=0
	pid=$(worker_pid "$1")
	kill -TERM "$pid" 2>/dev/null || return 0
	wait_until 60 "worker $1 to exit" "! alive $pid"
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ] || fail "worker $1 exited with $rc (see $IT_DIR/$1.log)"
}

# kill_worker NAME: kill -9, reaped.
kill_worker() {
	local pid
	pid=$(worker_pid "$1")
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# wait_until SECONDS WHAT CONDITION: polls CONDITION (a shell snippet) until true.
wait_until() {
	local deadline=$((SECONDS + $1)) what=$2 cond=$3
	while ! eval "$cond"; do
		[ $SECONDS -lt $deadline ] || die "timed out after $1 s waiting for $what"
		sleep 0.2
	done
}

# decided: records decided so far over all partitions.
decided() { sql "SELECT coalesce(sum(n_records), 0) FROM partitions"; }

# results_keys: the intent ids keying the records of the results topic (one per line; the
# replies to sale records, keyed by SKU, are left out).
results_keys() {
	kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
		-t "it.$IT_ID.results" -o beginning -f '%k\n' | grep -E '^[0-9a-f]{8}-' || true
}

# results_dump: every result record's payload (one per line).
results_dump() {
	kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
		-t "it.$IT_ID.results" -o beginning -f '%s\n'
}

# stock_dump: every stock record, as KEY PAYLOAD (one per line).
stock_dump() {
	kcat -b "$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)" -C -q -e \
		-t "it.$IT_ID.stock" -o beginning -f '%k %s\n'
}

# audit_ok: the one checker (flashsale audit) must pass.
audit_ok() {
	if fs audit >"$IT_DIR/audit.txt" 2>&1; then
		say "ok: audit"
	else
		cat "$IT_DIR/audit.txt"
		fail "audit found violations"
	fi
}

it_cleanup() {
	local rc=$?
	# A stopped test's targets would keep Prometheus's alerts firing for later tests.
	[ ${#IT_PROM_FILES[@]} -eq 0 ] || rm -f "${IT_PROM_FILES[@]}"
	for pid in "${IT_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$rc" -eq 0 ] && [ "$IT_FAILED" -eq 0 ] && [ -z "${IT_KEEP:-}" ]; then
		psql "$IT_ADMIN_PG" -X -q -c "DROP DATABASE IF EXISTS $IT_DB" >/dev/null 2>&1 || true
		# The broker keeps every topic's logs, indexes and objects: a day of test runs left
		# 762 topics behind, and the heap the broker kept after each collection was ~115 MB
		# against ~80 MB without them.
		fs topics delete >/dev/null 2>&1 || true
		rm -rf "$IT_DIR"
	else
		say "kept database $IT_DB and logs in $IT_DIR"
		for f in "$IT_DIR"/*.log; do
			[ -f "$f" ] || continue
			say "--- tail of $f"
			tail -n 20 "$f"
		done
	fi
}

# it_done: the test's verdict (exit status).
it_done() {
	if [ "$IT_FAILED" -eq 0 ]; then
		say "PASS"
		exit 0
	fi
	say "FAIL"
	exit 1
}

# ---- Prometheus (issue 30): the local one of scripts/services prometheus-up --------------------
#
#   prom_up                          start it (or reload it) with short `for:` durations
#   prom_targets JOB [HOST:PORT...]  this test's targets of JOB for it (none: remove them)
#   prom_query PROMQL                print an instant query's answer
#   prom_wait_value SECONDS PROMQL VALUE   wait until prom_query prints VALUE
#   prom_wait_alert SECONDS ALERTNAME [MATCHERS]   wait until the alert fires
#   prom_check_metrics URL           tests/prometheus/check-metrics.sh (a failure fails the test)
#
# Prometheus scrapes every second and reads targets files as they change, so a worker or
# gateway started on a free port is scraped a second or two after prom_targets names it.

IT_PROM=http://127.0.0.1:${FLASHSALE_PROM_PORT:-59090}
IT_PROM_FILES=()

# prom_up: scripts/services prometheus-up, with every alert's `for:` cut to IT_PROM_RULES_FOR
# (1s unless set; set it empty for the shipped durations), so that an alert fires within
# seconds of its condition (its windows, 10-30 s, stay: docs/reference/operations.md).
prom_up() {
	FLASHSALE_PROM_RULES_FOR=${IT_PROM_RULES_FOR-1s} "$IT_ROOT/scripts/services" prometheus-up ||
		die "scripts/services prometheus-up failed"
}

# prom_targets JOB [HOST:PORT...]: JOB (flashsale-worker or flashsale-gateway) scrapes these
# addresses for this test, with the label it=IT_ID (it_setup's id; the test's name and pid
# before it_setup); a second call replaces them, none removes them. The file,
# .local/prometheus/targets/JOB-ID.json, is removed when the test ends.
prom_targets() {
	local job=$1 id=${IT_ID:-${IT_NAME}_$$} dir=$IT_ROOT/.local/prometheus/targets file
	shift
	case "$job" in
	flashsale-worker | flashsale-gateway) ;;
	*) die "prom_targets: the job must be flashsale-worker or flashsale-gateway, not '$job'" ;;
	esac
	file=$dir/$job-$id.json
	if [ $# -eq 0 ]; then
		rm -f "$file"
		return 0
	fi
	mkdir -p "$dir"
	# Renamed into place: Prometheus never reads a half-written file (a name not ending .json).
	python3 -c 'import json, sys; json.dump([{"targets": sys.argv[2:], "labels": {"it": sys.argv[1]}}], sys.stdout)' \
		"$id" "$@" >"$dir/.$job-$id.tmp"
	mv "$dir/.$job-$id.tmp" "$file"
	IT_PROM_FILES+=("$file")
	say "prometheus: $job scrapes $* (it=$id)"
}

# prom_query PROMQL: the answer of $IT_PROM/api/v1/query at this moment. One sample (or a
# scalar): its value alone (1, 0.25, +Inf, NaN); several: one line each, NAME{LABEL="VALUE",...}
# VALUE, sorted; none: nothing. A range vector prints each series' values on its line. Exit 1
# with the reason on stderr when Prometheus does not answer or refuses the query.
prom_query() {
	python3 - "$IT_PROM" "$1" <<'PY'
import json, sys, urllib.error, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
try:
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
except urllib.error.HTTPError as e:
    try:
        body = json.load(e)
    except ValueError:
        sys.exit(f"prom_query: {url}: HTTP {e.code}")
except (urllib.error.URLError, OSError) as e:
    sys.exit(f"prom_query: {url}: {getattr(e, 'reason', e)}")
if body.get("status") != "success":
    sys.exit(f"prom_query: {sys.argv[2]}: {body.get('error', body)}")
kind, result = body["data"]["resultType"], body["data"]["result"]
if kind in ("scalar", "string"):
    print(result[1])
    sys.exit(0)
def name(m):
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(m.items()) if k != "__name__")
    return m.get("__name__", "") + "{" + labels + "}"
if kind == "vector" and len(result) == 1:
    print(result[0]["value"][1])
elif kind == "vector":
    for line in sorted(f"{name(s['metric'])} {s['value'][1]}" for s in result):
        print(line)
else:
    for line in sorted(name(s["metric"]) + " " + " ".join(v for _, v in s["values"]) for s in result):
        print(line)
PY
}

# prom_wait_value SECONDS PROMQL VALUE: waits until prom_query PROMQL prints VALUE (exactly:
# e.g. 1 for `up{it="$IT_ID",job="flashsale-worker"}`); dies after SECONDS naming what it
# printed last.
prom_wait_value() {
	local deadline=$((SECONDS + $1)) got
	while :; do
		got=$(prom_query "$2" 2>&1) || true
		if [ "$got" = "$3" ]; then
			say "ok: prometheus: $2 = $3"
			return 0
		fi
		[ $SECONDS -lt $deadline ] || die "timed out after $1 s waiting for prometheus: $2 = $3 (last: ${got:-no sample})"
		sleep 0.5
	done
}

# prom_wait_alert SECONDS ALERTNAME [MATCHERS]: waits until ALERTNAME fires (pending is not
# firing), with MATCHERS (e.g. 'instance="127.0.0.1:41234"' or 'it="'$IT_ID'"'; the alerts that
# sum over a group carry group= instead) narrowing it to this test's.
prom_wait_alert() {
	prom_wait_value "$1" "min(ALERTS{alertname=\"$2\",alertstate=\"firing\"${3:+,$3}})" 1
}

# prom_check_metrics URL: tests/prometheus/check-metrics.sh URL (promtool check metrics, then
# the families against docs/reference/metrics.md); a failure fails the test.
prom_check_metrics() {
	if "$IT_ROOT/tests/prometheus/check-metrics.sh" "$1"; then
		say "ok: check-metrics $1"
	else
		fail "check-metrics $1"
	fi
}

# ---- the metrics endpoints (issue 30) -----------------------------------------------------------
#   metrics_port NAME            the port of NAME's metrics endpoint (waits for its log line)
#   metric_sum URL PATTERN       the sum of the samples of URL/metrics whose name{labels} part
#                                matches the extended regular expression PATTERN (0: none)
#   metric_count URL PATTERN     how many samples match (0: none, or the endpoint is down)
metrics_port() {
	wait_until 30 "$1's metrics endpoint" "grep -q 'metrics: listening on' '$IT_DIR/$1.log'"
	sed -n 's/.*metrics: listening on .* (port \([0-9]*\)).*/\1/p' "$IT_DIR/$1.log" | tail -n 1
}
metric_sum() {
	curl -s --max-time 5 "$1/metrics" |
		awk -v re="^($2)\$" '!/^#/ && NF == 2 && $1 ~ re { s += $2 } END { printf "%.0f\n", s }'
}
metric_count() {
	curl -s --max-time 5 "$1/metrics" |
		awk -v re="^($2)\$" '!/^#/ && NF == 2 && $1 ~ re { n++ } END { print n + 0 }'
}
