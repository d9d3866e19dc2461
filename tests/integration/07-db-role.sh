#!/usr/bin/env bash
# The local services are not open to every local user (issue 28, item 11): PostgreSQL takes
# SCRAM passwords only, on 127.0.0.1 only; the passwords live in .local/pgpass and the
# conninfo in .local/env, both mode 0600; the worker and the CLI log in as an application role
# that may read, insert and update the tables and nothing else, and a worker runs a sale with
# it; the gateway logs in as a role of its own that may only read (issue 48, item 6), under
# its own application_name, and answers from Postgres with it. Skipped when FLASHSALE_PG names
# another server (its security is its operator's).
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
# The gateway's role (issue 48): its own, read-only, and the gateway uses it.
[ -n "$IT_GW_PG" ] || die ".local/env has no FLASHSALE_PG_GATEWAY: scripts/services made no role for the gateway"
gw() { psql "$IT_GW_PG" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
assert_eq "flashsale_gateway|f|f|f|f" "$(gw "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = current_user")" "the gateway's role: name|superuser|createdb|createrole|bypassrls"
assert_eq 3 "$(gw "SELECT count(*) FROM decisions WHERE outcome = 'held'")" "the gateway's role reads the decisions"
for q in "INSERT INTO skus (sku, part) VALUES ('X', 0)" "UPDATE decisions SET qty = 9" "DELETE FROM decisions" \
	"BEGIN READ WRITE; UPDATE decisions SET qty = 9; COMMIT" "TRUNCATE reservations" "CREATE TABLE x (a int)"; do
	out=$(gw "$q") && fail "the gateway's role may: $q" || true
	case "$out" in *'permission denied'* | *'read-only transaction'* | *'must be owner'*) ;; *) fail "$q: $out" ;; esac
done
assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE qty = 9")" "no decision changed by the gateway's role"
say "ok: the gateway's role may read, and not insert, update, delete, truncate or create"
start_gateway gw
id=$(sql "SELECT intent_id FROM decisions WHERE outcome = 'held' LIMIT 1")
assert_eq 200 "$(req GET "/v1/intents/$id")" "a decision the gateway read from Postgres"
assert_eq postgres "$(body_field source)" "its source"
wait_until 20 "the gateway's session" "[ -n \"\$(sql \"SELECT 1 FROM pg_stat_activity WHERE application_name = 'flashsale-gateway' AND datname = current_database()\")\" ]"
assert_eq flashsale_gateway "$(sql "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = 'flashsale-gateway' AND datname = current_database()")" "the gateway's sessions' role"
grep -q 'may write' "$IT_DIR/gw.log" && fail "the gateway warned about its own role: $(grep 'may write' "$IT_DIR/gw.log")"
# A gateway given the worker's role still reads, in a read-only session, and says so.
start_gateway gw2 --set gateway.pg=
assert_eq 200 "$(req GET "/v1/intents/$id")" "a decision read with the worker's role"
wait_until 20 "the warning about a role that may write" "grep -q 'postgres role flashsale may write (INSERT, UPDATE)' '$IT_DIR/gw2.log'"
say "ok: $(grep -o 'postgres role flashsale may write.*' "$IT_DIR/gw2.log" | head -n 1)"
audit_ok
stop_worker w1
it_done
