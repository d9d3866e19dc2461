# shellcheck shell=bash
# A fresh flashsale run for scripts/demo and scripts/bench. Source it after .local/env; do not
# run it.
#
#   fresh_run NAME PARTITIONS   database flashsale_NAME (dropped and created again, schema
#                               applied), topics NAME.intents/.results/.stock (deleted and
#                               created again), configuration .local/NAME/flashsale.conf
#   fs ARGS...                  the CLI on the current run's configuration
#   start_run_worker LOG        a worker on it in the background; its pid in $run_worker_pid
#
# FLASHSALE_RUN_CONF: more configuration lines for the run (e.g. "batch.wait.ms = 5").
# FLASHSALE_PG and FLASHSALE_KAFKA (from .local/env) would override the configuration file, so
# the CLI and the workers run without them.

fresh_run() {
	local name=$1 parts=$2 admin_pg=$FLASHSALE_PG
	run_dir=.local/$name
	run_conf=$run_dir/flashsale.conf
	mkdir -p "$run_dir"
	local db="flashsale_${name//-/_}"
	run_pg="$(printf '%s' "$admin_pg" | sed -E 's/dbname=[^ ]+//') dbname=$db"
	# Quietly: DROP ... IF EXISTS of what a fresh database never had would print a NOTICE.
	local quiet="-c client_min_messages=warning"
	PGOPTIONS=$quiet psql "$admin_pg" -X -q -v ON_ERROR_STOP=1 \
		-c "DROP DATABASE IF EXISTS $db (FORCE)" -c "CREATE DATABASE $db" >/dev/null
	local f
	for f in sql/*.sql; do
		PGOPTIONS=$quiet psql "$run_pg" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null
	done
	cat >"$run_conf" <<CONF
brokers = $FLASHSALE_KAFKA
pg = $run_pg
group = $name-workers
topic.intents = $name.intents
topic.results = $name.results
topic.stock = $name.stock
${FLASHSALE_RUN_CONF:-}
CONF
	fs topics delete >/dev/null
	# Deletion is asynchronous in Kafka: retry the creation until the old topics are gone.
	local _
	for _ in $(seq 1 60); do
		if fs topics create --partitions "$parts" 2>/dev/null | grep -q created; then
			return 0
		fi
		sleep 0.5
	done
	fs topics create --partitions "$parts"
}

fs() { env -u FLASHSALE_PG -u FLASHSALE_KAFKA build/flashsale -c "$run_conf" "$@"; }

start_run_worker() {
	env -u FLASHSALE_PG -u FLASHSALE_KAFKA build/flashsale-worker -c "$run_conf" >"$1" 2>&1 &
	run_worker_pid=$!
}
