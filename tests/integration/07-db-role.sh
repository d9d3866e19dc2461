#!/usr/bin/env bash
# The local services are not open to every local user (issue 28, item 11): PostgreSQL takes
# SCRAM passwords only, on 127.0.0.1 only; the passwords live in .local/pgpass and the
# conninfo in .local/env, both mode 0600; the worker and the CLI log in as an application role
# that may read, insert and update the tables and nothing else, and a worker runs a sale with
# it. Skipped when FLASHSALE_PG names another server (its security is its operator's).
. "$(dirname "$0")/lib.sh"
case "$FLASHSALE_PG" in
*"passfile=$IT_ROOT/.local/pgpass"*) ;;
*)
	say "SKIP: FLASHSALE_PG is not the local server of scripts/services"
	exit 0
	;;
esac
it_setup 1
mode() { stat -c %a "$1"; }
assert_eq 600 "$(mode "$IT_ROOT/.local/env")" ".local/env mode"
assert_eq 600 "$(mode "$IT_ROOT/.local/pgpass")" ".local/pgpass mode"
app() { psql "$IT_APP_PG" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
assert_eq "flashsale|f|f|f" "$(app "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")" "the application role: name|superuser|createdb|createrole"
# Without the password file: refused, for the application role and the superuser alike.
nopass="$(printf '%s' "$IT_APP_PG" | sed -E 's/passfile=[^ ]+//')"
out=$(PGPASSFILE=/dev/null psql "$nopass" -X -w -At -c 'SELECT 1' 2>&1 </dev/null) && fail "logged in without a password: $out"
case "$out" in *'no password supplied'*) say "ok: no password, no login" ;; *) fail "without a password: $out" ;; esac
out=$(PGPASSFILE=/dev/null psql "$nopass user=postgres" -X -w -At -c 'SELECT 1' 2>&1 </dev/null) && fail "the superuser logged in without a password"
grep -Eqv '^[[:space:]]*(#|$)' "$IT_ROOT/.local/pg/data/pg_hba.conf" &&
	! grep -Eq '^[^#]*(trust|0\.0\.0\.0|::)' "$IT_ROOT/.local/pg/data/pg_hba.conf" && say "ok: pg_hba.conf: no trust, no address beyond 127.0.0.1" ||
	fail "pg_hba.conf: $(grep -Ev '^#' "$IT_ROOT/.local/pg/data/pg_hba.conf" | tr '\n' ';')"
# What the role may not do.
for q in "DROP TABLE decisions" "DELETE FROM decisions" "TRUNCATE reservations" "CREATE TABLE x (a int)" \
	"ALTER TABLE skus ADD COLUMN x int" "CREATE DATABASE ${IT_DB}_x" "CREATE ROLE x"; do
	out=$(app "$q") && fail "the application role may: $q" || true
	case "$out" in *'permission denied'* | *'must be owner'*) ;; *) fail "$q: $out" ;; esac
done
say "ok: the application role may not drop, delete, truncate, create or alter"
# What it does: a sale, decided and audited as it.
start_worker w1
fs sale open R1 --stock 3 --wait 30 >/dev/null || die "open"
for i in 1 2 3 4 5; do fs buy R1 --buyer "r$i" >/dev/null; done
fs wait --quiet --timeout 60 || die "not decided"
assert_eq "3|2" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions")" "held|sold_out, decided as the application role"
assert_eq flashsale "$(sql "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = 'flashsale-worker' AND datname = current_database()")" "the worker's sessions' role"
audit_ok
stop_worker w1
it_done
