# bench/quick_lib.sh: the set-up the quick probes beside scripts/bench share (carts_quick.sh,
# point_quick.sh). Sourced from the checkout's root with .local/env read; then
#   quick_run NAME PARTITIONS [CONF_LINE]...
# makes a fresh database (sql/*.sql, the application role granted) and topics NAME-PID.*
# (PARTITIONS partitions), writes .local/bench/NAME/flashsale.conf (the CONF_LINEs appended),
# defines fs (the CLI on it) and, on exit, stops $wpid (a worker the caller started) and drops
# the database and topics (KEEP=1 keeps them, for a look). Sets dir, db, topic and admin.
quick_run() {
	local name=$1 parts=$2 line
	shift 2
	dir=.local/bench/$name
	mkdir -p "$dir"
	db=fs_${name}_quick_$$
	topic=$name-quick-$$
	admin="$(printf '%s' "$FLASHSALE_PG_ADMIN" | sed -E 's/dbname=[^ ]+//') dbname=$db"
	psql "$FLASHSALE_PG_ADMIN" -X -q -c "CREATE DATABASE $db"
	for f in sql/*.sql; do
		PGOPTIONS='-c client_min_messages=warning' psql "$admin" -X -q -v ON_ERROR_STOP=1 -f "$f"
	done
	psql "$admin" -X -q -c "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO flashsale"
	{
		echo "topic.intents = $topic.intents"
		echo "topic.results = $topic.results"
		echo "topic.stock = $topic.stock"
		echo "group = $topic"
		echo "pg = $(printf '%s' "$FLASHSALE_PG" | sed -E 's/dbname=[^ ]+//') dbname=$db"
		for line in "$@"; do echo "$line"; done
	} >"$dir/flashsale.conf"
	unset FLASHSALE_PG
	trap quick_cleanup EXIT
	fs topics create --partitions "$parts" >/dev/null
}

fs() { build/flashsale -c "$dir/flashsale.conf" "$@"; }

quick_cleanup() {
	[ -n "${wpid:-}" ] && kill "$wpid" 2>/dev/null && wait "$wpid" 2>/dev/null
	[ -n "${KEEP:-}" ] && { echo "kept: database $db, topics $topic.*"; return; }
	fs topics delete >/dev/null 2>&1 || true
	psql "$FLASHSALE_PG_ADMIN" -X -q -c "DROP DATABASE IF EXISTS $db" || true
}
