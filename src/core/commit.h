/* commit.h: a decided batch's transaction as data (DESIGN.md section 4): the offset
 * compare-and-set and every row the batch writes, table by table, with what the store needs to
 * know to send each (a row the core takes for new goes by COPY, a row that may exist by
 * upsert; a SKU update carries its guard). Pure: io/store.c renders it into statements and
 * sends it, the simulator applies it to its tables, the unit tests read it.
 *
 * Rows are views: their strings point into the batch and the core they were built from, and
 * are valid until either changes. */
#ifndef FS_COMMIT_H
#define FS_COMMIT_H

#include "core/batch.h"
#include "core/cart.h"
#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

/* The partitions row's update, guarded by the expected offset (and, for a batch decided on top
 * of one still in flight, that one's commit token: the store's). */
struct fs_tx_cas {
	int32_t partition;
	int64_t expected;  /* the stored next offset this batch was decided on (-1: none yet) */
	int64_t next;	   /* the stored next offset once committed: after the batch's last */
	int64_t replied;   /* results delivered below this (-1: none known) */
	int64_t clock_ms;  /* the partition clock after the batch */
	int64_t first_off; /* first_offset if the partition has none yet */
	/* Offsets below next that hold no record a consumer is given: a transaction's marker, an
	 * aborted transaction's records (issue 28, item 9); after expected, or from first_off. */
	int64_t gaps;
	struct fs_batch_counts counts;
};

/* decisions: one row per new intent decision (asserted new: a row that exists fails it). */
struct fs_tx_decision {
	const char *intent_id;
	int kind;
	int64_t body_hash;
	int64_t offset;
	const char *sku;
	const char *buyer_id; /* buys only; NULL otherwise */
	int64_t qty;
	const char *outcome;
	const char *reason; /* NULL: none */
	bool has_expiry;
	int64_t expires_at_ms;
	int64_t decided_at_ms;
};

/* rejects: a run of alike invalid records (adjacent, same reason, no intent id) is one row
 * covering offset..offset_end; a record with an intent id is a row of its own. */
struct fs_tx_reject {
	int64_t offset, offset_end;
	const char *intent_id; /* NULL: none */
	const char *reason;
};

/* store_refusals: a hold whose expiry the store refused, and the record it was due at; or a
 * waiting cart group whose units it refused to take, and the record that woke it. */
struct fs_tx_refusal {
	int64_t offset;
	const char *intent_id; /* the hold's, or the cart's */
	int32_t round;	       /* 0: a hold's expiry; else the cart's group of that round */
};

/* sale_log: open, restock and close records. */
struct fs_tx_sale {
	int64_t offset;
	int kind;
	const char *sku;
	int64_t amount; /* stock or units added; 0 for a close */
	const char *outcome;
	const char *reason; /* NULL: none */
};

/* forwards: a misrouted record and the partition the rule names. */
struct fs_tx_forward {
	int64_t offset;
	int32_t to_partition;
	const char *intent_id; /* NULL: none */
	int kind;	       /* buy, confirm or cancel when it names an intent; 0 otherwise */
};

/* reservations: every hold the batch changed. copy: new by the core's account (no row can
 * exist), else an upsert of its status, late flag and end. */
struct fs_tx_hold {
	bool copy;
	const char *intent_id, *sku, *buyer_id;
	int64_t qty, expires_at_ms, offset;
	const char *status;
	bool late;
	bool ended; /* ended_at_ms and ended_offset are NULL while held */
	int64_t ended_at_ms, ended_offset;
};

/* skus: a new SKU is inserted; a stored one is updated only where its four counters still
 * hold the committed base values (asserted for every row). */
struct fs_tx_sku {
	bool insert;
	const char *sku;
	const char *status;
	int64_t supply, available, held, sold;
	int64_t per_buyer_limit, max_qty, hold_ms, opens_at_ms, closes_at_ms; /* insert only */
	int64_t base_supply, base_available, base_held, base_sold;	      /* update only */
	const struct fs_admission *admission; /* insert only: the waiting room's (rate 0: none) */
};

/* room_joins (issue 33): a waiting room's entry, new (a join: copy, unless careful) or changed
 * (admitted: upsert). */
struct fs_tx_join {
	bool copy;
	const char *sku;
	const struct fs_room_entry *e;
	/* An admitted entry's token as the worker's admission result gives it (the core's key
	 * ring's signing key; "" when not admitted or no ring): kept in the row, so that a
	 * gateway or client that missed the result hands out the worker's token, never one of
	 * its own (issue 47 item 1). */
	char token[FS_TOKEN_TEXT_MAX + 1];
};

/* buyers: units per (SKU, buyer). copy: new by the core's account, else an upsert; either is
 * joined to the partition's SKUs by the store. */
struct fs_tx_buyer {
	bool copy;
	const char *sku, *buyer_id;
	int64_t units;
};

/* cart_out (issue 31): the outbox. A protocol message for another partition (msg) or a
 * cart's result (ev), under the record whose step made it and its place among that batch's:
 * sent once the batch committed, and again after a crash while the replied offset is below
 * it. */
struct fs_tx_cart_out {
	int64_t offset;
	int32_t seq;
	const struct fs_cart_msg *msg; /* NULL: a result */
	const struct fs_cart_event *ev;
};

#define FS_TX_ARRAY(T)                                                                             \
	struct {                                                                                   \
		T *v;                                                                              \
		uint32_t len, cap;                                                                 \
	}

struct fs_tx {
	struct fs_tx_cas cas;
	FS_TX_ARRAY(struct fs_tx_decision) decisions;
	FS_TX_ARRAY(struct fs_tx_reject) rejects;
	FS_TX_ARRAY(struct fs_tx_sale) sales;
	FS_TX_ARRAY(struct fs_tx_forward) forwards;
	FS_TX_ARRAY(struct fs_tx_hold) holds;
	FS_TX_ARRAY(struct fs_tx_sku) skus;
	FS_TX_ARRAY(struct fs_tx_buyer) buyers;
	/* carts and cart_groups: every cart and group the batch changed, the new ones (COPY rows,
	 * n_cart_copies and n_group_copies of them) first, then those to upsert */
	FS_TX_ARRAY(const struct fs_cart *) carts;
	FS_TX_ARRAY(const struct fs_group *) groups;
	FS_TX_ARRAY(struct fs_tx_cart_out) outs; /* all new: COPY rows */
	FS_TX_ARRAY(struct fs_tx_join) joins;
	FS_TX_ARRAY(struct fs_tx_refusal) refusals;
	int64_t n_sku_inserts, n_sku_updates, n_hold_copies, n_buyer_copies;
	uint32_t n_cart_copies, n_group_copies, n_join_copies;
};

void fs_tx_init(struct fs_tx *t);
void fs_tx_free(struct fs_tx *t);
/* Builds the transaction of batch b (decided, not empty) on the core's state: meta is the
 * partition's state it was decided on, next_offset the batch's end, replied_offset what was
 * delivered (-1: unknown). careful (a batch redone after a failed attempt): no row is taken
 * for new, every hold and buyer goes by upsert. Reuses t's arrays. 0 or -ENOMEM. */
int fs_tx_build(struct fs_tx *t, int32_t partition, int64_t expected, int64_t next_offset,
		int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
		bool careful);

/* The cart rows of t to upsert (the carts and groups after the copies) as JSON arrays of
 * objects whose members are the columns of carts and cart_groups (sql/001_schema.sql), for
 * json_populate_recordset; "[]" when none. */
void fs_tx_carts_json(const struct fs_tx *t, int32_t partition, struct fs_buf *carts,
		      struct fs_buf *groups);

/* The new cart rows of t as the data of three COPYs (binary format) with the columns in the
 * order of FS_TX_CARTS_COPY, FS_TX_GROUPS_COPY and FS_TX_OUTS_COPY; each buffer has a row only
 * when its count (n_cart_copies, n_group_copies, outs.len) is above 0. */
#define FS_TX_CARTS_COPY                                                                           \
	"COPY carts (cart_id, part, buyer_id, body_hash, lines, state, round, at, cancel_asked, "  \
	"hold_ms, expires_at_ms, off, outcome, reason, line, answer, answer_reason) FROM STDIN "   \
	"(FORMAT binary)"
#define FS_TX_GROUPS_COPY                                                                          \
	"COPY cart_groups (cart_id, round, part, coord, buyer_id, lines, state, off) FROM STDIN "  \
	"(FORMAT binary)"
#define FS_TX_OUTS_COPY                                                                            \
	"COPY cart_out (part, off, seq, to_topic, to_part, msg_key, payload) FROM STDIN "          \
	"(FORMAT binary)"
void fs_tx_carts_copy(const struct fs_tx *t, int32_t partition, struct fs_buf *carts,
		      struct fs_buf *groups, struct fs_buf *outs);

#endif
