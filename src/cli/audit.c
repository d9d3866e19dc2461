/* audit.c: `flashsale audit`, the invariant checker over Postgres and the intents topic.
 *
 * Each check is one SQL query that returns the rows violating it (empty = ok), so the checks
 * read as the invariants of DESIGN.md section 1. Exit 1 on any violation, naming it. */
#include "cli/cli.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SHOW_ROWS_MAX = 5 };

struct check {
	const char *inv;
	const char *name;
	const char *sql; /* returns violating rows; $1 = group, $2 = topic */
	/* Holds only once the carts' protocol settled (no message in flight): skipped with
	 * --allow-lag, as the log's end is. */
	bool settled;
};

static const struct check checks[] = {
	{"INV-1", "stock counters are non-negative and add up to the supply",
	 "SELECT sku, supply, available, held, sold FROM skus WHERE available < 0 OR held < 0 OR "
	 "sold < 0 OR available + held + sold <> supply"},
	{"INV-1", "supply equals the applied open and restock records",
	 "SELECT k.sku, k.supply, coalesce(l.total, 0) AS logged FROM skus k LEFT JOIN (SELECT "
	 "sku, "
	 "sum(amount) AS total FROM sale_log WHERE outcome = 'applied' AND kind IN (4, 5) GROUP "
	 "BY sku) l USING (sku) WHERE k.supply <> coalesce(l.total, 0)"},
	{"INV-1", "held and sold equal the reservations and the carts' lines",
	 "SELECT k.sku, k.held, k.sold, coalesce(r.held, 0) AS res_held, coalesce(r.sold, 0) AS "
	 "res_sold FROM skus k LEFT JOIN (SELECT sku, sum(qty) FILTER (WHERE status = 'held') AS "
	 "held, sum(qty) FILTER (WHERE status = 'confirmed') AS sold FROM (SELECT sku, qty, "
	 "status FROM reservations UNION ALL SELECT sku, qty, CASE WHEN state = 'sold' THEN "
	 "'confirmed' ELSE 'held' END FROM cart_lines WHERE state IN ('pending', 'held', 'sold')) "
	 "u GROUP BY sku) r USING (sku) WHERE k.held <> coalesce(r.held, 0) OR k.sold <> "
	 "coalesce(r.sold, 0)"},
	{"INV-1", "per-buyer totals equal their reservations and stay within the limit",
	 "SELECT b.sku, b.buyer_id, b.units, coalesce(r.units, 0) AS res_units, k.per_buyer_limit "
	 "FROM buyers b JOIN skus k USING (sku) LEFT JOIN (SELECT sku, buyer_id, sum(qty) AS "
	 "units FROM (SELECT sku, buyer_id, qty FROM reservations WHERE status IN ('held', "
	 "'confirmed') UNION ALL SELECT sku, buyer_id, qty FROM cart_lines WHERE state IN "
	 "('pending', 'held', 'sold')) u GROUP BY 1, 2) r USING (sku, buyer_id) WHERE b.units <> "
	 "coalesce(r.units, 0) OR b.units > k.per_buyer_limit UNION ALL SELECT r.sku, "
	 "r.buyer_id, NULL, sum(r.qty), NULL FROM (SELECT sku, buyer_id, qty FROM reservations "
	 "WHERE status IN ('held', 'confirmed') UNION ALL SELECT sku, buyer_id, qty FROM "
	 "cart_lines WHERE state IN ('pending', 'held', 'sold')) r LEFT JOIN buyers b USING "
	 "(sku, buyer_id) WHERE b.sku IS NULL GROUP BY 1, 2"},
	{"INV-2", "record counters add up to the offsets decided",
	 "SELECT part, first_offset, next_offset, n_records, n_fresh + n_repeats + n_conflicts + "
	 "n_invalid + n_sale + n_ticks + n_forwarded + n_carts + n_joins AS by_class FROM "
	 "partitions WHERE grp = $1 "
	 "AND topic = $2 AND (n_records <> n_fresh + n_repeats + n_conflicts + n_invalid + "
	 "n_sale + n_ticks + n_forwarded + n_carts + n_joins OR "
	 "(first_offset >= 0 AND n_records + n_gaps <> next_offset - first_offset) OR "
	 "(first_offset < 0 "
	 "AND n_records <> 0))"},
	{"INV-2", "every decided record has its row (decisions, rejects, sale log, forwards)",
	 "WITH c AS (SELECT p.part, p.n_fresh, p.n_invalid, p.n_sale, p.n_forwarded, (SELECT "
	 "count(*) FROM forwards f WHERE f.part = p.part) AS forwards, (SELECT count(*) FROM "
	 "decisions d WHERE d.part = p.part) AS decisions, (SELECT coalesce(sum(j.off_end - "
	 "j.off + 1), 0) FROM rejects j WHERE j.part = p.part) AS rejects, (SELECT count(*) FROM "
	 "sale_log s WHERE s.part = p.part) AS sale_log FROM partitions p WHERE p.grp = $1 AND "
	 "p.topic = $2) SELECT * FROM c WHERE n_fresh <> decisions OR n_invalid <> rejects OR "
	 "n_sale <> sale_log OR n_forwarded <> forwards"},
	{"INV-2",
	 "forwarded records lie inside the decided offsets and go to a partition of the "
	 "topic",
	 "SELECT f.part, f.off, f.to_part FROM forwards f LEFT JOIN partitions p ON p.grp = $1 "
	 "AND p.topic = $2 AND p.part = f.part LEFT JOIN topics t ON t.topic = $2 WHERE p.part "
	 "IS NULL OR f.off < p.first_offset OR f.off >= p.next_offset OR t.topic IS NULL OR "
	 "f.to_part >= t.partitions LIMIT 20"},
	{"INV-2", "every forwarded intent has its decision (or its reject where it was forwarded)",
	 "SELECT f.part, f.off, f.to_part, f.intent_id FROM forwards f WHERE f.kind IS NOT NULL "
	 "AND NOT EXISTS (SELECT 1 FROM decisions d WHERE d.intent_id = f.intent_id AND d.part = "
	 "f.to_part AND d.kind IN (f.kind, f.kind + 10)) AND NOT EXISTS (SELECT 1 FROM rejects j "
	 "WHERE j.intent_id = "
	 "f.intent_id AND "
	 "j.part = f.to_part) LIMIT 20"},
	{"INV-2", "reject rows lie inside the decided offsets and never overlap",
	 "SELECT j.part, j.off, j.off_end FROM rejects j LEFT JOIN partitions p ON p.grp = $1 AND "
	 "p.topic = $2 AND p.part = j.part WHERE p.part IS NULL OR j.off < p.first_offset OR "
	 "j.off_end >= p.next_offset OR j.off_end < j.off OR EXISTS (SELECT 1 FROM rejects k "
	 "WHERE k.part = j.part AND k.off > j.off AND k.off <= j.off_end) LIMIT 20"},
	{"INV-2", "decision rows lie inside the decided offsets",
	 "SELECT d.part, d.off FROM decisions d LEFT JOIN partitions p ON p.grp = $1 AND p.topic "
	 "= $2 AND p.part = d.part WHERE p.part IS NULL OR d.off < p.first_offset OR d.off >= "
	 "p.next_offset LIMIT 20"},
	{"INV-3", "every hold has exactly its decision, and every held decision its reservation",
	 "SELECT d.intent_id, d.outcome, d.qty, r.qty AS res_qty FROM decisions d FULL JOIN "
	 "reservations r ON r.intent_id = d.intent_id AND r.part = d.part AND d.kind = 1 WHERE "
	 "(d.outcome = 'held' "
	 "AND (r.intent_id IS NULL OR r.qty <> d.qty OR r.sku <> d.sku OR r.buyer_id <> "
	 "d.buyer_id)) OR (r.intent_id IS NOT NULL AND (d.intent_id IS NULL OR d.outcome NOT IN "
	 "('held', 'confirmed', 'confirmed_late'))) LIMIT 20"},
	{"INV-1", "no hold is still held once its partition's clock reached its expiry",
	 "SELECT r.intent_id, r.expires_at_ms, p.clock_ms FROM reservations r JOIN partitions p "
	 "ON p.grp = $1 AND p.topic = $2 AND p.part = r.part WHERE r.status = 'held' AND "
	 "r.expires_at_ms <= p.clock_ms AND NOT EXISTS (SELECT 1 FROM store_refusals x WHERE "
	 "x.part = r.part AND x.intent_id = r.intent_id AND x.round = 0) LIMIT 20"},
	{"INV-3", "every confirmed, cancelled or expired hold has the decision that ended it",
	 "SELECT r.intent_id, r.status, r.late, d.outcome FROM reservations r LEFT JOIN decisions "
	 "d ON d.intent_id = r.intent_id AND d.part = r.part AND d.kind = CASE r.status WHEN "
	 "'confirmed' THEN 2 WHEN "
	 "'cancelled' THEN 3 ELSE 0 END WHERE (r.status = 'confirmed' AND (d.outcome IS NULL OR "
	 "d.outcome <> CASE WHEN r.late THEN 'confirmed_late' ELSE 'confirmed' END)) OR "
	 "(r.status = 'cancelled' AND (d.outcome IS DISTINCT FROM 'cancelled')) OR (r.status = "
	 "'expired' AND (r.ended_off IS NULL OR r.ended_at_ms < r.expires_at_ms)) LIMIT 20"},
	{"INV-3", "every confirm or cancel that took effect changed its hold",
	 "SELECT d.intent_id, d.kind, d.outcome, r.status FROM decisions d LEFT JOIN reservations "
	 "r USING (intent_id, part) WHERE d.kind IN (2, 3) AND d.reason IS NULL AND d.outcome IN "
	 "('confirmed', 'confirmed_late', 'cancelled') AND (r.intent_id IS NULL OR r.status <> "
	 "CASE d.kind WHEN 2 THEN 'confirmed' ELSE 'cancelled' END OR r.ended_off <> d.off) LIMIT "
	 "20"},
	/* Carts (issue 31): true once the protocol settled (no message in flight), as after a
	 * sale; while carts are under way the first one names them. */
	{"INV-8", "every cart is decided and no group waits or is pending (settled)",
	 "SELECT 'cart' AS what, cart_id, part, state FROM carts WHERE state IN ('reserving', "
	 "'late_round') UNION ALL SELECT 'group', cart_id, part, state FROM cart_groups WHERE "
	 "state IN ('waiting', 'pending') LIMIT 20",
	 true},
	{"INV-8",
	 "no cart is partly held: a held cart's groups are all held, a confirmed one's "
	 "all sold, any other's none",
	 "SELECT c.cart_id, c.state, c.round, p.part, g.round AS group_round, g.state AS "
	 "group_state FROM carts c CROSS JOIN LATERAL (SELECT DISTINCT (l->>'part')::int AS part "
	 "FROM jsonb_array_elements(c.lines) l) p LEFT JOIN cart_groups g ON g.cart_id = "
	 "c.cart_id AND g.part = p.part AND g.round = c.round WHERE (c.state = 'held' AND "
	 "g.state IS DISTINCT FROM 'held') OR (c.state IN ('confirmed', 'confirmed_late') AND "
	 "g.state IS DISTINCT FROM 'sold') OR (c.state NOT IN ('held', 'confirmed', "
	 "'confirmed_late') AND g.state IN ('held', 'sold', 'pending')) UNION ALL SELECT "
	 "g.cart_id, c.state, c.round, g.part, g.round, g.state FROM cart_groups g JOIN carts c "
	 "ON c.cart_id = g.cart_id AND c.part = g.coord WHERE g.round < c.round AND g.state IN "
	 "('held', 'sold', 'pending') LIMIT 20",
	 true},
	{"INV-8", "every group belongs to a cart, with exactly that cart's lines on its partition",
	 "SELECT g.cart_id, g.round, g.part, g.coord FROM cart_groups g LEFT JOIN carts c ON "
	 "c.cart_id = g.cart_id AND c.part = g.coord WHERE c.cart_id IS NULL OR g.buyer_id <> "
	 "c.buyer_id OR (SELECT coalesce(jsonb_agg(jsonb_build_object('sku', l->>'sku', 'qty', "
	 "(l->>'qty')::bigint) ORDER BY l->>'sku'), '[]') FROM jsonb_array_elements(g.lines) l) "
	 "<> (SELECT coalesce(jsonb_agg(jsonb_build_object('sku', l->>'sku', 'qty', "
	 "(l->>'qty')::bigint) ORDER BY l->>'sku'), '[]') FROM jsonb_array_elements(c.lines) l "
	 "WHERE (l->>'part')::int = g.part) LIMIT 20"},
	/* The waiting room (issue 33). */
	{"INV-9",
	 "no buy of a sale behind a waiting room won without its buyer's admission, live at the "
	 "buy",
	 "SELECT d.intent_id, d.sku, d.buyer_id, d.decided_at_ms, j.admitted_ms, "
	 "coalesce(j.minted_ms, j.decided_ms) + k.token_ms AS token_end FROM decisions d JOIN skus "
	 "k ON k.sku = d.sku AND k.admit_rate > 0 LEFT JOIN room_joins j ON j.sku = d.sku AND "
	 "j.buyer_id = d.buyer_id WHERE d.kind = 1 AND d.outcome = 'held' AND (j.admitted_ms IS "
	 "NULL OR d.decided_at_ms < j.admitted_ms OR d.decided_at_ms >= coalesce(j.minted_ms, "
	 "j.decided_ms) + k.token_ms) LIMIT 20"},
	{"INV-9",
	 "no waiting room admits faster than its rate (any two admissions i < j: (j - i) * step "
	 "<= (a_j - a_i) * 1000 + 999 microseconds)",
	 "WITH a AS (SELECT j.sku, j.admitted_ms, (1000000 + k.admit_rate - 1) / k.admit_rate AS "
	 "step, row_number() OVER (PARTITION BY j.sku ORDER BY j.admitted_ms, j.decided_off) AS n "
	 "FROM room_joins j JOIN skus k USING (sku) WHERE j.admitted_ms IS NOT NULL), x AS (SELECT "
	 "sku, n, n * step - admitted_ms * 1000 AS v FROM a), m AS (SELECT sku, n, v, min(v) OVER "
	 "(PARTITION BY sku ORDER BY n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS lo "
	 "FROM x) SELECT sku, n, v - lo AS over_us FROM m WHERE v - lo > 999 LIMIT 20"},
	{"INV-9", "every admission is of a buyer who joined, at or after the join",
	 "SELECT sku, buyer_id, off, decided_off, admitted_ms, joined_ms FROM room_joins WHERE "
	 "admitted_ms IS NOT NULL AND (decided_off < off OR admitted_ms < joined_ms) LIMIT 20"},
	{"INV-5", "replied offset never passes the next offset",
	 "SELECT part, replied_offset, next_offset FROM partitions WHERE grp = $1 AND topic = $2 "
	 "AND replied_offset > next_offset"},
};

static int show(PGresult *r, bool json)
{
	int n = PQntuples(r);
	for (int i = 0; i < n && i < SHOW_ROWS_MAX; i++) {
		fputs(json ? "" : "      ", stdout);
		for (int c = 0; c < PQnfields(r); c++)
			printf("%s%s=%s", c ? " " : "", PQfname(r, c),
			       PQgetisnull(r, i, c) ? "null" : PQgetvalue(r, i, c));
		if (!json)
			putchar('\n');
	}
	return n;
}

static void report(bool json, bool *first, const char *inv, const char *name, bool ok,
		   const char *detail)
{
	if (json) {
		printf("%s{\"invariant\":\"%s\",\"check\":\"%s\",\"ok\":%s,\"detail\":\"%s\"}",
		       *first ? "" : ",", inv, name, ok ? "true" : "false", detail);
		*first = false;
	} else {
		printf("%-4s %s %s%s%s\n", ok ? "ok" : "FAIL", inv, name, detail[0] ? ": " : "",
		       detail);
	}
}

/* INV-2 and INV-6 against the log: stored next offsets never pass the log end (no phantom
 * decisions), and reach it once the worker is idle. */
static int check_log(flashsale_t *fs, PGconn *pg, bool allow_lag, bool json, bool *first)
{
	const struct fs_config *cfg = flashsale_config(fs);
	int64_t *ends = NULL;
	int n = cli_topic_ends(fs, cfg->topic_intents, &ends);
	if (n < 0) {
		report(json, first, "INV-2", "intents topic readable", false, "no metadata");
		return 1;
	}
	const char *p[] = {cfg->group, cfg->topic_intents};
	PGresult *r = PQexecParams(pg,
				   "SELECT part, next_offset FROM partitions WHERE grp = $1 AND "
				   "topic = $2 ORDER BY part",
				   2, NULL, p, NULL, NULL, 0);
	int bad_phantom = 0, bad_lag = 0;
	char detail[512] = "";
	size_t dl = 0;
	for (int part = 0; part < n; part++) {
		int64_t next = -1;
		for (int i = 0; i < PQntuples(r); i++)
			if (atoi(PQgetvalue(r, i, 0)) == part)
				next = strtoll(PQgetvalue(r, i, 1), NULL, 10);
		int64_t decided = next < 0 ? 0 : next;
		if (decided > ends[part])
			bad_phantom++;
		if (decided < ends[part])
			bad_lag++;
		if ((decided != ends[part]) && dl < sizeof detail - 80)
			dl += (size_t)snprintf(detail + dl, sizeof detail - dl,
					       "%spartition %d next %" PRId64 " log end %" PRId64,
					       dl ? "; " : "", part, decided, ends[part]);
	}
	for (int i = 0; i < PQntuples(r); i++)
		if (atoi(PQgetvalue(r, i, 0)) >= n)
			bad_phantom++;
	PQclear(r);
	free(ends);
	report(json, first, "INV-6", "no decision past the log end", bad_phantom == 0,
	       bad_phantom ? detail : "");
	bool lag_ok = bad_lag == 0 || allow_lag;
	report(json, first, "INV-2", "every record in the log is decided", lag_ok,
	       bad_lag ? detail : "");
	return (bad_phantom ? 1 : 0) + (lag_ok ? 0 : 1);
}

static const char usage_audit[] =
	"usage: flashsale audit [--json] [--allow-lag] [--no-replay]\n"
	"\n"
	"Checks INV-1 (no oversell, conservation, per-buyer limits), INV-2 (every record decided\n"
	"once, counters add up), INV-3 (one effect per intent id), INV-5/INV-6 (offsets) over\n"
	"Postgres and the intents topic, and INV-4: the intents log replayed through the pure "
	"core\n"
	"in memory must reproduce everything Postgres recorded (as `replay --dry-run`; skip it\n"
	"with --no-replay), and INV-8 (carts: none partly held, every group a cart's). Run it\n"
	"when the worker is idle, or pass --allow-lag (with a running worker, also --no-replay;\n"
	"the checks that need the carts' protocol settled are skipped then).\n"
	"Exit 0 when every check holds, 1 when any fails (each failure is named).\n";

int cli_audit(flashsale_t *fs, int argc, char **argv)
{
	bool json = false, allow_lag = false, no_replay = false;
	const struct cli_opt spec[] = {
		{"json", CLI_FLAG, &json},
		{"allow-lag", CLI_FLAG, &allow_lag},
		{"no-replay", CLI_FLAG, &no_replay},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_audit, spec, 0, 0);
	if (rc >= 0)
		return rc;
	PGconn *pg = flashsale_pg(fs);
	if (!pg) {
		cli_err("audit: %s", flashsale_error(fs));
		return 1;
	}
	const struct fs_config *cfg = flashsale_config(fs);
	const char *p[] = {cfg->group, cfg->topic_intents};
	int failed = 0;
	bool first = true;
	if (json)
		printf("{\"checks\":[");
	/* One snapshot for all the SQL checks, so that a running worker cannot make two
	 * consistent halves look inconsistent. */
	PQclear(PQexec(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
	for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
		const struct check *k = &checks[i];
		if (k->settled && allow_lag) {
			report(json, &first, k->inv, k->name, true, "skipped (--allow-lag)");
			continue;
		}
		int nparams = strstr(k->sql, "$2") ? 2 : 0;
		PGresult *r = PQexecParams(pg, k->sql, nparams, NULL, p, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			report(json, &first, k->inv, k->name, false, "query failed");
			cli_err("audit: %s: %s", k->name, PQerrorMessage(pg));
			failed++;
		} else if (PQntuples(r) == 0) {
			report(json, &first, k->inv, k->name, true, "");
		} else {
			char detail[32];
			snprintf(detail, sizeof detail, "%d rows", PQntuples(r));
			report(json, &first, k->inv, k->name, false, detail);
			if (!json)
				show(r, false);
			failed++;
		}
		PQclear(r);
	}
	PQclear(PQexec(pg, "COMMIT"));
	failed += check_log(fs, pg, allow_lag, json, &first);
	if (!no_replay) {
		/* The strongest check: the log through the pure core must give every decision,
		 * reject, sale record, hold and counter Postgres holds (DIFF lines name them). */
		int64_t records = 0, diffs = 0;
		int bad = cli_replay_check(fs, json, &records, &diffs);
		char detail[96];
		snprintf(detail, sizeof detail,
			 "%" PRId64 " records replayed, %" PRId64 " differences", records, diffs);
		report(json, &first, "INV-4", "replaying the log reproduces every decision", !bad,
		       bad ? detail : "");
		if (!bad && !json)
			printf("     (%s)\n", detail);
		failed += bad;
	}
	if (json)
		printf("],\"ok\":%s}\n", failed ? "false" : "true");
	else
		printf("audit: %s (%d violations)\n", failed ? "FAILED" : "ok", failed);
	return failed ? 1 : 0;
}
