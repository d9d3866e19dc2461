/* batch.h: one partition's batch of records, and the pure step that decides it.
 *
 * The worker fills a batch with parsed records (in offset order), asks the store for the
 * decisions already recorded for the batch's intent ids (fs_batch_add_stored), then calls
 * fs_batch_decide(), which answers repeats from what is stored (or from an earlier record of
 * the same batch), finds conflicts, and hands every new record to the core in offset order.
 * No I/O. Buffers are allocated once and reused; fs_batch_clear() keeps them. Thread: one. */
#ifndef FS_BATCH_H
#define FS_BATCH_H

#include "core/buf.h"
#include "core/cart.h"
#include "core/core.h"
#include "core/map.h"
#include "core/record.h"

#include <stdint.h>
#include <string.h>

/* The dedupe key's kind of a confirm or cancel that found no hold (unknown_intent): its kind
 * plus this (12, 13 in the decisions table). Kept apart from the follow-up's own key, so that
 * such an answer does not consume the intent id: the right confirm after one with the wrong
 * SKU, or a cancel after its buy when an earlier one came before it, takes effect; a retry of
 * the unmatched one, while still unmatched, is its repeat (issue 28, item 3). */
#define FS_KEY_UNMATCHED 10

/* A decision already recorded in the store for an (intent id, key kind). */
struct fs_stored {
	char intent_id[FS_UUID_LEN + 1];
	int kind; /* an enum fs_kind, or a follow-up's plus FS_KEY_UNMATCHED */
	int64_t body_hash;
	int32_t partition;
	int64_t offset;
	struct fs_decision dec; /* dec.reason is copied into reason_buf by fs_batch_add_stored */
	char reason_buf[48];
};

enum fs_item_class {
	FS_ITEM_NEW = 1,      /* first decision for its intent id: write a decisions row */
	FS_ITEM_REPEAT = 2,   /* same id, same body: answered with the first decision */
	FS_ITEM_CONFLICT = 3, /* same id, another body: answered `conflict`, no effect */
	FS_ITEM_INVALID = 4,  /* unparseable or invalid record: write a rejects row */
	FS_ITEM_SALE = 5,     /* open / restock / close: write a sale_log row */
	FS_ITEM_TICK = 6,
	/* On the wrong partition (rec.misrouted): not decided here; a forwards row, and its key
	 * and payload (kept by fs_batch_keep) re-published to rec.route once committed. */
	FS_ITEM_FORWARD = 7,
	/* A cart, a cart's confirm or cancel, or a protocol message: decided by the cart module
	 * (core->carts), whose state dedupes it; its answers are the module's events. */
	FS_ITEM_CART = 8,
	/* A join (issue 33): decided by the SKU's waiting room, whose entry dedupes it (one per
	 * buyer) and is its row (room_joins). */
	FS_ITEM_JOIN = 9,
};

struct fs_item {
	struct fs_record rec;
	struct fs_decision dec;
	enum fs_item_class cls;
	/* Where the answered decision was first made (itself unless a repeat). */
	int32_t first_partition;
	int64_t first_offset;
	/* The hash of its dedupe key (intent id, record kind): made once, by whichever of the
	 * memory lookup, the decision and the memory's insert comes first (0: not yet). */
	uint64_t key_h;
	/* FS_ITEM_FORWARD: the message's key and payload, at fwd_at in the batch's fwd buffer. */
	size_t fwd_at;
	uint32_t fwd_key_len, fwd_len;
	/* A cart item's lines or message: an index into the batch's exts (fs_batch_keep_ext). */
	uint32_t ext;
	/* The store refused the expiries this record's clock brings (issue 47, item 5; the
	 * live worker's isolation, or a replay's store_refusals rows): fs_core_refuse_due. */
	bool refuse_due;
};

struct fs_batch_counts {
	int64_t records, fresh, repeats, conflicts, invalid, sale, ticks, forwarded;
	int64_t carts;		 /* cart items (FS_ITEM_CART) */
	int64_t joins;		 /* joins (FS_ITEM_JOIN), repeats included */
	int64_t wrong_partition; /* of the invalid: misrouted, rejected (not stored apart) */
};

struct fs_batch {
	struct fs_item *items;
	uint32_t len, cap;
	struct fs_stored *stored;
	uint32_t stored_len, stored_cap;
	struct fs_map index; /* (intent id, key kind) -> item or stored entry */
	struct fs_batch_counts counts;
	struct fs_buf fwd;	    /* the bytes of misrouted records (fs_batch_keep) */
	struct fs_record_ext *exts; /* cart items' lines and messages */
	uint32_t exts_len, exts_cap;
	/* Whose expiries a refuse_due item refuses (not owned; NULL: every hold due there). */
	const char *const *refuse_ids;
	uint32_t refuse_ids_len;
	/* Waiting groups whose units the store refused to take when woken (not owned; given to
	 * the carts as fs_carts.refuse_groups). */
	const struct fs_group_ref *refuse_groups;
	uint32_t refuse_groups_len;
};

int fs_batch_init(struct fs_batch *b, uint32_t cap);
void fs_batch_free(struct fs_batch *b);
void fs_batch_clear(struct fs_batch *b);
/* Returns the next free item (zeroed), or NULL when the batch is full. */
struct fs_item *fs_batch_push(struct fs_batch *b);
/* Keeps a misrouted item's key and payload, to forward them once the batch is committed.
 * Returns 0, or -ENOMEM (the batch can then not be committed: the caller drops it). */
int fs_batch_keep(struct fs_batch *b, struct fs_item *it, const void *key, size_t key_len,
		  const void *payload, size_t len);
/* Keeps a cart item's lines or message (the parse's ext). Returns 0 or -ENOMEM. */
int fs_batch_keep_ext(struct fs_batch *b, struct fs_item *it, const struct fs_record_ext *x);
static inline bool fs_kind_is_cart(int kind)
{
	return kind >= FS_KIND_CART && kind <= FS_KIND_CART_MSG;
}

/* The kept bytes of a forwarded item. */
static inline const char *fs_item_fwd_key(const struct fs_batch *b, const struct fs_item *it)
{
	return b->fwd.data + it->fwd_at;
}
static inline const char *fs_item_fwd_payload(const struct fs_batch *b, const struct fs_item *it)
{
	return b->fwd.data + it->fwd_at + it->fwd_key_len;
}
/* Drops the stored entries and decisions (before a redo of the same records). */
void fs_batch_reset_decisions(struct fs_batch *b);
int fs_batch_add_stored(struct fs_batch *b, const struct fs_stored *s);
/* True if the record is answered by intent id (buy, confirm, cancel) and so is deduplicated
 * (a misrouted record is not: the partition it belongs on dedupes it). */
bool fs_item_has_key(const struct fs_item *it);
/* True for a confirm or cancel: looked up under both its keys. */
static inline bool fs_kind_is_followup(int kind)
{
	return kind == FS_KIND_CONFIRM || kind == FS_KIND_CANCEL;
}
/* True for a kind whose answers that changed nothing have a key of their own (kind plus
 * FS_KEY_UNMATCHED): a follow-up that found no hold, and a buy refused for its token (11,
 * issue 47 item 1: a token refusal does not use up the id, so the same id with a valid token
 * is decided on its merits). Looked up under both keys. */
static inline bool fs_kind_has_unmatched(int kind)
{
	return fs_kind_is_followup(kind) || kind == FS_KIND_BUY;
}
/* A buy's refusal for its token (no_token, bad_token, token_expired, token_not_yet_valid,
 * token_other_buyer: token.h's reasons, each with "token" in it and no other reason has). */
static inline bool fs_dec_token_refused(const struct fs_decision *d)
{
	return d->outcome == FS_OUT_REJECTED && d->reason && strstr(d->reason, "token");
}
/* The kind its decision is keyed by: the record's kind, or that plus FS_KEY_UNMATCHED for a
 * new confirm or cancel answered unknown_intent or a new buy refused for its token. */
static inline int fs_item_key_kind(const struct fs_item *it)
{
	int kind = (int)it->rec.kind;
	if (it->cls != FS_ITEM_NEW)
		return kind;
	if ((fs_kind_is_followup(kind) && it->dec.outcome == FS_OUT_UNKNOWN_INTENT) ||
	    (kind == FS_KIND_BUY && fs_dec_token_refused(&it->dec)))
		return kind + FS_KEY_UNMATCHED;
	return kind;
}

/* The answer to a record that reuses an intent id with another body: conflict
 * (intent_id_reused) with the record's own qty and time, naming the record itself; the live
 * answer and one given again after a restart alike. */
void fs_item_answer_conflict(struct fs_item *it);
/* The store refused the item's record for good (issue 28, item 1): from now on, and in a
 * replay, it is an invalid record, rejected store_refused. */
void fs_item_refuse(struct fs_item *it);
/* The reason stored for an invalid item ("invalid" when it has none). */
const char *fs_item_reject_reason(const struct fs_item *it);
/* True if the invalid item it extends the run of rejects that ends with prev (adjacent
 * offsets, the same reason, no intent id on either): a run is one rejects row. */
bool fs_item_extends_reject_run(const struct fs_item *prev, const struct fs_item *it);

/* True if a confirm or cancel of the batch, not answered by what the batch has stored, names
 * no hold of its SKU in the core: it may find none, and its answer then depends on whether
 * its own key was decided before, which only the store knows (the decisions insert cannot
 * tell: an unmatched key is another row). The caller looks the batch up first. Honest
 * follow-ups name their hold, so this costs a lookup only for rare or hostile ones. Likewise
 * a new buy of a sale behind a room whose token would be refused (kind 11, issue 47 item 1):
 * its token's verdict is kept in the record, so that the core does not verify it twice. */
bool fs_batch_needs_lookup(struct fs_batch *b, const struct fs_core *core);

/* Decides every item. Returns 0, or -ENOMEM (the core's state is then unusable: reload). */
int fs_batch_decide(struct fs_batch *b, struct fs_core *core);

/* A bounded memory of committed decisions by (intent id, kind): the worker answers most
 * repeats from it without asking Postgres, and the replay check uses it as its store. When it
 * is full it forgets everything and starts again (a forgotten id is found by the store's
 * lookup, so forgetting costs a round trip, never a wrong answer). */
struct fs_seen {
	struct fs_stored *items;
	uint32_t len, cap, cap_max;
	struct fs_map index;
	int64_t resets;
};

int fs_seen_init(struct fs_seen *s, uint32_t cap_max);
void fs_seen_free(struct fs_seen *s);
void fs_seen_clear(struct fs_seen *s);
/* Remembers the decision of a NEW item. Returns 0 or -ENOMEM. */
int fs_seen_add(struct fs_seen *s, const struct fs_item *it);
const struct fs_stored *fs_seen_find(const struct fs_seen *s, const char *intent_id, int kind);
/* Adds to the batch the remembered decisions of its intent ids. Returns how many it found. */
uint32_t fs_batch_add_seen(struct fs_batch *b, const struct fs_seen *s);

#endif
