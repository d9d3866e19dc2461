/* cache.h: what the gateway knows of intents and SKUs: per (intent id, type) what it
 * published and the decision that came back, with the intent's events (decided, then what
 * became of the hold); per SKU the latest stock record. Bounded: the oldest entries that no
 * request waits on go first (they are in Postgres). No I/O, no locks: the caller holds the
 * gateway's lock around every call. */
#ifndef GW_CACHE_H
#define GW_CACHE_H

#include "core/record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gw_kind {
	GW_K_BUY = 0,
	GW_K_CONFIRM = 1,
	GW_K_CANCEL = 2,
	/* carts (issue 31): keyed by the cart id */
	GW_K_CART = 3,
	GW_K_CART_CONFIRM = 4,
	GW_K_CART_CANCEL = 5,
	/* the waiting room (issue 33): a lookup only, never an entry */
	GW_K_QUEUE = 6,
};

enum gw_state {
	GW_S_STUB = 0,	 /* only waited on: nothing published here, nothing known yet */
	GW_S_PUBLISHING, /* its record is being published: a retry is a 409 */
	GW_S_QUEUED,	 /* its record is on the log: the decision will come */
	GW_S_DECIDED,	 /* the decision is here */
};

enum { GW_EVENTS_MAX = 8 };

struct gw_event {
	char name[24]; /* decided, expired, confirmed, cancelled, ... */
	int32_t part;
	int64_t off;
	char *data; /* the result record's JSON */
};

/* A request that waits for an entry or a SKU to change (the gateway's own struct embeds it). */
struct gw_waiter {
	struct gw_waiter *prev, *next;
	void *owner;
};

struct gw_entry {
	char id[FS_UUID_LEN + 1];
	enum gw_kind kind;
	enum gw_state state;
	/* gw_fingerprint of the request published here, or of the decision's own record (a
	 * decision learned through another door, read from Postgres); 0: not known */
	uint64_t fp;
	char sku[FS_SKU_LEN_MAX + 1];
	/* A buy's or cart's buyer (issue 48, item 2): from its POST here, or from Postgres; ""
	 * while unknown. Only that buyer reads it. */
	char owner[FS_BUYER_LEN_MAX + 1];
	char *decision; /* the result's JSON, when decided */
	int32_t part;	/* where it was decided */
	int64_t off;
	struct gw_event ev[GW_EVENTS_MAX]; /* buys and carts only */
	int n_ev;
	bool provisional; /* decided unknown_intent: a later decision of the id replaces it */
	bool looked_up;	  /* Postgres was asked (a stub stays one after a miss) */
	/* When it was last put on the log or Postgres was last asked for it (gw_now_ms): a queued
	 * or provisional entry asks Postgres again GW_RECHECK_MS after (issue 47, item 10). */
	int64_t asked_ms;
	int pins;			/* requests that hold a pointer to it: never evicted then */
	struct gw_waiter waiters;	/* list head: requests to wake on a change */
	struct gw_entry *hnext;		/* hash chain */
	struct gw_entry *qprev, *qnext; /* age order */
	uint64_t hash;
};

struct gw_stock {
	char sku[FS_SKU_LEN_MAX + 1];
	char *json; /* the latest stock record, NULL while unknown */
	char status[16];
	bool room; /* its sale is behind a waiting room (the record's "room") */
	int32_t part;
	int64_t off;
	uint64_t version; /* bumped on every change */
	struct gw_waiter waiters;
	struct gw_stock *hnext;
	uint64_t hash;
};

struct gw_cache {
	struct gw_entry **buckets;
	size_t nbuckets; /* a power of two */
	size_t len, max;
	struct gw_entry *oldest, *newest;
	struct gw_stock **sbuckets;
	size_t nsbuckets;
	size_t slen, smax;
	int64_t evicted;
	/* Puts refused (issue 48, item 5): an intent or queue entry because every entry was in
	 * use, a SKU because the SKU table was full. */
	int64_t refused, srefused;
};

int gw_cache_init(struct gw_cache *c, size_t max, size_t stock_max);
void gw_cache_free(struct gw_cache *c);

/* How often a queued or provisional entry asks Postgres for its decision (issue 47, item 10:
 * a result the consumer missed). */
enum { GW_RECHECK_MS = 2000 };
/* A queued entry, or one decided provisionally, that Postgres was not asked for lately. */
bool gw_entry_stale(const struct gw_entry *e, int64_t now_ms);

struct gw_entry *gw_cache_get(struct gw_cache *c, const char *id, enum gw_kind kind);
/* Gets or adds (as a stub) the entry; NULL when out of memory or full of pinned entries. */
struct gw_entry *gw_cache_put(struct gw_cache *c, const char *id, enum gw_kind kind);
/* Drops an entry (its publication failed): it must have no pins. */
void gw_cache_drop(struct gw_cache *c, struct gw_entry *e);

/* Records a decision (the first one wins: repeats carry the same decision; a provisional
 * one, a follow-up answered unknown_intent, gives way to a later one of its partition or to
 * one of another partition that took effect). An entry published here and undecided (fp set,
 * sku set) takes only a decision of its SKU. The entry's events are its decision's partition's
 * only. Returns true if it was taken. */
bool gw_entry_decide(struct gw_entry *e, const char *json, const char *sku, int32_t part,
		     int64_t off, bool provisional);
/* Adds an event unless one of that name and offset is there, or the entry is decided on
 * another partition: true if it was new. */
bool gw_entry_event(struct gw_entry *e, const char *name, int32_t part, int64_t off,
		    const char *json);

struct gw_stock *gw_stock_get(struct gw_cache *c, const char *sku);
/* Gets or adds (unknown yet) the SKU; NULL when full (counted in srefused). Only a stock
 * record adds a SKU (issue 48, item 5): a request naming one the stock topic never named adds
 * nothing, so junk names cannot fill the table. */
struct gw_stock *gw_stock_put(struct gw_cache *c, const char *sku);
/* Takes a stock record unless it is older than the one held (same partition, lower
 * offset: a late copy from a worker that lost the partition). True if taken. */
bool gw_stock_update(struct gw_stock *s, const char *json, const char *status, int32_t part,
		     int64_t off);

/* Waiter lists. */
void gw_waiter_init(struct gw_waiter *head);
void gw_waiter_add(struct gw_waiter *head, struct gw_waiter *w, void *owner);
void gw_waiter_remove(struct gw_waiter *w);
bool gw_waiter_linked(const struct gw_waiter *w);
/* How many are on the list (a walk: for readyz and the metrics, not per request). */
int64_t gw_waiter_count(const struct gw_waiter *head);

/* A token bucket (issue 48, item 5: Postgres lookups for ids the gateway has never seen):
 * rate tokens a second, holding at most burst. Pure: the caller gives the clock. */
struct gw_bucket {
	double rate, burst, tokens;
	int64_t last_ms;
};
void gw_bucket_init(struct gw_bucket *b, double rate, double burst, int64_t now_ms);
/* Takes a token if one is there: true, else false (nothing taken). */
bool gw_bucket_take(struct gw_bucket *b, int64_t now_ms);
/* Whole seconds until a token is there (at least 1): a refusal's Retry-After. */
int64_t gw_bucket_retry_s(const struct gw_bucket *b);

/* The lookup thread's cache of waiting rooms (issue 48, item 5): a slot's SKU and when it was
 * read (0: empty). Where a read of sku's room goes among the n slots: the slot that holds it;
 * else, when named (its SKU's stock record carries a room), the one read longest ago; else -1,
 * a scratch slot that no later read finds, so that rooms no sale has cannot push a real one
 * out. */
struct gw_room_key {
	char sku[FS_SKU_LEN_MAX + 1];
	int64_t read_ms;
};
int gw_room_slot(const struct gw_room_key *keys, int n, const char *sku, bool named);

#endif
