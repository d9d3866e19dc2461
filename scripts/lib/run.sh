# shellcheck shell=bash
# A fresh flashsale run for scripts/demo, scripts/bench and scripts/profile. Source it after
# .local/env; do not run it.
#
#   fresh_run NAME PARTITIONS   database flashsale_NAME (dropped and created again, schema
#                               applied), topics NAME.intents/.results/.stock (deleted, their
#                               files gone from the local broker's disk, and
#                               created again), configuration .local/NAME/flashsale.conf
#   fs ARGS...                  the CLI on the current run's configuration
#   start_run_worker LOG [CMD]  a worker on it in the background (CMD: the worker's command,
#                               build/flashsale-worker by default); its pid in $run_worker_pid
#
# FLASHSALE_RUN_CONF: more configuration lines for the run (e.g. "batch.wait.ms = 5").
# FLASHSALE_PG, FLASHSALE_PG_GATEWAY and FLASHSALE_KAFKA (from .local/env) would override the
# configuration file, so
# the CLI and the workers run without them.

# shellcheck source=scripts/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fresh_run() {
	# The database is made and its schema applied as the admin role; the run's programs log in
	# as the application's (scripts/services).
	local name=$1 parts=$2 admin_pg=${FLASHSALE_PG_ADMIN:-$FLASHSALE_PG}
	run_dir=.local/$name
	run_conf=$run_dir/flashsale.conf
	mkdir -p "$run_dir"
	local db="flashsale_${name//-/_}"
	local schema_pg
	schema_pg="$(printf '%s' "$admin_pg" | sed -E 's/dbname=[^ ]+//') dbname=$db"
	run_pg="$(printf '%s' "$FLASHSALE_PG" | sed -E 's/dbname=[^ ]+//') dbname=$db"
	# The gateway's read-only role (issue 48), when the services made one.
	local gw_pg=""
	[ -z "${FLASHSALE_PG_GATEWAY:-}" ] ||
		gw_pg="gateway.pg = $(printf '%s' "$FLASHSALE_PG_GATEWAY" | sed -E 's/dbname=[^ ]+//') dbname=$db"
	# Quietly: DROP ... IF EXISTS of what a fresh database never had would print a NOTICE.
	local quiet="-c client_min_messages=warning"
	PGOPTIONS=$quiet psql "$admin_pg" -X -q -v ON_ERROR_STOP=1 \
		-c "DROP DATABASE IF EXISTS $db (FORCE)" -c "CREATE DATABASE $db" >/dev/null
	local f
	for f in sql/*.sql; do
		PGOPTIONS=$quiet psql "$schema_pg" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null
	done
	cat >"$run_conf" <<CONF
brokers = $FLASHSALE_KAFKA
pg = $run_pg
group = $name-workers
topic.intents = $name.intents
topic.results = $name.results
topic.stock = $name.stock
$gw_pg
${FLASHSALE_RUN_CONF:-}
CONF
	fs topics delete >/dev/null
	# Deletion is asynchronous in Kafka: retry the creation until the old topics are gone.
	local _ created=""
	for _ in $(seq 1 60); do
		if fs topics create --partitions "$parts" 2>/dev/null | grep -q created; then
			created=1
			break
		fi
		sleep 0.5
	done
	[ -n "$created" ] || fs topics create --partitions "$parts" || return 1
	wait_topic_files_gone
}

# The broker removes a deleted topic's files later (log.segment.delete.delay.ms, 1 s in
# config/kafka/server.properties, 60 s by default). Removing a previous run's hundreds of MB
# stalls the disk the WAL is on for tens of ms, so a run waits until the local broker has done it
# rather than meet it in its measured window. An external broker's
# files are not ours to watch: nothing to wait for.
wait_topic_files_gone() {
	local _
	for _ in $(seq 1 300); do
		compgen -G "$FS_KAFKA_DATA/*-delete" >/dev/null || return 0
		sleep 0.1
	done
	fs_warn "the broker still has deleted topics' files in $FS_KAFKA_DATA after 30 s; going on"
}

fs() { env -u FLASHSALE_PG -u FLASHSALE_KAFKA -u FLASHSALE_PG_GATEWAY build/flashsale -c "$run_conf" "$@"; }

start_run_worker() {
	local log=$1
	shift
	[ $# -gt 0 ] || set -- build/flashsale-worker
	env -u FLASHSALE_PG -u FLASHSALE_KAFKA -u FLASHSALE_PG_GATEWAY "$@" -c "$run_conf" >"$log" 2>&1 &
	run_worker_pid=$!
}
