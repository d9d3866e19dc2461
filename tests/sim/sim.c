/* sim.c: flashsale's deterministic simulator (TESTING.md, layer 2), in the spirit of
 * TigerBeetle's VOPR and FoundationDB's simulation. It runs the real worker: the protocol
 * files of src/worker/ are linked unchanged, on simulated edges (sim_proc.c).
 *
 *   sim --seeds 10000            sweep seeds 1..10000 (stops at the first failing seed)
 *   sim --seed 1234 [--trace]    one seed, with a summary (and every step with --trace)
 *   sim --seed 1234 --seeds 100  seeds 1234..1333
 *   sim --mutate no-cas|no-dedupe|no-reforward|stacked-offset-only|no-cart-resend|
 *                room-forget-admissions
 *                                break the store or the edges on purpose: the sweep must fail
 *   sim --known-bug join-again-unknown-sku
 *                                stop stepping around a known bug of src/ (meson.build)
 *   FS_SIM_SEEDS=N               overrides the seed count of a plain --seeds sweep
 *
 * A failing seed prints itself and the command that replays it; everything a seed does comes
 * from one PRNG seeded with it, so the replay is bit for bit (no clock, no thread running
 * beside another, no hash order, no addresses).
 *
 * The model. One seed builds a world of 1-3 partitions and 2-3 workers of one consumer group:
 *
 * - The intents log of each partition: records as bytes with a key and a LogAppendTime-like
 *   timestamp (the broker clock, which only moves forward). A simulated web tier appends them
 *   while the workers run: each SKU's sale records (open, with small stock, per-buyer limits
 *   and holds of 1-3 s, sometimes a window; restock; close; an open again), buys from a crowd
 *   of buyers, verbatim repeats of earlier records, retries with an upper-case intent id,
 *   conflicts (same id, another body), confirms and cancels of earlier buys (and of unknown
 *   ids), ticks, and bad input (garbage bytes, broken JSON, duplicate keys, wrong or missing
 *   key, bad fields, oversized payloads), and in the seeds with bad input one buy in 64 by a
 *   buyer whose decision the store refuses for good (as a trigger's check_violation would:
 *   the worker must isolate it, reject it store_refused and decide the rest; issue 28, item
 *   1), one in 64 by a buyer whose holds the store refuses to expire, and one cart in 8 by
 *   the refused buyer, whose groups' units the store refuses to take (issue 47, item 5: each
 *   refusal recorded against what caused it, no partition stopped, no cart left reserving).
 *   Keyed records go to the partition the partitioning
 *   rule names (murmur2 of the key), except a share per seed that a web tier with another
 *   partitioner puts elsewhere: the workers forward those (or, in one seed in four, reject them
 *   wrong_partition), and a forward's delivery appends the same bytes to its partition's log.
 *   The workers append ticks of their own.
 * - The waiting room (issue 33), in about one seed in three (drawn from a PRNG of its own, so
 *   that the other seeds keep their schedules): some SKUs open behind a room (rate 1-50/s,
 *   tokens of 1-5 s, a random or fifo draw, opens_at a little after the open), buyers join
 *   before and after opens_at (and repeat, byte for byte, and join before the open), and most
 *   buys of those SKUs carry a token: the buyer's own, taken from the results log as a client
 *   would (an `admission`, or a join admitted at once), or none, garbage, another buyer's,
 *   another SKU's, one not valid yet, one expired, one of an unknown key, one altered (the
 *   web tier mints these with the workers' ring; never one that is live for its SKU). The
 *   workers load a ring of two keys, k2 signing; in half those seeds each start signs with
 *   either, so tokens of the other key are verified after restarts and handovers.
 * - The store (sim_store.c): the tables and statements of src/io/store.c, with the offset
 *   compare-and-set and its commit token, the dedupe on (intent id, kind), the lookup by
 *   (intent id, kind) pairs, the guards and CHECK constraints, all-or-nothing commits, and
 *   loads that read one snapshot.
 * - The workers (sim_proc.c): flashsale-worker processes running src/worker/'s loop,
 *   partition, pipeline, committer and publisher code, with commit.overlap 0, 1 or 2 per seed
 *   (the committer threads are coroutines), batch.max, batch.max.behind, batch.wait.ms and
 *   the dedupe cache's size drawn per seed. Their edges: a consumer over the intents log (the
 *   rebalance callback runs inside the poll), a producer whose messages the broker takes
 *   later, the store over sim_store.c, the world's clock. A poll does not always return a
 *   record that is there (a fetch in flight), so batches take random sizes.
 * - The group coordinator (below): eager rebalances with a barrier (everyone revokes, then the
 *   new assignment), members that crash, restart, or are kicked out while they still run.
 * - The results log: what the workers' producers delivered, with the record each answers.
 *
 * The schedule. Each step the scheduler picks, from the seed's PRNG: the web tier appends a
 * record, the clock moves (sometimes past every hold; while healing, only when nothing can
 * run), one coroutine of a worker runs to its next edge call (a poll, a store statement, a
 * produce, a lock, a wait, a sleep, a crash point), or the broker takes one message. Faults,
 * at rates drawn per seed: a worker crashes between any two edge calls of any of its threads
 * (its memory is gone; queued messages land or not) and restarts later; a worker is kicked
 * out of the group while it runs, sometimes paused a while first (its partitions move and it
 * carries on, so its next commit must be fenced by the compare-and-set, and a batch it
 * decided on top of another in flight must not commit on the next owner's commit of the
 * range below); spontaneous rebalances; redelivery (a consumer reads again records it
 * already read); transient store errors on any statement; a commit whose connection dies (it
 * applied or not; the worker reads the offset and the commit token back, and only its own
 * token at its batch's end means committed; cuts aim at commits that are about to be fenced,
 * which may read back the same range committed by another worker); results dropped (delivery
 * fails, replied stops) or doubled; kicks prefer a worker with batches in flight, most of all
 * one with a record in hand while it makes room for it (issue 28, item 2). Then the faults
 * stop, every worker comes back, and the
 * world runs until it is quiescent (INV-7: within a step budget); then one more rebalance, so
 * that results whose delivery failed are sent again from the stored replied offset, as a
 * restart does.
 *
 * The checker (sim_check.c), on the quiescent world: INV-1 (per SKU available + held + sold =
 * supply, held and sold equal the reservations, per buyer units equal the reservations and
 * stay within the limit), INV-2 (each record below the log end committed exactly once, by
 * commits that start at the stored offset; the stored next offset is the log end; every buy,
 * confirm, cancel and invalid record has a result; every expiry was announced), INV-3 (one
 * decision per (intent id, kind), each reservation made by its `held` decision, every reply
 * for a buy's intent id has one outcome), INV-5 (every commit moves the stored offset forward),
 * INV-6 (every row and result names a record of the log), and INV-4: the log replayed through
 * a fresh core and batch in one fault-free pass into a fresh store must give the same rows,
 * column by column, and the same replies, byte for byte. While the world runs: every commit
 * that applies starts at the stored offset and moves it forward (INV-2, INV-5), no CHECK
 * constraint ever refuses a row, every state a worker loads is consistent with itself (one
 * snapshot), and every lookup fits its batch (INV-7: the worker would retry it forever).
 *
 * The waiting room (sim_check.c), computed from the log alone: each room's entries (a buyer's
 * first join after the open, the sale not closed), the draw (OpenSSL's HMAC-SHA256(seed,
 * buyer), ties by offset; fifo in log order), every admission's slot, clock and record on the
 * rate's schedule, equal to the store's room_joins after every crash (INV-9), the rate as
 * flashsale audit checks it, every buy's token verdict recomputed from the token's bytes, the
 * buyer, the SKU and the buy's timestamp (a verifier of its own, not token.c), no buy held
 * without a live admission of its buyer, every admission announced as its row says, every
 * join answered as its buyer's first; the replay (INV-4) compares the rooms' rows and every
 * join's answer and admission (the token is checked apart: a rotation changes its key).
 *
 * Mutations: --mutate no-cas makes the simulated commit ignore the expected offset, and
 * --mutate no-dedupe makes the store forget intent ids (the lookup finds nothing, the insert
 * adds a second row), and --mutate no-reforward makes a restarted worker skip the forwards of
 * the misrouted records it reads below the stored offset (the producer drops them), and
 * --mutate stacked-offset-only lets a transaction decided on top of another in flight commit
 * when the offset is at that one's end whoever committed it (src/ before this simulator ran
 * the real worker), and --mutate room-forget-admissions makes the store load the waiting
 * rooms' entries without their admissions (a restart admits them again). The sweep must then
 * fail (tests/sim/meson.build: should_fail).
 *
 * Bugs of src/ this simulator found, all fixed (tests/sim/meson.build lists them): the default
 * sweep runs every path they were on, and the checks above would catch each one again.
 *
 * Left out of the model: the stock topic, shutdown (SIGTERM drain), the rebuild (--replay),
 * Kafka's advisory offsets, clock skew between the worker and the broker, and the same intent id on
 * two partitions (a confirm or cancel keyed to a SKU of another partition: DESIGN-NOTES.md calls it
 * hostile, and its decision depends on the order of two partitions' commits, which no replay of the
 * log can know, so the generator keeps a wrong key on the partition). */
#include "sim.h"

#include "sim_store.h"
#include "sim_proc.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- PRNG and helpers --------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

uint32_t rng_below(struct rng *r, uint32_t n)
{
	return (uint32_t)((rng_next(r) >> 32) * n >> 32);
}

bool rng_chance(struct rng *r, uint32_t per_mille)
{
	return per_mille && rng_below(r, 1000) < per_mille;
}

void *sim_grow(void *data, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return data;
	size_t n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	void *p = realloc(data, n * size);
	if (!p) {
		fprintf(stderr, "sim: out of memory\n");
		abort();
	}
	*cap = n;
	return p;
}

char *sim_strndup(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (!p)
		abort();
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

bool sim_fail(struct sim_world *W, const char *inv, const char *fmt, ...)
{
	if (W->failed)
		return false;
	W->failed = true;
	int n = snprintf(W->why, sizeof W->why, "%s: ", inv);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(W->why + n, sizeof W->why - (size_t)n, fmt, ap);
	va_end(ap);
	TRACE(W, "VIOLATION %s", W->why);
	return false;
}

void sim_trace(struct sim_world *W, const char *fmt, ...)
{
	fprintf(stderr, "[%6" PRId64 " t=%" PRId64 "] ", W->step, W->now_ms);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void sim_log_append(struct sim_world *W, int32_t part, const char *key, size_t key_len,
		    const char *val, size_t val_len)
{
	struct sim_log *log = &W->log[part];
	int64_t off = (int64_t)log->recs.len;
	struct sim_rec *r = VEC_PUSH(log->recs);
	memset(r, 0, sizeof *r);
	r->key = key ? sim_strndup(key, key_len) : NULL;
	r->key_len = key ? key_len : 0;
	r->val = sim_strndup(val, val_len);
	r->val_len = val_len;
	r->ts = W->now_ms;
	fs_record_parse(&W->limits, r->key, r->key_len, r->val, r->val_len, part, off, r->ts,
			&r->parsed);
	TRACE(W, "log p%d@%" PRId64 " key=%.*s %.*s", (int)part, off, key ? (int)key_len : 1,
	      key ? key : "-", (int)(val_len > 160 ? 160 : val_len), val);
}

/* ---- the web tier: what gets appended to the intents log ---------------------------------- */

struct gen_buy {
	char id[FS_UUID_LEN + 1];
	int sku, buyer;
	int64_t qty;
};

struct gen_cart {
	char id[FS_UUID_LEN + 1];
};

/* A token the web tier saw in the results log (issue 33): a join's or an admission's. */
struct gen_token {
	int sku, buyer;
	char text[FS_TOKEN_TEXT_MAX + 1];
};

struct gen {
	int n_skus, n_buyers;
	char sku[SIM_SKUS_MAX][16];
	bool opened[SIM_SKUS_MAX];
	int limit[SIM_SKUS_MAX];
	int total, remaining;
	VEC(struct gen_buy) buys;
	VEC(int64_t) keyed; /* part << 32 | offset of earlier buy/confirm/cancel records */
	VEC(struct gen_cart) carts;
	/* The waiting room (issue 33): the SKUs behind one, the join records (part << 32 |
	 * offset), the tokens read from the results log so far, and a ring with a key the
	 * workers do not know. */
	bool room[SIM_SKUS_MAX];
	int n_rooms;
	VEC(int64_t) joins;
	VEC(struct gen_token) tokens;
	size_t results_seen;
	struct fs_keyring stranger;
};

static const char *const buyer_names[] = {"b0", "b1", "b2",	"b3",  "b4", "b5",  "b6",
					  "b7", "b8", "x\\\"y", "b10", "~",  "b12", "b13"};

static void gen_uuid(struct rng *r, char out[FS_UUID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < FS_UUID_LEN; i++)
		out[i] = (i == 8 || i == 13 || i == 18 || i == 23) ? '-' : hex[rng_below(r, 16)];
	out[FS_UUID_LEN] = '\0';
}

/* The partition a keyed record belongs on: the rule (murmur2), as every producer of ours and
 * a web tier with the right partitioner publishes; an empty key goes anywhere. */
static int key_part(struct sim_world *W, const char *key, size_t n)
{
	int32_t part = fs_partition_of(key, n, W->n_parts);
	return part >= 0 ? part : (int)rng_below(&W->rng, (uint32_t)W->n_parts);
}

/* Returns the partition it went to. */
static int append(struct sim_world *W, struct gen *G, const char *key, size_t key_len,
		  const char *val, size_t val_len)
{
	int part = key ? key_part(W, key, key_len) : (int)rng_below(&W->rng, (uint32_t)W->n_parts);
	if (key && key_len && W->n_parts > 1 && rng_chance(&W->rng, W->f.misroute)) {
		/* A web tier with another partitioner: any other partition. */
		part = (part + 1 + (int)rng_below(&W->rng, (uint32_t)W->n_parts - 1)) % W->n_parts;
		W->stats->misrouted_appended++;
	}
	sim_log_append(W, part, key, key_len, val, val_len);
	const struct sim_rec *r = &W->log[part].recs.v[W->log[part].recs.len - 1];
	if (r->parsed.kind == FS_KIND_BUY || r->parsed.kind == FS_KIND_CONFIRM ||
	    r->parsed.kind == FS_KIND_CANCEL || r->parsed.kind == FS_KIND_CART ||
	    r->parsed.kind == FS_KIND_CART_CONFIRM || r->parsed.kind == FS_KIND_CART_CANCEL)
		*VEC_PUSH(G->keyed) = ((int64_t)part << 32) | (int64_t)(W->log[part].recs.len - 1);
	return part;
}

static int append_str(struct sim_world *W, struct gen *G, const char *key, const char *val)
{
	return append(W, G, key, key ? strlen(key) : 0, val, strlen(val));
}

static void gen_room_open(struct sim_world *W, struct gen *G, int s);
static void gen_room_buy(struct sim_world *W, struct gen *G, int s);

static void gen_open(struct sim_world *W, struct gen *G, int s)
{
	if (G->room[s]) {
		gen_room_open(W, G, s);
		return;
	}
	struct rng *r = &W->rng;
	char buf[320];
	int stock = 1 + (int)rng_below(r, 6);
	int limit = 1 + (int)rng_below(r, 3);
	int n = snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"open\",\"sku\":\"%s\",\"stock\":%d,"
			 "\"per_buyer_limit\":%d,\"hold_seconds\":%d",
			 G->sku[s], stock, limit, 1 + (int)rng_below(r, 3));
	if (rng_chance(r, 300))
		n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"max_qty\":%d",
			      1 + (int)rng_below(r, (uint32_t)limit + 1));
	if (rng_chance(r, 120)) {
		int64_t opens = W->now_ms + rng_below(r, 3000);
		n += snprintf(buf + n, sizeof buf - (size_t)n,
			      ",\"opens_at\":%" PRId64 ",\"closes_at\":%" PRId64, opens,
			      opens + 2000 + rng_below(r, 8000));
	}
	snprintf(buf + n, sizeof buf - (size_t)n, "}");
	if (!G->opened[s])
		G->limit[s] = limit;
	G->opened[s] = true;
	append_str(W, G, G->sku[s], buf);
}

static void buy_json(char *buf, size_t n, const char *id, const char *sku, const char *buyer,
		     int64_t qty, int token)
{
	int k = snprintf(buf, n,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
			 "\"buyer_id\":\"%s\",\"qty\":%" PRId64,
			 id, sku, buyer, qty);
	if (token >= 0)
		k += snprintf(buf + k, n - (size_t)k, ",\"token\":\"t%d\"", token);
	snprintf(buf + k, n - (size_t)k, "}");
}

static void gen_buy(struct sim_world *W, struct gen *G)
{
	struct rng *r = &W->rng;
	int sku = (int)rng_below(r, (uint32_t)G->n_skus);
	if (G->room[sku] && rng_chance(&W->rrng, 700)) {
		gen_room_buy(W, G, sku); /* most buys of a room's sale carry a token */
		return;
	}
	struct gen_buy *b = VEC_PUSH(G->buys);
	gen_uuid(r, b->id);
	b->sku = sku;
	b->buyer = (int)rng_below(r, (uint32_t)G->n_buyers);
	int lim = G->limit[b->sku] ? G->limit[b->sku] : 2;
	b->qty = rng_chance(r, 700) ? 1 : 1 + rng_below(r, (uint32_t)lim + 1);
	char buf[320];
	/* One buy in 64 of the seeds with bad input is by the buyer the store refuses (no draw
	 * of its own: the other seeds keep their schedules). */
	bool refused = W->f.bad_input && b->id[0] == 'f' && b->id[1] < '4';
	/* As many by the buyer whose holds the store refuses to expire (issue 47, item 5). */
	bool stuck = W->f.bad_input && b->id[0] == 'e' && b->id[1] < '4';
	buy_json(buf, sizeof buf, b->id, G->sku[b->sku],
		 refused ? SIM_REFUSED_BUYER : (stuck ? SIM_STUCK_BUYER : buyer_names[b->buyer]),
		 b->qty, rng_chance(r, 200) ? (int)rng_below(r, 3) : -1);
	const char *key = G->sku[b->sku];
	if (rng_chance(r, 30))
		key = G->sku[rng_below(r, (uint32_t)G->n_skus)]; /* maybe the wrong one */
	if (rng_chance(r, 10))
		key = NULL;
	append_str(W, G, key, buf);
}

static void gen_repeat(struct sim_world *W, struct gen *G, bool upper)
{
	if (G->keyed.len == 0)
		return;
	int64_t k = G->keyed.v[rng_below(&W->rng, (uint32_t)G->keyed.len)];
	const struct sim_rec *r = &W->log[k >> 32].recs.v[k & 0xffffffff];
	char *val = sim_strndup(r->val, r->val_len);
	char *id = strstr(val, r->parsed.intent_id);
	if (upper && id) /* a retry whose client printed the id in upper case: the same id */
		for (int i = 0; i < FS_UUID_LEN; i++)
			if (id[i] >= 'a' && id[i] <= 'f')
				id[i] = (char)(id[i] - 'a' + 'A');
	append(W, G, r->key, r->key_len, val, r->val_len);
	free(val);
}

static void gen_conflict(struct sim_world *W, struct gen *G)
{
	if (G->buys.len == 0)
		return;
	const struct gen_buy *b = &G->buys.v[rng_below(&W->rng, (uint32_t)G->buys.len)];
	char buf[320];
	bool other_buyer = rng_chance(&W->rng, 500);
	/* One in four names another SKU: on the buy's partition a conflict, on another a buy of
	 * that partition's own, decided there alone (issue 28, item 6). */
	int sku = rng_chance(&W->rng, 250) ? (int)rng_below(&W->rng, (uint32_t)G->n_skus) : b->sku;
	buy_json(buf, sizeof buf, b->id, G->sku[sku],
		 buyer_names[other_buyer ? (b->buyer + 1) % G->n_buyers : b->buyer],
		 other_buyer ? b->qty : b->qty + 1, -1);
	append_str(W, G, G->sku[sku], buf);
}

static void gen_followup(struct sim_world *W, struct gen *G, const char *type)
{
	struct rng *r = &W->rng;
	char id[FS_UUID_LEN + 1];
	int sku;
	if (G->buys.len == 0 || rng_chance(r, 80)) {
		gen_uuid(r, id);
		sku = (int)rng_below(r, (uint32_t)G->n_skus);
	} else {
		/* Mostly recent buys: their holds are still live. */
		size_t n = G->buys.len, k = n - 1 - rng_below(r, n < 6 ? (uint32_t)n : 6);
		if (rng_chance(r, 300))
			k = rng_below(r, (uint32_t)n);
		memcpy(id, G->buys.v[k].id, sizeof id);
		sku = G->buys.v[k].sku;
	}
	char buf[256];
	int n = snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"%s\",\"intent_id\":\"%s\"", type,
			 id);
	if (rng_chance(r, 300))
		n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"sku\":\"%s\"",
			      G->sku[rng_chance(r, 100) ? rng_below(r, (uint32_t)G->n_skus)
							: (uint32_t)sku]);
	snprintf(buf + n, sizeof buf - (size_t)n, "}");
	/* A wrong key names another SKU, maybe of another partition: each partition dedupes its
	 * own log (issue 28, item 6), so there it is a follow-up of its own. */
	const char *key = G->sku[sku];
	int other = (int)rng_below(r, (uint32_t)G->n_skus);
	if (rng_chance(r, 40))
		key = G->sku[other];
	append_str(W, G, key, buf);
}

/* A cart of 1-3 lines (issue 31), keyed by its cart id: its coordinator is that partition,
 * its lines' SKUs anywhere; one in five is a line the limits refuse (qty 3). */
/* One cart in 8 of the seeds with bad input is the refused buyer's: the store refuses its
 * groups' units at each participant, whose cart_reserve must still answer, or when another
 * record wakes a waiting one (issue 47, item 5; rarer: a group waits, then a release wakes
 * it). No draw of its own: the other seeds keep their schedules. */
static const char *cart_buyer(const struct sim_world *W, const char *id, const char *name)
{
	return W->f.bad_input && id[0] >= 'e' ? SIM_REFUSED_BUYER : name;
}

static void gen_cart(struct sim_world *W, struct gen *G)
{
	struct rng *r = &W->rng;
	struct gen_cart *c = VEC_PUSH(G->carts);
	gen_uuid(r, c->id);
	char buf[512];
	int n = snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"cart\",\"cart_id\":\"%s\",\"buyer_id\":\"%s\","
			 "\"lines\":[",
			 c->id,
			 cart_buyer(W, c->id, buyer_names[rng_below(r, (uint32_t)G->n_buyers)]));
	int lines = 1 + (int)rng_below(r, 3), picked[3], got = 0;
	for (int i = 0; i < lines; i++) {
		int s = (int)rng_below(r, (uint32_t)G->n_skus);
		bool dup = false;
		for (int j = 0; j < got; j++)
			dup |= picked[j] == s;
		if (dup)
			continue;
		picked[got++] = s;
		n += snprintf(buf + n, sizeof buf - (size_t)n, "%s{\"sku\":\"%s\",\"qty\":%d}",
			      got > 1 ? "," : "", G->sku[s],
			      rng_chance(r, 200) ? 3 : 1 + (int)rng_below(r, 2));
	}
	snprintf(buf + n, sizeof buf - (size_t)n, "]}");
	append_str(W, G, c->id, buf);
}

/* A confirm or cancel of a cart (mostly a recent one: its hold is still live). */
static void gen_cart_followup(struct sim_world *W, struct gen *G, const char *type)
{
	struct rng *r = &W->rng;
	char id[FS_UUID_LEN + 1];
	if (G->carts.len == 0 || rng_chance(r, 80)) {
		gen_uuid(r, id);
	} else {
		size_t n = G->carts.len, k = n - 1 - rng_below(r, n < 6 ? (uint32_t)n : 6);
		memcpy(id, G->carts.v[k].id, sizeof id);
	}
	char buf[160];
	snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"%s\",\"cart_id\":\"%s\"}", type, id);
	append_str(W, G, id, buf);
}

static void gen_bad(struct sim_world *W, struct gen *G)
{
	struct rng *r = &W->rng;
	char buf[SIM_RECORD_BYTES_MAX + 64], id[FS_UUID_LEN + 1];
	const char *sku = G->sku[rng_below(r, (uint32_t)G->n_skus)];
	gen_uuid(r, id);
	switch (rng_below(r, 13)) {
	case 0: { /* random bytes, NULs included */
		size_t n = rng_below(r, 40);
		for (size_t i = 0; i < n; i++)
			buf[i] = (char)rng_below(r, 256);
		append(W, G, sku, strlen(sku), buf, n);
		return;
	}
	case 1:
		append(W, G, sku, strlen(sku), "", 0);
		return;
	case 2:
		append_str(W, G, sku, "{\"v\":1,\"type\":\"buy\",");
		return;
	case 3:
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
			 "\"buyer_id\":\"b1\",\"qty\":1,\"qty\":9}",
			 id, sku);
		break;
	case 4:
		snprintf(buf, sizeof buf, "[1,2,3]");
		break;
	case 5:
		snprintf(buf, sizeof buf, "{\"v\":2,\"type\":\"buy\",\"intent_id\":\"%s\"}", id);
		break;
	case 6: {
		static const char *const qty[] = {"0", "-1", "1.5", "\"1\"", "10000000", "null"};
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
			 "\"buyer_id\":\"b2\",\"qty\":%s}",
			 id, sku, qty[rng_below(r, 6)]);
		break;
	}
	case 7:
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"not-a-uuid\",\"sku\":\"%s\","
			 "\"buyer_id\":\"b1\",\"qty\":1}",
			 sku);
		break;
	case 8:
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\",\"qty\":1}",
			 id, sku);
		break;
	case 9:
		snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"frobnicate\"}");
		break;
	case 10: /* a confirm whose key has a NUL in it */
		snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"%s\"}",
			 id);
		append(W, G, "A\0B", 3, buf, strlen(buf));
		return;
	case 11: { /* oversized */
		int n = snprintf(buf, sizeof buf,
				 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
				 "\"buyer_id\":\"b1\",\"qty\":1,\"pad\":\"",
				 id, sku);
		while (n < SIM_RECORD_BYTES_MAX + 10)
			buf[n++] = 'x';
		snprintf(buf + n, sizeof buf - (size_t)n, "\"}");
		break;
	}
	default: /* a key that is no SKU */
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"%s\",\"sku\":\"%s\"}", id,
			 sku);
		append_str(W, G, "no such sku", buf);
		return;
	}
	append_str(W, G, sku, buf);
}

/* ---- the waiting room's web tier (issue 33), drawn from the seed's room PRNG ------------- */

/* A sale behind a waiting room: opens_at a little later, so that buyers join before and
 * after it; small rates; tokens that live a few seconds. */
static void gen_room_open(struct sim_world *W, struct gen *G, int s)
{
	struct rng *r = &W->rrng;
	char buf[400];
	int limit = 1 + (int)rng_below(r, 3);
	int64_t opens = W->now_ms + 200 + rng_below(r, 2500);
	int n = snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"open\",\"sku\":\"%s\",\"stock\":%d,"
			 "\"per_buyer_limit\":%d,\"hold_seconds\":%d,\"opens_at\":%" PRId64,
			 G->sku[s], 1 + (int)rng_below(r, 6), limit, 1 + (int)rng_below(r, 3),
			 opens);
	if (rng_chance(r, 150))
		n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"closes_at\":%" PRId64,
			      opens + 2000 + rng_below(r, 8000));
	static const uint32_t rates[] = {1, 2, 5, 10, 50};
	bool fifo = rng_chance(r, 300);
	n += snprintf(buf + n, sizeof buf - (size_t)n,
		      ",\"admission\":{\"rate_per_s\":%u,\"token_seconds\":%u,\"draw\":\"%s\"",
		      rates[rng_below(r, 5)], 1 + rng_below(r, 5), fifo ? "fifo" : "random");
	if (!fifo || rng_chance(r, 500))
		n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"seed\":\"s%" PRIu64 ".%d:x_-\"",
			      W->seed, s);
	snprintf(buf + n, sizeof buf - (size_t)n, "}}");
	if (!G->opened[s])
		G->limit[s] = limit;
	G->opened[s] = true;
	append_str(W, G, G->sku[s], buf);
}

/* The buyer id a buyer_names entry (JSON text) stands for. */
static void buyer_id_of(int b, char out[FS_BUYER_LEN_MAX + 1])
{
	const char *p = buyer_names[b];
	size_t k = 0;
	for (; *p && k < FS_BUYER_LEN_MAX; p++)
		if (!(p[0] == '\\' && p[1] == '"'))
			out[k++] = *p;
	out[k] = '\0';
}

/* Reads the results delivered since the last look, as a client polling its answers does:
 * every token a join's answer or an admission carries. */
static void gen_observe(struct sim_world *W, struct gen *G)
{
	for (; G->results_seen < W->results.len; G->results_seen++) {
		const struct sim_result *x = &W->results.v[G->results_seen];
		const char *t = x->room ? strstr(x->json, "\"token\":\"") : NULL;
		if (!t)
			continue;
		t += 9;
		const char *end = strchr(t, '"');
		struct gen_token k = {.sku = -1, .buyer = -1};
		char want[64];
		for (int i = 0; i < G->n_skus; i++) {
			snprintf(want, sizeof want, "\"sku\":\"%s\"", G->sku[i]);
			if (strstr(x->json, want))
				k.sku = i;
		}
		for (int i = 0; i < G->n_buyers; i++) {
			snprintf(want, sizeof want, "\"buyer_id\":\"%s\"", buyer_names[i]);
			if (strstr(x->json, want))
				k.buyer = i;
		}
		if (!end || k.sku < 0 || k.buyer < 0 || (size_t)(end - t) > FS_TOKEN_TEXT_MAX)
			continue;
		memcpy(k.text, t, (size_t)(end - t));
		k.text[end - t] = '\0';
		*VEC_PUSH(G->tokens) = k;
	}
}

/* A token seen for SKU s (of buyer b, or of anyone when b < 0): the latest that has not
 * expired by now, else the latest; NULL if none. */
static const struct gen_token *seen_token(const struct gen *G, int s, int b, int64_t now)
{
	const struct gen_token *last = NULL;
	for (size_t i = G->tokens.len; i-- > 0;) {
		const struct gen_token *t = &G->tokens.v[i];
		if (t->sku != s || (b >= 0 && t->buyer != b))
			continue;
		const char *exp = strchr(t->text + 3, '.'); /* v1.KID.NBF.EXP... */
		exp = exp ? strchr(exp + 1, '.') : NULL;
		if (exp && strtoll(exp + 1, NULL, 10) > now)
			return t;
		last = last ? last : t;
	}
	return last;
}

/* A join of SKU s by buyer b (a random one when b < 0), or now and then a repeat. */
static void gen_join(struct sim_world *W, struct gen *G, int s, int b)
{
	struct rng *r = &W->rrng;
	if (G->joins.len && rng_chance(r, 200)) { /* a repeat, byte for byte */
		int64_t k = G->joins.v[rng_below(r, (uint32_t)G->joins.len)];
		const struct sim_rec *x = &W->log[k >> 32].recs.v[k & 0xffffffff];
		char *val = sim_strndup(x->val, x->val_len);
		append(W, G, x->key, x->key_len, val, x->val_len);
		free(val);
		return;
	}
	char buf[200];
	snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"join\",\"sku\":\"%s\",\"buyer_id\":\"%s\"}",
		 G->sku[s], buyer_names[b >= 0 ? b : (int)rng_below(r, (uint32_t)G->n_buyers)]);
	int part = append_str(W, G, G->sku[s], buf);
	*VEC_PUSH(G->joins) = ((int64_t)part << 32) | (int64_t)(W->log[part].recs.len - 1);
}

/* A client's retry (issue 47 item 1): an earlier buy of SKU s by the buyer of `seen`, sent
 * again under its intent id, with the same body and that buyer's token (live or not by now).
 * A buy refused for its token did not use up its id: the retry is decided on its merits; one
 * decided on its merits is answered as before. False when there is no such buy (or by
 * chance, to keep most buys fresh). */
static bool retry_with_token(struct sim_world *W, struct gen *G, int s,
			     const struct gen_token *seen)
{
	if (!rng_chance(&W->rrng, 250))
		return false;
	for (size_t i = G->buys.len - 1; i-- > 0;) {
		const struct gen_buy *b = &G->buys.v[i];
		if (b->sku != s || b->buyer != seen->buyer)
			continue;
		char buf[480];
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
			 "\"buyer_id\":\"%s\",\"qty\":%" PRId64 ",\"token\":\"%s\"}",
			 b->id, G->sku[s], buyer_names[b->buyer], b->qty, seen->text);
		append_str(W, G, G->sku[s], buf);
		return true;
	}
	return false;
}

/* A buy of a sale behind a room, with a token of some kind: the buyer's own from the results
 * (as a client would), none, garbage, another buyer's, another SKU's, one not valid yet, one
 * expired, one of a key the workers do not know, one altered. Those the web tier mints are
 * never live for this SKU: a live one is only ever the workers'. */
static void gen_room_buy(struct sim_world *W, struct gen *G, int s)
{
	struct rng *r = &W->rrng;
	struct gen_buy *b = VEC_PUSH(G->buys);
	gen_uuid(r, b->id);
	b->sku = s;
	b->buyer = (int)rng_below(r, (uint32_t)G->n_buyers);
	b->qty = rng_chance(r, 800) ? 1 : 2;
	char tok[FS_TOKEN_TEXT_MAX + 1] = "", id[FS_BUYER_LEN_MAX + 1];
	bool has = true;
	uint32_t x = rng_below(r, 100);
	int64_t now = W->now_ms;
	const struct gen_token *seen = seen_token(G, s, x < 45 ? b->buyer : -1, now);
	if (x < 45 && (!seen || !rng_chance(r, 300)))
		seen = seen_token(G, s, -1, now);
	if (x < 45 && seen && retry_with_token(W, G, s, seen)) {
		G->buys.len--;
		return;
	}
	if (x < 45 && !seen) {
		/* no one has a token yet: the client joins first */
		G->buys.len--;
		gen_join(W, G, s, b->buyer);
		return;
	}
	if (x < 45)
		b->buyer = seen->buyer; /* a buyer who was admitted */
	buyer_id_of(b->buyer, id);
	if (x < 45 || (x >= 90 && seen)) {
		has = seen != NULL;
		if (seen)
			snprintf(tok, sizeof tok, "%s", seen->text);
		if (seen && x >= 90) /* altered: its MAC's last character */
			tok[strlen(tok) - 1] = tok[strlen(tok) - 1] == 'A' ? 'B' : 'A';
	} else if (x < 55) {
		has = false;
	} else if (x < 62) {
		static const char *const junk[] = {
			"garbage", "v1.k1.1.2.x.y", "v1", "",
			"v1.k1.0.99999999999999.AAAAAAAAAAAAAAAAAAAAAA.B"};
		snprintf(tok, sizeof tok, "%s", junk[rng_below(r, 5)]);
	} else if (x < 70) {
		/* another buyer's genuine token */
		const struct gen_token *o = seen_token(G, s, -1, now);
		has = o != NULL;
		if (o) {
			snprintf(tok, sizeof tok, "%s", o->text);
			if (o->buyer == b->buyer)
				b->buyer = (b->buyer + 1) % G->n_buyers;
		}
	} else if (x < 77) {
		const char *other = G->n_skus > 1 ? G->sku[(s + 1) % G->n_skus] : "ZZ9";
		fs_token_mint(&W->ring, other, id, now > 10 ? now - 10 : 0, now + 60000, tok);
	} else if (x < 84) {
		fs_token_mint(&W->ring, G->sku[s], id, now + 86400000, now + 86401000, tok);
	} else if (x < 90) {
		fs_token_mint(&W->ring, G->sku[s], id, now - 20000, now - 10000 + (int64_t)x, tok);
	} else {
		fs_token_mint(&G->stranger, G->sku[s], id, now - 10, now + 60000, tok);
	}
	char buf[480];
	int n = snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
			 "\"buyer_id\":\"%s\",\"qty\":%" PRId64,
			 b->id, G->sku[s], buyer_names[b->buyer], b->qty);
	if (has)
		n += snprintf(buf + n, sizeof buf - (size_t)n, ",\"token\":\"%s\"", tok);
	snprintf(buf + n, sizeof buf - (size_t)n, "}");
	append_str(W, G, G->sku[s], buf);
}

static void gen_room(struct sim_world *W, struct gen *G)
{
	gen_observe(W, G);
	int k = (int)rng_below(&W->rrng, (uint32_t)G->n_rooms), s = 0;
	for (; s < G->n_skus; s++)
		if (G->room[s] && k-- == 0)
			break;
	if (rng_chance(&W->rrng, 450))
		gen_join(W, G, s, -1);
	else
		gen_room_buy(W, G, s);
}

static void produce_one(struct sim_world *W, struct gen *G)
{
	struct rng *r = &W->rng;
	G->remaining--;
	for (int s = 0; s < G->n_skus; s++) {
		if (!G->opened[s] && rng_chance(r, 600)) {
			gen_open(W, G, s);
			return;
		}
	}
	/* Seeds with rooms: their records besides the others' (issue 33). */
	if (G->n_rooms && rng_chance(&W->rrng, 300)) {
		gen_room(W, G);
		return;
	}
	uint32_t bad = W->f.bad_input;
	uint32_t x = rng_below(r, 1000);
	bool late = G->remaining < G->total / 3;
	char buf[160];
	if (x < bad) {
		gen_bad(W, G);
	} else if (x < bad + 350) {
		gen_buy(W, G);
	} else if (x < bad + 470) {
		gen_repeat(W, G, false);
	} else if (x < bad + 490) {
		gen_repeat(W, G, true);
	} else if (x < bad + 530) {
		gen_conflict(W, G);
	} else if (x < bad + 640) {
		gen_followup(W, G, "confirm");
	} else if (x < bad + 710) {
		gen_followup(W, G, "cancel");
	} else if (x < bad + 740) {
		append_str(W, G, NULL, "{\"v\":1,\"type\":\"tick\"}");
	} else if (x < bad + 760) {
		int s = (int)rng_below(r, (uint32_t)G->n_skus);
		snprintf(buf, sizeof buf,
			 "{\"v\":1,\"type\":\"restock\",\"sku\":\"%s\",\"add\":%d}", G->sku[s],
			 1 + (int)rng_below(r, 3));
		append_str(W, G, G->sku[s], buf);
	} else if (x < bad + 770 && late) {
		int s = (int)rng_below(r, (uint32_t)G->n_skus);
		snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"close\",\"sku\":\"%s\"}", G->sku[s]);
		append_str(W, G, G->sku[s], buf);
	} else if (x < bad + 775) {
		gen_open(W, G, (int)rng_below(r, (uint32_t)G->n_skus)); /* already_open, mostly */
	} else if (x < bad + 835) {
		gen_cart(W, G);
	} else if (x < bad + 855) {
		gen_cart_followup(W, G, rng_chance(r, 600) ? "confirm" : "cancel");
	} else {
		gen_buy(W, G);
	}
}

/* ---- the group coordinator ----------------------------------------------------------------- */

static void group_rebalance(struct sim_world *W)
{
	W->rebalancing = true;
	W->gen++;
	W->stats->rebalances++;
	for (int i = 0; i < W->n_workers; i++) {
		if (!W->member[i])
			continue;
		W->procs[i]->pending_revoke = true;
		W->procs[i]->pending_assign = false;
	}
	TRACE(W, "rebalance %" PRId64, W->gen);
}

/* Once every member has revoked, hands out the partitions. */
static void coordinator(struct sim_world *W)
{
	if (!W->rebalancing)
		return;
	int m[SIM_WORKERS_MAX], n = 0;
	for (int i = 0; i < W->n_workers; i++) {
		if (!W->member[i])
			continue;
		if (W->procs[i]->pending_revoke)
			return;
		m[n++] = i;
	}
	if (n == 0)
		return;
	uint32_t set[SIM_WORKERS_MAX] = {0};
	uint32_t rot = rng_below(&W->rng, (uint32_t)n);
	for (int p = 0; p < W->n_parts; p++)
		set[m[((uint32_t)p + rot) % (uint32_t)n]] |= 1u << p;
	for (int k = 0; k < n; k++) {
		W->procs[m[k]]->pending_assign = true;
		W->procs[m[k]]->assign_parts = set[m[k]];
		TRACE(W, "w%d gets 0x%x", m[k], set[m[k]]);
	}
	W->rebalancing = false;
}

static void worker_crash(struct sim_world *W, struct sim_proc *P)
{
	proc_crash(W, P);
	W->member[P->id] = false;
	group_rebalance(W);
}

static void worker_start(struct sim_world *W, struct sim_proc *P)
{
	proc_start(W, P);
	W->member[P->id] = true;
	TRACE(W, "w%d starts", P->id);
	group_rebalance(W);
}

/* Paused past its session timeout: out of the group, but it does not know yet. */
static void worker_kick(struct sim_world *W, struct sim_proc *P)
{
	W->stats->kicks++;
	W->member[P->id] = false;
	P->kicked = true;
	P->pending_revoke = true;
	P->pending_assign = false;
	/* Half the time it stays paused a while: the next owner decides and commits meanwhile
	 * what it had in flight. */
	if (rng_chance(&W->rng, 500))
		P->paused_until = W->step + 5 + rng_below(&W->rng, 60);
	TRACE(W, "w%d KICKED", P->id);
	group_rebalance(W);
}

static void worker_rejoin(struct sim_world *W, struct sim_proc *P)
{
	P->kicked = false;
	W->member[P->id] = true;
	TRACE(W, "w%d rejoins", P->id);
	group_rebalance(W);
}

/* ---- the scheduler ------------------------------------------------------------------------ */

enum pick_what { PICK_UP, PICK_QUEUE, PICK_RUNNABLE };

static struct sim_proc *pick_proc(struct sim_world *W, enum pick_what what)
{
	int c[SIM_WORKERS_MAX], n = 0;
	for (int i = 0; i < W->n_workers; i++) {
		const struct sim_proc *P = W->procs[i];
		if (P->up && (what != PICK_QUEUE || P->queue.len) &&
		    (what != PICK_RUNNABLE || proc_runnable(W, P)))
			c[n++] = i;
	}
	return n ? W->procs[c[rng_below(&W->rng, (uint32_t)n)]] : NULL;
}

static void deliver_one(struct sim_world *W)
{
	struct sim_proc *P = pick_proc(W, PICK_QUEUE);
	if (P)
		proc_deliver(W, P,
			     rng_chance(&W->rng, 700) ? 0
						      : rng_below(&W->rng, (uint32_t)P->queue.len));
}

/* The rare points (reading back an unknown outcome, a commit just sent, a batch being
 * answered) last a step or two: crashes aim at them. */
static const char *const rare_points[] = {"read_next", "commit_sent", "after_commit",
					  "after_publish"};

static void faults(struct sim_world *W)
{
	struct rng *r = &W->rng;
	struct sim_proc *P;
	if (rng_chance(r, W->f.crash) && (P = pick_proc(W, PICK_UP))) {
		/* Half the time, one in the middle of something (not waiting for records). */
		for (int i = 0; i < W->n_workers && rng_chance(r, 500); i++)
			if (W->procs[i]->up && strcmp(W->procs[i]->last_at, "poll") != 0)
				P = W->procs[i];
		worker_crash(W, P);
	}
	for (int i = 0; i < W->n_workers; i++) {
		P = W->procs[i];
		for (size_t k = 0; P->up && k < sizeof rare_points / sizeof *rare_points; k++)
			if (proc_at(P, rare_points[k]) && rng_chance(r, W->f.crash * 20))
				worker_crash(W, P);
	}
	if (rng_chance(r, W->f.kick)) {
		/* Prefer a member in the middle of a batch: that is when a stale commit hurts. */
		int c[SIM_WORKERS_MAX], n = 0;
		for (int i = 0; i < W->n_workers; i++)
			if (W->member[i] && W->procs[i]->up)
				c[n++] = i;
		for (int k = 0; k < n; k++)
			if (W->procs[c[k]]->w && W->procs[c[k]]->w->n_fly)
				c[0] = c[k], n = 1;
		/* Above all one with a batch decided on top of another in flight: its successor
		 * must not commit on what the next owner commits in the meantime. */
		for (int i = 0; i < W->n_workers; i++)
			if (W->member[i] && W->procs[i]->up && W->procs[i]->w &&
			    W->procs[i]->w->n_fly > 1)
				c[0] = i, n = 1;
		/* Most of all one whose batch is deciding with a message in hand (it found the
		 * batch full): a fence then must not let that message in (issue 28, item 2). */
		for (int i = 0; i < W->n_workers; i++)
			if (W->member[i] && W->procs[i]->up && W->procs[i]->in_hand &&
			    rng_chance(r, 500))
				c[0] = i, n = 1;
		if (n)
			worker_kick(W, W->procs[c[rng_below(r, (uint32_t)n)]]);
	}
	if (rng_chance(r, W->f.rebalance))
		group_rebalance(W);
	if (rng_chance(r, W->f.redeliver) && (P = pick_proc(W, PICK_UP))) {
		int p = (int)rng_below(r, (uint32_t)W->n_parts);
		if (P->consuming[p] && P->fetch[p] > 0) {
			int64_t back = 1 + rng_below(r, 6);
			P->fetch[p] = P->fetch[p] > back ? P->fetch[p] - back : 0;
			W->stats->redeliveries++;
			TRACE(W, "w%d p%d redelivers from %" PRId64, P->id, p, P->fetch[p]);
		}
	}
	for (int i = 0; i < W->n_workers; i++) {
		P = W->procs[i];
		if (!P->up && rng_chance(r, 30))
			worker_start(W, P);
		else if (P->up && P->kicked && !P->pending_revoke && rng_chance(r, 30))
			worker_rejoin(W, P);
	}
}

/* The clock moves: at random while the faults run; when healing, only when nothing can run
 * (to the first coroutine waiting for it). */
static void clock_moves(struct sim_world *W)
{
	if (!W->healing) {
		W->now_ms += rng_chance(&W->rng, 100)	? 1000 + rng_below(&W->rng, 3000)
			     : rng_chance(&W->rng, 300) ? 50 + rng_below(&W->rng, 550)
							: rng_below(&W->rng, 50);
		return;
	}
	int64_t t = INT64_MAX;
	for (int i = 0; i < W->n_workers; i++) {
		const struct sim_proc *P = W->procs[i];
		if (P->queue.len || proc_runnable(W, P))
			return;
		int64_t u = proc_next_wake(P);
		t = u < t ? u : t;
	}
	if (t != INT64_MAX && t > W->now_ms)
		W->now_ms = t;
}

static void step(struct sim_world *W, struct gen *G)
{
	W->step++;
	uint32_t x = rng_below(&W->rng, 100);
	struct sim_proc *P;
	if (!W->healing && G->remaining > 0 && x < 12)
		produce_one(W, G);
	else if (x < 17)
		clock_moves(W);
	else if (x < 30)
		deliver_one(W);
	else if ((P = pick_proc(W, PICK_RUNNABLE)))
		proc_step(W, P);
	else if (W->healing)
		clock_moves(W);
	if (!W->healing)
		faults(W);
	coordinator(W);
}

static bool quiescent(struct sim_world *W)
{
	if (W->rebalancing)
		return false;
	for (int i = 0; i < W->n_workers; i++) {
		const struct sim_proc *P = W->procs[i];
		if (!P->up || P->kicked || !W->member[i] || !proc_idle(W, P))
			return false;
	}
	for (int p = 0; p < W->n_parts; p++) {
		int owners = 0;
		for (int i = 0; i < W->n_workers; i++) {
			const struct sim_proc *P = W->procs[i];
			const struct part *q = P->w ? P->w->parts[p] : NULL;
			owners += q && q->assigned && q->loaded && P->consuming[p];
		}
		int64_t len = (int64_t)W->log[p].recs.len;
		const struct ss_part *row = &W->store->parts[p];
		if (owners != 1 || (len && (!row->exists || row->next_offset != len)))
			return false;
	}
	return true;
}

/* Heal: no more faults; everyone back; run until quiescent. */
static bool settle(struct sim_world *W, struct gen *G, const char *what)
{
	for (int64_t budget = 400000; budget > 0 && !W->failed; budget--) {
		for (int i = 0; i < W->n_workers; i++) {
			struct sim_proc *P = W->procs[i];
			if (!P->up)
				worker_start(W, P);
			else if (P->kicked && !P->pending_revoke)
				worker_rejoin(W, P);
		}
		if (quiescent(W))
			return true;
		step(W, G);
	}
	if (W->failed)
		return false;
	char buf[768];
	int n = 0;
	for (int i = 0; i < W->n_workers && n >= 0 && n < 600; i++)
		n += proc_describe(W->procs[i], buf + n, sizeof buf - (size_t)n);
	return sim_fail(W, "INV-7",
			"not quiescent %s (stored next offsets: %" PRId64 " %" PRId64 " %" PRId64
			"):%s",
			what, W->store->parts[0].next_offset, W->store->parts[1].next_offset,
			W->store->parts[2].next_offset, buf);
}

struct opts {
	uint64_t first, count;
	bool one;
	enum sim_mutation mutation;
	bool known_bug;
	bool trace, keep_going;
};

static uint32_t pick(struct rng *r, const uint32_t *v, uint32_t n)
{
	return v[rng_below(r, n)];
}
#define PICK(r, ...)                                                                               \
	pick((r), (const uint32_t[]){__VA_ARGS__},                                                 \
	     sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

static void world_free(struct sim_world *W)
{
	for (int p = 0; p < SIM_PARTS_MAX; p++) {
		for (size_t i = 0; i < W->log[p].recs.len; i++) {
			free(W->log[p].recs.v[i].key);
			free(W->log[p].recs.v[i].val);
		}
		free(W->log[p].recs.v);
		free(W->decided[p].v);
		free(W->landed[p].v);
	}
	for (size_t i = 0; i < W->results.len; i++)
		free(W->results.v[i].json);
	free(W->results.v);
	for (int i = 0; i < W->n_workers; i++) {
		proc_free(W, W->procs[i]);
		free(W->procs[i]);
	}
	ss_free(W->store);
	free(W->store);
}

/* Runs one seed. Returns true if every invariant held. */
static bool run_seed(uint64_t seed, const struct opts *o, struct sim_stats *st, char *why,
		     size_t why_len)
{
	struct sim_world W0, *W = &W0;
	memset(W, 0, sizeof *W);
	W->seed = seed;
	rng_seed(&W->rng, seed);
	W->mutation = o->mutation;
	W->known_bug = o->known_bug;
	W->trace = o->trace;
	W->stats = st;
	struct rng *r = &W->rng;

	W->n_parts = 1 + (int)rng_below(r, SIM_PARTS_MAX);
	W->n_workers = 2 + (int)rng_below(r, SIM_WORKERS_MAX - 1);
	W->batch_max = (int)PICK(r, 1, 2, 3, 4, 6, 8, 16);
	/* commit.overlap 0 (in line), 1 (a committer thread) and 2 (the next batch decided on
	 * top of the one committing: the default), the real committer code in each. */
	W->overlap = (int)PICK(r, 0, 1, 2, 2);
	W->stats->overlap_seeds[W->overlap]++;
	W->batch_max_behind = W->batch_max * (int)PICK(r, 1, 2, 4);
	W->batch_wait_ms = (int)PICK(r, 0, 1, 5, 20);
	W->dedupe_cache_max = (int)PICK(r, 1, 4, 200000);
	W->limits.bytes_max = SIM_RECORD_BYTES_MAX;
	W->f.crash = PICK(r, 0, 1, 3, 8);
	W->f.kick = PICK(r, 0, 2, 5, 12);
	W->f.rebalance = PICK(r, 0, 1, 3);
	W->f.redeliver = PICK(r, 0, 5, 20);
	W->f.store_err = PICK(r, 0, 10, 50);
	W->f.commit_unknown = PICK(r, 0, 50, 200);
	W->f.deliver_fail = PICK(r, 0, 30, 150);
	W->f.deliver_double = PICK(r, 0, 30, 150);
	W->f.bad_input = PICK(r, 0, 40, 100);
	W->f.misroute = PICK(r, 0, 0, 30, 150);
	/* The partitioning rule, checked as the live worker does; one seed in four rejects. */
	W->limits.partitions = W->n_parts;
	W->limits.carts = true; /* as the worker once it knows the count: carts (issue 31) */
	W->limits.misrouted_reject = rng_chance(r, 250);
	W->stats->reject_mode_seeds += W->limits.misrouted_reject;
	W->now_ms = 1700000000000 + rng_below(r, 1000000);
	/* The waiting room (issue 33): its own PRNG, so that the seeds without rooms run as they
	 * did; the key ring every worker loads (k1 of 32 bytes, k2 of 64, k2 signing). */
	rng_seed(&W->rrng, seed ^ 0x726f6f6d726f6f6dULL);
	W->rooms = rng_chance(&W->rrng, 350);
	W->rotate = rng_chance(&W->rrng, 500);
	W->stats->room_seeds += W->rooms;
	char ring[400], err[120];
	int n = snprintf(ring, sizeof ring, "# the simulator's\nk1 ");
	for (int i = 0; i < 32; i++)
		n += snprintf(ring + n, sizeof ring - (size_t)n, "%02x",
			      (unsigned)(i * 7 + 1) & 0xff);
	n += snprintf(ring + n, sizeof ring - (size_t)n, "\nk2 ");
	for (int i = 0; i < 64; i++)
		n += snprintf(ring + n, sizeof ring - (size_t)n, "%02x",
			      (unsigned)(i * 13 + 5) & 0xff);
	snprintf(ring + n, sizeof ring - (size_t)n, "\nsign k2\n");
	if (fs_keyring_parse(ring, &W->ring, err, sizeof err) < 0 || W->ring.n != 2 ||
	    W->ring.sign != 1)
		abort();
	W->last_sign = W->ring.sign;
	W->store = calloc(1, sizeof *W->store);
	if (!W->store)
		abort();
	ss_init(W->store, o->mutation);
	for (int p = 0; p < SIM_PARTS_MAX; p++)
		W->last_next[p] = -1;

	struct gen G;
	memset(&G, 0, sizeof G);
	G.n_skus = 1 + (int)rng_below(r, SIM_SKUS_MAX);
	G.n_buyers = 2 + (int)rng_below(r, sizeof buyer_names / sizeof buyer_names[0] - 1);
	for (int s = 0; s < G.n_skus; s++)
		snprintf(G.sku[s], sizeof G.sku[s], "%c%d", 'A' + s, s);
	G.total = G.remaining = 20 + (int)rng_below(r, 100);
	for (int s = 0; W->rooms && s < G.n_skus; s++)
		G.room[s] = s == 0 || rng_chance(&W->rrng, 400);
	for (int s = 0; s < G.n_skus; s++)
		G.n_rooms += G.room[s];
	if (fs_keyring_parse("k9 "
			     "99999999999999999999999999999999"
			     "99999999999999999999999999999999\n",
			     &G.stranger, err, sizeof err) < 0)
		abort();

	for (int i = 0; i < W->n_workers; i++) {
		W->procs[i] = malloc(sizeof *W->procs[i]);
		if (!W->procs[i])
			abort();
		proc_init(W, W->procs[i], i);
		proc_start(W, W->procs[i]);
		W->member[i] = true;
	}
	group_rebalance(W);
	TRACE(W,
	      "seed %" PRIu64 ": %d partitions, %d workers, batch.max %d, commit.overlap %d, "
	      "%d records; faults "
	      "crash %u kick %u rebalance %u redeliver %u store %u unknown %u drop %u double %u "
	      "bad %u",
	      seed, W->n_parts, W->n_workers, W->batch_max, W->overlap, G.total, W->f.crash,
	      W->f.kick, W->f.rebalance, W->f.redeliver, W->f.store_err, W->f.commit_unknown,
	      W->f.deliver_fail, W->f.deliver_double, W->f.bad_input);

	int64_t extra = 50 + rng_below(r, 400);
	while (!W->failed && (G.remaining > 0 || extra-- > 0))
		step(W, &G);
	W->healing = true;
	TRACE(W, "heal");
	bool ok = !W->failed && settle(W, &G, "after the faults stopped");
	if (ok) {
		TRACE(W, "final rebalance: answer again what was never delivered");
		group_rebalance(W);
		ok = settle(W, &G, "after the final rebalance");
	}
	if (ok)
		ok = sim_check(W);
	st->seeds++;
	st->steps += W->step;
	st->lookup_kinds_left += W->store->kinds_left;
	st->holds_looked_up += W->store->holds_looked_up;
	st->stacked_same_range += W->store->stacked_same_range;
	st->room_loads += W->store->room_loads;
	if (o->one) {
		int64_t recs = 0;
		for (int p = 0; p < W->n_parts; p++)
			recs += (int64_t)W->log[p].recs.len;
		printf("sim: seed %" PRIu64 ": %d partitions, %d workers, batch.max %d, %" PRId64
		       " records, %zu results, %" PRId64 " steps: %s\n",
		       seed, W->n_parts, W->n_workers, W->batch_max, recs, W->results.len, W->step,
		       ok ? "ok" : "FAILED");
	}
	memcpy(why, W->why, why_len < sizeof W->why ? why_len : sizeof W->why);
	why[why_len - 1] = '\0';
	world_free(W);
	free(G.buys.v);
	free(G.keyed.v);
	free(G.carts.v);
	free(G.joins.v);
	free(G.tokens.v);
	return ok;
}

static const char *const mutation_names[] = {"none",
					     "no-cas",
					     "no-dedupe",
					     "no-reforward",
					     "stacked-offset-only",
					     "no-cart-resend",
					     "room-forget-admissions"};

/* An assertion in the real code (or a crash) ends the process: say which seed it was. The
 * message is written before each seed, so the handler only has to write(2) it. */
static char crash_msg[512];
static size_t crash_len;

static void on_crash(int sig)
{
	if (crash_len && write(STDOUT_FILENO, crash_msg, crash_len) < 0)
		crash_len = 0;
	signal(sig, SIG_DFL);
	raise(sig);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sim [--seed N] [--seeds N]\n"
		   "           [--mutate no-cas|no-dedupe|no-reforward|stacked-offset-only|\n"
		   "                     no-cart-resend|room-forget-admissions]\n"
		   "           [--known-bug join-again-unknown-sku]\n"
		   "           [--trace] [--keep-going]\n");
}

const char *const sim_points[] = {
	"start",	  "poll",	"after_poll", "after_lookup",  "after_commit",
	"after_publish",  "in_revoke",	"lock",	      "wait",	       "sleep",
	"flush",	  "join",	"produce",    "connect",       "load",
	"load_snapshot",  "lookup",	"read_next",  "save_replied",  "expired",
	"after_cas_sent", "idle_in_tx", "in_copy",    "before_commit", "commit_sent",
	"other",	  NULL};

int sim_point(const char *at)
{
	int i = 0;
	for (; sim_points[i + 1]; i++)
		if (at && strcmp(at, sim_points[i]) == 0)
			return i;
	return i; /* "other" */
}

static void print_stats(const struct sim_stats *s, double secs)
{
	printf("sim: %" PRId64 " seeds in %.2f s: %.0f seeds/s, %" PRId64 " steps, %" PRId64
	       " records read, %" PRId64 " commits; commit.overlap 0/1/2 in %" PRId64 "/%" PRId64
	       "/%" PRId64 " seeds, %" PRId64 " batches stacked (%" PRId64
	       " decided again: the one below did not commit; %" PRId64
	       " found the range below committed by another)\n",
	       s->seeds, secs, secs > 0 ? (double)s->seeds / secs : 0.0, s->steps, s->records,
	       s->commits, s->overlap_seeds[0], s->overlap_seeds[1], s->overlap_seeds[2],
	       s->stacked, s->stacked_redone, s->stacked_same_range);
	printf("sim: faults: %" PRId64 " crashes, %" PRId64 " kicks, %" PRId64
	       " rebalances, %" PRId64 " redeliveries, %" PRId64 " store errors, %" PRId64
	       "+%" PRId64 " unknown commits (applied+lost; %" PRId64
	       " found the same range committed by another), %" PRId64 " fenced, %" PRId64
	       " redo, %" PRId64 " retries\n",
	       s->crashes, s->kicks, s->rebalances, s->redeliveries, s->store_errors,
	       s->unknown_applied, s->unknown_lost, s->unknown_same_range, s->fenced, s->redo,
	       s->retries);
	printf("sim: results: %" PRId64 " delivered, %" PRId64 " failed, %" PRId64
	       " doubled, %" PRId64 " answered again (%" PRId64 " conflicts, %" PRId64
	       " invalid), %" PRId64 " expiries; %" PRId64 " ticks appended, %" PRId64
	       " stale skipped, %" PRId64 " fences with a record in hand (dropped, read again)\n",
	       s->delivered, s->deliver_failed, s->deliver_doubled, s->again_answered,
	       s->again_conflicts, s->again_invalid, s->expired_replies, s->ticks_appended,
	       s->skipped_stale, s->inhand_after_fence);
	printf("sim: carts: %" PRId64 " protocol messages sent (outbox), %" PRId64
	       " cart results, %" PRId64 " cancels during a round\n",
	       s->cart_messages, s->cart_results, s->cart_cancels_in_round);
	printf("sim: waiting rooms: %" PRId64 " seeds, %" PRId64 "/%" PRId64
	       " rooms admitting (random/fifo draw), %" PRId64 " join answers, %" PRId64
	       " admissions (%" PRId64 " answered again), %" PRId64
	       " loads with entries; buys' tokens: %" PRId64 " valid, %" PRId64
	       " no_token, %" PRId64 " bad_token, %" PRId64 " token_expired, %" PRId64
	       " token_not_yet_valid, %" PRId64 " token_other_buyer; held on k1/k2 %" PRId64
	       "/%" PRId64 " (%" PRId64
	       " answered by a worker signing with the other key), %" PRId64
	       " starts signing with the other key; %" PRId64
	       " answers let pass (known bug join-again-unknown-sku); %" PRId64
	       " ids refused for their token, then held on a retry with a valid one\n",
	       s->room_seeds, s->room_draws[0], s->room_draws[1], s->joins, s->admissions,
	       s->admissions_again, s->room_loads, s->verdicts[FS_TOKEN_OK],
	       s->verdicts[FS_TOKEN_NONE], s->verdicts[FS_TOKEN_BAD], s->verdicts[FS_TOKEN_EXPIRED],
	       s->verdicts[FS_TOKEN_NOT_YET], s->verdicts[FS_TOKEN_OTHER_BUYER], s->held_by_key[0],
	       s->held_by_key[1], s->held_other_key, s->signers_rotated, s->known_bug_stepped,
	       s->token_retries_held);
	printf("sim: waiting rooms: %" PRId64 " admissions at a slot moved up after a gap in the "
	       "clock, %" PRId64 " tokens re-minted after a gap\n",
	       s->room_catchups, s->room_remints);
	printf("sim: partitioning: %" PRId64 " records appended to a wrong partition, %" PRId64
	       " forwards queued (%" PRId64 " of them again after a restart), %" PRId64
	       " landed; %" PRId64 " seeds in reject mode\n",
	       s->misrouted_appended, s->forwards_queued, s->forwards_again, s->forwards_landed,
	       s->reject_mode_seeds);
	printf("sim: lookups: %" PRId64 " stored rows of a batch's intent ids left out (another "
	       "kind); %" PRId64 " records the store refused for good (%" PRId64
	       " cart_reserves); %" PRId64 " hold expiries and %" PRId64
	       " woken cart groups the store refused; %" PRId64
	       " ended holds looked up for a follow-up (not in memory)\n",
	       s->lookup_kinds_left, s->refused, s->reserves_refused, s->expiries_refused,
	       s->groups_refused, s->holds_looked_up);
	printf("sim: crashes at:");
	for (int i = 0; sim_points[i]; i++)
		printf(" %s=%" PRId64, sim_points[i], s->crash_at[i]);
	printf("\n");
}

/* The crash points a sweep must have crashed at: the protocol's named ones, and every store
 * call a batch makes. */
static const char *const must_crash_at[] = {
	"after_poll",	  "after_lookup", "after_commit", "after_publish", "in_revoke",	 "lock",
	"wait",		  "produce",	  "load",	  "lookup",	   "read_next",	 "expired",
	"after_cas_sent", "idle_in_tx",	  "in_copy",	  "before_commit", "commit_sent"};

/* A sweep that never reached a fault path proves nothing about it (TESTING.md). */
static bool coverage_ok(const struct sim_stats *s)
{
	bool ok = s->kicks && s->fenced && s->unknown_applied && s->unknown_lost &&
		  s->redeliveries && s->store_errors && s->deliver_failed && s->deliver_doubled &&
		  s->again_answered && s->expired_replies && s->ticks_appended &&
		  s->unknown_same_range && s->again_conflicts && s->again_invalid &&
		  s->lookup_kinds_left && s->misrouted_appended && s->forwards_landed &&
		  s->forwards_again && s->reject_mode_seeds && s->inhand_after_fence &&
		  s->overlap_seeds[0] && s->overlap_seeds[1] && s->overlap_seeds[2] && s->stacked &&
		  s->stacked_redone && s->unknown_committed && s->stacked_same_range &&
		  s->refused && s->reserves_refused && s->expiries_refused && s->groups_refused &&
		  s->holds_looked_up && s->cart_messages && s->cart_results &&
		  s->cart_cancels_in_round && s->room_draws[0] && s->room_draws[1] && s->joins &&
		  s->admissions && s->admissions_again && s->room_loads && s->held_by_key[0] &&
		  s->held_by_key[1] && s->signers_rotated && s->held_other_key &&
		  s->token_retries_held;
	for (int v = FS_TOKEN_OK; v <= FS_TOKEN_OTHER_BUYER; v++)
		ok = ok && s->verdicts[v];
	for (size_t i = 0; i < sizeof must_crash_at / sizeof *must_crash_at; i++)
		ok = ok && s->crash_at[sim_point(must_crash_at[i])];
	ok = ok && s->room_catchups && s->room_remints;
	return ok;
}

int main(int argc, char **argv)
{
	struct opts o = {.first = 1, .count = 1};
	bool have_seed = false, have_seeds = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--seed") == 0 && v) {
			o.first = strtoull(v, NULL, 10);
			have_seed = true;
			i++;
		} else if (strcmp(a, "--seeds") == 0 && v) {
			o.count = strtoull(v, NULL, 10);
			have_seeds = true;
			i++;
		} else if (strcmp(a, "--mutate") == 0 && v) {
			for (int k = 1; k < (int)(sizeof mutation_names / sizeof mutation_names[0]);
			     k++)
				if (strcmp(v, mutation_names[k]) == 0)
					o.mutation = (enum sim_mutation)k;
			if (!o.mutation) {
				usage(stderr);
				return 2;
			}
			i++;
		} else if (strcmp(a, "--known-bug") == 0 && v &&
			   strcmp(v, "join-again-unknown-sku") == 0) {
			o.known_bug = true;
			i++;
		} else if (strcmp(a, "--trace") == 0) {
			o.trace = true;
		} else if (strcmp(a, "--keep-going") == 0) {
			o.keep_going = true;
		} else {
			usage(strcmp(a, "--help") == 0 ? stdout : stderr);
			return strcmp(a, "--help") == 0 ? 0 : 2;
		}
	}
	/* Only the plain sweep: a mutation run must keep its seeds to fail. */
	const char *env = getenv("FS_SIM_SEEDS");
	if (have_seeds && env && *env && !o.mutation && !o.known_bug)
		o.count = strtoull(env, NULL, 10);
	o.one = have_seed && !have_seeds;
	char extra[160] = "";
	if (o.mutation)
		snprintf(extra, sizeof extra, " --mutate %s", mutation_names[o.mutation]);
	else if (o.known_bug)
		snprintf(extra, sizeof extra, " --known-bug join-again-unknown-sku");
	printf("sim: seeds %" PRIu64 "..%" PRIu64 "%s\n", o.first, o.first + o.count - 1, extra);
	fflush(stdout);

	struct sim_stats st;
	memset(&st, 0, sizeof st);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0); /* only to print the rate; never seen by a seed */
	uint64_t failures = 0, first_failed = 0;
	char why[1024];
	signal(SIGABRT, on_crash);
	signal(SIGSEGV, on_crash);
	for (uint64_t s = o.first; s < o.first + o.count; s++) {
		int k = snprintf(crash_msg, sizeof crash_msg,
				 "sim: seed %" PRIu64 " CRASHED (an assertion or a signal)\n"
				 "sim: replay: %s --seed %" PRIu64 "%s --trace\n",
				 s, argv[0], s, extra);
		crash_len = k > 0 && (size_t)k < sizeof crash_msg ? (size_t)k : 0;
		if (run_seed(s, &o, &st, why, sizeof why))
			continue;
		if (!failures)
			first_failed = s;
		failures++;
		printf("sim: seed %" PRIu64 " FAILED: %s\n"
		       "sim: replay: %s --seed %" PRIu64 "%s --trace\n",
		       s, why, argv[0], s, extra);
		fflush(stdout);
		if (!o.keep_going)
			break;
	}
	crash_len = 0;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_stats(&st, secs);
	if (failures) {
		printf("sim: %" PRIu64 " of %" PRId64 " seeds FAILED (first: %" PRIu64 ")\n",
		       failures, st.seeds, first_failed);
		return 1;
	}
	if (o.count >= 1000 && !coverage_ok(&st)) {
		printf("sim: a fault path never ran (see the counters above): the sweep proves "
		       "nothing about it\n");
		return 1;
	}
	printf("sim: all %" PRId64 " seeds passed\n", st.seeds);
	return 0;
}
