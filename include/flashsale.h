/* flashsale.h: the public C API, the one a web tier links.
 *
 * Publish buy intents and sale records to the intents topic (keyed by SKU, idempotent
 * producer), read a result from Postgres, wait for one (Postgres, then the results topic),
 * follow the results topic, read a SKU's stock. Errors: negative errno values, with a one-line
 * message in flashsale_error(). One handle per thread. */
#ifndef FLASHSALE_H
#define FLASHSALE_H

/* The configuration (struct fs_config, src/io/config.h): loaded from a file and the
 * environment by fs_config_load_file and fs_config_apply_env. */
struct fs_config;

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct flashsale flashsale_t;

struct flashsale_result {
	char type[16]; /* buy | confirm | cancel | expire | invalid | open ... */
	char intent_id[37];
	char sku[65];
	char outcome[32]; /* see docs/reference/records.md */
	char reason[64];  /* empty unless a rejection says why */
	int64_t qty;
	int64_t expires_at_ms; /* holds only, on the partition's log clock */
	int32_t partition;
	int64_t offset;
	bool duplicate;
	char hold[16]; /* from Postgres, for a buy that won: held | confirmed | cancelled | expired
			*/
};

struct flashsale_stock {
	char sku[65];
	char status[16]; /* open | sold_out | closed | not_open (before its window) */
	int64_t supply, available, held, sold;
	int64_t per_buyer_limit, max_qty, hold_ms; /* from Postgres only */
	/* Where the state was decided: the SKU's partition, the offset of the last record it
	 * reflects, the partition clock then. */
	int32_t partition;
	int64_t offset, clock_ms;
};

struct flashsale_sale {
	int64_t stock;
	int64_t per_buyer_limit;	   /* 0: default 1 */
	int64_t max_qty;		   /* 0: the per-buyer limit */
	int64_t hold_seconds;		   /* 0: default 600 */
	int64_t opens_at_ms, closes_at_ms; /* 0: no bound; on the partition's log clock */
	/* The waiting room (issue 33): admission_rate buyers a second from opens_at, each with a
	 * token of token_seconds; 0: the sale needs no admission. draw: "random" (NULL: the
	 * default; draw_seed then required) or "fifo". */
	int64_t admission_rate, token_seconds;
	const char *draw, *draw_seed;
};

/* Needs only Kafka for publishing and only Postgres for reading: each side connects lazily. */
flashsale_t *flashsale_new(const struct fs_config *cfg, char *err, size_t err_len);
/* Waits (bounded by flush_timeout_ms) for published records to be delivered. */
void flashsale_destroy(flashsale_t *fs);
const char *flashsale_error(const flashsale_t *fs);

/* Publishes a buy. intent_id NULL: a fresh UUID is generated (version 7, time-ordered: the
 * cheapest kind for the decisions' index; any version is accepted). The id (given or new) is
 * copied to out_id. Returns 0 once queued; flashsale_flush() tells whether it was delivered. */
int flashsale_buy(flashsale_t *fs, const char *sku, const char *buyer_id, int64_t qty,
		  const char *intent_id, char out_id[37]);
/* flashsale_buy with an admission token (issue 33; NULL or "": none), for a sale that needs
 * admission. The token is not part of the intent: once a buy is decided on its merits, a retry
 * with a refreshed token is its repeat; a buy refused for its token (no_token, bad_token,
 * token_expired, ...) did not use up its id, so a retry with a valid one is decided on its
 * merits (issue 47 item 1). */
int flashsale_buy_token(flashsale_t *fs, const char *sku, const char *buyer_id, int64_t qty,
			const char *intent_id, const char *token, char out_id[37]);
/* Joins the SKU's waiting room (issue 33): one entry per buyer, keyed by the SKU. The answer
 * (waiting, or admitted with a token) and the admission come to the results topic under
 * "SKU/BUYER"; flashsale_queue_get reads where the buyer stands from Postgres. */
int flashsale_join(flashsale_t *fs, const char *sku, const char *buyer_id);
/* Where a buyer stands in a SKU's waiting room, from Postgres as the worker last committed it:
 * the room is rebuilt from its rows (the draw is a function of them and the sale's seed).
 * status "waiting" (position 0 before the draw) or "admitted" (with the worker's token, as its
 * admission result gave it: kept in the room's row; never one minted here, issue 47 item 1).
 * -ENOENT: not joined (or no such SKU or room). */
struct flashsale_queue {
	char status[16];
	bool drawn;
	int64_t position, ahead, estimated_wait_ms; /* waiting */
	int64_t not_before, expires_at;		    /* admitted: the token's life */
	char token[192];			    /* admitted: the worker's; else "" */
	int32_t partition;
	int64_t clock_ms;
};
int flashsale_queue_get(flashsale_t *fs, const char *sku, const char *buyer_id,
			struct flashsale_queue *out);

/* Payment succeeded / the buyer gave up: publishes a confirm / cancel for the buy with this
 * intent id, keyed by the buy's SKU (so that it reaches the buy's partition). */
int flashsale_confirm(flashsale_t *fs, const char *intent_id, const char *sku);
int flashsale_cancel(flashsale_t *fs, const char *intent_id, const char *sku);
/* The SKU of a decided buy, from Postgres (for tools that only have the intent id); -ENOENT
 * if none is decided, -EEXIST if buys of SKUs on several partitions used the id (each
 * partition dedupes its own log: docs/reference/records.md). */
int flashsale_buy_sku(flashsale_t *fs, const char *intent_id, char sku[65]);
int flashsale_sale_open(flashsale_t *fs, const char *sku, const struct flashsale_sale *sale);
int flashsale_sale_restock(flashsale_t *fs, const char *sku, int64_t add);
int flashsale_sale_close(flashsale_t *fs, const char *sku);
/* Publishes any payload with the given key (tests and tools; the worker judges it). */
int flashsale_publish_raw(flashsale_t *fs, const void *key, size_t key_len, const void *payload,
			  size_t len);
/* Waits until every published record is delivered. Returns 0 or -EIO (some failed). */
int flashsale_flush(flashsale_t *fs, int timeout_ms);
/* Serves delivery reports without waiting (a load loop calls it). */
void flashsale_poll(flashsale_t *fs);
int64_t flashsale_delivery_failures(const flashsale_t *fs);

/* The decision for a buy, from Postgres. 0 found, -ENOENT not decided (yet). */
int flashsale_result_get(flashsale_t *fs, const char *intent_id, struct flashsale_result *out);
/* As above, and if not decided yet, follows the results topic until it arrives or timeout. */
int flashsale_result_wait(flashsale_t *fs, const char *intent_id, int timeout_ms,
			  struct flashsale_result *out);

/* The same for the decision of a record of another type ("buy", "confirm", "cancel"). A
 * confirm or cancel answered unknown_intent, or a buy refused for its token (issue 47 item 1),
 * does not use up its id, so when that is what is stored and this handle has published a
 * record, decision_wait (and result_wait) waits until the worker has decided past that
 * record, and gives the answer then (a later one may have taken effect). */
int flashsale_decision_get(flashsale_t *fs, const char *intent_id, const char *type,
			   struct flashsale_result *out);
int flashsale_decision_wait(flashsale_t *fs, const char *intent_id, const char *type,
			    int timeout_ms, struct flashsale_result *out);

/* The outcome of the sale record (open, restock, close) this handle published last, once the
 * worker decided it: 0 with outcome ("applied", "rejected") and reason (e.g. "already_open",
 * "unknown_sku"; empty when applied) filled, -ETIMEDOUT, or -ENOENT when nothing was
 * published. A record the worker forwarded (it was on another partition than the rule's) is
 * answered "forwarded", its partition in reason. */
int flashsale_sale_wait(flashsale_t *fs, int timeout_ms, char outcome[32], char reason[64]);

/* Follows the results topic from its end; cb returns non-zero to stop. Returns 0 when cb
 * stopped it, -ETIMEDOUT when timeout_ms (<0: none) passed. */
typedef int (*flashsale_result_cb)(const struct flashsale_result *r, void *ctx);
int flashsale_subscribe_results(flashsale_t *fs, flashsale_result_cb cb, void *ctx, int timeout_ms);

/* A SKU's counters, from Postgres. 0 found, -ENOENT unknown SKU. */
int flashsale_stock_get(flashsale_t *fs, const char *sku, struct flashsale_stock *out);

/* Follows the compacted stock topic from its beginning: cb sees the SKU's latest state, then
 * every change (the web tier's cheap sold-out flag); a record older than one already seen (a
 * lower offset of the same partition: a late copy from a worker that lost the partition) is
 * skipped. cb returns non-zero to stop. Returns 0 when cb stopped it, -ETIMEDOUT when
 * timeout_ms (<0: none) passed. */
typedef int (*flashsale_stock_cb)(const struct flashsale_stock *s, void *ctx);
int flashsale_stock_follow(flashsale_t *fs, const char *sku, flashsale_stock_cb cb, void *ctx,
			   int timeout_ms);

/* ---- carts (issue 31): several SKUs, all or nothing (docs/reference/records.md) ---------- */

struct flashsale_cart_line {
	const char *sku;
	int64_t qty;
};

/* Publishes a cart of n lines (1 to 8, each SKU once), keyed by its cart id (its partition
 * decides it). cart_id NULL: a fresh one. The id is copied to out_id. Returns 0 once queued. */
int flashsale_cart_buy(flashsale_t *fs, const char *buyer_id,
		       const struct flashsale_cart_line *lines, size_t n, const char *cart_id,
		       char out_id[37]);

/* Payment succeeded / the buyer gave up: for the whole cart. */
int flashsale_cart_confirm(flashsale_t *fs, const char *cart_id);
int flashsale_cart_cancel(flashsale_t *fs, const char *cart_id);

struct flashsale_cart {
	char cart_id[37];
	char state[24];	  /* reserving | held | confirmed | refused | cancelled | expired |
			     late_round | confirmed_late | refund_required */
	char outcome[32]; /* the cart record's answer: held, sold_out, ... (empty: none yet) */
	char reason[64];
	int32_t line;	       /* a refusal's line (0-based), or -1 */
	int64_t expires_at_ms; /* held: on the coordinator's log clock */
	int32_t partition;     /* the coordinator */
	int64_t offset;	       /* the cart record's */
};

/* A cart's state from Postgres: 0, or -ENOENT (not decided by its coordinator yet). */
int flashsale_cart_get(flashsale_t *fs, const char *cart_id, struct flashsale_cart *out);
/* As above, waiting (up to timeout_ms) until the cart record has its answer. */
int flashsale_cart_wait(flashsale_t *fs, const char *cart_id, int timeout_ms,
			struct flashsale_cart *out);

/* Handles for the tools built on this API (CLI, audit). */
void *flashsale_pg(flashsale_t *fs);	   /* PGconn *, connected, or NULL */
void *flashsale_producer(flashsale_t *fs); /* rd_kafka_t *, or NULL */
const struct fs_config *flashsale_config(const flashsale_t *fs);

#endif
