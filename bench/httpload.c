/* httpload.c: the HTTP buyers of scripts/bench (S8-S10) on libcurl's multi interface.
 *
 *   flashsale-httpload --url http://127.0.0.1:PORT --sku SKU --buyers N [--concurrency C]
 *                      [--mode buy-wait|buy] [--wait SECONDS] [--seed N] [--threads T]
 *                      [--token-keys FILE]
 *
 * C buyers at a time (over T threads, each with its own multi handle), each on a keep-alive
 * connection of its own: a buyer POSTs
 * /v1/skus/SKU/buys with a fresh Idempotency-Key (buy-wait: then long-polls
 * GET /v1/intents/ID?wait=SECONDS until the decision, unless the POST already answered it).
 * A buyer's latency runs from its POST being handed to libcurl to its decision. Prints
 * "HTTPLOAD WAITING n" once every one of the first C buyers waits on its long-poll (S10
 * measures the gateway then), and at the end one line:
 *   HTTPLOAD buyers= ok= failed= seconds= per_s= p50_ms= p99_ms= p999_ms= max_ms=
 *            requests= accepted= edge= held= sold_out= other=
 * Exit 0 when every buyer got a decision (or, with --mode buy, a 2xx), 1 otherwise.
 *
 * --token-keys FILE: a sale behind a waiting room (issue 33, S14): each buy carries its buyer's
 * admission token, minted with the key ring FILE (src/core/token.h's format) for SKU, valid from
 * a minute before the run until an hour after it (the gateway checks them at the edge, the
 * worker again); every token is minted before the first request. */

#include "core/token.h"

#include <curl/curl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { BODY_MAX = 4096 };

struct buyer {
	CURL *h;
	struct curl_slist *hdrs;
	int64_t index;
	int phase; /* 0 POST, 1 GET */
	char id[37];
	char url[512];
	char post[FS_TOKEN_TEXT_MAX + 96];
	char body[BODY_MAX];
	size_t body_len;
	int64_t t0_us;
	int tries;
};

static struct {
	const char *url, *sku, *mode;
	int64_t buyers;
	int concurrency;
	double wait_s;
	uint64_t seed;
	bool buy_only;
} opt = {.mode = "buy-wait", .concurrency = 64, .wait_s = 60, .seed = 1};

/* One thread's buyers (each thread has its own multi handle and its share of the buyers). */
struct part {
	int64_t first, end; /* buyer indexes [first, end) */
	int concurrency;
	uint64_t seed;
	int64_t next, done, ok, failed, requests, accepted, edge, held, sold_out, other, waiting;
	int64_t *lat_us;
	bool announced;
	pthread_t thread;
};

/* --token-keys: buyer i's token at tokens + i * (FS_TOKEN_TEXT_MAX + 1); NULL without. */
static char *tokens;
static atomic_long all_waiting;
static atomic_int parts_waiting;
static int n_threads = 1;

static int64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static uint64_t rng(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

/* A version-4 id from the seeded generator (distinct per buyer, the same for a seed). */
static void new_id(uint64_t *seed, char out[37])
{
	uint64_t a = rng(seed), b = rng(seed);
	a = (a & ~0xf000ULL) | 0x4000ULL;
	b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
	snprintf(out, 37, "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
		 a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48, b & (uint64_t)0xffffffffffff);
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct buyer *b = ctx;
	size_t len = size * n, room = sizeof b->body - 1 - b->body_len;
	memcpy(b->body + b->body_len, p, len < room ? len : room);
	b->body_len += len < room ? len : room;
	b->body[b->body_len] = '\0';
	return len;
}

static void setup_post(struct part *st, struct buyer *b)
{
	new_id(&st->seed, b->id);
	snprintf(b->url, sizeof b->url, "%s/v1/skus/%s/buys", opt.url, opt.sku);
	snprintf(b->post, sizeof b->post, "{\"buyer_id\":\"hb-%" PRId64 "\",\"qty\":1%s%s%s}",
		 b->index, tokens ? ",\"token\":\"" : "",
		 tokens ? tokens + b->index * (FS_TOKEN_TEXT_MAX + 1) : "", tokens ? "\"" : "");
	char key[80];
	snprintf(key, sizeof key, "Idempotency-Key: %s", b->id);
	curl_slist_free_all(b->hdrs);
	b->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	b->hdrs = curl_slist_append(b->hdrs, key);
	b->hdrs = curl_slist_append(b->hdrs, "Expect:");
	curl_easy_setopt(b->h, CURLOPT_URL, b->url);
	curl_easy_setopt(b->h, CURLOPT_POSTFIELDS, b->post);
	curl_easy_setopt(b->h, CURLOPT_HTTPHEADER, b->hdrs);
	b->phase = 0;
	b->body_len = 0;
	b->t0_us = now_us();
}

static void setup_get(struct buyer *b)
{
	snprintf(b->url, sizeof b->url, "%s/v1/intents/%s?wait=%g", opt.url, b->id, opt.wait_s);
	curl_easy_setopt(b->h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(b->h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(b->h, CURLOPT_URL, b->url);
	b->phase = 1;
	b->body_len = 0;
}

/* The buyer's decision, counted. */
static void decided(struct part *st, struct buyer *b, bool edge)
{
	st->lat_us[st->ok++] = now_us() - b->t0_us;
	if (edge)
		st->edge++;
	if (strstr(b->body, "\"outcome\":\"held\""))
		st->held++;
	else if (strstr(b->body, "\"outcome\":\"sold_out\""))
		st->sold_out++;
	else
		st->other++;
}

/* Starts the next buyer on this handle; false when none is left. */
static bool next_buyer(struct part *st, CURLM *m, struct buyer *b)
{
	if (st->next >= st->end)
		return false;
	b->index = st->next++;
	b->tries = 0;
	setup_post(st, b);
	curl_multi_add_handle(m, b->h);
	return true;
}

/* One request finished: the buyer's next step. True if the handle goes on. */
static bool finished(struct part *st, CURLM *m, struct buyer *b, CURLcode rc)
{
	long code = 0;
	curl_easy_getinfo(b->h, CURLINFO_RESPONSE_CODE, &code);
	curl_multi_remove_handle(m, b->h);
	st->requests++;
	bool retry = rc != CURLE_OK || code == 503;
	if (retry && ++b->tries < 50) {
		b->body_len = 0; /* the same request again (the same key: safe) */
		curl_multi_add_handle(m, b->h);
		return true;
	}
	if (b->phase == 0 && code == 202) {
		st->accepted++;
		if (opt.buy_only) {
			st->lat_us[st->ok++] = now_us() - b->t0_us;
			st->done++;
			return next_buyer(st, m, b);
		}
		setup_get(b);
		st->waiting++;
		atomic_fetch_add(&all_waiting, 1);
		curl_multi_add_handle(m, b->h);
		return true;
	}
	if (b->phase == 1 && code == 202) { /* the wait ran out: again */
		b->body_len = 0;
		curl_multi_add_handle(m, b->h);
		return true;
	}
	if (code == 200)
		decided(st, b, b->phase == 0 && strstr(b->body, "\"source\":\"edge\"") != NULL);
	else
		st->failed++;
	if (b->phase == 1) {
		st->waiting--;
		atomic_fetch_sub(&all_waiting, 1);
	}
	st->done++;
	return next_buyer(st, m, b);
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double pct_ms(const int64_t *lat, int64_t n, double p)
{
	if (n == 0)
		return 0;
	int64_t i = (int64_t)(p * (double)(n - 1) + 0.5);
	return (double)lat[i] / 1000.0;
}

static void *part_main(void *arg)
{
	struct part *st = arg;
	struct buyer *bs = calloc((size_t)st->concurrency, sizeof *bs);
	CURLM *m = curl_multi_init();
	if (!bs || !m) {
		st->failed = st->end - st->first;
		return NULL;
	}
	curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)st->concurrency);
	curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)st->concurrency);
	st->next = st->first;
	for (int i = 0; i < st->concurrency; i++) {
		struct buyer *b = &bs[i];
		b->h = curl_easy_init();
		curl_easy_setopt(b->h, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(b->h, CURLOPT_WRITEDATA, b);
		curl_easy_setopt(b->h, CURLOPT_PRIVATE, b);
		curl_easy_setopt(b->h, CURLOPT_TCP_NODELAY, 1L);
		curl_easy_setopt(b->h, CURLOPT_TIMEOUT_MS, (long)(opt.wait_s * 1000) + 30000L);
		curl_easy_setopt(b->h, CURLOPT_CONNECTTIMEOUT_MS, 30000L);
		next_buyer(st, m, b);
	}
	int running = 1;
	int64_t total = st->end - st->first;
	while (st->done < total) {
		curl_multi_perform(m, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left)) != NULL) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			struct buyer *b;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&b);
			finished(st, m, b, msg->data.result);
		}
		if (!st->announced && !opt.buy_only && st->waiting >= st->concurrency &&
		    st->next == st->first + st->concurrency) {
			st->announced = true;
			if (atomic_fetch_add(&parts_waiting, 1) + 1 == n_threads) {
				printf("HTTPLOAD WAITING %ld\n", atomic_load(&all_waiting));
				fflush(stdout);
			}
		}
		if (st->done < total)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	for (int i = 0; i < st->concurrency; i++) {
		curl_easy_cleanup(bs[i].h);
		curl_slist_free_all(bs[i].hdrs);
	}
	curl_multi_cleanup(m);
	free(bs);
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: flashsale-httpload --url URL --sku SKU --buyers N [--concurrency C]\n"
		     "                          [--mode buy-wait|buy] [--wait SECONDS] [--seed N]\n"
		     "                          [--threads T] [--token-keys FILE]\n");
}

/* --token-keys: every buyer's token minted before the first request. 0, or -1 said. */
static int mint_tokens(const char *path)
{
	static char text[65536];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (!f || ferror(f)) {
		fprintf(stderr, "httpload: %s: cannot read\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	text[n] = '\0';
	static struct fs_keyring ring;
	char err[256];
	if (fs_keyring_parse(text, &ring, err, sizeof err) < 0) {
		fprintf(stderr, "httpload: %s: %s\n", path, err);
		return -1;
	}
	tokens = malloc((size_t)opt.buyers * (FS_TOKEN_TEXT_MAX + 1));
	if (!tokens)
		return -1;
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	int64_t now_ms = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
	for (int64_t i = 0; i < opt.buyers; i++) {
		char buyer[32];
		snprintf(buyer, sizeof buyer, "hb-%" PRId64, i);
		if (fs_token_mint(&ring, opt.sku, buyer, now_ms - 60000, now_ms + 3600000,
				  tokens + i * (FS_TOKEN_TEXT_MAX + 1)) < 0) {
			fprintf(stderr, "httpload: %s: no key to sign with\n", path);
			return -1;
		}
	}
	fs_keyring_wipe(&ring);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"url", required_argument, NULL, 'u'},
		{"sku", required_argument, NULL, 's'},
		{"buyers", required_argument, NULL, 'n'},
		{"concurrency", required_argument, NULL, 'c'},
		{"mode", required_argument, NULL, 'm'},
		{"wait", required_argument, NULL, 'w'},
		{"seed", required_argument, NULL, 'S'},
		{"threads", required_argument, NULL, 't'},
		{"token-keys", required_argument, NULL, 'k'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	const char *keys = NULL;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			opt.url = optarg;
			break;
		case 's':
			opt.sku = optarg;
			break;
		case 'n':
			opt.buyers = strtoll(optarg, NULL, 10);
			break;
		case 'c':
			opt.concurrency = atoi(optarg);
			break;
		case 'm':
			opt.mode = optarg;
			break;
		case 'w':
			opt.wait_s = atof(optarg);
			break;
		case 'S':
			opt.seed = strtoull(optarg, NULL, 10) | 1;
			break;
		case 't':
			n_threads = atoi(optarg);
			break;
		case 'k':
			keys = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	opt.buy_only = strcmp(opt.mode, "buy") == 0;
	if (!opt.url || !opt.sku || opt.buyers < 1 || opt.concurrency < 1 || n_threads < 1 ||
	    n_threads > 64 || (!opt.buy_only && strcmp(opt.mode, "buy-wait") != 0)) {
		usage(stderr);
		return 2;
	}
	if (keys && (strlen(opt.sku) > 64 || mint_tokens(keys) < 0))
		return 2;
	if (opt.concurrency > opt.buyers)
		opt.concurrency = (int)opt.buyers;
	if (n_threads > opt.concurrency)
		n_threads = opt.concurrency;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)opt.concurrency + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	int64_t *lat = calloc((size_t)opt.buyers, sizeof *lat);
	struct part *parts = calloc((size_t)n_threads, sizeof *parts);
	if (!lat || !parts || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "flashsale-httpload: out of memory\n");
		return 1;
	}
	int64_t t_start = now_us();
	for (int i = 0; i < n_threads; i++) {
		struct part *p = &parts[i];
		p->first = opt.buyers * i / n_threads;
		p->end = opt.buyers * (i + 1) / n_threads;
		p->concurrency =
			opt.concurrency * (i + 1) / n_threads - opt.concurrency * i / n_threads;
		if (p->concurrency > p->end - p->first)
			p->concurrency = (int)(p->end - p->first);
		p->seed = (opt.seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL) | 1;
		p->lat_us = lat + p->first;
		if (pthread_create(&p->thread, NULL, part_main, p) != 0) {
			fprintf(stderr, "flashsale-httpload: cannot start a thread\n");
			return 1;
		}
	}
	struct part st = {0};
	for (int i = 0; i < n_threads; i++) {
		struct part *p = &parts[i];
		pthread_join(p->thread, NULL);
		/* Each thread's latencies were written at the start of its slice: pack them. */
		memmove(lat + st.ok, p->lat_us, (size_t)p->ok * sizeof *lat);
		st.ok += p->ok;
		st.failed += p->failed;
		st.requests += p->requests;
		st.accepted += p->accepted;
		st.edge += p->edge;
		st.held += p->held;
		st.sold_out += p->sold_out;
		st.other += p->other;
	}
	double secs = (double)(now_us() - t_start) / 1e6;
	qsort(lat, (size_t)st.ok, sizeof *lat, cmp64);
	printf("HTTPLOAD buyers=%" PRId64 " ok=%" PRId64 " failed=%" PRId64
	       " seconds=%.3f per_s=%.0f p50_ms=%.1f p99_ms=%.1f p999_ms=%.1f max_ms=%.1f "
	       "requests=%" PRId64 " accepted=%" PRId64 " edge=%" PRId64 " held=%" PRId64
	       " sold_out=%" PRId64 " other=%" PRId64 " threads=%d concurrency=%d\n",
	       opt.buyers, st.ok, st.failed, secs, (double)opt.buyers / secs,
	       pct_ms(lat, st.ok, 0.50), pct_ms(lat, st.ok, 0.99), pct_ms(lat, st.ok, 0.999),
	       pct_ms(lat, st.ok, 1.0), st.requests, st.accepted, st.edge, st.held, st.sold_out,
	       st.other, n_threads, opt.concurrency);
	curl_global_cleanup();
	return st.failed == 0 && st.ok == opt.buyers ? 0 : 1;
}
