/* sim.c: flashsale's deterministic simulator (TESTING.md, layer 2), in the spirit of
 * TigerBeetle's VOPR and FoundationDB's simulation.
 *
 *   sim --seeds 10000            sweep seeds 1..10000 (stops at the first failing seed)
 *   sim --seed 1234 [--trace]    one seed, with a summary (and every step with --trace)
 *   sim --seed 1234 --seeds 100  seeds 1234..1333
 *   sim --mutate no-cas|no-dedupe|no-reforward|inhand-push   break the store or the worker
 *                                on purpose: the sweep must fail
 *   FS_SIM_SEEDS=N               overrides the seed count of a plain --seeds sweep
 *
 * A failing seed prints itself and the command that replays it; everything a seed does comes
 * from one PRNG seeded with it, so the replay is bit for bit (no clock, no threads, no hash
 * order, no addresses).
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
 *   key, bad fields, oversized payloads). Keyed records go to the partition the partitioning
 *   rule names (murmur2 of the key), except a share per seed that a web tier with another
 *   partitioner puts elsewhere: the workers forward those (or, in one seed in four, reject them
 *   wrong_partition), and a forward's delivery appends the same bytes to its partition's log.
 *   The workers append ticks of their own.
 * - The store (sim_store.c): the tables and statements of src/io/store.c, with the offset
 *   compare-and-set and its commit token, the dedupe on (intent id, kind), the lookup by
 *   (intent id, kind) pairs, the guards and CHECK constraints, all-or-nothing commits, and
 *   loads that read one snapshot.
 * - The workers (sim_worker.c): the protocol of src/worker/main.c as a state machine over the real
 *   pure code (fs_record_parse, fs_batch_*, fs_core_*, fs_reply_*). Batches take random sizes
 *   (as many records as the poll returned before batch.wait.ms passed).
 * - The group coordinator (below): eager rebalances with a barrier (everyone revokes, then the
 *   new assignment), members that crash, restart, or are kicked out while they still run.
 * - The results log: what the workers' producers delivered, with the record each answers.
 *
 * The schedule. Each step the scheduler picks, from the seed's PRNG: the web tier appends a
 * record, the clock moves (sometimes past every hold), a worker takes one step (one store
 * statement, one message, one publish), or a producer delivers one result. Faults, at rates
 * drawn per seed: a worker crashes at any step of its loop or of a batch (its memory is gone;
 * queued results land or not) and restarts later; a worker is kicked out of the group while it
 * runs (its partitions move and it carries on, so its next commit must be fenced by the
 * compare-and-set); spontaneous rebalances; redelivery (a consumer reads again records it
 * already read); transient store errors on any statement; a commit whose connection dies (it
 * applied or not; the worker reads the offset and the commit token back, and only its own
 * token at its batch's end means committed; cuts aim at commits that are about to be fenced,
 * which may read back the same range committed by another worker); results dropped (delivery
 * fails, replied stops) or doubled; a full batch left waiting for the next poll, as when both
 * committers of commit.overlap are busy, so that the next message finds it full and waits in
 * hand while it is decided (and a kick then prefers such a worker, whose batch may be
 * fenced). Then the faults stop, every worker comes back, and the
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
 * Mutations: --mutate no-cas makes the simulated commit ignore the expected offset, and
 * --mutate no-dedupe makes the store forget intent ids (the lookup finds nothing, the insert
 * adds a second row), and --mutate no-reforward makes a restarted worker skip the forwards of
 * the misrouted records it reads below the stored offset, and --mutate inhand-push lets the
 * message in hand into the emptied batch after a fence (main before issue 28's item 2 was
 * fixed). The sweep must then fail
 * (tests/sim/meson.build: should_fail).
 *
 * Bugs of src/ this simulator found, all fixed (tests/sim/meson.build lists them): the default
 * sweep runs every path they were on, and the checks above would catch each one again.
 *
 * Left out of the model: the stock topic, shutdown (SIGTERM drain), Kafka's advisory offsets,
 * clock skew between the worker and the broker, and the same intent id on two partitions (a
 * confirm or cancel keyed to a SKU of another partition: DESIGN-NOTES.md calls it hostile, and
 * its decision depends on the order of two partitions' commits, which no replay of the log
 * can know, so the generator keeps a wrong key on the partition). Reading a record hands the
 * worker the fs_record_parse result computed when it was appended (parsing is pure; the
 * oracle parses the bytes again). */
#include "sim.h"

#include "sim_store.h"
#include "sim_worker.h"

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

struct gen {
	int n_skus, n_buyers;
	char sku[SIM_SKUS_MAX][16];
	int sku_part[SIM_SKUS_MAX];
	bool opened[SIM_SKUS_MAX];
	int limit[SIM_SKUS_MAX];
	int total, remaining;
	VEC(struct gen_buy) buys;
	VEC(int64_t) keyed; /* part << 32 | offset of earlier buy/confirm/cancel records */
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

static void append(struct sim_world *W, struct gen *G, const char *key, size_t key_len,
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
	    r->parsed.kind == FS_KIND_CANCEL)
		*VEC_PUSH(G->keyed) = ((int64_t)part << 32) | (int64_t)(W->log[part].recs.len - 1);
}

static void append_str(struct sim_world *W, struct gen *G, const char *key, const char *val)
{
	append(W, G, key, key ? strlen(key) : 0, val, strlen(val));
}

static void gen_open(struct sim_world *W, struct gen *G, int s)
{
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
	struct gen_buy *b = VEC_PUSH(G->buys);
	gen_uuid(r, b->id);
	b->sku = (int)rng_below(r, (uint32_t)G->n_skus);
	b->buyer = (int)rng_below(r, (uint32_t)G->n_buyers);
	int lim = G->limit[b->sku] ? G->limit[b->sku] : 2;
	b->qty = rng_chance(r, 700) ? 1 : 1 + rng_below(r, (uint32_t)lim + 1);
	char buf[320];
	buy_json(buf, sizeof buf, b->id, G->sku[b->sku], buyer_names[b->buyer], b->qty,
		 rng_chance(r, 200) ? (int)rng_below(r, 3) : -1);
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
	buy_json(buf, sizeof buf, b->id, G->sku[b->sku],
		 buyer_names[other_buyer ? (b->buyer + 1) % G->n_buyers : b->buyer],
		 other_buyer ? b->qty : b->qty + 1, -1);
	append_str(W, G, G->sku[b->sku], buf);
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
	/* A wrong key names another SKU of the same partition: on another partition the intent
	 * id would be decided twice, by two partitions, in an order no replay can know (the
	 * same id on two partitions: DESIGN-NOTES.md, "Dedupe"). */
	const char *key = G->sku[sku];
	int other = (int)rng_below(r, (uint32_t)G->n_skus);
	if (rng_chance(r, 40) && G->sku_part[other] == G->sku_part[sku])
		key = G->sku[other];
	append_str(W, G, key, buf);
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
		W->workers[i]->pending_revoke = true;
		W->workers[i]->pending_assign = false;
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
		if (W->workers[i]->pending_revoke)
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
		W->workers[m[k]]->pending_assign = true;
		W->workers[m[k]]->assign_parts = set[m[k]];
		TRACE(W, "w%d gets 0x%x", m[k], set[m[k]]);
	}
	W->rebalancing = false;
}

static void worker_crash(struct sim_world *W, struct sw_worker *w)
{
	sw_crash(W, w);
	W->member[w->id] = false;
	group_rebalance(W);
}

static void worker_start(struct sim_world *W, struct sw_worker *w)
{
	sw_init(w, w->id);
	w->up = true;
	W->member[w->id] = true;
	TRACE(W, "w%d starts", w->id);
	group_rebalance(W);
}

/* Paused past its session timeout: out of the group, but it does not know yet. */
static void worker_kick(struct sim_world *W, struct sw_worker *w)
{
	W->stats->kicks++;
	W->member[w->id] = false;
	w->kicked = true;
	w->pending_revoke = true;
	w->pending_assign = false;
	TRACE(W, "w%d KICKED", w->id);
	group_rebalance(W);
}

static void worker_rejoin(struct sim_world *W, struct sw_worker *w)
{
	w->kicked = false;
	W->member[w->id] = true;
	TRACE(W, "w%d rejoins", w->id);
	group_rebalance(W);
}

/* ---- the scheduler ------------------------------------------------------------------------ */

static struct sw_worker *pick_worker(struct sim_world *W, bool with_queue)
{
	int c[SIM_WORKERS_MAX], n = 0;
	for (int i = 0; i < W->n_workers; i++)
		if (W->workers[i]->up && (!with_queue || W->workers[i]->queue.len))
			c[n++] = i;
	return n ? W->workers[c[rng_below(&W->rng, (uint32_t)n)]] : NULL;
}

static void deliver_one(struct sim_world *W)
{
	struct sw_worker *w = pick_worker(W, true);
	if (w)
		sw_deliver(W, w,
			   rng_chance(&W->rng, 700) ? 0
						    : rng_below(&W->rng, (uint32_t)w->queue.len));
}

static void faults(struct sim_world *W)
{
	struct rng *r = &W->rng;
	struct sw_worker *w;
	if (rng_chance(r, W->f.crash) && (w = pick_worker(W, false))) {
		/* Half the time, one in the middle of something (crash points inside a batch). */
		for (int i = 0; i < W->n_workers && rng_chance(r, 500); i++)
			if (W->workers[i]->up && W->workers[i]->act != ACT_NONE)
				w = W->workers[i];
		worker_crash(W, w);
	}
	/* The rare points of a batch (reading back an unknown outcome, reloading to redo,
	 * reloading after a fence) last one step or two: aim at them. */
	for (int i = 0; i < W->n_workers; i++) {
		w = W->workers[i];
		if (w->up && w->act == ACT_PROCESS &&
		    (w->state == PS_RESOLVE || w->state == PS_RELOAD || w->state == PS_FENCED) &&
		    rng_chance(r, W->f.crash * 20))
			worker_crash(W, w);
	}
	if (rng_chance(r, W->f.kick)) {
		/* Prefer a member in the middle of a batch: that is when a stale commit hurts. */
		int c[SIM_WORKERS_MAX], n = 0;
		for (int i = 0; i < W->n_workers; i++)
			if (W->member[i] && W->workers[i]->up)
				c[n++] = i;
		for (int k = 0; k < n; k++)
			if (W->workers[c[k]]->act == ACT_PROCESS)
				c[0] = c[k], n = 1;
		/* Most of all one whose batch is deciding with a message in hand (it found the
		 * batch full): a fence then must not let that message in (issue 28, item 2). */
		for (int i = 0; i < W->n_workers; i++)
			if (W->member[i] && W->workers[i]->up && W->workers[i]->inhand &&
			    rng_chance(r, 500))
				c[0] = i, n = 1;
		if (n)
			worker_kick(W, W->workers[c[rng_below(r, (uint32_t)n)]]);
	}
	if (rng_chance(r, W->f.rebalance))
		group_rebalance(W);
	if (rng_chance(r, W->f.redeliver) && (w = pick_worker(W, false))) {
		int p = (int)rng_below(r, (uint32_t)W->n_parts);
		if (w->parts[p].consuming && w->parts[p].fetch > 0) {
			int64_t back = 1 + rng_below(r, 6);
			w->parts[p].fetch = w->parts[p].fetch > back ? w->parts[p].fetch - back : 0;
			W->stats->redeliveries++;
			TRACE(W, "w%d p%d redelivers from %" PRId64, w->id, p, w->parts[p].fetch);
		}
	}
	for (int i = 0; i < W->n_workers; i++) {
		w = W->workers[i];
		if (!w->up && rng_chance(r, 30))
			worker_start(W, w);
		else if (w->up && w->kicked && !w->pending_revoke && rng_chance(r, 30))
			worker_rejoin(W, w);
	}
}

static void step(struct sim_world *W, struct gen *G)
{
	W->step++;
	uint32_t x = rng_below(&W->rng, 100);
	struct sw_worker *w;
	if (!W->healing && G->remaining > 0 && x < 12)
		produce_one(W, G);
	else if (!W->healing && x < 17)
		W->now_ms += rng_chance(&W->rng, 100)	? 1000 + rng_below(&W->rng, 3000)
			     : rng_chance(&W->rng, 300) ? 50 + rng_below(&W->rng, 550)
							: rng_below(&W->rng, 50);
	else if (x < 30)
		deliver_one(W);
	else if ((w = pick_worker(W, false)))
		sw_step(W, w);
	if (!W->healing)
		faults(W);
	coordinator(W);
}

static bool quiescent(struct sim_world *W)
{
	if (W->rebalancing)
		return false;
	for (int i = 0; i < W->n_workers; i++) {
		const struct sw_worker *w = W->workers[i];
		if (!w->up || w->kicked || !W->member[i] || !sw_idle(W, w))
			return false;
	}
	for (int p = 0; p < W->n_parts; p++) {
		int owners = 0;
		for (int i = 0; i < W->n_workers; i++) {
			const struct sw_part *q = &W->workers[i]->parts[p];
			owners += q->assigned && q->loaded && q->consuming;
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
	for (int64_t budget = 200000; budget > 0 && !W->failed; budget--) {
		for (int i = 0; i < W->n_workers; i++) {
			struct sw_worker *w = W->workers[i];
			if (!w->up)
				worker_start(W, w);
			else if (w->kicked && !w->pending_revoke)
				worker_rejoin(W, w);
		}
		if (quiescent(W))
			return true;
		step(W, G);
	}
	if (W->failed)
		return false;
	char buf[512];
	int n = 0;
	for (int i = 0; i < W->n_workers && n < 400; i++) {
		const struct sw_worker *w = W->workers[i];
		n += snprintf(buf + n, sizeof buf - (size_t)n,
			      " w%d(up %d member %d act %d state %d queue %zu)", i, w->up,
			      W->member[i], w->act, w->state, w->queue.len);
	}
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
		sw_free(W->workers[i]);
		free(W->workers[i]);
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
	W->trace = o->trace;
	W->stats = st;
	struct rng *r = &W->rng;

	W->n_parts = 1 + (int)rng_below(r, SIM_PARTS_MAX);
	W->n_workers = 2 + (int)rng_below(r, SIM_WORKERS_MAX - 1);
	W->batch_max = (int)PICK(r, 1, 2, 3, 4, 6, 8, 16);
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
	W->f.busy = PICK(r, 0, 0, 200, 600);
	/* The partitioning rule, checked as the live worker does; one seed in four rejects. */
	W->limits.partitions = W->n_parts;
	W->limits.misrouted_reject = rng_chance(r, 250);
	W->stats->reject_mode_seeds += W->limits.misrouted_reject;
	W->now_ms = 1700000000000 + rng_below(r, 1000000);
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
	for (int s = 0; s < G.n_skus; s++) {
		snprintf(G.sku[s], sizeof G.sku[s], "%c%d", 'A' + s, s);
		G.sku_part[s] = key_part(W, G.sku[s], strlen(G.sku[s]));
	}
	G.total = G.remaining = 20 + (int)rng_below(r, 100);

	for (int i = 0; i < W->n_workers; i++) {
		W->workers[i] = malloc(sizeof *W->workers[i]);
		if (!W->workers[i])
			abort();
		sw_init(W->workers[i], i);
		W->workers[i]->up = true;
		W->member[i] = true;
	}
	group_rebalance(W);
	TRACE(W,
	      "seed %" PRIu64 ": %d partitions, %d workers, batch.max %d, %d records; faults "
	      "crash %u kick %u rebalance %u redeliver %u store %u unknown %u drop %u double %u "
	      "bad %u",
	      seed, W->n_parts, W->n_workers, W->batch_max, G.total, W->f.crash, W->f.kick,
	      W->f.rebalance, W->f.redeliver, W->f.store_err, W->f.commit_unknown,
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
	return ok;
}

static const char *const mutation_names[] = {"none", "no-cas", "no-dedupe", "no-reforward",
					     "inhand-push"};

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
		   "           [--mutate no-cas|no-dedupe|no-reforward|inhand-push]\n"
		   "           [--trace] [--keep-going]\n");
}

static void print_stats(const struct sim_stats *s, double secs)
{
	printf("sim: %" PRId64 " seeds in %.2f s: %.0f seeds/s, %" PRId64 " steps, %" PRId64
	       " records read, %" PRId64 " commits\n",
	       s->seeds, secs, secs > 0 ? (double)s->seeds / secs : 0.0, s->steps, s->records,
	       s->commits);
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
	       " stale skipped, %" PRId64 " in hand after a fence (dropped, read again)\n",
	       s->delivered, s->deliver_failed, s->deliver_doubled, s->again_answered,
	       s->again_conflicts, s->again_invalid, s->expired_replies, s->ticks_appended,
	       s->skipped_stale, s->inhand_after_fence);
	printf("sim: partitioning: %" PRId64 " records appended to a wrong partition, %" PRId64
	       " forwards queued (%" PRId64 " of them again after a restart), %" PRId64
	       " landed; %" PRId64 " seeds in reject mode\n",
	       s->misrouted_appended, s->forwards_queued, s->forwards_again, s->forwards_landed,
	       s->reject_mode_seeds);
	printf("sim: lookups: %" PRId64 " stored rows of a batch's intent ids left out (another "
	       "kind)\n",
	       s->lookup_kinds_left);
	printf("sim: crashes at:");
	static const char *const at[] = {"poll",   "due",     "assign",	 "lookup",
					 "decide", "commit",  "resolve", "reload",
					 "fenced", "publish", "again",	 "again-expired"};
	for (int i = 0; i < AT_WHERE_COUNT; i++)
		printf(" %s=%" PRId64, at[i], s->crash_at[i]);
	printf("\n");
}

/* A sweep that never reached a fault path proves nothing about it (TESTING.md). */
static bool coverage_ok(const struct sim_stats *s)
{
	bool ok = s->kicks && s->fenced && s->unknown_applied && s->unknown_lost &&
		  s->redeliveries && s->store_errors && s->deliver_failed && s->deliver_doubled &&
		  s->again_answered && s->expired_replies && s->ticks_appended &&
		  s->unknown_same_range && s->again_conflicts && s->again_invalid &&
		  s->lookup_kinds_left && s->misrouted_appended && s->forwards_landed &&
		  s->forwards_again && s->reject_mode_seeds && s->inhand_after_fence;
	for (int i = 0; i < AT_WHERE_COUNT; i++)
		ok = ok && s->crash_at[i];
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
	if (have_seeds && env && *env && !o.mutation)
		o.count = strtoull(env, NULL, 10);
	o.one = have_seed && !have_seeds;
	char extra[160] = "";
	if (o.mutation)
		snprintf(extra, sizeof extra, " --mutate %s", mutation_names[o.mutation]);
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
