/* fetch.h: GET several URLs at once, on libcurl's multi interface, for `flashsale top`'s
 * scrapes. Every transfer is bounded: FETCH_CONNECT_MS to connect, timeout_ms in all, a body
 * of at most FETCH_BODY_MAX bytes, http and https only, no redirects followed. An answer other
 * than 200 is an error. Connections are kept between rounds (one pool per fetcher).
 *
 * While a round waits, idle(ctx) is called at least every FETCH_STEP_MS: a non-zero return
 * abandons the round (a key pressed, a signal). Errors are one line in the result's error.
 * One owner; curl_global_init() is the caller's (before any thread starts). */
#ifndef FS_CLI_FETCH_H
#define FS_CLI_FETCH_H

#include <stdbool.h>
#include <stddef.h>

enum {
	FETCH_BODY_MAX = 4 << 20, /* the worker's text is about 10 KiB per 100 partitions */
	FETCH_CONNECT_MS = 1000,
	FETCH_STEP_MS = 50,
	FETCH_ERR_MAX = 256,
};

struct fetch_result {
	bool ok;
	char error[FETCH_ERR_MAX];
	const char *body; /* NUL-terminated; valid until the next round */
	size_t len;
};

struct fetcher;

/* A fetcher of the n URLs (copied); NULL when out of memory. */
struct fetcher *fetcher_new(const char *const *urls, int n, int timeout_ms);
void fetcher_free(struct fetcher *f);
/* One GET of every URL, at once: 0 when all ended (each result says how), 1 when idle
 * abandoned the round. */
int fetcher_round(struct fetcher *f, int (*idle)(void *ctx), void *ctx);
const struct fetch_result *fetcher_result(const struct fetcher *f, int i);

#endif
