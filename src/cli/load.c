/* load.c: `flashsale load`, the load generator the demo and the tests use.
 *
 * Publishes one buy per distinct buyer with a fresh intent id, as fast as the producer takes
 * them or at a given rate; a share of them is re-sent verbatim a little later, as a client's
 * retry would be. Bounded: at most FS_LOAD_BUYERS_MAX intents per run. */
#include "cli/cli.h"

#include "core/record.h"
#include "core/token.h"
#include "io/config.h"
#include "io/keyring.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

enum {
	FS_LOAD_BUYERS_MAX = 10000000,
	/* --token: every token is minted before the first publish, held in memory (about 110
	 * bytes each) */
	FS_LOAD_TOKENS_MAX = 2000000,
	TOKEN_BEFORE_MS = 60000,  /* valid from a minute before the load */
	TOKEN_AFTER_MS = 3600000, /* until an hour after it */
	/* A repeat goes out this many records after its original (a retry, not a double send). */
	DUP_DELAY = 64,
	PAYLOAD_MAX = 1024,
	CART_SKUS_MAX = 64, /* --cart-lines: the SKUs of the list */
	POLL_EVERY = 1000,
	POISON_RUN = 100,
};

struct pending_dup {
	int64_t due;
	char key[FS_UUID_LEN + 1]; /* a cart's id; a buy's key is the SKU */
	char payload[PAYLOAD_MAX];
	int len;
};

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: seeded, reproducible; not for anything secret. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

/* Intent ids as the client library mints them (version 7: the time in ms, then random bits;
 * --id-version 4: all random), the random bits from splitmix64 seeded once by libuuid:
 * uuid_generate_random for every id made a getrandom call and reseeded random() each time,
 * half of this generator's CPU in a 100,000-buyer run (perf), on a machine the worker shares.
 * Consecutive outputs of splitmix64 do not repeat within 2^64 steps. */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void intent_id_next(uint64_t *s, int version, char out[FS_UUID_LEN + 1])
{
	uint64_t a = splitmix64(s), b = splitmix64(s);
	if (version == 7) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		fs_uuid_v7((int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000, a, b, out);
		return;
	}
	uuid_t u;
	memcpy(u, &a, 8);
	memcpy(u + 8, &b, 8);
	u[6] = (unsigned char)((u[6] & 0x0f) | 0x40); /* version 4 */
	u[8] = (unsigned char)((u[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	uuid_unparse_lower(u, out);
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char usage_load[] =
	"usage: flashsale load SKU --buyers N [--qty N] [--rate R] [--dup-ratio X] [--seed S]\n"
	"                          [--dup-count N] [--poison N] [--buyer-prefix P] [--ids FILE]\n"
	"                          [--id-version 7|4] [--join] [--token]\n"
	"\n"
	"Publishes N buy intents for SKU from N distinct buyers (P-0 .. P-(N-1)), each with a\n"
	"fresh intent id; a share X (0..1) of them is re-sent verbatim a few records later, as\n"
	"a retry would be (--dup-count: exactly N of them). --rate caps records per second\n"
	"(default: as fast as possible). --poison N spreads N bad records (not JSON) between\n"
	"the buys in bursts of 100, as a flood would come.\n"
	"Intent ids are version 7 (time-ordered), as the client library mints them;\n"
	"--id-version 4 makes them all random, to measure what such ids cost the worker.\n"
	"--ids writes every distinct intent id, one per line. The seed (printed) makes the\n"
	"choice of repeats and the default buyer prefix reproducible. Exit 1 if any record was\n"
	"not delivered.\n"
	"--cart-lines L: carts instead of buys (issue 31): SKU is then a comma-separated list\n"
	"of SKUs, and each buyer publishes one cart of L distinct SKUs drawn from it (seeded),\n"
	"--qty units each, keyed by a fresh cart id (written by --ids).\n"
	"--join: joins of SKU's waiting room instead of buys (issue 33), one per buyer.\n"
	"--token: each buy carries its buyer's admission token, minted with this configuration's\n"
	"key ring (admission.keys) as a worker would, valid from a minute before the load until\n"
	"an hour after it, all minted before the first publish (at most 2,000,000 buyers): the\n"
	"cost of a sale behind a waiting room without the room's pace (scripts/bench S14).\n";

struct load_opts {
	int64_t buyers, qty, rate, seed, dup_count, poison, id_version, cart_lines;
	bool join, token;
	int nskus;
	char skus[CART_SKUS_MAX][FS_SKU_LEN_MAX + 1];
	double dup_ratio;
	const char *sku, *prefix, *ids_path;
	char prefix_buf[32];
};

/* The options, checked; -1: go on, else the exit status. */
static int load_parse(int argc, char **argv, struct load_opts *o)
{
	*o = (struct load_opts){
		.buyers = -1, .qty = 1, .seed = -1, .dup_count = -1, .id_version = 7};
	const struct cli_opt spec[] = {
		{"buyers", CLI_INT, &o->buyers, 1, FS_LOAD_BUYERS_MAX},
		{"qty", CLI_INT, &o->qty, 1, FS_QTY_MAX},
		{"rate", CLI_INT, &o->rate, 1, 10000000},
		{"dup-ratio", CLI_RATIO, &o->dup_ratio},
		{"seed", CLI_INT, &o->seed, 0, INT64_MAX},
		{"buyer-prefix", CLI_STR, &o->prefix},
		{"ids", CLI_STR, &o->ids_path},
		{"dup-count", CLI_INT, &o->dup_count, 0, FS_LOAD_BUYERS_MAX},
		{"poison", CLI_INT, &o->poison, 0, FS_LOAD_BUYERS_MAX},
		{"id-version", CLI_INT, &o->id_version, 4, 7},
		{"cart-lines", CLI_INT, &o->cart_lines, 1, FS_CART_LINES_MAX},
		{"join", CLI_FLAG, &o->join},
		{"token", CLI_FLAG, &o->token},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_load, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (o->buyers < 0)
		return cli_usage(usage_load);
	if (o->id_version != 4 && o->id_version != 7) {
		cli_err("load: --id-version must be 7 or 4");
		return 2;
	}
	if (o->dup_count > o->buyers) {
		cli_err("load: --dup-count must not exceed --buyers");
		return 2;
	}
	o->sku = argv[optind];
	if (o->join + (o->cart_lines > 0) + o->token > 1) {
		cli_err("load: --join, --cart-lines and --token: one of them");
		return 2;
	}
	if (o->token && o->buyers > FS_LOAD_TOKENS_MAX) {
		cli_err("load: --token: at most %d buyers", FS_LOAD_TOKENS_MAX);
		return 2;
	}
	if (o->cart_lines > 0) {
		/* SKU,SKU,...: each checked, each once. */
		const char *p = o->sku;
		while (*p) {
			size_t n = strcspn(p, ",");
			if (o->nskus == CART_SKUS_MAX || n == 0 || n > FS_SKU_LEN_MAX) {
				cli_err("load: --cart-lines: SKU must be a list of 1 to %d SKUs",
					CART_SKUS_MAX);
				return 2;
			}
			memcpy(o->skus[o->nskus], p, n);
			o->skus[o->nskus][n] = '\0';
			if (!fs_sku_valid(o->skus[o->nskus])) {
				cli_err("load: invalid sku '%s'", o->skus[o->nskus]);
				return 2;
			}
			o->nskus++;
			p += n + (p[n] == ',');
		}
		if (o->nskus < o->cart_lines) {
			cli_err("load: --cart-lines %" PRId64 " needs at least that many SKUs",
				o->cart_lines);
			return 2;
		}
	} else if (!fs_sku_valid(o->sku)) {
		cli_err("load: invalid sku '%s'", o->sku);
		return 2;
	}
	if (o->seed < 0)
		o->seed = (int64_t)(((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid()) & INT64_MAX;
	if (!o->prefix) {
		snprintf(o->prefix_buf, sizeof o->prefix_buf, "b%" PRId64, o->seed % 1000000);
		o->prefix = o->prefix_buf;
	}
	if (strlen(o->prefix) > 40) {
		cli_err("load: --buyer-prefix: at most 40 characters");
		return 2;
	}
	return -1;
}

/* One load's progress: the repeats waiting their turn (a ring), the counts, the PRNGs. */
struct load_run {
	flashsale_t *fs;
	const struct load_opts *o;
	FILE *ids;
	int64_t dup_every;
	uint64_t rng, id_state;
	int ring_head, ring_len;
	int64_t sent, dups, poisoned;
	double t0;
	char *tokens; /* --token: buyer i's at tokens + i * (FS_TOKEN_TEXT_MAX + 1) */
};

static struct pending_dup ring[DUP_DELAY + 1];

/* Buyer i's cart (--cart-lines): L distinct SKUs of the list, drawn with the seed's PRNG. */
static int cart_payload(struct load_run *r, int64_t i, const char *id, char *payload, size_t n)
{
	const struct load_opts *o = r->o;
	int len =
		snprintf(payload, n,
			 "{\"v\":1,\"type\":\"cart\",\"cart_id\":\"%s\",\"buyer_id\":\"%s-%" PRId64
			 "\",\"lines\":[",
			 id, o->prefix, i);
	int picked[FS_CART_LINES_MAX];
	for (int64_t l = 0; l < o->cart_lines; l++) {
		int s;
		bool again;
		do {
			s = (int)(rng_next(&r->rng) % (uint64_t)o->nskus);
			again = false;
			for (int64_t j = 0; j < l; j++)
				again |= picked[j] == s;
		} while (again);
		picked[l] = s;
		len += snprintf(payload + len, n - (size_t)len,
				"%s{\"sku\":\"%s\",\"qty\":%" PRId64 "}", l ? "," : "", o->skus[s],
				o->qty);
	}
	len += snprintf(payload + len, n - (size_t)len, "]}");
	return len;
}

/* Buyer i's buy (or cart), and its repeat queued if it gets one. */
static int publish_buy(struct load_run *r, int64_t i)
{
	const struct load_opts *o = r->o;
	char payload[PAYLOAD_MAX];
	char id[FS_UUID_LEN + 1];
	intent_id_next(&r->id_state, (int)o->id_version, id);
	int len;
	if (o->cart_lines > 0)
		len = cart_payload(r, i, id, payload, sizeof payload);
	else if (o->join)
		len = snprintf(
			payload, sizeof payload,
			"{\"v\":1,\"type\":\"join\",\"sku\":\"%s\",\"buyer_id\":\"%s-%" PRId64
			"\"}",
			o->sku, o->prefix, i);
	else
		len = snprintf(payload, sizeof payload,
			       "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":"
			       "\"%s\",\"buyer_id\":\"%s-%" PRId64 "\",\"qty\":%" PRId64 "%s%s%s}",
			       id, o->sku, o->prefix, i, o->qty, r->tokens ? ",\"token\":\"" : "",
			       r->tokens ? r->tokens + i * (FS_TOKEN_TEXT_MAX + 1) : "",
			       r->tokens ? "\"" : "");
	if (r->ids)
		fprintf(r->ids, "%s\n", id);
	const char *key = o->cart_lines > 0 ? id : o->sku;
	int rc = flashsale_publish_raw(r->fs, key, strlen(key), payload, (size_t)len);
	r->sent++;
	/* --dup-count: exactly that many, spread evenly; --dup-ratio: by chance. */
	bool dup;
	if (o->dup_count >= 0)
		dup = r->dup_every > 0 && i % r->dup_every == 0 && i / r->dup_every < o->dup_count;
	else
		dup = o->dup_ratio > 0 &&
		      (double)(rng_next(&r->rng) >> 11) / 9007199254740992.0 < o->dup_ratio;
	if (rc == 0 && dup) {
		struct pending_dup *d = &ring[(r->ring_head + r->ring_len) % (DUP_DELAY + 1)];
		d->due = i + DUP_DELAY;
		snprintf(d->key, sizeof d->key, "%s", o->cart_lines > 0 ? id : "");
		memcpy(d->payload, payload, (size_t)len);
		d->len = len;
		r->ring_len++;
	}
	return rc;
}

/* --poison: bad records between the buys in bursts of about POISON_RUN, spread evenly, as a
 * flood would come (garbage that is not even JSON). */
static int publish_poison(struct load_run *r, int64_t i)
{
	const struct load_opts *o = r->o;
	int64_t bursts = (o->poison + POISON_RUN - 1) / POISON_RUN;
	int64_t bad = 0;
	if (bursts > 0 && bursts * (i + 1) / o->buyers != bursts * i / o->buyers)
		bad = o->poison * (bursts * (i + 1) / o->buyers) / bursts -
		      o->poison * (bursts * i / o->buyers) / bursts;
	int rc = 0;
	for (int64_t k = 0; rc == 0 && k < bad; k++) {
		static const char junk[] = "GET / HTTP/1.1 <script>alert(1)</script>";
		rc = flashsale_publish_raw(r->fs, o->sku, strlen(o->sku), junk, sizeof junk - 1);
		r->sent++;
		r->poisoned++;
		if (r->sent % POLL_EVERY == 0)
			flashsale_poll(r->fs);
	}
	return rc;
}

/* The repeats whose time has come at buyer i (or all of them once the originals are out). */
static int publish_due(struct load_run *r, int64_t i, bool original)
{
	int rc = 0;
	while (rc == 0 && r->ring_len > 0 &&
	       (ring[r->ring_head].due <= i || !original || r->ring_len == DUP_DELAY + 1)) {
		struct pending_dup *d = &ring[r->ring_head];
		const char *key = d->key[0] ? d->key : r->o->sku;
		rc = flashsale_publish_raw(r->fs, key, strlen(key), d->payload, (size_t)d->len);
		r->ring_head = (r->ring_head + 1) % (DUP_DELAY + 1);
		r->ring_len--;
		r->sent++;
		r->dups++;
	}
	return rc;
}

/* --token: every buyer's token, minted with the configuration's key ring before the first
 * publish (so that the publisher's pace is the same with tokens as without). 0, or -1 said. */
static int mint_tokens(flashsale_t *fs, struct load_run *r)
{
	const struct load_opts *o = r->o;
	const char *path = flashsale_config(fs)->admission_keys;
	if (!path[0]) {
		cli_err("load: --token needs the key ring: admission.keys in the configuration");
		return -1;
	}
	static struct fs_keyring keys;
	char err[256];
	if (fs_keyring_load(path, &keys, err, sizeof err) < 0) {
		cli_err("load: %s", err);
		return -1;
	}
	r->tokens = malloc((size_t)o->buyers * (FS_TOKEN_TEXT_MAX + 1));
	if (!r->tokens) {
		fs_keyring_wipe(&keys);
		cli_err("load: --token: out of memory");
		return -1;
	}
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	int64_t now_ms = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
	double t0 = mono_s();
	int rc = 0;
	for (int64_t i = 0; rc == 0 && i < o->buyers; i++) {
		char buyer[FS_BUYER_LEN_MAX + 1];
		snprintf(buyer, sizeof buyer, "%s-%" PRId64, o->prefix, i);
		rc = fs_token_mint(&keys, o->sku, buyer, now_ms - TOKEN_BEFORE_MS,
				   now_ms + TOKEN_AFTER_MS,
				   r->tokens + i * (FS_TOKEN_TEXT_MAX + 1));
	}
	fs_keyring_wipe(&keys);
	if (rc < 0) {
		cli_err("load: --token: %s has no key to sign with", path);
		return -1;
	}
	printf("minted %" PRId64 " tokens in %.3f s\n", o->buyers, mono_s() - t0);
	return 0;
}

/* --rate: sleeps while ahead of the schedule. */
static void pace(const struct load_run *r)
{
	if (r->o->rate <= 0)
		return;
	double ahead = (double)r->sent / (double)r->o->rate - (mono_s() - r->t0);
	if (ahead > 0.001)
		usleep((useconds_t)(ahead * 1e6));
}

int cli_load(flashsale_t *fs, int argc, char **argv)
{
	struct load_opts o;
	int rc = load_parse(argc, argv, &o);
	if (rc >= 0)
		return rc;
	struct load_run r = {
		.fs = fs,
		.o = &o,
		.dup_every = o.dup_count > 0 ? o.buyers / o.dup_count : 0,
		.rng = (uint64_t)o.seed * 0x9E3779B97F4A7C15ULL + 1,
	};
	if (o.ids_path && !(r.ids = fopen(o.ids_path, "w"))) {
		cli_err("load: %s: %s", o.ids_path, strerror(errno));
		return 1;
	}
	if (o.token && mint_tokens(fs, &r) < 0) {
		if (r.ids)
			fclose(r.ids);
		return 1;
	}
	uuid_t seed_id;
	uuid_generate_random(seed_id);
	memcpy(&r.id_state, seed_id, sizeof r.id_state);
	r.t0 = mono_s();
	rc = 0;
	for (int64_t i = 0; i < o.buyers || r.ring_len > 0; i++) {
		bool original = i < o.buyers;
		rc = original ? publish_buy(&r, i) : 0;
		if (rc == 0 && original)
			rc = publish_poison(&r, i);
		if (rc == 0)
			rc = publish_due(&r, i, original);
		if (rc < 0)
			break;
		if (r.sent % POLL_EVERY == 0)
			flashsale_poll(fs);
		pace(&r);
	}
	free(r.tokens);
	if (r.ids && fclose(r.ids) != 0) {
		cli_err("load: %s: %s", o.ids_path, strerror(errno));
		rc = -EIO;
	}
	if (rc == 0)
		rc = flashsale_flush(fs, 120000);
	double el = mono_s() - r.t0;
	if (rc < 0) {
		cli_err("load: %s (%" PRId64 " delivery failures)", flashsale_error(fs),
			flashsale_delivery_failures(fs));
		return 1;
	}
	printf("published %" PRId64 " records (%" PRId64 " intents, %" PRId64 " repeats, %" PRId64
	       " bad) for %s in %.2f s, %.0f records/s, seed %" PRId64 "\n",
	       r.sent, o.buyers, r.dups, r.poisoned, o.sku, el, el > 0 ? (double)r.sent / el : 0.0,
	       o.seed);
	return 0;
}
