/* peers.c: flashsale-peers, the ways teams sell limited stock today, measured against the same
 * PostgreSQL that flashsale uses (issue 5).
 *
 * One run = one approach: C clients (threads, one libpq connection each, closed loop) send the
 * requests of B buyers for one hot SKU that has S units. Each buyer sends one request (plus a
 * repeat for a share of them with --dup-ratio, as a retried request or a redelivered message
 * would be). After the run, SQL checks what was sold against the stock and whether an order key
 * was recorded twice. One machine-readable line per run on stdout:
 *
 *   PEER approach=conditional-update clients=32 buyers=100000 ... check=ok
 *
 * The approaches (every statement below is a round trip; no CHECK constraint on the stock, so
 * that a broken approach can show its oversell instead of an error):
 *
 *   read-then-write     BEGIN; SELECT stock; [if > 0: UPDATE stock = stock - 1; INSERT order];
 *                       COMMIT. READ COMMITTED: it oversells, and the line says by how much.
 *   conditional-update  WITH d AS (UPDATE ... SET stock = stock - 1 WHERE sku = $1 AND stock > 0
 *                       RETURNING sku) INSERT order SELECT ... FROM d: the order is inserted when
 *                       a row was updated; one statement, one round trip, atomic.
 *   idempotent-reserve  BEGIN; INSERT order ON CONFLICT (order_key) DO NOTHING; [if new:
 *                       UPDATE ... WHERE stock > 0]; COMMIT, or ROLLBACK when sold out. What
 *                       flashsale does per batch, done per request.
 *   for-update          BEGIN; SELECT stock ... FOR UPDATE; [if > 0: UPDATE; INSERT order];
 *                       COMMIT (ROLLBACK when sold out).
 *   optimistic          SELECT stock, version; [if > 0: the conditional statement with
 *                       WHERE version = $v instead of stock > 0]; zero rows: read again,
 *                       at most --max-retries times.
 *   redis-gate          a Redis Lua script decrements a counter when positive (127.0.0.1,
 *                       --redis-port); the winners then run the conditional-update statement.
 *                       Only when built with hiredis.
 *
 * Carts (issue 31; the seed on shopping-cart checkout): each buyer is a cart of --lines distinct
 * SKUs out of --skus (SKU-0 ..), each with --stock units, drawn from the seed; all or nothing:
 *
 *   cart-for-update     BEGIN; per line in the cart's order: SELECT stock ... FOR UPDATE
 *                       (--think-us after each, the seed's 2 ms of pricing); if every line
 *                       has a unit: per line UPDATE and INSERT order; COMMIT, else ROLLBACK.
 *                       Carts whose orders cross deadlock: Postgres kills one (40P01), which
 *                       is counted and tried again (at most --max-retries times).
 *   cart-sorted         the same with the lines locked in SKU order: no deadlock.
 *
 * Everything lives in schema `peers` of the database named by --pg (dropped and created again
 * on every run); the database `flashsale` is refused. Only loopback servers are accepted. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#ifdef FS_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

enum {
	CLIENTS_MAX = 256,
	BUYERS_MAX = 10000000,
	STOCK_MAX = 1000000000,
	TIME_LIMIT_MAX = 3600,
	RETRIES_MAX = 100000,
	THINK_US_MAX = 1000000,
	/* A repeat goes out this many requests after its original (a retry, not a double send). */
	DUP_DELAY = 64,
	/* The process ends itself this long after the run's limit, whatever hangs. */
	HARD_LIMIT_EXTRA_S = 120,
	ERRORS_SHOWN = 5,
};

enum approach {
	A_READ_THEN_WRITE,
	A_CONDITIONAL_UPDATE,
	A_IDEMPOTENT_RESERVE,
	A_FOR_UPDATE,
	A_OPTIMISTIC,
	A_REDIS_GATE,
	A_CART_FOR_UPDATE,
	A_CART_SORTED,
	A_COUNT,
};

static const char *const approach_names[A_COUNT] = {
	"read-then-write", "conditional-update", "idempotent-reserve", "for-update",
	"optimistic",	   "redis-gate",	 "cart-for-update",    "cart-sorted",
};

enum outcome {
	O_WIN,	    /* a unit was sold to this request */
	O_SOLD_OUT, /* answered: nothing left */
	O_REPEAT,   /* answered: this order key was already processed (idempotent-reserve) */
	O_GAVE_UP,  /* optimistic: retries exhausted, no answer */
	O_ERROR,    /* a statement failed */
};

struct opts {
	enum approach approach;
	long clients;
	long buyers;
	long stock;
	long time_limit;
	long max_retries;
	long think_us;
	long redis_port;
	double dup_ratio;
	long skus, lines; /* carts */
	uint64_t seed;
	const char *pg;
	const char *sku;
	bool progress;
};

struct client {
	pthread_t thread;
	int index;
	PGconn *pg;
#ifdef FS_HAVE_HIREDIS
	redisContext *redis;
#endif
	/* Results, summed by main after the join. */
	uint64_t count[O_ERROR + 1];
	uint64_t retries;
	uint64_t gate_mismatch;
	uint64_t deadlocks; /* carts: transactions Postgres ended with 40P01 */
	bool deadlocked;    /* the last statement's error was a deadlock */
	uint32_t *lat_us;
	size_t lat_len, lat_cap;
	bool dead;
};

static struct opts opt;
static uint32_t *req_buyer; /* request index -> buyer index; NULL when there is no repeat */
static uint64_t req_total;
static atomic_uint_fast64_t req_next;
static atomic_uint_fast64_t req_done;
static atomic_bool timed_out;
static atomic_bool clients_done;
static atomic_int errors_shown;
static double deadline;
#ifdef FS_HAVE_HIREDIS
static char gate_sha[64];
#endif

static const char gate_lua[] = "local n = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
			       "if n > 0 then redis.call('DECR', KEYS[1]) return 1 end\n"
			       "return 0\n";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("flashsale-peers: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* The order key of a buyer, derived from the run's seed, so that a repeat carries the same key
 * and nothing has to be stored per buyer. Version-7-shaped like the ids flashsale's client
 * library mints (a millisecond time first: the run's start plus one ms per 1,000 buyers, the
 * order the clients take them in), so that both sides' B-trees see keys of the same kind. */
static int64_t key_epoch_ms;

static void order_key(uint64_t buyer, char out[37])
{
	uint64_t r1 = splitmix64(opt.seed ^ (buyer * 0xD1B54A32D192ED03ULL));
	uint64_t lo = splitmix64(r1 ^ 0x8CB92BA72F3D8DD7ULL);
	uint64_t hi = ((uint64_t)(key_epoch_ms + (int64_t)(buyer / 1000)) << 16) | 0x7000ULL |
		      (r1 & 0x0FFFULL);
	lo = (lo & ~(3ULL << 62)) | (2ULL << 62);
	snprintf(out, 37, "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
		 hi >> 32, (hi >> 16) & 0xFFFF, hi & 0xFFFF, lo >> 48,
		 lo & (uint64_t)0xFFFFFFFFFFFF);
}

/* ------------------------------------------------------------------------------------------
 * Command line */

static const char usage[] =
	"usage: flashsale-peers --approach NAME --pg CONNINFO [--clients N] [--buyers N]\n"
	"                       [--stock N] [--sku SKU] [--time-limit S] [--max-retries N]\n"
	"                       [--think-us N] [--dup-ratio X] [--seed N] [--redis-port P]\n"
	"                       [--skus N] [--lines N] [--progress]\n"
	"       flashsale-peers --list\n"
	"\n"
	"Runs one approach (read-then-write, conditional-update, idempotent-reserve, for-update,\n"
	"optimistic, redis-gate; for carts cart-for-update and cart-sorted, each buyer a cart of\n"
	"--lines SKUs (3) out of --skus (20), --stock units each, all or nothing, the deadlocks\n"
	"counted and retried) with N clients (default 32, at most 256) over --buyers buyers\n"
	"(default 100000, at most 10000000) for one SKU with --stock units (default 500), in the\n"
	"schema `peers` of the database --pg names (or $FLASHSALE_BENCH_PG), dropped and created\n"
	"again. Prints one line: PEER approach=... (see bench/peers.c for every field).\n"
	"--time-limit: clients stop taking requests after S seconds (default 120, at most 3600).\n"
	"--think-us: work between the read and the write (default 0). --dup-ratio X (0..1): a\n"
	"share of the buyers sends its request twice. Exit 0 check ok, 3 check failed (oversold,\n"
	"an order twice, ...), 1 error, 2 usage.\n";

static void usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("flashsale-peers: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs(" (see --help)\n", stderr);
	va_end(ap);
	exit(2);
}

static long parse_long(const char *name, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		usage_die("--%s takes an integer in %ld..%ld, got '%s'", name, lo, hi, s);
	return v;
}

static bool approach_available(enum approach a)
{
#ifdef FS_HAVE_HIREDIS
	(void)a;
	return true;
#else
	return a != A_REDIS_GATE;
#endif
}

static void parse_args(int argc, char **argv)
{
	opt.approach = A_COUNT;
	opt.clients = 32;
	opt.buyers = 100000;
	opt.stock = 500;
	opt.time_limit = 120;
	opt.max_retries = 100;
	opt.redis_port = 56379;
	opt.sku = "PHONE-X";
	opt.skus = 20;
	opt.lines = 3;
	opt.seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	key_epoch_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	opt.pg = getenv("FLASHSALE_BENCH_PG");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			exit(0);
		}
		if (!strcmp(a, "--list")) {
			for (int k = 0; k < A_COUNT; k++)
				if (approach_available((enum approach)k))
					printf("%s\n", approach_names[k]);
			exit(0);
		}
		if (!strcmp(a, "--progress")) {
			opt.progress = true;
			continue;
		}
		if (strncmp(a, "--", 2) != 0 || i + 1 >= argc)
			usage_die("unexpected argument '%s'", a);
		const char *name = a + 2, *v = argv[++i];
		if (!strcmp(name, "approach")) {
			for (int k = 0; k < A_COUNT; k++)
				if (!strcmp(v, approach_names[k]))
					opt.approach = (enum approach)k;
			if (opt.approach == A_COUNT)
				usage_die("unknown approach '%s'", v);
			if (!approach_available(opt.approach))
				usage_die("%s: built without hiredis", v);
		} else if (!strcmp(name, "pg")) {
			opt.pg = v;
		} else if (!strcmp(name, "sku")) {
			if (!*v || strlen(v) > 64)
				usage_die("--sku: 1 to 64 characters");
			opt.sku = v;
		} else if (!strcmp(name, "clients")) {
			opt.clients = parse_long(name, v, 1, CLIENTS_MAX);
		} else if (!strcmp(name, "buyers")) {
			opt.buyers = parse_long(name, v, 1, BUYERS_MAX);
		} else if (!strcmp(name, "stock")) {
			opt.stock = parse_long(name, v, 0, STOCK_MAX);
		} else if (!strcmp(name, "time-limit")) {
			opt.time_limit = parse_long(name, v, 1, TIME_LIMIT_MAX);
		} else if (!strcmp(name, "max-retries")) {
			opt.max_retries = parse_long(name, v, 0, RETRIES_MAX);
		} else if (!strcmp(name, "think-us")) {
			opt.think_us = parse_long(name, v, 0, THINK_US_MAX);
		} else if (!strcmp(name, "redis-port")) {
			opt.redis_port = parse_long(name, v, 1, 65535);
		} else if (!strcmp(name, "skus")) {
			opt.skus = parse_long(name, v, 1, 100000);
		} else if (!strcmp(name, "lines")) {
			opt.lines = parse_long(name, v, 1, 16);
		} else if (!strcmp(name, "seed")) {
			opt.seed = (uint64_t)parse_long(name, v, 0, LONG_MAX);
		} else if (!strcmp(name, "dup-ratio")) {
			char *end;
			opt.dup_ratio = strtod(v, &end);
			if (end == v || *end || !(opt.dup_ratio >= 0 && opt.dup_ratio <= 1))
				usage_die("--dup-ratio takes a number in 0..1, got '%s'", v);
		} else {
			usage_die("unknown option '%s'", a);
		}
	}
	if (opt.approach == A_COUNT)
		usage_die("--approach is required");
	if (opt.lines > opt.skus)
		usage_die("--lines %ld needs at least as many --skus", opt.lines);
	if (!opt.pg || !*opt.pg)
		usage_die("--pg (or FLASHSALE_BENCH_PG) is required");
}

static void pg_check_conninfo(void);

/* ------------------------------------------------------------------------------------------
 * PostgreSQL */

static bool is_loopback(const char *host)
{
	return !host || !*host || host[0] == '/' || !strcmp(host, "127.0.0.1") ||
	       !strcmp(host, "localhost") || !strcmp(host, "::1");
}

/* Every name in a comma-separated host list is a loopback address or a socket folder. */
static bool all_loopback(const char *list)
{
	char buf[1024];
	if (!list || !*list)
		return true;
	snprintf(buf, sizeof buf, "%s", list);
	if (strlen(list) >= sizeof buf)
		return false;
	char *save = NULL;
	for (char *h = strtok_r(buf, ",", &save); h; h = strtok_r(NULL, ",", &save))
		if (!is_loopback(h))
			return false;
	return true;
}

/* Before any packet leaves: the conninfo (and the PGHOST/PGHOSTADDR it falls back to) names
 * only 127.0.0.1, localhost, ::1 or a local socket; a service file could name anything. */
static void pg_check_conninfo(void)
{
	char *err = NULL;
	PQconninfoOption *o = PQconninfoParse(opt.pg, &err);
	if (!o)
		usage_die("--pg: %s", err ? err : "invalid conninfo");
	const char *host = getenv("PGHOST"), *hostaddr = getenv("PGHOSTADDR");
	bool service = getenv("PGSERVICE") != NULL;
	for (PQconninfoOption *p = o; p->keyword; p++) {
		if (!p->val)
			continue;
		if (!strcmp(p->keyword, "host"))
			host = p->val;
		else if (!strcmp(p->keyword, "hostaddr"))
			hostaddr = p->val;
		else if (!strcmp(p->keyword, "service"))
			service = true;
	}
	bool ok = !service && all_loopback(host) && all_loopback(hostaddr);
	PQconninfoFree(o);
	if (!ok)
		usage_die("--pg: only a server on 127.0.0.1 (or a local socket) is accepted, "
			  "named by host/hostaddr (no service)");
}

static PGconn *pg_connect(void)
{
	PGconn *c = PQconnectdb(opt.pg);
	if (PQstatus(c) != CONNECTION_OK) {
		char msg[512];
		snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
		msg[strcspn(msg, "\n")] = 0;
		PQfinish(c);
		die("postgres: %s", msg);
	}
	const char *addr = PQhostaddr(c);
	if (!is_loopback(PQhost(c)) || (addr && *addr && !is_loopback(addr))) {
		PQfinish(c);
		die("postgres: only a server on 127.0.0.1 (or a local socket) is accepted");
	}
	return c;
}

/* Runs a statement that must succeed (set-up, checks); returns its result. */
static PGresult *pg_must(PGconn *c, const char *sql, int n, const char *const *params,
			 ExecStatusType want)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != want) {
		char msg[512];
		snprintf(msg, sizeof msg, "%s", PQresultErrorMessage(r));
		msg[strcspn(msg, "\n")] = 0;
		die("postgres: %s (in: %.60s...)", msg, sql);
	}
	return r;
}

static void pg_must_cmd(PGconn *c, const char *sql)
{
	PQclear(pg_must(c, sql, 0, NULL, PGRES_COMMAND_OK));
}

/* The statements, prepared on every client connection. */
enum stmt {
	S_BEGIN,
	S_COMMIT,
	S_ROLLBACK,
	S_READ,
	S_READ_FOR_UPDATE,
	S_READ_VERSION,
	S_DECREMENT,
	S_DECREMENT_IF_STOCK,
	S_INSERT_ORDER,
	S_INSERT_ORDER_IDEMPOTENT,
	S_SELL_IF_STOCK,
	S_SELL_IF_VERSION,
	S_COUNT,
};

static const struct {
	const char *name, *sql;
	int nparams;
} stmts[S_COUNT] = {
	{"begin", "BEGIN", 0},
	{"commit", "COMMIT", 0},
	{"rollback", "ROLLBACK", 0},
	{"read", "SELECT stock FROM peers.stock WHERE sku = $1", 1},
	{"read_for_update", "SELECT stock FROM peers.stock WHERE sku = $1 FOR UPDATE", 1},
	{"read_version", "SELECT stock, version FROM peers.stock WHERE sku = $1", 1},
	{"decrement", "UPDATE peers.stock SET stock = stock - 1 WHERE sku = $1", 1},
	{"decrement_if_stock",
	 "UPDATE peers.stock SET stock = stock - 1 WHERE sku = $1 AND stock > 0", 1},
	{"insert_order", "INSERT INTO peers.orders (order_key, sku, buyer) VALUES ($2, $1, $3)", 3},
	{"insert_order_idempotent",
	 "INSERT INTO peers.orders (order_key, sku, buyer) VALUES ($2, $1, $3) "
	 "ON CONFLICT (order_key) DO NOTHING",
	 3},
	{"sell_if_stock",
	 "WITH d AS (UPDATE peers.stock SET stock = stock - 1 WHERE sku = $1 AND stock > 0 "
	 "RETURNING sku) INSERT INTO peers.orders (order_key, sku, buyer) "
	 "SELECT $2, sku, $3 FROM d",
	 3},
	{"sell_if_version",
	 "WITH d AS (UPDATE peers.stock SET stock = stock - 1, version = version + 1 "
	 "WHERE sku = $1 AND version = $4 RETURNING sku) "
	 "INSERT INTO peers.orders (order_key, sku, buyer) SELECT $2, sku, $3 FROM d",
	 4},
};

static void pg_prepare_all(PGconn *c)
{
	char sql[160];
	/* Bounded statements; READ COMMITTED whatever the server's default is. */
	snprintf(sql, sizeof sql,
		 "SET statement_timeout = %ld; SET lock_timeout = %ld; "
		 "SET default_transaction_isolation = 'read committed'",
		 (opt.time_limit + 30) * 1000, (opt.time_limit + 30) * 1000);
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		die("postgres: %s", PQresultErrorMessage(r));
	PQclear(r);
	for (int i = 0; i < S_COUNT; i++) {
		r = PQprepare(c, stmts[i].name, stmts[i].sql, stmts[i].nparams, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			die("postgres: prepare %s: %s", stmts[i].name, PQresultErrorMessage(r));
		PQclear(r);
	}
}

static bool is_cart(void)
{
	return opt.approach == A_CART_FOR_UPDATE || opt.approach == A_CART_SORTED;
}

/* The set-up, on its own connection: schema, tables, the SKU's row (carts: --skus rows). */
static void pg_setup(void)
{
	PGconn *c = pg_connect();
	PGresult *r = pg_must(c, "SELECT current_database()", 0, NULL, PGRES_TUPLES_OK);
	if (!strcmp(PQgetvalue(r, 0, 0), "flashsale"))
		die("postgres: refusing the database 'flashsale' (the worker's own); "
		    "name a database of its own in --pg");
	PQclear(r);
	pg_must_cmd(c, "SET client_min_messages = warning");
	pg_must_cmd(c, "DROP SCHEMA IF EXISTS peers CASCADE");
	pg_must_cmd(c, "CREATE SCHEMA peers");
	/* No CHECK (stock >= 0): a broken approach must be able to show its oversell. */
	pg_must_cmd(c, "CREATE TABLE peers.stock (sku text PRIMARY KEY, stock integer NOT NULL, "
		       "version bigint NOT NULL DEFAULT 0)");
	pg_must_cmd(c, "CREATE TABLE peers.orders (order_key uuid NOT NULL, sku text NOT NULL, "
		       "buyer bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
	/* One btree on the key everywhere; unique only where the approach relies on it, so that a
	 * repeat shows up as a duplicate order elsewhere instead of as an error. */
	if (opt.approach == A_IDEMPOTENT_RESERVE)
		pg_must_cmd(c, "CREATE UNIQUE INDEX orders_key ON peers.orders (order_key)");
	else
		pg_must_cmd(c, "CREATE INDEX orders_key ON peers.orders (order_key)");
	char stock[24], n[24];
	snprintf(stock, sizeof stock, "%ld", opt.stock);
	snprintf(n, sizeof n, "%ld", opt.skus);
	const char *p[2] = {opt.sku, stock};
	if (is_cart())
		PQclear(pg_must(c,
				"INSERT INTO peers.stock (sku, stock) SELECT 'SKU-' || i, $2 FROM "
				"generate_series(0, $1::int - 1) i",
				2, (const char *const[]){n, stock}, PGRES_COMMAND_OK));
	else
		PQclear(pg_must(c, "INSERT INTO peers.stock (sku, stock) VALUES ($1, $2)", 2, p,
				PGRES_COMMAND_OK));
	pg_must_cmd(c, "ANALYZE peers.stock");
	PQfinish(c);
}

/* ------------------------------------------------------------------------------------------
 * Redis */

#ifdef FS_HAVE_HIREDIS
static redisContext *redis_connect(void)
{
	struct timeval tv = {5, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", (int)opt.redis_port, tv);
	if (!c || c->err)
		die("redis 127.0.0.1:%ld: %s", opt.redis_port, c ? c->errstr : "out of memory");
	return c;
}

static void redis_setup(void)
{
	redisContext *c = redis_connect();
	redisReply *r = redisCommand(c, "SET peers:stock:%s %ld", opt.sku, opt.stock);
	if (!r || r->type == REDIS_REPLY_ERROR)
		die("redis: SET failed");
	freeReplyObject(r);
	r = redisCommand(c, "SCRIPT LOAD %s", gate_lua);
	if (!r || r->type != REDIS_REPLY_STRING || r->len >= (int)sizeof gate_sha)
		die("redis: SCRIPT LOAD failed");
	memcpy(gate_sha, r->str, (size_t)r->len + 1);
	freeReplyObject(r);
	redisFree(c);
}

static long long redis_left(void)
{
	redisContext *c = redis_connect();
	redisReply *r = redisCommand(c, "GET peers:stock:%s", opt.sku);
	long long v = r && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
	freeReplyObject(r);
	redisFree(c);
	return v;
}
#endif

/* ------------------------------------------------------------------------------------------
 * The approaches, one request each */

struct req {
	const char *params[4];
	char sku[32]; /* carts: the line's SKU */
	char key[37];
	char buyer[24];
	char version[24];
};

static void client_error(struct client *cl, const PGresult *r)
{
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	cl->deadlocked = state && !strcmp(state, "40P01");
	if (!cl->deadlocked && atomic_fetch_add(&errors_shown, 1) < ERRORS_SHOWN) {
		char msg[512];
		snprintf(msg, sizeof msg, "%s",
			 r ? PQresultErrorMessage(r) : PQerrorMessage(cl->pg));
		msg[strcspn(msg, "\n")] = 0;
		fprintf(stderr, "flashsale-peers: client %d: %s\n", cl->index, msg);
	}
	if (PQstatus(cl->pg) != CONNECTION_OK)
		cl->dead = true;
}

/* Runs a prepared statement. Returns the rows it touched or returned, -1 on error (reported;
 * an open transaction is rolled back). *value gets the first column of the first row. */
static long exec(struct client *cl, enum stmt s, struct req *rq, long *value, long *value2)
{
	PGresult *r = PQexecPrepared(cl->pg, stmts[s].name, stmts[s].nparams,
				     stmts[s].nparams ? rq->params : NULL, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	long n = -1;
	if (st == PGRES_TUPLES_OK) {
		n = PQntuples(r);
		if (n > 0 && value)
			*value = strtol(PQgetvalue(r, 0, 0), NULL, 10);
		if (n > 0 && value2)
			*value2 = strtol(PQgetvalue(r, 0, 1), NULL, 10);
	} else if (st == PGRES_COMMAND_OK) {
		const char *t = PQcmdTuples(r);
		n = *t ? strtol(t, NULL, 10) : 0;
	} else {
		client_error(cl, r);
	}
	PQclear(r);
	if (n < 0 && !cl->dead && PQtransactionStatus(cl->pg) != PQTRANS_IDLE) {
		PGresult *rb = PQexec(cl->pg, "ROLLBACK");
		PQclear(rb);
	}
	return n;
}

static void think(void)
{
	if (opt.think_us > 0)
		usleep((useconds_t)opt.think_us);
}

/* Ends a transaction that ran without error: COMMIT, or ROLLBACK when nothing was done. */
static enum outcome finish(struct client *cl, struct req *rq, enum stmt end, enum outcome o)
{
	return exec(cl, end, rq, NULL, NULL) < 0 ? O_ERROR : o;
}

static enum outcome read_then_write(struct client *cl, struct req *rq)
{
	long stock = 0, n;
	if (exec(cl, S_BEGIN, rq, NULL, NULL) < 0 || (n = exec(cl, S_READ, rq, &stock, NULL)) < 0)
		return O_ERROR;
	if (n == 0 || stock <= 0)
		return finish(cl, rq, S_COMMIT, O_SOLD_OUT);
	think();
	if (exec(cl, S_DECREMENT, rq, NULL, NULL) < 0 ||
	    exec(cl, S_INSERT_ORDER, rq, NULL, NULL) < 0)
		return O_ERROR;
	return finish(cl, rq, S_COMMIT, O_WIN);
}

static enum outcome conditional_update(struct client *cl, struct req *rq)
{
	long n = exec(cl, S_SELL_IF_STOCK, rq, NULL, NULL);
	return n < 0 ? O_ERROR : n == 1 ? O_WIN : O_SOLD_OUT;
}

static enum outcome idempotent_reserve(struct client *cl, struct req *rq)
{
	long n;
	if (exec(cl, S_BEGIN, rq, NULL, NULL) < 0 ||
	    (n = exec(cl, S_INSERT_ORDER_IDEMPOTENT, rq, NULL, NULL)) < 0)
		return O_ERROR;
	if (n == 0)
		return finish(cl, rq, S_COMMIT, O_REPEAT);
	if ((n = exec(cl, S_DECREMENT_IF_STOCK, rq, NULL, NULL)) < 0)
		return O_ERROR;
	if (n == 0)
		return finish(cl, rq, S_ROLLBACK, O_SOLD_OUT);
	return finish(cl, rq, S_COMMIT, O_WIN);
}

static enum outcome for_update(struct client *cl, struct req *rq)
{
	long stock = 0, n;
	if (exec(cl, S_BEGIN, rq, NULL, NULL) < 0 ||
	    (n = exec(cl, S_READ_FOR_UPDATE, rq, &stock, NULL)) < 0)
		return O_ERROR;
	if (n == 0 || stock <= 0)
		return finish(cl, rq, S_ROLLBACK, O_SOLD_OUT);
	think();
	if (exec(cl, S_DECREMENT, rq, NULL, NULL) < 0 ||
	    exec(cl, S_INSERT_ORDER, rq, NULL, NULL) < 0)
		return O_ERROR;
	return finish(cl, rq, S_COMMIT, O_WIN);
}

static enum outcome optimistic(struct client *cl, struct req *rq)
{
	for (long attempt = 0;; attempt++) {
		long stock = 0, version = 0, n;
		if ((n = exec(cl, S_READ_VERSION, rq, &stock, &version)) < 0)
			return O_ERROR;
		if (n == 0 || stock <= 0)
			return O_SOLD_OUT;
		think();
		snprintf(rq->version, sizeof rq->version, "%ld", version);
		if ((n = exec(cl, S_SELL_IF_VERSION, rq, NULL, NULL)) < 0)
			return O_ERROR;
		if (n == 1)
			return O_WIN;
		if (attempt >= opt.max_retries)
			return O_GAVE_UP;
		cl->retries++;
	}
}

#ifdef FS_HAVE_HIREDIS
static enum outcome redis_gate(struct client *cl, struct req *rq)
{
	char key[96];
	snprintf(key, sizeof key, "peers:stock:%s", opt.sku);
	redisReply *r = redisCommand(cl->redis, "EVALSHA %s 1 %s", gate_sha, key);
	if (!r || r->type != REDIS_REPLY_INTEGER) {
		if (atomic_fetch_add(&errors_shown, 1) < ERRORS_SHOWN)
			fprintf(stderr, "flashsale-peers: client %d: redis: %s\n", cl->index,
				r && r->type == REDIS_REPLY_ERROR ? r->str : cl->redis->errstr);
		if (!r)
			cl->dead = true;
		freeReplyObject(r);
		return O_ERROR;
	}
	long long pass = r->integer;
	freeReplyObject(r);
	if (!pass)
		return O_SOLD_OUT;
	long n = exec(cl, S_SELL_IF_STOCK, rq, NULL, NULL);
	if (n == 1)
		return O_WIN;
	/* The gate let it through but Postgres had nothing (or failed): give the unit back. */
	r = redisCommand(cl->redis, "INCR %s", key);
	freeReplyObject(r);
	if (n < 0)
		return O_ERROR;
	cl->gate_mismatch++;
	return O_SOLD_OUT;
}
#endif

/* Carts: buyer b's cart, --lines distinct SKU indexes drawn from the seed (in the cart's
 * order). */
static void cart_of(uint64_t b, long *skus)
{
	uint64_t x = opt.seed ^ (b * 0x9E3779B97F4A7C15ULL);
	for (long l = 0; l < opt.lines; l++) {
		bool again;
		do {
			x = splitmix64(x);
			skus[l] = (long)(x % (uint64_t)opt.skus);
			again = false;
			for (long j = 0; j < l; j++)
				again |= skus[j] == skus[l];
		} while (again);
	}
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* One try of a cart: O_WIN, O_SOLD_OUT, or O_ERROR (cl->deadlocked: a deadlock). */
static enum outcome cart_try(struct client *cl, struct req *rq, const long *skus)
{
	rq->params[0] = rq->sku;
	if (exec(cl, S_BEGIN, rq, NULL, NULL) < 0)
		return O_ERROR;
	bool all = true;
	for (long l = 0; l < opt.lines; l++) {
		long stock = 0, n;
		snprintf(rq->sku, sizeof rq->sku, "SKU-%ld", skus[l]);
		if ((n = exec(cl, S_READ_FOR_UPDATE, rq, &stock, NULL)) < 0)
			return O_ERROR;
		all &= n == 1 && stock > 0;
		think();
	}
	if (!all)
		return finish(cl, rq, S_ROLLBACK, O_SOLD_OUT);
	for (long l = 0; l < opt.lines; l++) {
		snprintf(rq->sku, sizeof rq->sku, "SKU-%ld", skus[l]);
		if (exec(cl, S_DECREMENT, rq, NULL, NULL) < 0 ||
		    exec(cl, S_INSERT_ORDER, rq, NULL, NULL) < 0)
			return O_ERROR;
	}
	return finish(cl, rq, S_COMMIT, O_WIN);
}

static enum outcome cart(struct client *cl, struct req *rq)
{
	long skus[16];
	cart_of(strtoull(rq->buyer, NULL, 10), skus);
	if (opt.approach == A_CART_SORTED)
		qsort(skus, (size_t)opt.lines, sizeof *skus, cmp_long);
	for (long attempt = 0;; attempt++) {
		cl->deadlocked = false;
		enum outcome o = cart_try(cl, rq, skus);
		if (o != O_ERROR || !cl->deadlocked)
			return o;
		cl->deadlocks++;
		/* Past the time limit a cart stops retrying: without this, carts deadlocking
		 * over and over (one second of deadlock_timeout each) kept a run going for
		 * twice its limit. */
		if (attempt >= opt.max_retries || mono_s() >= deadline)
			return O_GAVE_UP;
	}
}

static enum outcome run_one(struct client *cl, struct req *rq)
{
	switch (opt.approach) {
	case A_READ_THEN_WRITE:
		return read_then_write(cl, rq);
	case A_CONDITIONAL_UPDATE:
		return conditional_update(cl, rq);
	case A_IDEMPOTENT_RESERVE:
		return idempotent_reserve(cl, rq);
	case A_FOR_UPDATE:
		return for_update(cl, rq);
	case A_OPTIMISTIC:
		return optimistic(cl, rq);
	case A_REDIS_GATE:
#ifdef FS_HAVE_HIREDIS
		return redis_gate(cl, rq);
#endif
		break;
	case A_CART_FOR_UPDATE:
	case A_CART_SORTED:
		return cart(cl, rq);
	case A_COUNT:
		break;
	}
	return O_ERROR;
}

static void lat_push(struct client *cl, double seconds)
{
	if (cl->lat_len == cl->lat_cap) {
		size_t cap = cl->lat_cap ? cl->lat_cap * 2 : 4096;
		uint32_t *p = realloc(cl->lat_us, cap * sizeof *p);
		if (!p)
			die("out of memory");
		cl->lat_us = p;
		cl->lat_cap = cap;
	}
	double us = seconds * 1e6;
	cl->lat_us[cl->lat_len++] = us >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static pthread_barrier_t start_barrier;

static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct req rq;
	rq.params[0] = opt.sku;
	rq.params[1] = rq.key;
	rq.params[2] = rq.buyer;
	rq.params[3] = rq.version;
	pthread_barrier_wait(&start_barrier);
	while (!cl->dead) {
		if (mono_s() >= deadline) {
			atomic_store(&timed_out, true);
			break;
		}
		uint64_t i = atomic_fetch_add(&req_next, 1);
		if (i >= req_total)
			break;
		uint64_t buyer = req_buyer ? req_buyer[i] : i;
		order_key(buyer, rq.key);
		snprintf(rq.buyer, sizeof rq.buyer, "%" PRIu64, buyer);
		double t0 = mono_s();
		enum outcome o = run_one(cl, &rq);
		lat_push(cl, mono_s() - t0);
		cl->count[o]++;
		atomic_fetch_add(&req_done, 1);
	}
	return NULL;
}

/* ------------------------------------------------------------------------------------------
 * The run */

/* The request sequence when some buyers repeat: each repeat DUP_DELAY requests after its
 * original. */
static void build_requests(void)
{
	req_total = (uint64_t)opt.buyers;
	if (opt.dup_ratio <= 0)
		return;
	req_buyer = malloc(sizeof *req_buyer * (size_t)opt.buyers * 2);
	if (!req_buyer)
		die("out of memory");
	uint32_t ring[DUP_DELAY + 1];
	uint64_t due[DUP_DELAY + 1];
	int head = 0, len = 0;
	uint64_t n = 0, rng = opt.seed;
	for (uint64_t b = 0; b < (uint64_t)opt.buyers || len > 0; b++) {
		bool original = b < (uint64_t)opt.buyers;
		if (original) {
			req_buyer[n++] = (uint32_t)b;
			rng = splitmix64(rng);
			if ((double)(rng >> 11) / 9007199254740992.0 < opt.dup_ratio) {
				int at = (head + len) % (DUP_DELAY + 1);
				ring[at] = (uint32_t)b;
				due[at] = b + DUP_DELAY;
				len++;
			}
		}
		while (len > 0 && (due[head] <= b || !original || len == DUP_DELAY + 1)) {
			req_buyer[n++] = ring[head];
			head = (head + 1) % (DUP_DELAY + 1);
			len--;
		}
	}
	req_total = n;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static double percentile_ms(const uint32_t *v, size_t n, double q)
{
	if (n == 0)
		return 0;
	size_t k = (size_t)ceil(q * (double)n);
	k = k == 0 ? 0 : k - 1;
	return (double)v[k < n ? k : n - 1] / 1000.0;
}

static void *progress_main(void *arg)
{
	(void)arg;
	double t0 = mono_s();
	while (!atomic_load(&clients_done)) {
		fprintf(stderr, "\r  %-18s %10" PRIu64 "/%" PRIu64 " requests %6.1f s",
			approach_names[opt.approach], (uint64_t)atomic_load(&req_done), req_total,
			mono_s() - t0);
		usleep(250000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	pg_check_conninfo();
	/* Whatever hangs (a server that stops answering), the process ends. */
	alarm((unsigned)(opt.time_limit + HARD_LIMIT_EXTRA_S));
	build_requests();
	pg_setup();
#ifdef FS_HAVE_HIREDIS
	if (opt.approach == A_REDIS_GATE)
		redis_setup();
#endif

	int nc = (int)opt.clients;
	struct client *cls = calloc((size_t)nc, sizeof *cls);
	if (!cls)
		die("out of memory");
	for (int i = 0; i < nc; i++) {
		cls[i].index = i;
		cls[i].pg = pg_connect();
		pg_prepare_all(cls[i].pg);
#ifdef FS_HAVE_HIREDIS
		if (opt.approach == A_REDIS_GATE)
			cls[i].redis = redis_connect();
#endif
	}
	pthread_barrier_init(&start_barrier, NULL, (unsigned)nc + 1);
	for (int i = 0; i < nc; i++)
		if (pthread_create(&cls[i].thread, NULL, client_main, &cls[i]) != 0)
			die("pthread_create failed");
	pthread_t prog;
	double t0 = mono_s();
	deadline = t0 + (double)opt.time_limit;
	pthread_barrier_wait(&start_barrier);
	bool prog_on = opt.progress && pthread_create(&prog, NULL, progress_main, NULL) == 0;
	for (int i = 0; i < nc; i++)
		pthread_join(cls[i].thread, NULL);
	double seconds = mono_s() - t0;
	if (prog_on) {
		atomic_store(&clients_done, true);
		pthread_join(prog, NULL);
		fprintf(stderr, "\r%60s\r", "");
	}

	uint64_t count[O_ERROR + 1] = {0}, retries = 0, mismatch = 0, deadlocks = 0;
	size_t nlat = 0;
	bool dead = false;
	for (int i = 0; i < nc; i++) {
		for (int k = 0; k <= O_ERROR; k++)
			count[k] += cls[i].count[k];
		retries += cls[i].retries;
		deadlocks += cls[i].deadlocks;
		mismatch += cls[i].gate_mismatch;
		nlat += cls[i].lat_len;
		dead |= cls[i].dead;
	}
	uint32_t *lat = malloc((nlat ? nlat : 1) * sizeof *lat);
	if (!lat)
		die("out of memory");
	size_t at = 0;
	for (int i = 0; i < nc; i++) {
		if (cls[i].lat_len)
			memcpy(lat + at, cls[i].lat_us, cls[i].lat_len * sizeof *lat);
		at += cls[i].lat_len;
		free(cls[i].lat_us);
		PQfinish(cls[i].pg);
#ifdef FS_HAVE_HIREDIS
		if (cls[i].redis)
			redisFree(cls[i].redis);
#endif
	}
	qsort(lat, nlat, sizeof *lat, cmp_u32);

	/* The check, in SQL. */
	PGconn *c = pg_connect();
	const char *p[1] = {opt.sku};
	/* Carts: units over every SKU, an order row per line (order key and SKU once each), a
	 * SKU below zero oversold. */
	PGresult *r = pg_must(
		c,
		is_cart()
			? "SELECT (SELECT count(*) FROM peers.orders), (SELECT count(*) - "
			  "count(DISTINCT (order_key, sku)) FROM peers.orders), (SELECT sum(stock) "
			  "FROM peers.stock), (SELECT coalesce(-sum(stock) FILTER (WHERE stock < "
			  "0), "
			  "0) FROM peers.stock WHERE $1::text IS NOT NULL)"
			: "SELECT (SELECT count(*) FROM peers.orders), "
			  "(SELECT count(*) - count(DISTINCT order_key) FROM peers.orders), "
			  "(SELECT stock FROM peers.stock WHERE sku = $1), 0",
		1, p, PGRES_TUPLES_OK);
	long long sold = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	long long dups = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
	long long left = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
	long long below_zero = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
	PQclear(r);
	long long supply = is_cart() ? opt.stock * opt.skus : opt.stock;
	long long per_win = is_cart() ? opt.lines : 1;
	PQfinish(c);
	long long gate_left = 0;
#ifdef FS_HAVE_HIREDIS
	if (opt.approach == A_REDIS_GATE)
		gate_left = redis_left();
#endif

	bool complete = !atomic_load(&timed_out) && !dead && count[O_ERROR] == 0 &&
			(uint64_t)atomic_load(&req_done) == req_total;
	long long oversell = is_cart() ? below_zero : sold > opt.stock ? sold - opt.stock : 0;
	long long want = opt.stock < opt.buyers ? opt.stock : opt.buyers;
	/* (A cart's lines compete over several SKUs: what a complete run sells is not known
	 * beforehand.) */
	long long undersold = complete && !is_cart() && sold < want ? want - sold : 0;
	char check[160] = "";
#define FAIL(what)                                                                                 \
	snprintf(check + strlen(check), sizeof check - strlen(check), "%s%s", *check ? "," : "",   \
		 what)
	if (oversell > 0)
		FAIL("oversold");
	if (undersold > 0)
		FAIL("undersold");
	if (dups > 0)
		FAIL("order_twice");
	if (sold + left != supply)
		FAIL("stock_mismatch");
	if ((uint64_t)sold != count[O_WIN] * (uint64_t)per_win)
		FAIL("wins_mismatch");
	if (opt.approach == A_REDIS_GATE && gate_left != left)
		FAIL("gate_mismatch");
	if (!complete)
		FAIL("incomplete");
#undef FAIL
	/* Attempts: requests that ran to an end (answered, given up or failed). */
	uint64_t attempts = atomic_load(&req_done);
	double sec = seconds > 0 ? seconds : 1e-9;
	printf("PEER approach=%s clients=%ld buyers=%ld requests=%" PRIu64 " stock=%ld "
	       "seconds=%.3f attempts_per_s=%.0f winners_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
	       "max_ms=%.3f sold=%lld oversell=%lld undersold=%lld stock_left=%lld "
	       "dup_orders=%lld won=%" PRIu64 " sold_out=%" PRIu64 " repeats=%" PRIu64
	       " retries=%" PRIu64 " retries_per_sale=%.2f gave_up=%" PRIu64 " errors=%" PRIu64
	       " gate_left=%lld gate_mismatch=%" PRIu64 " skus=%ld lines=%ld deadlocks=%" PRIu64
	       " complete=%s check=%s\n",
	       approach_names[opt.approach], opt.clients, opt.buyers, req_total, opt.stock, seconds,
	       (double)attempts / sec, (double)count[O_WIN] / sec, percentile_ms(lat, nlat, 0.50),
	       percentile_ms(lat, nlat, 0.99), nlat ? (double)lat[nlat - 1] / 1000.0 : 0.0, sold,
	       oversell, undersold, left, dups, count[O_WIN], count[O_SOLD_OUT], count[O_REPEAT],
	       retries, count[O_WIN] ? (double)retries / (double)count[O_WIN] : 0.0,
	       count[O_GAVE_UP], count[O_ERROR], gate_left, mismatch, is_cart() ? opt.skus : 1,
	       is_cart() ? opt.lines : 1, deadlocks, complete ? "yes" : "no",
	       *check ? check : "ok");
	free(lat);
	free(cls);
	free(req_buyer);
	return *check ? 3 : 0;
}
