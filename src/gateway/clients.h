/* clients.h: what the gateway bounds per client address (issue 48, item 5): the long-polls and
 * event streams one address holds open, and its request rate (a token bucket). Pure: no I/O,
 * no clock (the caller passes the time), no lock (the gateway's lock guards it); the unit suite
 * tests it (tests/unit/test_gateway.c). */
#ifndef GW_CLIENTS_H
#define GW_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* A client's key: its IPv4 address (as ::ffff:a.b.c.d), or the first 64 bits of its IPv6 one
 * (a subscriber's usual share: one machine can take any address of its /64). */
enum { GW_CLIENT_KEY = 16 };
void gw_client_key(const struct sockaddr *sa, uint8_t key[GW_CLIENT_KEY]);

struct gw_client {
	struct gw_client *next; /* in its bucket */
	uint8_t key[GW_CLIENT_KEY];
	int64_t waits; /* long-polls and streams open */
	double tokens; /* the bucket, as of at_ms */
	int64_t at_ms;
};

struct gw_clients {
	struct gw_client **buckets;
	size_t n_buckets; /* a power of two */
	size_t len, max;  /* entries; past max, new addresses share `overflow` */
	struct gw_client overflow;
	double rate, burst; /* requests a second (0: no limit), and the bucket's size */
	int64_t waits_max;  /* 0: no cap */
};

/* 0, or -ENOMEM. max: the addresses tracked one by one. */
int gw_clients_init(struct gw_clients *c, size_t max, double rate, double burst, int64_t waits_max);
void gw_clients_free(struct gw_clients *c);
/* The client of key, added if new (with a full bucket); the shared overflow entry when the
 * table is full or memory is short. Never NULL. */
struct gw_client *gw_client_get(struct gw_clients *c, const uint8_t key[GW_CLIENT_KEY],
				int64_t now_ms);
/* One request of e at now_ms: 0 when it may go on (a token taken), else the seconds until a
 * token is there (Retry-After, at least 1). Always 0 without a rate. */
int64_t gw_client_take(struct gw_clients *c, struct gw_client *e, int64_t now_ms);
/* A long-poll or stream of e begins: true when under the cap (counted), false when at it. */
bool gw_client_wait_begin(struct gw_clients *c, struct gw_client *e);
void gw_client_wait_end(struct gw_client *e);
/* Forgets the clients that hold nothing: no wait open and a full bucket again. */
void gw_clients_sweep(struct gw_clients *c, int64_t now_ms);

#endif
