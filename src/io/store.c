/* store.c: Postgres side of the worker (see store.h). */
#include "io/store.h"

#include "io/roomread.h"

#include "core/buf.h"
#include "core/cart.h"
#include "core/commit.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

enum {
	ERR_LEN_MAX = 512,
	STEPS_MAX = 18,
	STALE_WAIT_STEPS = 200, /* 200 x 50 ms: how long to wait for a dead connection's backend */
	STALE_WAIT_STEP_US = 50000,
	/* Columns of the array-literal parameters of the batch statements. */
	BUF_COUNT = 69, /* every array parameter of one batch has its own buffer */
};

struct step {
	const char *sql;
	const char *prepared; /* the name sql is prepared under on this connection, or NULL */
	int nparams;
	const char *params[21];
	const char *what;
	bool cas; /* the offset compare-and-set */
};

struct fs_store {
	PGconn *conn;
	char *conninfo;
	char err[ERR_LEN_MAX];
	fs_crash_fn crash;
	int stale_pid; /* backend of a connection that died; may still be running a transaction */
	/* sessions of stalled workers ended (break_stalled); atomic: the committer thread counts,
	 * the main thread's stats line reads */
	_Atomic int64_t stalled_broken;
	char id[40]; /* random, per store: the commit tokens' prefix */
	int64_t attempt;
	char token[FS_STORE_TOKEN_SIZE]; /* the token of the last commit attempt */
	bool cas_prepared; /* this connection has the compare-and-set as a prepared statement */
	struct fs_buf bufs[BUF_COUNT];
	/* The batch fs_store_commit_prepare encoded, for fs_store_commit_send: every parameter
	 * points into bufs (or at the caller's group and topic strings), none into the batch or
	 * the core, so that these may change while it is sent. */
	struct step st[STEPS_MAX];
	int k;
	bool after; /* the COPYs before the compare-and-set (a predecessor is in flight) */
	/* after: the predecessor's commit token, which its commit leaves in the partition row */
	char after_token[FS_STORE_TOKEN_SIZE];
	bool prepared;
	char part[16];
	struct fs_tx tx; /* the batch's transaction as data (core/commit.h), rendered into st */
	char refused[6]; /* the SQLSTATE that rolled the last commit back ("" if none) */
	/* The wall clock (us) when fs_store_commit_send's first part was done: in line the
	 * statements' pipeline, stacked the rows' COPYs (0: it did not get that far). */
	int64_t phase_us;
};

static int64_t wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void set_err(struct fs_store *s, const char *what, const char *detail)
{
	snprintf(s->err, sizeof s->err, "%s: %s", what, detail ? detail : "");
	/* libpq messages end in a newline; keep the error to one line. */
	for (char *p = s->err; *p; p++)
		if (*p == '\n')
			*p = (p[1] ? ' ' : '\0');
}

bool fs_store_refused(const struct fs_store *s)
{
	/* Class 22 (data exception) and 23 (integrity constraint violation): the same rows
	 * fail the same way again, unlike a lost connection, a lock timeout (55P03), a
	 * serialization failure (40001) or a deadlock (40P01). */
	return s->refused[0] == '2' && (s->refused[1] == '2' || s->refused[1] == '3');
}

bool fs_store_sql_error(const struct fs_store *s)
{
	/* The guards raise FS* states (fs_assert), and an id decided elsewhere a unique
	 * violation: memory and Postgres disagree. Classes 22 and 23 are the batch's records'
	 * (fs_store_refused), a constraint the core cannot know of included. */
	return s->refused[0] && strncmp(s->refused, "FS", 2) != 0 && !fs_store_refused(s);
}

const char *fs_store_error(const struct fs_store *s)
{
	return s->err;
}

void fs_store_set_crash_hook(struct fs_store *s, fs_crash_fn fn)
{
	s->crash = fn;
}

static bool crash_point(struct fs_store *s, const char *point)
{
	return s->crash && s->crash(point);
}

static int connect_now(struct fs_store *s)
{
	if (s->conn) {
		if (PQbackendPID(s->conn) > 0)
			s->stale_pid = PQbackendPID(s->conn);
		PQfinish(s->conn);
	}
	/* fallback_application_name: operators (and tests) can find the worker's sessions. */
	const char *keys[] = {"dbname", "fallback_application_name", NULL};
	const char *vals[] = {s->conninfo, "flashsale-worker", NULL};
	s->conn = PQconnectdbParams(keys, vals, 1);
	s->cas_prepared = false;
	if (PQstatus(s->conn) != CONNECTION_OK) {
		set_err(s, "postgres connect", PQerrorMessage(s->conn));
		return -EIO;
	}
	/* The worker's transactions take milliseconds. One left open by a paused or wedged worker
	 * holds the partition row's lock and would block the partition's new owner: Postgres
	 * ends it after 5 s (the next owner's compare-and-set then proceeds and fences it). */
	/* lock_timeout: a lock held longer than this is a stalled worker's (see below). */
	PGresult *r = PQexec(s->conn, "SET idle_in_transaction_session_timeout = '5s'; "
				      "SET statement_timeout = '60s'; SET lock_timeout = '5s'");
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		set_err(s, "postgres session setup", PQerrorMessage(s->conn));
	PQclear(r);
	return ok ? 0 : -EIO;
}

int fs_store_open(const char *conninfo, struct fs_store **out)
{
	struct fs_store *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->conninfo = strdup(conninfo);
	uuid_t u;
	uuid_generate_random(u);
	uuid_unparse_lower(u, s->id);
	if (!s->conninfo) {
		free(s);
		return -ENOMEM;
	}
	*out = s;
	return connect_now(s);
}

void fs_store_close(struct fs_store *s)
{
	if (!s)
		return;
	if (s->conn)
		PQfinish(s->conn);
	for (int i = 0; i < BUF_COUNT; i++)
		fs_buf_free(&s->bufs[i]);
	fs_tx_free(&s->tx);
	free(s->conninfo);
	free(s);
}

int fs_store_ensure(struct fs_store *s)
{
	/* A connection left in pipeline mode (a batch broke off half way, with results never
	 * collected) refuses every later statement: start again rather than try to mend it. */
	if (s->conn && PQstatus(s->conn) == CONNECTION_OK &&
	    PQtransactionStatus(s->conn) == PQTRANS_IDLE &&
	    PQpipelineStatus(s->conn) == PQ_PIPELINE_OFF)
		return 0;
	return connect_now(s);
}

static bool conn_bad(const struct fs_store *s)
{
	return !s->conn || PQstatus(s->conn) != CONNECTION_OK;
}

/* Runs one statement outside a pipeline; returns the result (caller clears) or NULL. */
/* A worker paused in the middle of a batch (SIGSTOP, a VM freeze, a GC-like stall) can hold
 * its transaction's row locks forever: a backend waiting for the rest of a pipeline is neither
 * "idle in transaction" nor running a statement, so no server timeout ends it. When our own
 * statement waits on a lock past lock_timeout, we end the sessions of other flashsale workers
 * of this database that are inside a transaction and have waited on their client for more
 * than 5 s. This only frees locks: the offset compare-and-set still decides who may commit,
 * and the stalled worker finds its connection gone and its batch fenced when it wakes. */
static void break_stalled(struct fs_store *s)
{
	PGresult *r = PQexec(
		s->conn, "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
			 "application_name = 'flashsale-worker' AND datname = current_database() "
			 "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL AND "
			 "wait_event = 'ClientRead' AND state_change < now() - interval '5 s'");
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		atomic_fetch_add(&s->stalled_broken, PQntuples(r));
	PQclear(r);
}

static bool lock_timed_out(const PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	return state && strcmp(state, "55P03") == 0;
}

static PGresult *exec(struct fs_store *s, const char *sql, int n, const char *const *params,
		      ExecStatusType want)
{
	PGresult *r = PQexecParams(s->conn, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != want) {
		set_err(s, "postgres", PQerrorMessage(s->conn));
		bool stalled = lock_timed_out(r);
		PQclear(r);
		if (stalled && PQtransactionStatus(s->conn) == PQTRANS_IDLE)
			break_stalled(s);
		return NULL;
	}
	return r;
}

static int64_t get_i64(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return 0;
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* ---- load ------------------------------------------------------------------------------ */

static int load_skus(struct fs_store *s, const char *part, struct fs_core *core)
{
	const char *p[] = {part};
	PGresult *r = exec(s,
			   "SELECT sku, status, supply, available, held, sold, per_buyer_limit, "
			   "max_qty, hold_ms, opens_at_ms, closes_at_ms, admit_rate, token_ms, "
			   "coalesce(draw, ''), coalesce(draw_seed, '') FROM skus WHERE part = $1 "
			   "ORDER BY sku",
			   1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_sku k = {0};
		snprintf(k.sku, sizeof k.sku, "%s", PQgetvalue(r, i, 0));
		k.partition = core->partition;
		k.status = strcmp(PQgetvalue(r, i, 1), "open") == 0 ? FS_SKU_OPEN : FS_SKU_CLOSED;
		k.supply = get_i64(r, i, 2);
		k.available = get_i64(r, i, 3);
		k.held = get_i64(r, i, 4);
		k.sold = get_i64(r, i, 5);
		k.per_buyer_limit = get_i64(r, i, 6);
		k.max_qty = get_i64(r, i, 7);
		k.hold_ms = get_i64(r, i, 8);
		k.opens_at_ms = get_i64(r, i, 9);
		k.closes_at_ms = get_i64(r, i, 10);
		k.admission.rate_per_s = get_i64(r, i, 11);
		k.admission.token_ms = get_i64(r, i, 12);
		k.admission.draw =
			strcmp(PQgetvalue(r, i, 13), "fifo") == 0 ? FS_DRAW_FIFO : FS_DRAW_RANDOM;
		snprintf(k.admission.seed, sizeof k.admission.seed, "%s", PQgetvalue(r, i, 14));
		rc = fs_core_load_sku(core, &k);
	}
	PQclear(r);
	if (rc < 0)
		set_err(s, "load skus", strerror(-rc));
	return rc;
}

/* The waiting rooms' entries (issue 33), in join order per SKU; then each room draws again and
 * finds its front and slots as the log made them (fs_core_load_rooms_done). */
static int load_rooms(struct fs_store *s, const char *part, struct fs_core *core)
{
	if (core->room_skus_len == 0)
		return 0;
	const char *p[] = {part};
	PGresult *r = exec(s,
			   "SELECT sku, " FS_ROOM_ENTRY_COLUMNS " FROM room_joins "
			   "WHERE part = $1 ORDER BY sku, off",
			   1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		const struct fs_sku *k = fs_core_sku(core, PQgetvalue(r, i, 0));
		struct fs_room_entry e;
		fs_room_entry_of_row(r, i, 1, &e);
		rc = k && k->room ? fs_room_load(k->room, &e) : -EINVAL;
	}
	PQclear(r);
	if (rc == 0)
		rc = fs_core_load_rooms_done(core);
	if (rc < 0)
		set_err(s, "load room_joins", strerror(-rc));
	return rc;
}

static int load_buyers(struct fs_store *s, const char *part, struct fs_core *core)
{
	const char *p[] = {part};
	PGresult *r =
		exec(s,
		     "SELECT b.sku, b.buyer_id, b.units FROM buyers b JOIN skus k USING (sku) "
		     "WHERE k.part = $1 AND b.units > 0 ORDER BY 1, 2",
		     1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++)
		rc = fs_core_load_buyer(core, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
					get_i64(r, i, 2));
	PQclear(r);
	if (rc < 0)
		set_err(s, "load buyers", strerror(-rc));
	return rc;
}

#define HOLD_COLUMNS                                                                               \
	"intent_id, sku, buyer_id, qty, expires_at_ms, off, status, late, coalesce(ended_at_ms, "  \
	"0), coalesce(ended_off, -1), EXISTS (SELECT 1 FROM store_refusals x WHERE x.part = "      \
	"reservations.part AND x.intent_id = reservations.intent_id AND x.round = 0)"

/* Loads the holds of rows r (HOLD_COLUMNS) into the core. */
static int load_hold_rows(struct fs_store *s, PGresult *r, struct fs_core *core);

static int load_holds(struct fs_store *s, const char *part, struct fs_core *core)
{
	const char *p[] = {part};
	/* The live ones only: a hold that ended lives in Postgres, and is loaded when a confirm
	 * or cancel names it (fs_store_lookup_holds). In buy order, so that the expiry heap breaks
	 * ties as it did when they were made. */
	PGresult *r = exec(s,
			   "SELECT " HOLD_COLUMNS " FROM reservations WHERE part = $1 AND "
			   "status = 'held' ORDER BY off",
			   1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	return load_hold_rows(s, r, core);
}

static int load_hold_rows(struct fs_store *s, PGresult *r, struct fs_core *core)
{
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_hold h = {0};
		snprintf(h.intent_id, sizeof h.intent_id, "%s", PQgetvalue(r, i, 0));
		h.qty = get_i64(r, i, 3);
		h.expires_at_ms = get_i64(r, i, 4);
		h.offset = get_i64(r, i, 5);
		if (fs_hold_status_parse(PQgetvalue(r, i, 6), &h.status) < 0)
			rc = -EINVAL;
		h.late = PQgetvalue(r, i, 7)[0] == 't';
		h.ended_at_ms = get_i64(r, i, 8);
		h.ended_offset = get_i64(r, i, 9);
		h.expiry_refused = PQgetvalue(r, i, 10)[0] == 't';
		if (rc == 0)
			rc = fs_core_load_hold(core, &h, PQgetvalue(r, i, 1), PQgetvalue(r, i, 2));
	}
	PQclear(r);
	if (rc < 0)
		set_err(s, "load reservations", strerror(-rc));
	return rc;
}

/* A stored outcome name (NULL or empty: none). */
static enum fs_outcome outcome_of(const PGresult *r, int row, int col)
{
	enum fs_outcome o;
	if (PQgetisnull(r, row, col) || fs_outcome_parse(PQgetvalue(r, row, col), &o) < 0)
		return 0;
	return o;
}

static const char *reason_of(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : fs_cart_reason_static(PQgetvalue(r, row, col));
}

/* The partition's carts and groups (all of them: a finished one still answers its retries and
 * follow-ups, and a repeated reserve must find its group), then the waiting order. */
static int load_carts(struct fs_store *s, const char *part, struct fs_core *core)
{
	const char *p[] = {part};
	PGresult *r = exec(s,
			   "SELECT cart_id, buyer_id, body_hash, lines, state, round, at, "
			   "cancel_asked, hold_ms, expires_at_ms, off, outcome, reason, "
			   "coalesce(line, -1), answer, answer_reason FROM carts WHERE part = $1 "
			   "ORDER BY off",
			   1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_cart k;
		memset(&k, 0, sizeof k);
		snprintf(k.cart_id, sizeof k.cart_id, "%s", PQgetvalue(r, i, 0));
		snprintf(k.buyer_id, sizeof k.buyer_id, "%s", PQgetvalue(r, i, 1));
		k.body_hash = get_i64(r, i, 2);
		k.state = fs_cart_state_parse(PQgetvalue(r, i, 4));
		k.round = (int32_t)get_i64(r, i, 5);
		k.at = (uint32_t)get_i64(r, i, 6);
		k.cancel_asked = PQgetvalue(r, i, 7)[0] == 't';
		k.hold_ms = get_i64(r, i, 8);
		k.expires_at_ms = get_i64(r, i, 9);
		k.offset = get_i64(r, i, 10);
		k.outcome = outcome_of(r, i, 11);
		k.reason = reason_of(r, i, 12);
		k.line = (int32_t)get_i64(r, i, 13);
		k.answer = outcome_of(r, i, 14);
		k.answer_reason = reason_of(r, i, 15);
		rc = fs_cart_parse_lines(&k, PQgetvalue(r, i, 3));
		if (rc == 0 && !k.state)
			rc = -EINVAL;
		if (rc == 0)
			rc = fs_carts_load_cart(core->carts, &k);
	}
	PQclear(r);
	if (rc < 0) {
		set_err(s, "load carts", strerror(-rc));
		return rc;
	}
	r = exec(s,
		 "SELECT cart_id, round, coord, buyer_id, lines, state, off FROM cart_groups "
		 "WHERE part = $1 ORDER BY off",
		 1, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_group g;
		char names[FS_CART_LINES_MAX][FS_SKU_LEN_MAX + 1];
		const char *skus[FS_CART_LINES_MAX];
		memset(&g, 0, sizeof g);
		snprintf(g.cart_id, sizeof g.cart_id, "%s", PQgetvalue(r, i, 0));
		g.round = (int32_t)get_i64(r, i, 1);
		g.coord = (int32_t)get_i64(r, i, 2);
		snprintf(g.buyer_id, sizeof g.buyer_id, "%s", PQgetvalue(r, i, 3));
		g.state = fs_group_state_parse(PQgetvalue(r, i, 5));
		g.offset = get_i64(r, i, 6);
		rc = fs_group_parse_lines(&g, PQgetvalue(r, i, 4), names);
		for (uint32_t l = 0; l < FS_CART_LINES_MAX; l++)
			skus[l] = names[l];
		if (rc == 0 && !g.state)
			rc = -EINVAL;
		if (rc == 0)
			rc = fs_carts_load_group(core->carts, core, &g, skus);
	}
	PQclear(r);
	if (rc == 0)
		rc = fs_carts_load_done(core->carts, core);
	if (rc < 0)
		set_err(s, "load cart_groups", strerror(-rc));
	return rc;
}

int fs_store_cart_out(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		      fs_cart_out_fn fn, void *ctx)
{
	char part[16], lo[24], hi[24];
	snprintf(part, sizeof part, "%" PRId32, partition);
	snprintf(lo, sizeof lo, "%" PRId64, from);
	snprintf(hi, sizeof hi, "%" PRId64, to);
	const char *p[] = {part, lo, hi};
	PGresult *r = exec(s,
			   "SELECT to_topic = 'intents', coalesce(to_part, -1), msg_key, payload "
			   "FROM cart_out WHERE part = $1::int AND off >= $2::bigint AND "
			   "off < $3::bigint ORDER BY off, seq",
			   3, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	for (int i = 0; i < PQntuples(r); i++)
		fn(ctx, PQgetvalue(r, i, 0)[0] == 't', (int32_t)get_i64(r, i, 1),
		   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), (size_t)PQgetlength(r, i, 3));
	PQclear(r);
	return 0;
}

int fs_store_load(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		  struct fs_core *core, struct fs_part_meta *meta)
{
	char part[16];
	snprintf(part, sizeof part, "%" PRId32, partition);
	const char *p[] = {grp, topic, part};
	fs_core_reset(core);
	core->partition = partition;
	PGresult *r = exec(s,
			   "INSERT INTO partitions (grp, topic, part) VALUES ($1, $2, $3) "
			   "ON CONFLICT DO NOTHING",
			   3, p, PGRES_COMMAND_OK);
	if (!r)
		return -EIO;
	PQclear(r);
	/* One snapshot for the offsets, SKU counters, buyers and holds: a batch committed (by a
	 * worker about to be fenced) between two of these reads would load counters from before
	 * it and holds from after it. */
	r = exec(s, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, PGRES_COMMAND_OK);
	if (!r)
		return -EIO;
	PQclear(r);
	r = exec(s,
		 "SELECT next_offset, first_offset, replied_offset, clock_ms FROM partitions "
		 "WHERE grp = $1 AND topic = $2 AND part = $3",
		 3, p, PGRES_TUPLES_OK);
	if (!r) {
		PQclear(PQexec(s->conn, "ROLLBACK"));
		return -EIO;
	}
	if (PQntuples(r) != 1) {
		PQclear(r);
		PQclear(PQexec(s->conn, "ROLLBACK"));
		set_err(s, "load partition", "row missing");
		return -EIO;
	}
	meta->partition = partition;
	meta->next_offset = get_i64(r, 0, 0);
	meta->first_offset = get_i64(r, 0, 1);
	meta->replied_offset = get_i64(r, 0, 2);
	meta->clock_ms = get_i64(r, 0, 3);
	PQclear(r);
	core->clock_ms = meta->clock_ms;
	int rc = load_skus(s, part, core);
	if (rc == 0)
		rc = load_buyers(s, part, core);
	if (rc == 0)
		rc = load_holds(s, part, core);
	if (rc == 0)
		rc = load_rooms(s, part, core);
	if (rc == 0 && core->carts)
		rc = load_carts(s, part, core);
	r = PQexec(s->conn, rc == 0 ? "COMMIT" : "ROLLBACK");
	PQclear(r);
	return rc;
}

const char *fs_store_token(const struct fs_store *s)
{
	return s->token;
}

int fs_store_topic_rule(struct fs_store *s, const char *topic, const struct fs_topic_rule *mine,
			struct fs_topic_rule *rec)
{
	char n[16], bytes[24];
	snprintf(n, sizeof n, "%" PRId32, mine->partitions);
	snprintf(bytes, sizeof bytes, "%" PRId64, mine->record_max_bytes);
	const char *p[] = {topic, n, mine->misrouted, bytes};
	/* The first worker of the topic records what it found; everyone after reads it back (a
	 * row from before the size cap was recorded gets this worker's). */
	PGresult *r =
		exec(s,
		     "INSERT INTO topics AS t (topic, partitions, misrouted, record_max_bytes) "
		     "VALUES ($1, $2::int, $3, $4::int) ON CONFLICT (topic) DO UPDATE SET "
		     "record_max_bytes = coalesce(t.record_max_bytes, EXCLUDED.record_max_bytes) "
		     "RETURNING partitions, misrouted, record_max_bytes",
		     4, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = PQntuples(r) >= 1 ? 0 : -ENOENT;
	if (rc == 0) {
		rec->partitions = (int32_t)get_i64(r, 0, 0);
		snprintf(rec->misrouted, sizeof rec->misrouted, "%s", PQgetvalue(r, 0, 1));
		rec->record_max_bytes = get_i64(r, 0, 2);
	} else {
		set_err(s, "topic rule", "no row");
	}
	PQclear(r);
	return rc;
}

int fs_store_read_next(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		       const char *token, int64_t *next_offset, bool *mine)
{
	/* The backend of the dead connection may not have noticed yet and still run the batch's
	 * transaction: end it (an uncommitted transaction rolls back, a committed one stays) and
	 * wait until it is gone, so that what we read next is final. */
	if (s->stale_pid > 0) {
		char pid[16];
		snprintf(pid, sizeof pid, "%d", s->stale_pid);
		const char *q[] = {pid};
		PGresult *t =
			exec(s, "SELECT pg_terminate_backend($1::int)", 1, q, PGRES_TUPLES_OK);
		PQclear(t);
		for (int i = 0; i < STALE_WAIT_STEPS; i++) {
			t = exec(s, "SELECT 1 FROM pg_stat_activity WHERE pid = $1::int", 1, q,
				 PGRES_TUPLES_OK);
			int alive = t && PQntuples(t) > 0;
			PQclear(t);
			if (!alive)
				break;
			usleep(STALE_WAIT_STEP_US);
		}
		s->stale_pid = 0;
	}
	/* FOR UPDATE as well: a transaction still holding the row makes us wait for its end. */
	char part[16];
	snprintf(part, sizeof part, "%" PRId32, partition);
	const char *p[] = {grp, topic, part};
	PGresult *r = exec(s,
			   "SELECT next_offset, coalesce(commit_token, '') FROM partitions WHERE "
			   "grp = $1 AND topic = $2 AND part = $3 FOR UPDATE",
			   3, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = PQntuples(r) == 1 ? 0 : -ENOENT;
	if (rc == 0) {
		*next_offset = get_i64(r, 0, 0);
		*mine = token[0] && strcmp(PQgetvalue(r, 0, 1), token) == 0;
	} else
		set_err(s, "read next offset", "partition row missing");
	PQclear(r);
	return rc;
}

/* ---- lookup ---------------------------------------------------------------------------- */

int fs_store_lookup_holds(struct fs_store *s, const struct fs_batch *b, struct fs_core *core)
{
	struct fs_buf *ids = &s->bufs[0];
	fs_buf_clear(ids);
	fs_arr_begin(ids);
	uint32_t n = 0;
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		if (fs_item_has_key(it) && fs_kind_is_followup((int)it->rec.kind) &&
		    !fs_core_hold(core, it->rec.intent_id)) {
			fs_arr_text(ids, it->rec.intent_id);
			n++;
		}
	}
	fs_arr_end(ids);
	if (n == 0)
		return 0;
	if (!fs_buf_ok(ids)) {
		set_err(s, "lookup holds", "out of memory");
		return -ENOMEM;
	}
	char part[16];
	snprintf(part, sizeof part, "%" PRId32, core->partition);
	const char *p[] = {part, fs_buf_cstr(ids)};
	/* By the key (intent id, partition); in buy order, as the load. Ended ones only: the
	 * counters of the core's SKUs count its live holds, and a live one the core lacks was
	 * made by another worker since this one loaded (its batch is fenced). */
	PGresult *r = exec(s,
			   "SELECT " HOLD_COLUMNS " FROM reservations WHERE part = $1::int AND "
			   "intent_id = ANY (SELECT DISTINCT unnest($2::uuid[])) AND status <> "
			   "'held' ORDER BY off",
			   2, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	return load_hold_rows(s, r, core);
}

int fs_store_lookup(struct fs_store *s, struct fs_batch *b)
{
	struct fs_buf *ids = &s->bufs[0], *kinds = &s->bufs[37];
	fs_buf_clear(ids);
	fs_buf_clear(kinds);
	fs_arr_begin(ids);
	fs_arr_begin(kinds);
	uint32_t n = 0;
	for (uint32_t i = 0; i < b->len; i++) {
		if (!fs_item_has_key(&b->items[i]))
			continue;
		int kind = (int)b->items[i].rec.kind;
		fs_arr_text(ids, b->items[i].rec.intent_id);
		fs_arr_int(kinds, kind);
		n++;
		if (fs_kind_has_unmatched(kind)) { /* and its unmatched key (batch.h) */
			fs_arr_text(ids, b->items[i].rec.intent_id);
			fs_arr_int(kinds, kind + FS_KEY_UNMATCHED);
		}
	}
	fs_arr_end(ids);
	fs_arr_end(kinds);
	if (n == 0)
		return 0;
	if (!fs_buf_ok(ids) || !fs_buf_ok(kinds)) {
		set_err(s, "lookup", "out of memory");
		return -ENOMEM;
	}
	char part[16];
	snprintf(part, sizeof part, "%" PRId32, b->items[0].rec.partition);
	const char *p[] = {fs_buf_cstr(ids), fs_buf_cstr(kinds), part};
	/* By (intent id, kind) pairs, not by id alone: an id can have a buy, a confirm and a
	 * cancel stored (and a confirm and a cancel that found no hold), and the batch has room
	 * for two stored decisions per item. On the batch's partition only: the dedupe is the
	 * partition's (the schema's decisions). */
	PGresult *r = exec(s,
			   "SELECT d.intent_id, d.kind, d.body_hash, d.part, d.off, d.outcome, "
			   "d.reason, d.qty, d.expires_at_ms, d.decided_at_ms FROM decisions d "
			   "JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::int2[])) AS k(id, "
			   "kind) ON d.intent_id = k.id AND d.kind = k.kind AND d.part = $3::int",
			   3, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_stored st = {0};
		snprintf(st.intent_id, sizeof st.intent_id, "%s", PQgetvalue(r, i, 0));
		st.kind = (int)get_i64(r, i, 1);
		st.body_hash = get_i64(r, i, 2);
		st.partition = (int32_t)get_i64(r, i, 3);
		st.offset = get_i64(r, i, 4);
		if (fs_outcome_parse(PQgetvalue(r, i, 5), &st.dec.outcome) < 0)
			st.dec.outcome = FS_OUT_REJECTED;
		/* Reasons are static strings in the core; map a stored one back to a static. */
		st.dec.reason = PQgetisnull(r, i, 6) ? NULL : PQgetvalue(r, i, 6);
		st.dec.qty = get_i64(r, i, 7);
		st.dec.expires_at_ms = get_i64(r, i, 8);
		st.dec.decided_at_ms = get_i64(r, i, 9);
		rc = fs_batch_add_stored(b, &st);
	}
	PQclear(r);
	if (rc < 0)
		set_err(s, "lookup", strerror(-rc));
	return rc;
}

/* ---- commit ---------------------------------------------------------------------------- */

static struct fs_buf *buf(struct fs_store *s, int i)
{
	assert(i >= 0 && i < BUF_COUNT);
	fs_buf_clear(&s->bufs[i]);
	return &s->bufs[i];
}

static const char *int_str(struct fs_buf *b, int64_t v)
{
	fs_buf_clear(b);
	fs_buf_int(b, v);
	return fs_buf_cstr(b);
}

/* decisions: one row per new intent decision, as the data of one COPY (binary format, with
 * the columns' exact types): about half the server's time per row of the unnest INSERT it
 * replaced, and a fifth less again than the text format.
 * A row that exists already (decided elsewhere) fails the COPY with a unique violation
 * (23505), the batch is rolled back and redone with a lookup, as the count assertion of the
 * INSERT ... ON CONFLICT DO NOTHING did before. Returns the number of rows. */
static void decisions_copy(struct fs_buf *d, const struct fs_tx *t)
{
	fs_buf_clear(d);
	fs_copy_begin(d);
	for (uint32_t i = 0; i < t->decisions.len; i++) {
		const struct fs_tx_decision *r = &t->decisions.v[i];
		fs_copy_row(d, 12);
		fs_copy_id(d, r->intent_id);
		fs_copy_int2(d, (int16_t)r->kind);
		fs_copy_int8(d, r->body_hash);
		fs_copy_int4(d, t->cas.partition);
		fs_copy_int8(d, r->offset);
		fs_copy_text(d, r->sku);
		fs_copy_text(d, r->buyer_id);
		fs_copy_int8(d, r->qty);
		fs_copy_text(d, r->outcome);
		fs_copy_text(d, r->reason);
		if (r->has_expiry)
			fs_copy_int8(d, r->expires_at_ms);
		else
			fs_copy_null(d);
		fs_copy_int8(d, r->decided_at_ms);
	}
	fs_copy_end(d);
}

/* COMMIT is on the wire (its outcome unknown until the reply): the crash points there. */
static void commit_on_wire(struct fs_store *s)
{
	crash_point(s, "commit_sent");
	/* Fault injection: the connection dies with COMMIT on the wire, the process lives on. */
	if (crash_point(s, "commit_cut"))
		shutdown(PQsocket(s->conn), SHUT_RDWR);
}

/* One table's rows into the COPY the server just opened. With last_of_commit, COMMIT follows
 * in the same query string: once the end of this COPY is on the wire, so is the commit. */
static int put_copy(struct fs_store *s, const struct fs_buf *d, const char *what,
		    bool last_of_commit)
{
	bool sent = PQputCopyData(s->conn, d->data, (int)d->len) == 1;
	/* The rows are on the wire, the COPY still open: the backend is busy inside the
	 * statement (not idle in transaction), with the batch's locks held. Under fault
	 * injection they are flushed first: libpq may still hold the tail of them, and a stop
	 * there held no lock of the rows' (seen in CI: the new owner never waited). */
	if (sent && s->crash && PQflush(s->conn) != 0)
		sent = false;
	if (sent)
		crash_point(s, "in_copy");
	if (sent && last_of_commit)
		crash_point(s, "before_commit");
	if (!sent || PQputCopyEnd(s->conn, NULL) != 1) {
		set_err(s, what, PQerrorMessage(s->conn));
		return -EPIPE;
	}
	if (last_of_commit)
		commit_on_wire(s);
	return 0;
}

/* rejects: invalid records; a run of alike ones (see the schema) is one row. */
static void add_rejects(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	/* Cleared first, rows or not (as add_forwards). */
	struct fs_buf *off = buf(s, 13), *id = buf(s, 14), *reason = buf(s, 15), *end = buf(s, 36);
	if (t->rejects.len == 0)
		return;
	struct fs_buf *all[] = {off, id, reason, end};
	for (size_t i = 0; i < 4; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->rejects.len; i++) {
		const struct fs_tx_reject *r = &t->rejects.v[i];
		fs_arr_int(off, r->offset);
		fs_arr_text(id, r->intent_id);
		fs_arr_text(reason, r->reason);
		fs_arr_int(end, r->offset_end);
	}
	for (size_t i = 0; i < 4; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "rejects";
	x->sql = "INSERT INTO rejects (part, off, intent_id, reason, off_end) SELECT $1::int, * "
		 "FROM unnest($2::int8[], $3::uuid[], $4::text[], $5::int8[])";
	x->nparams = 5;
	for (int i = 0; i < 4; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* store_refusals: what the store refused that was no record's own (issue 47, item 5). */
static void add_refusals(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	/* cleared first, as add_forwards */
	struct fs_buf *off = buf(s, 66), *id = buf(s, 67), *round = buf(s, 68);
	if (t->refusals.len == 0)
		return;
	struct fs_buf *all[] = {off, id, round};
	for (size_t i = 0; i < 3; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->refusals.len; i++) {
		fs_arr_int(off, t->refusals.v[i].offset);
		fs_arr_text(id, t->refusals.v[i].intent_id);
		fs_arr_int(round, t->refusals.v[i].round);
	}
	for (size_t i = 0; i < 3; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "store_refusals";
	x->sql = "INSERT INTO store_refusals (part, off, intent_id, round) SELECT $1::int, * FROM "
		 "unnest($2::int8[], $3::uuid[], $4::int4[])";
	x->nparams = 4;
	for (int i = 0; i < 3; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* forwards: records on the wrong partition, and where they go (the rule's partition). */
static void add_forwards(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	/* Cleared first, rows or not: a flag of an earlier batch's out-of-memory must not fail
	 * every batch after it (prepare checks every buffer). */
	struct fs_buf *off = buf(s, 57), *to = buf(s, 58), *id = buf(s, 59), *kind = buf(s, 60);
	if (t->forwards.len == 0)
		return;
	struct fs_buf *all[] = {off, to, id, kind};
	for (size_t i = 0; i < 4; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->forwards.len; i++) {
		const struct fs_tx_forward *r = &t->forwards.v[i];
		fs_arr_int(off, r->offset);
		fs_arr_int(to, r->to_partition);
		fs_arr_text(id, r->intent_id);
		if (r->kind)
			fs_arr_int(kind, r->kind);
		else
			fs_arr_text(kind, NULL);
	}
	for (size_t i = 0; i < 4; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "forwards";
	x->sql = "INSERT INTO forwards (part, off, to_part, intent_id, kind) SELECT $1::int, * "
		 "FROM unnest($2::int8[], $3::int4[], $4::uuid[], $5::int2[])";
	x->nparams = 5;
	for (int i = 0; i < 4; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* sale_log: open / restock / close records. */
static void add_sale_log(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	/* Cleared first, rows or not (as add_forwards). */
	struct fs_buf *off = buf(s, 16), *kind = buf(s, 17), *sku = buf(s, 18), *amt = buf(s, 19),
		      *out = buf(s, 20), *reason = buf(s, 21);
	if (t->sales.len == 0)
		return;
	struct fs_buf *all[] = {off, kind, sku, amt, out, reason};
	for (size_t i = 0; i < 6; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->sales.len; i++) {
		const struct fs_tx_sale *r = &t->sales.v[i];
		fs_arr_int(off, r->offset);
		fs_arr_int(kind, r->kind);
		fs_arr_text(sku, r->sku);
		fs_arr_int(amt, r->amount);
		fs_arr_text(out, r->outcome);
		fs_arr_text(reason, r->reason);
	}
	for (size_t i = 0; i < 6; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "sale_log";
	x->sql = "INSERT INTO sale_log (part, off, kind, sku, amount, outcome, reason) "
		 "SELECT $1::int, * FROM unnest($2::int8[], $3::int2[], $4::text[], $5::int8[], "
		 "$6::text[], $7::text[])";
	x->nparams = 7;
	for (size_t i = 0; i < 6; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* reservations: the holds created by this batch as COPY rows into copy (their row cannot
 * exist: the decisions COPY of the same intent would fail first), the others (or all, when
 * careful) by one upsert. */
static void add_reservations(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k,
			     struct fs_buf *copy)
{
	fs_buf_clear(copy);
	fs_copy_begin(copy); /* sent only if a row follows */
	struct fs_buf *id = buf(s, 22), *sku = buf(s, 23), *buyer = buf(s, 24), *qty = buf(s, 25),
		      *exp = buf(s, 26), *off = buf(s, 27), *status = buf(s, 40),
		      *late = buf(s, 41), *ended_at = buf(s, 42), *ended_off = buf(s, 43);
	struct fs_buf *all[] = {id, sku, buyer, qty, exp, off, status, late, ended_at, ended_off};
	enum { N = sizeof all / sizeof all[0] };
	for (size_t i = 0; i < N; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->holds.len; i++) {
		const struct fs_tx_hold *h = &t->holds.v[i];
		if (!h->copy) {
			fs_arr_text(id, h->intent_id);
			fs_arr_text(sku, h->sku);
			fs_arr_text(buyer, h->buyer_id);
			fs_arr_int(qty, h->qty);
			fs_arr_int(exp, h->expires_at_ms);
			fs_arr_int(off, h->offset);
			fs_arr_text(status, h->status);
			fs_arr_text(late, h->late ? "t" : "f");
			if (h->ended) {
				fs_arr_int(ended_at, h->ended_at_ms);
				fs_arr_int(ended_off, h->ended_offset);
			} else {
				fs_arr_text(ended_at, NULL);
				fs_arr_text(ended_off, NULL);
			}
			continue;
		}
		fs_copy_row(copy, 11);
		fs_copy_id(copy, h->intent_id);
		fs_copy_text(copy, h->sku);
		fs_copy_text(copy, h->buyer_id);
		fs_copy_int8(copy, h->qty);
		fs_copy_int8(copy, h->expires_at_ms);
		fs_copy_int4(copy, t->cas.partition);
		fs_copy_int8(copy, h->offset);
		fs_copy_text(copy, h->status);
		fs_copy_bool(copy, h->late);
		if (h->ended) {
			fs_copy_int8(copy, h->ended_at_ms);
			fs_copy_int8(copy, h->ended_offset);
		} else {
			fs_copy_null(copy);
			fs_copy_null(copy);
		}
	}
	fs_copy_end(copy);
	if (t->n_hold_copies == (int64_t)t->holds.len)
		return;
	for (size_t i = 0; i < N; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "reservations";
	x->sql =
		"INSERT INTO reservations (intent_id, sku, buyer_id, qty, expires_at_ms, part, "
		"off, "
		"status, late, ended_at_ms, ended_off) SELECT u.id, u.sku, u.buyer, u.qty, u.exp, "
		"$1::int, u.off, u.status, u.late, u.ended_at, u.ended_off FROM unnest($2::uuid[], "
		"$3::text[], $4::text[], $5::int8[], $6::int8[], $7::int8[], $8::text[], "
		"$9::bool[], $10::int8[], $11::int8[]) AS u(id, sku, buyer, qty, exp, off, status, "
		"late, ended_at, ended_off) ON CONFLICT (intent_id, part) DO UPDATE SET "
		"status = "
		"EXCLUDED.status, late = EXCLUDED.late, ended_at_ms = EXCLUDED.ended_at_ms, "
		"ended_off = EXCLUDED.ended_off";
	x->nparams = 11;
	for (size_t i = 0; i < N; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* New SKUs (insert) and changed SKUs (update guarded by the committed base values). */
static void add_skus(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	struct fs_buf *sku = buf(s, 28), *status = buf(s, 29), *nums = buf(s, 30);
	struct fs_buf *ins = buf(s, 31);
	fs_arr_begin(sku);
	fs_arr_begin(status);
	fs_arr_begin(nums);
	bool first = true;
	/* New SKUs travel as one JSON array: few per batch, many columns. */
	fs_buf_str(ins, "[");
	for (uint32_t d = 0; d < t->skus.len; d++) {
		const struct fs_tx_sku *v = &t->skus.v[d];
		if (v->insert) {
			fs_buf_printf(ins,
				      "%s{\"sku\":\"%s\",\"status\":\"%s\",\"supply\":%" PRId64
				      ",\"available\":%" PRId64 ",\"held\":%" PRId64
				      ",\"sold\":%" PRId64 ",\"per_buyer_limit\":%" PRId64
				      ",\"max_qty\":%" PRId64 ",\"hold_ms\":%" PRId64
				      ",\"opens_at_ms\":%" PRId64 ",\"closes_at_ms\":%" PRId64,
				      first ? "" : ",", v->sku, v->status, v->supply, v->available,
				      v->held, v->sold, v->per_buyer_limit, v->max_qty, v->hold_ms,
				      v->opens_at_ms, v->closes_at_ms);
			const struct fs_admission *a = v->admission;
			if (a && a->rate_per_s > 0) /* the seed: [A-Za-z0-9._:-] (record.c) */
				fs_buf_printf(ins,
					      ",\"admit_rate\":%" PRId64 ",\"token_ms\":%" PRId64
					      ",\"draw\":\"%s\",\"draw_seed\":\"%s\"",
					      a->rate_per_s, a->token_ms,
					      a->draw == FS_DRAW_FIFO ? "fifo" : "random", a->seed);
			fs_buf_str(ins, "}");
			first = false;
			continue;
		}
		fs_arr_text(sku, v->sku);
		fs_arr_text(status, v->status);
		/* A 2-D array would need equal lengths; one flat array of 8 numbers per SKU. */
		int64_t vals[] = {v->supply,	  v->available,	     v->held,	   v->sold,
				  v->base_supply, v->base_available, v->base_held, v->base_sold};
		for (int i = 0; i < 8; i++)
			fs_arr_int(nums, vals[i]);
	}
	fs_buf_str(ins, "]");
	fs_arr_end(sku);
	fs_arr_end(status);
	fs_arr_end(nums);
	if (t->n_sku_inserts) {
		struct step *x = &st[(*k)++];
		x->what = "skus insert";
		/* Column list mirrors the JSON keys; sku text is validated ([A-Za-z0-9._:-]). */
		x->sql =
			"INSERT INTO skus (sku, part, status, supply, available, held, sold, "
			"per_buyer_limit, max_qty, hold_ms, opens_at_ms, closes_at_ms, admit_rate, "
			"token_ms, draw, draw_seed) "
			"SELECT j.sku, $1::int, j.status, j.supply, j.available, j.held, j.sold, "
			"j.per_buyer_limit, j.max_qty, j.hold_ms, j.opens_at_ms, j.closes_at_ms, "
			"coalesce(j.admit_rate, 0), coalesce(j.token_ms, 0), j.draw, j.draw_seed "
			"FROM json_to_recordset($2::json) AS j(sku text, status text, supply "
			"bigint, available bigint, held bigint, sold bigint, per_buyer_limit int, "
			"max_qty int, hold_ms bigint, opens_at_ms bigint, closes_at_ms bigint, "
			"admit_rate bigint, token_ms bigint, draw text, draw_seed text)";
		x->nparams = 2;
		x->params[1] = fs_buf_cstr(ins);
	}
	if (t->n_sku_updates) {
		struct step *x = &st[(*k)++];
		x->what = "skus update";
		x->sql = "WITH u AS (SELECT s.sku, s.status, n.v FROM unnest($2::text[], "
			 "$3::text[]) "
			 "WITH ORDINALITY AS s(sku, status, i) JOIN LATERAL (SELECT "
			 "($4::int8[])[(s.i - 1) * 8 + 1 : s.i * 8] AS v) n ON true), "
			 "upd AS (UPDATE skus k SET status = u.status, supply = u.v[1], "
			 "available = u.v[2], held = u.v[3], sold = u.v[4] FROM u WHERE k.sku = "
			 "u.sku "
			 "AND k.part = $1::int AND k.supply = u.v[5] AND k.available = u.v[6] "
			 "AND k.held = u.v[7] AND k.sold = u.v[8] RETURNING 1) "
			 "SELECT fs_assert((SELECT count(*) FROM upd) = $5::bigint, 'FSMIS', "
			 "'stock counters in memory and in Postgres disagree')";
		x->nparams = 5;
		x->params[1] = fs_buf_cstr(sku);
		x->params[2] = fs_buf_cstr(status);
		x->params[3] = fs_buf_cstr(nums);
		x->params[4] = int_str(buf(s, 32), t->n_sku_updates);
	}
}

/* buyers: the buyers this batch saw first as COPY rows into copy (no row of theirs exists:
 * every buyer with a row has a reservation, and every reservation is loaded), the others (or
 * all, when careful) by one upsert. If that reasoning ever failed, the COPY's unique
 * violation redoes the batch, carefully. */
static void add_buyers(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k,
		       struct fs_buf *copy)
{
	fs_buf_clear(copy);
	fs_copy_begin(copy); /* sent only if a row follows */
	struct fs_buf *sku = buf(s, 33), *buyer = buf(s, 34), *units = buf(s, 35);
	fs_arr_begin(sku);
	fs_arr_begin(buyer);
	fs_arr_begin(units);
	for (uint32_t d = 0; d < t->buyers.len; d++) {
		const struct fs_tx_buyer *v = &t->buyers.v[d];
		if (!v->copy) {
			fs_arr_text(sku, v->sku);
			fs_arr_text(buyer, v->buyer_id);
			fs_arr_int(units, v->units);
			continue;
		}
		fs_copy_row(copy, 3);
		fs_copy_text(copy, v->sku);
		fs_copy_text(copy, v->buyer_id);
		fs_copy_int8(copy, v->units);
	}
	fs_copy_end(copy);
	if (t->n_buyer_copies == (int64_t)t->buyers.len)
		return;
	fs_arr_end(sku);
	fs_arr_end(buyer);
	fs_arr_end(units);
	struct step *x = &st[(*k)++];
	x->what = "buyers";
	/* The join keeps a buyer row from ever naming a SKU of another partition. */
	x->sql = "INSERT INTO buyers (sku, buyer_id, units) SELECT u.sku, u.buyer, u.units FROM "
		 "unnest($2::text[], $3::text[], $4::int8[]) AS u(sku, buyer, units) JOIN skus k "
		 "ON k.sku = u.sku AND k.part = $1::int ON CONFLICT (sku, buyer_id) DO UPDATE SET "
		 "units = EXCLUDED.units";
	x->nparams = 4;
	x->params[1] = fs_buf_cstr(sku);
	x->params[2] = fs_buf_cstr(buyer);
	x->params[3] = fs_buf_cstr(units);
}

/* room_joins (issue 33): the rooms' new entries as COPY rows (buf 7: a row that existed would
 * fail the COPY and redo the batch, carefully), the admitted ones (or all, when careful) by one
 * upsert, joined to the partition's SKUs. */
static void add_joins(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	struct fs_buf *copy = buf(s, 7);
	fs_copy_begin(copy);
	struct fs_buf *sku = buf(s, 8), *buyer = buf(s, 9), *nums = buf(s, 10), *early = buf(s, 11);
	struct fs_buf *tok = buf(s, 65);
	struct fs_buf *all[] = {sku, buyer, nums, early, tok};
	for (size_t i = 0; i < 5; i++)
		fs_arr_begin(all[i]);
	for (uint32_t i = 0; i < t->joins.len; i++) {
		const struct fs_tx_join *j = &t->joins.v[i];
		const struct fs_room_entry *e = j->e;
		bool admitted = e->admitted_ms >= 0;
		if (!j->copy) {
			fs_arr_text(sku, j->sku);
			fs_arr_text(buyer, e->buyer_id);
			fs_arr_text(early, e->early ? "t" : "f");
			fs_arr_text(tok, j->token);
			/* 7 numbers a row (a flat array: -1 for none) */
			int64_t v[] = {e->offset,      e->joined_ms, e->admitted_ms, e->decided_ms,
				       e->decided_off, e->minted_ms, e->minted_off};
			for (int n = 0; n < 7; n++)
				fs_arr_int(nums, v[n]);
			continue;
		}
		fs_copy_row(copy, 12);
		fs_copy_text(copy, j->sku);
		fs_copy_text(copy, e->buyer_id);
		fs_copy_int4(copy, t->cas.partition);
		fs_copy_int8(copy, e->offset);
		fs_copy_int8(copy, e->joined_ms);
		fs_copy_bool(copy, e->early);
		const int64_t v[] = {e->admitted_ms, e->decided_ms, e->decided_off, e->minted_ms,
				     e->minted_off};
		for (int n = 0; n < 5; n++) {
			if (admitted)
				fs_copy_int8(copy, v[n]);
			else
				fs_copy_null(copy);
		}
		if (j->token[0])
			fs_copy_text(copy, j->token);
		else
			fs_copy_null(copy);
	}
	fs_copy_end(copy);
	if (t->n_join_copies == t->joins.len)
		return;
	for (size_t i = 0; i < 5; i++)
		fs_arr_end(all[i]);
	struct step *x = &st[(*k)++];
	x->what = "room_joins";
	x->sql = "INSERT INTO room_joins (sku, buyer_id, part, off, joined_ms, early, admitted_ms, "
		 "decided_ms, decided_off, minted_ms, minted_off, token) SELECT u.sku, u.buyer, "
		 "$1::int, n.v[1], n.v[2], u.early, nullif(n.v[3], -1), nullif(n.v[4], -1), "
		 "nullif(n.v[5], -1), nullif(n.v[6], -1), nullif(n.v[7], -1), nullif(u.token, '') "
		 "FROM unnest($2::text[], $3::text[], $5::bool[], $6::text[]) "
		 "WITH ORDINALITY AS u(sku, buyer, early, token, i) JOIN LATERAL "
		 "(SELECT ($4::int8[])[(u.i - 1) * 7 + 1 : u.i * 7] AS v) n ON true JOIN skus k ON "
		 "k.sku = u.sku AND k.part = $1::int ON CONFLICT (sku, buyer_id) DO UPDATE SET "
		 "admitted_ms = EXCLUDED.admitted_ms, decided_ms = EXCLUDED.decided_ms, "
		 "decided_off = EXCLUDED.decided_off, minted_ms = EXCLUDED.minted_ms, "
		 "minted_off = EXCLUDED.minted_off, token = EXCLUDED.token";
	x->nparams = 6;
	for (size_t i = 0; i < 5; i++)
		x->params[i + 1] = fs_buf_cstr(all[i]);
}

/* carts, cart_groups, cart_out (issue 31): the batch's new carts and groups, and its outbox
 * rows, as COPY data (bufs 4-6, sent with the other tables' new rows: a row that existed would
 * fail the COPY and redo the batch, carefully); its changed ones (or all, when careful) by
 * upsert, each set as one JSON parameter (json_populate_recordset). The rows name the
 * partition; the upserts' WHERE keeps a batch from ever writing another's. */
static void add_carts(struct fs_store *s, const struct fs_tx *t, struct step *st, int *k)
{
	struct fs_buf *carts = buf(s, 63), *groups = buf(s, 64);
	fs_tx_carts_copy(t, t->cas.partition, buf(s, 4), buf(s, 5), buf(s, 6));
	fs_tx_carts_json(t, t->cas.partition, carts, groups);
	if (t->carts.len > t->n_cart_copies) {
		struct step *x = &st[(*k)++];
		x->what = "carts";
		x->sql =
			"INSERT INTO carts SELECT * FROM json_populate_recordset(NULL::carts, "
			"$2::json) WHERE part = $1::int ON CONFLICT (cart_id, part) DO UPDATE SET "
			"state = EXCLUDED.state, round = EXCLUDED.round, at = EXCLUDED.at, "
			"cancel_asked = EXCLUDED.cancel_asked, hold_ms = EXCLUDED.hold_ms, "
			"expires_at_ms = EXCLUDED.expires_at_ms, outcome = EXCLUDED.outcome, "
			"reason = EXCLUDED.reason, line = EXCLUDED.line, answer = EXCLUDED.answer, "
			"answer_reason = EXCLUDED.answer_reason";
		x->nparams = 2;
		x->params[1] = fs_buf_cstr(carts);
	}
	if (t->groups.len > t->n_group_copies) {
		struct step *x = &st[(*k)++];
		x->what = "cart_groups";
		x->sql = "INSERT INTO cart_groups SELECT * FROM json_populate_recordset("
			 "NULL::cart_groups, $2::json) WHERE part = $1::int ON CONFLICT (cart_id, "
			 "round, part) DO UPDATE SET state = EXCLUDED.state";
		x->nparams = 2;
		x->params[1] = fs_buf_cstr(groups);
	}
}

/* The offset compare-and-set, with the partition's clock and counters: the first statement of
 * every batch. Prepared once per connection (CAS_NAME): its parse and plan were ~0.3 ms of
 * every transaction (pgbench, extended against prepared), a twentieth of a small batch's. */
#define CAS_NAME "fs_cas"
#define CAS_SQL                                                                                    \
	"WITH cas AS (UPDATE partitions SET next_offset = $5::bigint, "                            \
	"replied_offset = GREATEST(replied_offset, $6::bigint), clock_ms = $7::bigint, "           \
	"first_offset = CASE WHEN first_offset < 0 THEN $8::bigint ELSE first_offset END, "        \
	"n_records = n_records + $9::bigint, n_fresh = n_fresh + $10::bigint, "                    \
	"n_repeats = n_repeats + $11::bigint, n_conflicts = n_conflicts + $12::bigint, "           \
	"n_invalid = n_invalid + $13::bigint, n_sale = n_sale + $14::bigint, "                     \
	"n_ticks = n_ticks + $15::bigint, n_forwarded = n_forwarded + $17::bigint, "               \
	"n_gaps = n_gaps + $19::bigint, n_carts = n_carts + $20::bigint, "                         \
	"n_joins = n_joins + $21::bigint, "                                                        \
	"n_batches = n_batches + 1, commit_token = $16 "                                           \
	"WHERE grp = $2 AND topic = $3 AND part = $1::int AND next_offset = $4::bigint "           \
	"AND ($18::text IS NULL OR commit_token = $18::text) "                                     \
	"RETURNING 1) SELECT fs_assert((SELECT count(*) FROM cas) = 1, 'FSCAS', "                  \
	"'partition offset moved: another worker owns it')"

/* Fills the compare-and-set step: the expected and new offsets, the counters, a fresh token;
 * after a predecessor (s->after), its token too: the offset at its end is not enough, for
 * another worker may have committed the same range when the predecessor did not commit, and
 * this batch was decided on top of the predecessor's decisions, not of that worker's. */
static void add_cas(struct fs_store *s, const char *grp, const char *topic, const struct fs_tx *t,
		    struct step *x)
{
	x->what = "offset compare-and-set";
	x->cas = true;
	x->sql = CAS_SQL; /* sent prepared or not: fs_store_commit_send decides */
	x->nparams = 21;
	x->params[17] = s->after ? s->after_token : NULL;
	x->params[1] = grp;
	x->params[2] = topic;
	/* A token per attempt: this store's random id and a counter. */
	s->attempt++;
	snprintf(s->token, sizeof s->token, "%s-%" PRId64, s->id, s->attempt);
	x->params[15] = s->token;
	const struct fs_tx_cas *c = &t->cas;
	int64_t vals[] = {c->expected,	     c->next,		c->replied,
			  c->clock_ms,	     c->first_off,	c->counts.records,
			  c->counts.fresh,   c->counts.repeats, c->counts.conflicts,
			  c->counts.invalid, c->counts.sale,	c->counts.ticks};
	for (int i = 0; i < 12; i++)
		x->params[i + 3] = int_str(buf(s, 44 + i), vals[i]);
	x->params[16] = int_str(buf(s, 56), c->counts.forwarded);
	x->params[18] = int_str(buf(s, 61), c->gaps);
	x->params[19] = int_str(buf(s, 62), c->counts.carts);
	x->params[20] = int_str(buf(s, 12), c->counts.joins);
}

/* fs_store_commit_send's hook, told once that the compare-and-set's result is in (or that it
 * will not be sent). */
struct cas_hook {
	fs_cas_fn fn;
	void *ctx;
	bool ended;
};

static void cas_ended(struct cas_hook *h)
{
	if (h->fn && !h->ended) {
		h->ended = true;
		h->fn(h->ctx, false);
	}
}

/* Sends st[0..n-1] as one pipeline and collects every result; the hook hears of the
 * compare-and-set's as soon as it is read, before the statements after it. The crash
 * points around COMMIT fire only for the pipeline that carries it (commit). */
static int run_pipeline(struct fs_store *s, struct step *st, int n, bool commit,
			struct cas_hook *hook, int *failed_step, char sqlstate[6])
{
	*failed_step = -1;
	sqlstate[0] = '\0';
	if (!PQenterPipelineMode(s->conn)) {
		set_err(s, "pipeline", PQerrorMessage(s->conn));
		return -EIO;
	}
	int sent = 0;
	for (; sent < n; sent++) {
		bool ok =
			st[sent].prepared
				? PQsendQueryPrepared(s->conn, st[sent].prepared, st[sent].nparams,
						      st[sent].params, NULL, NULL, 0)
				: PQsendQueryParams(s->conn, st[sent].sql, st[sent].nparams, NULL,
						    st[sent].params, NULL, NULL, 0);
		if (!ok)
			break;
		if (st[sent].cas)
			crash_point(s, "after_cas_sent");
	}
	if (sent < n)
		set_err(s, "pipeline send", PQerrorMessage(s->conn));
	if (commit)
		crash_point(s, "before_commit");
	bool synced = sent == n && PQpipelineSync(s->conn);
	if (synced && commit)
		commit_on_wire(s);
	int rc = sent == n && synced ? 0 : -EIO;
	/* Collect one result (plus its NULL terminator) per statement, then the sync. */
	for (int i = 0; i < sent && !conn_bad(s); i++) {
		PGresult *r;
		while ((r = PQgetResult(s->conn)) != NULL) {
			ExecStatusType t = PQresultStatus(r);
			if (t == PGRES_FATAL_ERROR && *failed_step < 0) {
				*failed_step = i;
				const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
				snprintf(sqlstate, 6, "%s", state ? state : "");
				char what[128];
				snprintf(what, sizeof what, "batch %s", st[i].what);
				set_err(s, what, PQresultErrorMessage(r));
				rc = -EIO;
			} else if (t == PGRES_PIPELINE_ABORTED) {
				rc = -EIO;
			}
			PQclear(r);
		}
		if (st[i].cas)
			cas_ended(hook);
	}
	if (synced && !conn_bad(s)) {
		PGresult *r = PQgetResult(s->conn);
		while (r && PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
			PQclear(r);
			r = PQgetResult(s->conn);
		}
		PQclear(r);
	}
	if (conn_bad(s)) {
		if (rc == 0 || *failed_step < 0)
			set_err(s, "postgres connection lost", PQerrorMessage(s->conn));
		return -EPIPE;
	}
	if (!PQexitPipelineMode(s->conn)) {
		/* Results are left over (the server went away between two of them): the outcome
		 * is unknown and this connection unusable; fs_store_ensure makes a new one. */
		set_err(s, "postgres pipeline broken", PQerrorMessage(s->conn));
		return -EPIPE;
	}
	return rc;
}

int fs_store_commit_prepare(struct fs_store *s, const char *grp, const char *topic,
			    const struct fs_part_meta *meta, int64_t next_offset,
			    int64_t replied_offset, const struct fs_batch *b,
			    const struct fs_core *core, bool careful, const char *after)
{
	struct step *st = s->st;
	memset(s->st, 0, sizeof s->st);
	s->refused[0] = '\0'; /* an attempt that fails before its send was not refused */
	int k = 0;
	s->after = after != NULL;
	snprintf(s->after_token, sizeof s->after_token, "%s", after ? after : "");
	st[k++] = (struct step){.sql = "BEGIN", .what = "begin"};
	if (after) {
		/* The predecessor's UPDATE of the partition row is not committed yet: the row as
		 * the compare-and-set's snapshot sees it has the old offset, which its WHERE
		 * skips without waiting. Lock the row first: that waits for the predecessor's
		 * outcome, and the statements after it see its commit. */
		st[k++] = (struct step){
			.sql = "SELECT 1 FROM partitions WHERE part = $1::int AND grp = $2 AND "
			       "topic = $3 FOR UPDATE",
			.what = "partition row lock",
			.nparams = 3,
			.params = {NULL, grp, topic}};
	}
	/* Built apart (core/commit.c), rendered here. */
	struct fs_tx *t = &s->tx;
	s->prepared = false;
	if (fs_tx_build(t, meta->partition, meta->next_offset, next_offset, replied_offset, b, core,
			careful) < 0) {
		set_err(s, "batch", "out of memory");
		return -ENOMEM;
	}
	add_cas(s, grp, topic, t, &st[k++]);
	decisions_copy(buf(s, 1), t);
	add_rejects(s, t, st, &k);
	add_refusals(s, t, st, &k);
	add_forwards(s, t, st, &k);
	add_sale_log(s, t, st, &k);
	add_reservations(s, t, st, &k, buf(s, 2));
	add_skus(s, t, st, &k);
	add_buyers(s, t, st, &k, buf(s, 3));
	add_carts(s, t, st, &k);
	add_joins(s, t, st, &k);
	s->k = k;
	snprintf(s->part, sizeof s->part, "%" PRId32, meta->partition);
	for (int i = 1; i < k; i++)
		st[i].params[0] = s->part;
	s->prepared = false;
	for (int i = 0; i < BUF_COUNT; i++) {
		if (!fs_buf_ok(&s->bufs[i])) {
			set_err(s, "batch", "out of memory");
			return -ENOMEM;
		}
	}
	s->prepared = true;
	return 0;
}

static bool has_copies(const struct fs_store *s)
{
	return s->tx.decisions.len > 0 || s->tx.n_hold_copies > 0 || s->tx.n_buyer_copies > 0 ||
	       s->tx.n_cart_copies > 0 || s->tx.n_group_copies > 0 || s->tx.outs.len > 0 ||
	       s->tx.n_join_copies > 0;
}

/* The batch's new rows, one COPY per table, all in one query string (a pipeline cannot carry
 * COPY). The server opens each COPY as it reaches it, in the reply that completes the one
 * before, so n tables cost n + 1 round trips instead of 2n. begin puts BEGIN first; commit
 * puts COMMIT last, which then completes in the last table's round trip. On an error the
 * server skips the rest of the string: the transaction is left aborted, as by a failed
 * statement. 0, -EIO (the server refused: sqlstate says why) or -EPIPE. */
static int send_copies(struct fs_store *s, bool begin, bool commit, char sqlstate[6])
{
	enum { TABLES = 7 };
	static const char *const names[TABLES] = {
		"batch decisions",   "batch reservations", "batch buyers",    "batch carts",
		"batch cart_groups", "batch cart_out",	   "batch room_joins"};
	static const char *const copies[TABLES] = {
		"COPY decisions (intent_id, kind, body_hash, part, off, sku, buyer_id, qty, "
		"outcome, reason, expires_at_ms, decided_at_ms) FROM STDIN (FORMAT binary)",
		"COPY reservations (intent_id, sku, buyer_id, qty, expires_at_ms, part, off, "
		"status, late, ended_at_ms, ended_off) FROM STDIN (FORMAT binary)",
		"COPY buyers (sku, buyer_id, units) FROM STDIN (FORMAT binary)",
		FS_TX_CARTS_COPY,
		FS_TX_GROUPS_COPY,
		FS_TX_OUTS_COPY,
		"COPY room_joins (sku, buyer_id, part, off, joined_ms, early, admitted_ms, "
		"decided_ms, decided_off, minted_ms, minted_off, token) FROM STDIN (FORMAT binary)",
	};
	const int64_t rows[TABLES] = {s->tx.decisions.len,  s->tx.n_hold_copies,
				      s->tx.n_buyer_copies, s->tx.n_cart_copies,
				      s->tx.n_group_copies, s->tx.outs.len,
				      s->tx.n_join_copies};
	/* The statements of the string in order, named for errors, and the COPYs' data. */
	const char *what[TABLES + 2];
	const struct fs_buf *data[TABLES];
	int nstmt = 0, ncopy = 0;
	char sql[2048];
	size_t len = 0;
	sql[0] = '\0';
	if (begin) {
		len += (size_t)snprintf(sql + len, sizeof sql - len, "BEGIN; ");
		what[nstmt++] = "begin";
	}
	for (int i = 0; i < TABLES; i++) {
		if (rows[i] <= 0)
			continue;
		len += (size_t)snprintf(sql + len, sizeof sql - len, "%s; ", copies[i]);
		what[nstmt++] = names[i];
		data[ncopy++] = &s->bufs[1 + i];
	}
	if (commit) {
		len += (size_t)snprintf(sql + len, sizeof sql - len, "COMMIT");
		what[nstmt++] = "commit";
	}
	assert(ncopy > 0 && len < sizeof sql);
	if (!PQsendQuery(s->conn, sql)) {
		set_err(s, "batch rows", PQerrorMessage(s->conn));
		return -EPIPE;
	}
	int done = 0, copied = 0, rc = 0;
	PGresult *r;
	while ((r = PQgetResult(s->conn)) != NULL) {
		ExecStatusType t = PQresultStatus(r);
		if (t == PGRES_COPY_IN && copied < ncopy) {
			PQclear(r);
			if (put_copy(s, data[copied], what[done], commit && copied == ncopy - 1) <
			    0)
				return -EPIPE;
			copied++;
			continue;
		}
		if (t == PGRES_COMMAND_OK) {
			done++;
		} else if (rc == 0) {
			const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
			snprintf(sqlstate, 6, "%s", state ? state : "");
			set_err(s, done < nstmt ? what[done] : "batch rows",
				t == PGRES_COPY_IN ? "an unexpected COPY"
						   : PQresultErrorMessage(r));
			if (t == PGRES_COPY_IN)
				PQputCopyEnd(s->conn, "unexpected COPY");
			rc = -EIO;
		}
		PQclear(r);
		if (conn_bad(s))
			break;
	}
	if (conn_bad(s)) {
		if (rc == 0)
			set_err(s, "postgres connection lost", PQerrorMessage(s->conn));
		return -EPIPE;
	}
	return rc;
}

int fs_store_commit_send(struct fs_store *s, fs_cas_fn cas, void *ctx)
{
	if (!s->prepared) {
		set_err(s, "batch", "nothing prepared");
		return FS_COMMIT_RETRY;
	}
	s->prepared = false;
	/* Once per connection (not at connect: the schema may not be there yet). A failure costs
	 * nothing: the statement is then sent unprepared, and the next batch tries again. */
	if (!s->cas_prepared) {
		PGresult *r = PQprepare(s->conn, CAS_NAME, CAS_SQL, 16, NULL);
		s->cas_prepared = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
	}
	for (int i = 0; i < s->k; i++)
		if (s->st[i].cas)
			s->st[i].prepared = s->cas_prepared ? CAS_NAME : NULL;

	/* Round trips are the fixed cost of a transaction (docs/DESIGN-NOTES.md): COMMIT
	 * rides with the last statements sent. In line: the statements (offset compare-and-set
	 * first) in one pipeline, then the new rows by COPY with COMMIT after them in the same
	 * query string. With a predecessor in flight (after), BEGIN and the COPYs go first: they
	 * touch no row of it, and run while it commits; then the statements, from the row lock
	 * that waits for the predecessor's outcome, and COMMIT, in one pipeline: Postgres orders
	 * the two commits. A batch without new rows is one pipeline either way. */
	struct cas_hook hook = {cas, ctx, false};
	struct step *st = s->st;
	int k = s->k;
	s->phase_us = 0;
	bool copies = has_copies(s);
	char state[6] = "";
	int failed, rc;
	if (s->after || !copies) {
		assert(k < STEPS_MAX);
		st[k++] = (struct step){.sql = "COMMIT", .what = "commit"};
	}
	if (s->after) {
		rc = copies ? send_copies(s, true, false, state) : 0;
		s->phase_us = wall_us();
		if (rc == 0 && copies)
			crash_point(s, "idle_in_tx");
		if (rc == 0 && cas)
			cas(ctx, true);
		int from = copies ? 1 : 0; /* BEGIN went with the COPYs */
		if (rc == 0)
			rc = run_pipeline(s, st + from, k - from, true, &hook, &failed, state);
	} else {
		/* Its compare-and-set is in this pipeline: the hook has heard by its end. */
		rc = run_pipeline(s, st, k, !copies, &hook, &failed, state);
		s->phase_us = wall_us();
		if (rc == 0 && copies) {
			/* The statements ran: the session is idle in the transaction, its locks
			 * held, until the rows come (after the rows, when after). */
			crash_point(s, "idle_in_tx");
			rc = send_copies(s, false, true, state);
		}
	}
	cas_ended(&hook);
	if (rc == 0)
		return FS_COMMIT_OK;
	if (rc == -EPIPE) {
		/* The connection failed: if COMMIT was on the wire only the stored offset can tell
		 * whether it took effect (before it, the answer will be "not committed"). */
		return FS_COMMIT_UNKNOWN;
	}
	PGresult *r = PQexec(s->conn, "ROLLBACK");
	PQclear(r);
	snprintf(s->refused, sizeof s->refused, "%s", state);
	if (strcmp(state, "FSCAS") == 0)
		return FS_COMMIT_FENCED;
	if (strcmp(state, "55P03") == 0)
		break_stalled(s);
	if (conn_bad(s))
		return FS_COMMIT_UNKNOWN;
	return FS_COMMIT_REDO;
}

int64_t fs_store_phase_us(const struct fs_store *s)
{
	return s->phase_us;
}

int fs_store_commit(struct fs_store *s, const char *grp, const char *topic,
		    const struct fs_part_meta *meta, int64_t next_offset, int64_t replied_offset,
		    const struct fs_batch *b, const struct fs_core *core, bool careful)
{
	if (fs_store_commit_prepare(s, grp, topic, meta, next_offset, replied_offset, b, core,
				    careful, NULL) < 0)
		return FS_COMMIT_REDO;
	return fs_store_commit_send(s, NULL, NULL);
}

int fs_store_save_replied(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
			  int64_t next_offset, int64_t replied_offset)
{
	char part[16], next[24], replied[24];
	snprintf(part, sizeof part, "%" PRId32, partition);
	snprintf(next, sizeof next, "%" PRId64, next_offset);
	snprintf(replied, sizeof replied, "%" PRId64, replied_offset);
	const char *p[] = {grp, topic, part, next, replied};
	/* Guarded by next_offset: a stale worker cannot move another one's row. */
	PGresult *r = exec(s,
			   "UPDATE partitions SET replied_offset = GREATEST(replied_offset, "
			   "$5::bigint) WHERE grp = $1 AND topic = $2 AND part = $3::int AND "
			   "next_offset = $4::bigint AND $5::bigint <= next_offset",
			   5, p, PGRES_COMMAND_OK);
	if (!r)
		return -EIO;
	PQclear(r);
	return 0;
}

int fs_store_refused_at(struct fs_store *s, int32_t partition, int64_t offset)
{
	char part[16], off[24];
	snprintf(part, sizeof part, "%" PRId32, partition);
	snprintf(off, sizeof off, "%" PRId64, offset);
	const char *p[] = {part, off};
	PGresult *r = exec(s,
			   "SELECT 1 FROM rejects WHERE part = $1::int AND off = $2::bigint AND "
			   "reason = 'store_refused'",
			   2, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	int n = PQntuples(r);
	PQclear(r);
	return n > 0;
}

int fs_store_expired(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		     fs_expired_fn fn, void *ctx)
{
	char part[16], lo[24], hi[24];
	snprintf(part, sizeof part, "%" PRId32, partition);
	snprintf(lo, sizeof lo, "%" PRId64, from);
	snprintf(hi, sizeof hi, "%" PRId64, to);
	const char *p[] = {part, lo, hi};
	PGresult *r =
		exec(s,
		     "SELECT intent_id, sku, qty, ended_at_ms, ended_off FROM reservations "
		     "WHERE part = $1::int AND status = 'expired' AND ended_off >= $2::bigint "
		     "AND ended_off < $3::bigint ORDER BY ended_off, expires_at_ms, off",
		     3, p, PGRES_TUPLES_OK);
	if (!r)
		return -EIO;
	for (int i = 0; i < PQntuples(r); i++)
		fn(ctx, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), get_i64(r, i, 2),
		   get_i64(r, i, 3), get_i64(r, i, 4));
	PQclear(r);
	return 0;
}

int64_t fs_store_stalled_broken(const struct fs_store *s)
{
	return atomic_load(&s->stalled_broken);
}
