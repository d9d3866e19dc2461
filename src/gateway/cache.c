/* cache.c: the gateway's intents and SKUs (see cache.h). */
#include "gateway/cache.h"

#include "core/map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t pow2_at_least(size_t n)
{
	size_t p = 64;
	while (p < n)
		p <<= 1;
	return p;
}

int gw_cache_init(struct gw_cache *c, size_t max, size_t stock_max)
{
	memset(c, 0, sizeof *c);
	c->max = max;
	c->smax = stock_max;
	c->nbuckets = pow2_at_least(max);
	c->nsbuckets = pow2_at_least(stock_max);
	c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
	c->sbuckets = calloc(c->nsbuckets, sizeof *c->sbuckets);
	if (!c->buckets || !c->sbuckets) {
		gw_cache_free(c);
		return -1;
	}
	return 0;
}

static void entry_free(struct gw_entry *e)
{
	free(e->decision);
	for (int i = 0; i < e->n_ev; i++)
		free(e->ev[i].data);
	free(e);
}

void gw_cache_free(struct gw_cache *c)
{
	for (struct gw_entry *e = c->oldest, *n; e; e = n) {
		n = e->qnext;
		entry_free(e);
	}
	for (size_t i = 0; c->sbuckets && i < c->nsbuckets; i++)
		for (struct gw_stock *s = c->sbuckets[i], *n; s; s = n) {
			n = s->hnext;
			free(s->json);
			free(s);
		}
	free(c->buckets);
	free(c->sbuckets);
	memset(c, 0, sizeof *c);
}

static uint64_t id_hash(const char *id, enum gw_kind kind)
{
	return fs_hash_bytes(id, strlen(id), 0x6700 + (uint64_t)kind);
}

struct gw_entry *gw_cache_get(struct gw_cache *c, const char *id, enum gw_kind kind)
{
	uint64_t h = id_hash(id, kind);
	for (struct gw_entry *e = c->buckets[h & (c->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && e->kind == kind && strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

static void append_age(struct gw_cache *c, struct gw_entry *e)
{
	e->qnext = NULL;
	e->qprev = c->newest;
	if (c->newest)
		c->newest->qnext = e;
	else
		c->oldest = e;
	c->newest = e;
}

static void unlink_age(struct gw_cache *c, struct gw_entry *e)
{
	if (e->qprev)
		e->qprev->qnext = e->qnext;
	else
		c->oldest = e->qnext;
	if (e->qnext)
		e->qnext->qprev = e->qprev;
	else
		c->newest = e->qprev;
}

static void unlink_entry(struct gw_cache *c, struct gw_entry *e)
{
	struct gw_entry **pp = &c->buckets[e->hash & (c->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	unlink_age(c, e);
	c->len--;
}

void gw_cache_drop(struct gw_cache *c, struct gw_entry *e)
{
	unlink_entry(c, e);
	entry_free(e);
}

/* In use: a request holds it or waits on it, or its record is being published. */
static bool in_use(const struct gw_entry *e)
{
	return e->pins > 0 || e->waiters.next != &e->waiters || e->state == GW_S_PUBLISHING;
}

/* Makes room for one more: drops the oldest entry not in use. Ones in use met on the way
 * move to the young end. False if every entry is in use. */
static bool make_room(struct gw_cache *c)
{
	for (size_t tries = c->len; c->len >= c->max && tries > 0; tries--) {
		struct gw_entry *e = c->oldest;
		if (in_use(e)) {
			unlink_age(c, e);
			append_age(c, e);
			continue;
		}
		gw_cache_drop(c, e);
		c->evicted++;
	}
	return c->len < c->max;
}

struct gw_entry *gw_cache_put(struct gw_cache *c, const char *id, enum gw_kind kind)
{
	struct gw_entry *e = gw_cache_get(c, id, kind);
	if (e)
		return e;
	if (!make_room(c)) {
		c->refused++;
		return NULL;
	}
	e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	snprintf(e->id, sizeof e->id, "%s", id);
	e->kind = kind;
	e->part = -1;
	e->off = -1;
	e->hash = id_hash(id, kind);
	gw_waiter_init(&e->waiters);
	size_t b = e->hash & (c->nbuckets - 1);
	e->hnext = c->buckets[b];
	c->buckets[b] = e;
	append_age(c, e);
	c->len++;
	return e;
}

/* Whether a decided entry's decision gives way to this one: only a provisional one (a
 * follow-up answered unknown_intent) does, to a later one of its partition, or to one that took
 * effect on another (the follow-up sent again with the buy's right SKU: issue 47, item 2). */
static bool gives_way(const struct gw_entry *e, int32_t part, int64_t off, bool provisional)
{
	/* A buyer's admission gives way to a later one of its partition: a re-mint of its token
	 * after a gap (issue 47 item 4, src/core/room.h), told at the tick that minted it. */
	if (e->kind == GW_K_QUEUE && part == e->part)
		return off > e->off;
	if (!e->provisional)
		return false;
	if (part == e->part)
		return off > e->off;
	return !provisional;
}

/* Drops the events of other partitions than the decision's (issue 47, item 7): the same id on
 * a buy of a SKU of another partition is another buyer's, and its events are not this one's. */
static void keep_events_of(struct gw_entry *e, int32_t part)
{
	int n = 0;
	for (int i = 0; i < e->n_ev; i++) {
		if (e->ev[i].part == part)
			e->ev[n++] = e->ev[i];
		else
			free(e->ev[i].data);
	}
	e->n_ev = n;
}

bool gw_entry_decide(struct gw_entry *e, const char *json, const char *sku, int32_t part,
		     int64_t off, bool provisional)
{
	if (e->state == GW_S_DECIDED) {
		if (!gives_way(e, part, off, provisional))
			return false;
	} else if (e->fp && e->sku[0] && sku && *sku && strcmp(sku, e->sku) != 0) {
		/* An entry published here waits for a decision of the SKU it published (issue 47,
		 * item 7): another SKU's is another record's. */
		return false;
	}
	char *copy = strdup(json);
	if (!copy)
		return false;
	free(e->decision);
	e->decision = copy;
	e->provisional = provisional;
	e->state = GW_S_DECIDED;
	e->part = part;
	e->off = off;
	keep_events_of(e, part);
	if (sku && *sku)
		snprintf(e->sku, sizeof e->sku, "%s", sku);
	return true;
}

bool gw_entry_event(struct gw_entry *e, const char *name, int32_t part, int64_t off,
		    const char *json)
{
	/* Only the decision's partition: one intent id on two partitions is two buys. */
	if (e->state == GW_S_DECIDED && part != e->part)
		return false;
	for (int i = 0; i < e->n_ev; i++)
		if (e->ev[i].off == off && e->ev[i].part == part &&
		    strcmp(e->ev[i].name, name) == 0)
			return false;
	if (e->n_ev == GW_EVENTS_MAX)
		return false;
	char *copy = strdup(json);
	if (!copy)
		return false;
	struct gw_event *v = &e->ev[e->n_ev];
	snprintf(v->name, sizeof v->name, "%s", name);
	v->part = part;
	v->off = off;
	v->data = copy;
	/* In log order (a Postgres answer and a live one can come either way round). */
	int i = e->n_ev++;
	while (i > 0 && e->ev[i - 1].off > off) {
		struct gw_event t = e->ev[i - 1];
		e->ev[i - 1] = e->ev[i];
		e->ev[i] = t;
		i--;
	}
	return true;
}

static uint64_t sku_hash(const char *sku)
{
	return fs_hash_bytes(sku, strlen(sku), 0x5354);
}

struct gw_stock *gw_stock_get(struct gw_cache *c, const char *sku)
{
	uint64_t h = sku_hash(sku);
	for (struct gw_stock *s = c->sbuckets[h & (c->nsbuckets - 1)]; s; s = s->hnext)
		if (s->hash == h && strcmp(s->sku, sku) == 0)
			return s;
	return NULL;
}

struct gw_stock *gw_stock_put(struct gw_cache *c, const char *sku)
{
	struct gw_stock *s = gw_stock_get(c, sku);
	if (s)
		return s;
	if (c->slen >= c->smax) {
		c->srefused++;
		return NULL;
	}
	s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	snprintf(s->sku, sizeof s->sku, "%s", sku);
	s->part = -1;
	s->off = -1;
	s->hash = sku_hash(sku);
	gw_waiter_init(&s->waiters);
	size_t b = s->hash & (c->nsbuckets - 1);
	s->hnext = c->sbuckets[b];
	c->sbuckets[b] = s;
	c->slen++;
	return s;
}

bool gw_stock_update(struct gw_stock *s, const char *json, const char *status, int32_t part,
		     int64_t off)
{
	if (s->json && part == s->part && off < s->off)
		return false;
	char *copy = strdup(json);
	if (!copy)
		return false;
	free(s->json);
	s->json = copy;
	snprintf(s->status, sizeof s->status, "%s", status);
	s->part = part;
	s->off = off;
	s->version++;
	return true;
}

void gw_waiter_init(struct gw_waiter *head)
{
	head->prev = head->next = head;
	head->owner = NULL;
}

void gw_waiter_add(struct gw_waiter *head, struct gw_waiter *w, void *owner)
{
	w->owner = owner;
	w->next = head;
	w->prev = head->prev;
	head->prev->next = w;
	head->prev = w;
}

void gw_waiter_remove(struct gw_waiter *w)
{
	if (!gw_waiter_linked(w))
		return;
	w->prev->next = w->next;
	w->next->prev = w->prev;
	w->prev = w->next = NULL;
}

int64_t gw_waiter_count(const struct gw_waiter *head)
{
	int64_t n = 0;
	for (const struct gw_waiter *x = head->next; x != head; x = x->next)
		n++;
	return n;
}

bool gw_waiter_linked(const struct gw_waiter *w)
{
	return w && w->next != NULL;
}

bool gw_entry_stale(const struct gw_entry *e, int64_t now_ms)
{
	bool open = e->state == GW_S_QUEUED || (e->state == GW_S_DECIDED && e->provisional);
	return open && now_ms - e->asked_ms >= GW_RECHECK_MS;
}

void gw_bucket_init(struct gw_bucket *b, double rate, double burst, int64_t now_ms)
{
	b->rate = rate;
	b->burst = burst < 1 ? 1 : burst;
	b->tokens = b->burst;
	b->last_ms = now_ms;
}

bool gw_bucket_take(struct gw_bucket *b, int64_t now_ms)
{
	/* A clock that went back refills nothing (and does not move last_ms back). */
	if (now_ms > b->last_ms) {
		b->tokens += b->rate * (double)(now_ms - b->last_ms) / 1000.0;
		if (b->tokens > b->burst)
			b->tokens = b->burst;
		b->last_ms = now_ms;
	}
	if (b->tokens < 1.0)
		return false;
	b->tokens -= 1.0;
	return true;
}

int64_t gw_bucket_retry_s(const struct gw_bucket *b)
{
	double need = 1.0 - b->tokens;
	if (need <= 0 || b->rate <= 0)
		return 1;
	int64_t s = (int64_t)(need / b->rate + 0.999);
	return s < 1 ? 1 : s;
}

int gw_room_slot(const struct gw_room_key *keys, int n, const char *sku, bool named)
{
	int oldest = 0;
	for (int i = 0; i < n; i++) {
		if (keys[i].read_ms && strcmp(keys[i].sku, sku) == 0)
			return i;
		if (keys[i].read_ms < keys[oldest].read_ms)
			oldest = i;
	}
	return named && n > 0 ? oldest : -1;
}
