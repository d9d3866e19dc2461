/* load.c: `flashsale load`, the load generator the demo and the tests use.
 *
 * Publishes one buy per distinct buyer with a fresh intent id, as fast as the producer takes
 * them or at a given rate; a share of them is re-sent verbatim a little later, as a client's
 * retry would be. Bounded: at most FS_LOAD_BUYERS_MAX intents per run. */
#include "cli/cli.h"

#include "core/record.h"

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
	/* A repeat goes out this many records after its original (a retry, not a double send). */
	DUP_DELAY = 64,
	PAYLOAD_MAX = 256,
	POLL_EVERY = 1000,
	POISON_RUN = 100,
};

struct pending_dup {
	int64_t due;
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
	"                          [--id-version 7|4]\n"
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
	"not delivered.\n";

int cli_load(flashsale_t *fs, int argc, char **argv)
{
	int64_t buyers = -1, qty = 1, rate = 0, seed = -1, dup_count = -1, poison = 0,
		id_version = 7;
	double dup_ratio = 0;
	const char *prefix = NULL, *ids_path = NULL;
	const struct cli_opt spec[] = {
		{"buyers", CLI_INT, &buyers, 1, FS_LOAD_BUYERS_MAX},
		{"qty", CLI_INT, &qty, 1, FS_QTY_MAX},
		{"rate", CLI_INT, &rate, 1, 10000000},
		{"dup-ratio", CLI_RATIO, &dup_ratio},
		{"seed", CLI_INT, &seed, 0, INT64_MAX},
		{"buyer-prefix", CLI_STR, &prefix},
		{"ids", CLI_STR, &ids_path},
		{"dup-count", CLI_INT, &dup_count, 0, FS_LOAD_BUYERS_MAX},
		{"poison", CLI_INT, &poison, 0, FS_LOAD_BUYERS_MAX},
		{"id-version", CLI_INT, &id_version, 4, 7},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_load, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (buyers < 0)
		return cli_usage(usage_load);
	if (id_version != 4 && id_version != 7) {
		cli_err("load: --id-version must be 7 or 4");
		return 2;
	}
	if (dup_count > buyers) {
		cli_err("load: --dup-count must not exceed --buyers");
		return 2;
	}
	const char *sku = argv[optind];
	if (!fs_sku_valid(sku)) {
		cli_err("load: invalid sku '%s'", sku);
		return 2;
	}
	if (seed < 0)
		seed = (int64_t)(((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid()) & INT64_MAX;
	char prefix_buf[32];
	if (!prefix) {
		snprintf(prefix_buf, sizeof prefix_buf, "b%" PRId64, seed % 1000000);
		prefix = prefix_buf;
	}
	if (strlen(prefix) > 40) {
		cli_err("load: --buyer-prefix: at most 40 characters");
		return 2;
	}
	FILE *ids = NULL;
	if (ids_path && !(ids = fopen(ids_path, "w"))) {
		cli_err("load: %s: %s", ids_path, strerror(errno));
		return 1;
	}
	int64_t dup_every = dup_count > 0 ? buyers / dup_count : 0;
	uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
	static struct pending_dup ring[DUP_DELAY + 1];
	int ring_head = 0, ring_len = 0;
	uuid_t seed_id;
	uuid_generate_random(seed_id);
	uint64_t id_state;
	memcpy(&id_state, seed_id, sizeof id_state);
	int64_t sent = 0, dups = 0, poisoned = 0;
	double t0 = mono_s();
	rc = 0;
	for (int64_t i = 0; i < buyers || ring_len > 0; i++) {
		char payload[PAYLOAD_MAX];
		int len = 0;
		bool original = i < buyers;
		if (original) {
			char id[FS_UUID_LEN + 1];
			intent_id_next(&id_state, (int)id_version, id);
			len = snprintf(
				payload, sizeof payload,
				"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
				"\"buyer_id\":\"%s-%" PRId64 "\",\"qty\":%" PRId64 "}",
				id, sku, prefix, i, qty);
			if (ids)
				fprintf(ids, "%s\n", id);
			rc = flashsale_publish_raw(fs, sku, strlen(sku), payload, (size_t)len);
			sent++;
			/* --dup-count: exactly that many, spread evenly; --dup-ratio: by chance. */
			bool dup;
			if (dup_count >= 0)
				dup = dup_every > 0 && i % dup_every == 0 &&
				      i / dup_every < dup_count;
			else
				dup = dup_ratio > 0 &&
				      (double)(rng_next(&rng) >> 11) / 9007199254740992.0 <
					      dup_ratio;
			if (rc == 0 && dup) {
				struct pending_dup *d =
					&ring[(ring_head + ring_len) % (DUP_DELAY + 1)];
				d->due = i + DUP_DELAY;
				memcpy(d->payload, payload, (size_t)len);
				d->len = len;
				ring_len++;
			}
		}
		/* --poison: bad records between the buys in bursts of about POISON_RUN, spread
		 * evenly, as a flood would come (garbage that is not even JSON). */
		int64_t bursts = (poison + POISON_RUN - 1) / POISON_RUN;
		int64_t bad = 0;
		if (original && bursts > 0 && bursts * (i + 1) / buyers != bursts * i / buyers)
			bad = poison * (bursts * (i + 1) / buyers) / bursts -
			      poison * (bursts * i / buyers) / bursts;
		for (int64_t k = 0; rc == 0 && k < bad; k++) {
			static const char junk[] = "GET / HTTP/1.1 <script>alert(1)</script>";
			rc = flashsale_publish_raw(fs, sku, strlen(sku), junk, sizeof junk - 1);
			sent++;
			poisoned++;
			if (sent % POLL_EVERY == 0)
				flashsale_poll(fs);
		}
		/* Repeats whose time has come (or all of them once the originals are out). */
		while (rc == 0 && ring_len > 0 &&
		       (ring[ring_head].due <= i || !original || ring_len == DUP_DELAY + 1)) {
			struct pending_dup *d = &ring[ring_head];
			rc = flashsale_publish_raw(fs, sku, strlen(sku), d->payload,
						   (size_t)d->len);
			ring_head = (ring_head + 1) % (DUP_DELAY + 1);
			ring_len--;
			sent++;
			dups++;
		}
		if (rc < 0)
			break;
		if (sent % POLL_EVERY == 0)
			flashsale_poll(fs);
		if (rate > 0) {
			double ahead = (double)sent / (double)rate - (mono_s() - t0);
			if (ahead > 0.001)
				usleep((useconds_t)(ahead * 1e6));
		}
	}
	if (ids && fclose(ids) != 0) {
		cli_err("load: %s: %s", ids_path, strerror(errno));
		rc = -EIO;
	}
	if (rc == 0)
		rc = flashsale_flush(fs, 120000);
	double el = mono_s() - t0;
	if (rc < 0) {
		cli_err("load: %s (%" PRId64 " delivery failures)", flashsale_error(fs),
			flashsale_delivery_failures(fs));
		return 1;
	}
	printf("published %" PRId64 " records (%" PRId64 " intents, %" PRId64 " repeats, %" PRId64
	       " bad) for %s in %.2f s, %.0f records/s, seed %" PRId64 "\n",
	       sent, buyers, dups, poisoned, sku, el, el > 0 ? (double)sent / el : 0.0, seed);
	return 0;
}
