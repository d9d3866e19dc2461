/* clients.c: per-address bounds of the gateway (see clients.h). */
#include "gateway/clients.h"

#include "core/map.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { CLIENTS_SEED = 0x636c69 };

void gw_client_key(const struct sockaddr *sa, uint8_t key[GW_CLIENT_KEY])
{
	memset(key, 0, GW_CLIENT_KEY);
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &v4->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
		const uint8_t *a = v6->sin6_addr.s6_addr;
		static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		/* An IPv4 client of a dual-stack listener is its IPv4 address, whole. */
		memcpy(key, a, memcmp(a, mapped, 12) == 0 ? 16 : 8);
	}
}

int gw_clients_init(struct gw_clients *c, size_t max, double rate, double burst, int64_t waits_max)
{
	memset(c, 0, sizeof *c);
	c->n_buckets = 1024;
	while (c->n_buckets < max)
		c->n_buckets *= 2;
	c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
	if (!c->buckets)
		return -ENOMEM;
	c->max = max;
	c->rate = rate;
	c->burst = burst < 1 ? 1 : burst;
	c->waits_max = waits_max;
	c->overflow.tokens = c->burst;
	return 0;
}

void gw_clients_free(struct gw_clients *c)
{
	for (size_t i = 0; c->buckets && i < c->n_buckets; i++)
		for (struct gw_client *e = c->buckets[i], *nx; e; e = nx) {
			nx = e->next;
			free(e);
		}
	free(c->buckets);
	c->buckets = NULL;
}

static size_t bucket_of(const struct gw_clients *c, const uint8_t key[GW_CLIENT_KEY])
{
	/* Keyed SipHash (core/map.h): crafted addresses cannot share a chain on purpose. */
	return (size_t)fs_hash_bytes(key, GW_CLIENT_KEY, CLIENTS_SEED) & (c->n_buckets - 1);
}

struct gw_client *gw_client_get(struct gw_clients *c, const uint8_t key[GW_CLIENT_KEY],
				int64_t now_ms)
{
	size_t b = bucket_of(c, key);
	for (struct gw_client *e = c->buckets[b]; e; e = e->next)
		if (memcmp(e->key, key, GW_CLIENT_KEY) == 0)
			return e;
	struct gw_client *e = c->len < c->max ? calloc(1, sizeof *e) : NULL;
	if (!e)
		return &c->overflow;
	memcpy(e->key, key, GW_CLIENT_KEY);
	e->tokens = c->burst;
	e->at_ms = now_ms;
	e->next = c->buckets[b];
	c->buckets[b] = e;
	c->len++;
	return e;
}

/* The bucket of e refilled up to now_ms. */
static void refill(const struct gw_clients *c, struct gw_client *e, int64_t now_ms)
{
	if (now_ms > e->at_ms) {
		e->tokens += (double)(now_ms - e->at_ms) * c->rate / 1000.0;
		if (e->tokens > c->burst)
			e->tokens = c->burst;
	}
	e->at_ms = now_ms;
}

int64_t gw_client_take(struct gw_clients *c, struct gw_client *e, int64_t now_ms)
{
	if (c->rate <= 0)
		return 0;
	refill(c, e, now_ms);
	if (e->tokens >= 1.0) {
		e->tokens -= 1.0;
		return 0;
	}
	double wait = (1.0 - e->tokens) / c->rate;
	int64_t s = (int64_t)wait;
	if ((double)s < wait)
		s++; /* rounded up: no libm for ceil */
	return s < 1 ? 1 : s;
}

bool gw_client_wait_begin(struct gw_clients *c, struct gw_client *e)
{
	if (c->waits_max > 0 && e->waits >= c->waits_max)
		return false;
	e->waits++;
	return true;
}

void gw_client_wait_end(struct gw_client *e)
{
	if (e->waits > 0)
		e->waits--;
}

void gw_clients_sweep(struct gw_clients *c, int64_t now_ms)
{
	for (size_t i = 0; i < c->n_buckets; i++) {
		struct gw_client **pp = &c->buckets[i];
		while (*pp) {
			struct gw_client *e = *pp;
			if (c->rate > 0)
				refill(c, e, now_ms);
			if (e->waits == 0 && (c->rate <= 0 || e->tokens >= c->burst)) {
				*pp = e->next;
				free(e);
				c->len--;
			} else {
				pp = &e->next;
			}
		}
	}
}
