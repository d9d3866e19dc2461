/* core.h: the decision core. Pure: records and the partition's state in, decisions and
 * state changes out. No I/O, no clock (time is the partition's log clock), no randomness, no
 * hash-order iteration. It allocates only when a new SKU or a new buyer first appears (amortised
 * doubling), never per intent.
 *
 * One struct fs_core holds the state of one partition: the SKUs whose records live on it and the
 * per-buyer unit totals. It is a cache of Postgres: the worker loads it on assignment
 * (fs_core_load_*), lets the core decide a batch, writes the dirty entries in the batch's
 * transaction, then calls fs_core_commit(); if the transaction fails it throws the state away
 * and loads it again. Thread: one thread per struct fs_core. */
#ifndef FS_CORE_H
#define FS_CORE_H

#include "core/map.h"
#include "core/record.h"
#include "core/room.h"

#include <stdbool.h>
#include <stdint.h>

/* Outcomes: a stable set. The numbers are never reused; the names travel in results and rows. */
enum fs_outcome {
	FS_OUT_HELD = 1,	   /* units reserved for the buyer until expires_at */
	FS_OUT_SOLD_OUT = 2,	   /* not enough units left */
	FS_OUT_LIMIT_EXCEEDED = 3, /* the buyer would pass the per-buyer limit */
	FS_OUT_NOT_OPEN = 4,	   /* the sale window has not opened yet */
	FS_OUT_CLOSED = 5,	   /* the sale is closed or its window has ended */
	FS_OUT_REJECTED = 6,	   /* invalid record or invalid request; reason says why */
	FS_OUT_CONFLICT = 7,	   /* intent id already used with a different body; no effect */
	FS_OUT_CONFIRMED = 8,
	FS_OUT_CONFIRMED_LATE = 9,
	FS_OUT_REFUND_REQUIRED = 10,
	FS_OUT_CANCELLED = 11,
	FS_OUT_EXPIRED = 12,
	FS_OUT_UNKNOWN_INTENT = 13,
	FS_OUT_APPLIED = 14, /* a sale record (open, restock, close) took effect */
	/* the waiting room (issue 33): a join's answer, and an admission's */
	FS_OUT_WAITING = 15,
	FS_OUT_ADMITTED = 16,
};

const char *fs_outcome_name(enum fs_outcome o);
/* Returns 0 and the outcome for a name, -EINVAL for an unknown name. */
int fs_outcome_parse(const char *name, enum fs_outcome *out);

enum fs_sku_status {
	FS_SKU_OPEN = 1,
	FS_SKU_CLOSED = 2,
};

struct fs_sku {
	char sku[FS_SKU_LEN_MAX + 1];
	int32_t partition;
	int status;	/* enum fs_sku_status */
	int64_t supply; /* initial stock + restocks */
	int64_t available;
	int64_t held;
	int64_t sold;
	int64_t per_buyer_limit;
	int64_t max_qty;
	int64_t hold_ms;
	int64_t opens_at_ms;
	int64_t closes_at_ms;
	/* The waiting room (issue 33): admission.rate_per_s 0 when the sale needs none; room is
	 * the core's (allocated with the SKU, freed with the state). */
	struct fs_admission admission;
	struct fs_room *room;

	/* Store bookkeeping: the values Postgres holds now, for the guarded update. */
	bool stored; /* a row exists (else the batch inserts it) */
	bool dirty;
	int64_t base_available, base_held, base_sold, base_supply;
};

struct fs_buyer {
	uint32_t sku_index;
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	int64_t units; /* held + confirmed */
	int64_t base_units;
	bool dirty;
	bool stored; /* its row may exist in Postgres (loaded, or committed since): upsert it */
};

enum fs_hold_status {
	FS_HOLD_HELD = 1,
	FS_HOLD_CONFIRMED = 2,
	FS_HOLD_CANCELLED = 3,
	FS_HOLD_EXPIRED = 4,
};

const char *fs_hold_status_name(int status);
/* Returns 0 and the status for a name, -EINVAL for an unknown name. */
int fs_hold_status_parse(const char *name, int *out);

/* A reservation: the units a buy won, and what became of them. */
struct fs_hold {
	char intent_id[FS_UUID_LEN + 1];
	uint32_t sku_index;
	uint32_t buyer_index;
	int64_t qty;
	int64_t expires_at_ms;
	int64_t offset;	      /* the buy's offset; breaks ties between equal expiry times */
	int status;	      /* enum fs_hold_status */
	bool late;	      /* confirmed after it had expired */
	int64_t ended_at_ms;  /* partition clock when it left `held` (0 while held) */
	int64_t ended_offset; /* the record whose arrival ended it (-1 while held) */
	/* The store refused its expiry (issue 47, item 5): out of the heap for good, held until
	 * a confirm or cancel ends it. */
	bool expiry_refused;
	uint32_t heap_pos; /* position in the expiry heap, FS_MAP_NONE when not in it */
	bool dirty;
	bool stored; /* its row exists in Postgres (loaded, or committed since) */
};

struct fs_decision {
	enum fs_outcome outcome;
	const char *reason; /* static string or NULL */
	int64_t qty;
	int64_t expires_at_ms; /* holds only */
	int64_t decided_at_ms; /* the partition clock when decided */
	bool duplicate;	       /* answer to a repeated intent id */
	bool reserve;	       /* the decision creates a reservation row */
	/* a join's (issue 33): its place once drawn (0 before), ahead of it; admitted: its slot
	 * (the token's not-before; expires_at_ms the token's end) */
	int64_t position, ahead, admitted_ms;
};

struct fs_carts;
struct fs_keyring;

struct fs_core {
	int32_t partition;
	int64_t clock_ms;
	/* The partition's carts (src/core/cart.h), or NULL when carts are off. The caller owns
	 * it; fs_core_reset and fs_core_commit reset and commit it with the core. */
	struct fs_carts *carts;
	/* The key ring that verifies buys' admission tokens (issue 33), or NULL: then a sale that
	 * needs admission is refused at its open record (no_key_ring). The caller's. */
	const struct fs_keyring *keys;

	struct fs_sku *skus;
	uint32_t skus_len, skus_cap;
	struct fs_map sku_index; /* sku -> index into skus */

	struct fs_buyer *buyers;
	uint32_t buyers_len, buyers_cap;
	struct fs_map buyer_index; /* "skuindex/buyer" -> index into buyers */

	struct fs_hold *holds;
	uint32_t holds_len, holds_cap;
	struct fs_map hold_index; /* intent id -> index into holds */
	uint32_t *heap;		  /* live holds, a min-heap on (expires_at_ms, offset) */
	uint32_t heap_len;
	uint32_t *dirty_holds;
	uint32_t dirty_holds_len;
	/* Holds that expired since the last commit, in the order they expired (for replies). */
	uint32_t *expired;
	uint32_t expired_len;
	/* When and at which record each of them expired (a late confirm in the same batch may
	 * overwrite the hold's ended_* fields before the expiry is published). */
	int64_t *expired_at_ms;
	int64_t *expired_offset;
	/* Holds whose expiry the store refused since the last commit, and the record whose
	 * clock they were due at (fs_core_refuse_due). */
	uint32_t *refused;
	uint32_t refused_len;
	int64_t *refused_offset;

	uint32_t *dirty_skus; /* indexes, in the order they first changed */
	uint32_t dirty_skus_len;
	uint32_t *dirty_buyers;
	uint32_t dirty_buyers_len;
	/* the SKUs with a waiting room, in the order they opened */
	uint32_t *room_skus;
	uint32_t room_skus_len, room_skus_cap;
};

int fs_core_init(struct fs_core *c, int32_t partition);
void fs_core_free(struct fs_core *c);
/* Drops all state (after a failed transaction or a revoke). */
void fs_core_reset(struct fs_core *c);

/* Loading from the store: the values become the committed base. A SKU whose admission has a
 * rate gets an empty room: load its joins with fs_room_load, then fs_core_load_rooms_done. */
int fs_core_load_sku(struct fs_core *c, const struct fs_sku *sku);
int fs_core_load_rooms_done(struct fs_core *c);
int fs_core_load_buyer(struct fs_core *c, const char *sku, const char *buyer_id, int64_t units);

const struct fs_sku *fs_core_sku(const struct fs_core *c, const char *sku);

/* Loads a reservation (after its SKU and buyer). */
int fs_core_load_hold(struct fs_core *c, const struct fs_hold *h, const char *sku,
		      const char *buyer_id);
const struct fs_hold *fs_core_hold(const struct fs_core *c, const char *intent_id);
/* The earliest expiry among live holds, or -1 if none is held. */
int64_t fs_core_next_expiry(const struct fs_core *c);
/* When an open sale's waiting room next needs the clock (its draw, a waiting buyer's slot), or
 * -1: the worker's ticks move an idle partition's clock there. */
int64_t fs_core_next_room_due(const struct fs_core *c);

/* Moves the partition clock to max(clock, ts_ms) and expires, in (expires_at, offset) order,
 * every hold whose expiry the clock has reached; `offset` names the record that moved it.
 * Every record goes through here before it is decided (repeats included). */
void fs_core_advance(struct fs_core *c, int64_t ts_ms, int64_t offset);
/* The store refused expiries record `offset` (at ts_ms) would bring (issue 47, item 5): the
 * holds its clock would expire whose intent id is one of ids[0..n) (every one of them when
 * ids is NULL) are taken out of the expiry heap for good instead, marked expiry_refused and
 * listed in `refused` for the batch's transaction. Called before the record is decided, when
 * the item says so (fs_item.refuse_due). */
void fs_core_refuse_due(struct fs_core *c, int64_t ts_ms, int64_t offset, const char *const *ids,
			uint32_t n);
/* The holds the clock of a record at ts_ms would expire, in expiry order, at most max of them
 * into out (their intent ids, borrowed); returns how many there are in all. */
uint32_t fs_core_due(const struct fs_core *c, int64_t ts_ms, const char **out, uint32_t max);

/* Decides one new record (not a repeat) and applies its effect to the state. The record may be
 * invalid (then the decision is `rejected` with its reason). Returns 0, or -ENOMEM if a new
 * SKU or buyer could not be stored (the state is unchanged then). */
int fs_core_decide(struct fs_core *c, const struct fs_record *r, struct fs_decision *d);

/* A join's answer given again (a restart answering what was not delivered, issue 33): as
 * decided, from the room's state, with where the buyer stands now. Changes nothing. */
int fs_core_join_answer(const struct fs_core *c, const struct fs_record *r, struct fs_decision *d);

/* The batch committed: the current values become the base, dirty and expired lists are
 * cleared. */
void fs_core_commit(struct fs_core *c);

/* ---- for the cart module (src/core/cart.c): a cart's lines take and give back units as a
 * buy's hold does, with the same refusals, but their holds are the cart module's. */

/* The SKU's index, or FS_MAP_NONE when it is not on this partition. */
uint32_t fs_core_sku_index(const struct fs_core *c, const char *sku);
/* The verdict on a buy's token for SKU s at clock_ms (an enum fs_token_verdict: 0 valid), as
 * the core decides it; the record's cached verdict when made at that clock. */
int fs_core_token_verdict(const struct fs_core *c, const struct fs_sku *s,
			  const struct fs_record *r, int64_t clock_ms);
/* The buyer's units of the SKU (held + confirmed, cart lines included). */
int64_t fs_core_buyer_units(const struct fs_core *c, uint32_t si, const char *buyer_id);
/* Why a buy of qty units by a buyer who has `units` of the SKU would be refused now (closed,
 * not_open, rejected qty_over_cap, limit_exceeded, sold_out, in that order): true with the
 * outcome and reason in *d; false if it can be held. */
bool fs_core_refuses(const struct fs_core *c, const struct fs_sku *s, int64_t qty, int64_t units,
		     struct fs_decision *d);
/* Moves qty units from available to held for the buyer (qty <= available). Returns 0 or
 * -ENOMEM (a new buyer entry; the state is unchanged then). */
int fs_core_take(struct fs_core *c, uint32_t si, const char *buyer_id, int64_t qty);
/* Ends qty held units of the buyer: to sold, or back to available. */
void fs_core_give_back(struct fs_core *c, uint32_t si, const char *buyer_id, int64_t qty,
		       bool sold);

/* The SKUs one partition may hold (issue 28, item 12): an `open` of one more is rejected
 * `too_many_skus`. A protocol constant, as it decides outcomes: every worker and replay
 * decide alike. */
#define FS_SKUS_PER_PARTITION_MAX 10000

/* Forgets the holds that ended and whose end is committed (issue 28, item 12): they live in
 * Postgres, and a confirm or cancel that names one is looked up first (the batch's
 * fs_batch_needs_lookup, then the store loads its row with fs_core_load_hold), so the
 * decisions are those of a core that kept every hold. Only between batches, after
 * fs_core_commit (a no-op while a dirty or expired list is not empty). Returns how many. */
uint32_t fs_core_forget_ended(struct fs_core *c);
/* The holds it could forget now. */
static inline uint32_t fs_core_ended(const struct fs_core *c)
{
	return c->holds_len - c->heap_len;
}

#endif
