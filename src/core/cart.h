/* cart.h: carts, all or nothing across partitions (issue 31): the protocol's pure state
 * machine. docs/DESIGN-NOTES.md, "Carts across partitions", is the protocol; this is its code.
 *
 * A cart (its lines: SKU and quantity, each SKU once) is decided by its coordinator C, the
 * partition of its cart id. Its lines are grouped by the partition of their SKU; C visits the
 * groups in ascending partition order, one at a time: a reserve to the group's partition P,
 * P's answer back to C, then the next group. At P a group is held whole (pending, for the
 * cart), refused whole, or waits while what it lacks is held by other carts' pending groups
 * there. When every group is held, C decides the cart held (one expiry, C's clock) and
 * commits every group; when one is refused, C decides the cart refused and releases the
 * groups held before it. Confirm, cancel and expiry act on every group alike; a confirm after
 * the expiry runs a new round (confirmed_late, or refund_required with nothing held).
 *
 * Messages between partitions are struct fs_cart_msg. One for the partition itself is handled
 * in place, within the same step (no record); one for another partition is appended to the
 * outbox (fs_carts.out), which the worker publishes once the batch committed and sends again
 * after a crash; the receiver's state makes a repeat harmless (a message that finds its group
 * or cart past the step it asks for is ignored and counted). Decisions answered to buyers are
 * appended to fs_carts.events.
 *
 * Pure: no I/O, no clock (time is the partition's log clock, fs_core.clock_ms), no randomness,
 * no hash-order iteration. Thread: one, with its struct fs_core. */
#ifndef FS_CART_H
#define FS_CART_H

#include "core/buf.h"
#include "core/core.h"
#include "core/map.h"
#include "core/record.h"

#include <stdbool.h>
#include <stdint.h>

/* The partition a message goes to: C for an answer, P otherwise. */
static inline int32_t fs_cart_msg_to(const struct fs_cart_msg *m)
{
	return m->kind == FS_CART_ANSWER ? m->coord : m->part;
}

/* A decision answered to a buyer, about a cart. */
enum fs_cart_ev_kind {
	FS_CART_EV_CART = 1,	/* the cart record's answer: held or a refusal */
	FS_CART_EV_CONFIRM = 2, /* a confirm's: confirmed, confirmed_late, refund_required, ... */
	FS_CART_EV_CANCEL = 3,
	FS_CART_EV_EXPIRED = 4, /* the cart's hold ended on the clock */
	/* a record with the cart's id and another body: its own answer (conflict), never the
	 * cart's (issue 47 item 3) */
	FS_CART_EV_CONFLICT = 5,
};

struct fs_cart_event {
	int kind; /* enum fs_cart_ev_kind */
	char cart_id[FS_UUID_LEN + 1];
	enum fs_outcome outcome;
	const char *reason; /* static string or NULL */
	int32_t line;	    /* a refusal's line, or -1 */
	int64_t expires_at_ms;
	int64_t decided_at_ms;
	int64_t offset; /* the record whose step decided it */
};

/* A cart at its coordinator. */
enum fs_cart_state {
	FS_CART_RESERVING = 1, /* round 1 under way */
	FS_CART_HELD = 2,
	FS_CART_CONFIRMED = 3,
	FS_CART_REFUSED = 4,
	FS_CART_CANCELLED = 5,
	FS_CART_EXPIRED = 6,
	FS_CART_LATE = 7, /* a late confirm's round under way */
	FS_CART_CONFIRMED_LATE = 8,
	FS_CART_REFUND_REQUIRED = 9,
};

const char *fs_cart_state_name(int state);
/* The state of a name, or 0 for an unknown one. */
int fs_cart_state_parse(const char *name);

struct fs_cart {
	int64_t body_hash; /* the cart record's */
	char cart_id[FS_UUID_LEN + 1];
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	uint32_t nlines;
	struct fs_cart_line lines[FS_CART_LINES_MAX];
	uint32_t ngroups;
	int32_t parts[FS_CART_LINES_MAX]; /* the groups' partitions, ascending */
	int state;			  /* enum fs_cart_state */
	int32_t round;
	uint32_t at;	   /* the group in flight (an index into parts) while reserving */
	bool cancel_asked; /* a cancel came while round 1 was under way */
	int64_t hold_ms;   /* the shortest of the groups' (their answers) */
	int64_t expires_at_ms;
	int64_t offset; /* the cart record's */
	uint32_t heap_pos;
	/* a refusal's (the cart's or a late round's) */
	enum fs_outcome outcome;
	const char *reason;
	int32_t line;
	/* The cart record's answer once given (0 while reserving): a retry of the record gets
	 * it again. */
	enum fs_outcome answer;
	const char *answer_reason;
	bool dirty;
	bool stored; /* its row exists (loaded, or committed since): a change is an upsert */
};

/* A group at its partition P (one per cart and round that reached P). */
enum fs_group_state {
	FS_GROUP_WAITING = 1, /* short of units other carts' pending groups hold */
	FS_GROUP_PENDING = 2, /* held for the cart, its round not decided */
	FS_GROUP_HELD = 3,    /* the cart is held */
	FS_GROUP_SOLD = 4,
	FS_GROUP_RELEASED = 5,
	FS_GROUP_REFUSED = 6,
};

const char *fs_group_state_name(int state);
int fs_group_state_parse(const char *name);

struct fs_group {
	char cart_id[FS_UUID_LEN + 1];
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	int32_t round;
	int32_t coord;
	int state; /* enum fs_group_state */
	uint32_t nlines;
	struct {
		char sku[FS_SKU_LEN_MAX + 1];
		uint32_t sku_index; /* FS_MAP_NONE: not on this partition */
		int64_t qty;
		int32_t line;
	} lines[FS_CART_LINES_MAX];
	int64_t offset; /* the reserve's: waiting groups are decided again in this order */
	bool dirty;
	bool stored; /* as a cart's */
};

struct fs_cart_counts {
	int64_t carts, repeats, held, refused, waits, wakes, messages_in, messages_out, ignored;
};

/* The carts and groups of one partition. */
/* A cart's group at this partition, by name (issue 47, item 5). */
struct fs_group_ref {
	const char *cart_id;
	int32_t round;
};

struct fs_carts {
	int32_t partition, partitions;
	uint32_t lines_max; /* the lines a cart may have: FS_CART_LINES_MAX (tests may set less) */

	struct fs_cart *carts;
	uint32_t carts_len, carts_cap;
	struct fs_map cart_index; /* cart id -> carts */
	uint32_t *heap;		  /* held carts, a min-heap on (expires_at_ms, offset) */
	uint32_t heap_len;

	struct fs_group *groups;
	uint32_t groups_len, groups_cap;
	struct fs_map group_index; /* (cart id, round) -> groups */
	/* The waiting groups by SKU index: per SKU, the groups waiting with a line on it, in the
	 * order they came (their reserves' offsets); a group that stopped waiting is dropped when
	 * reached. */
	struct fs_wq {
		uint32_t *v;
		uint32_t head, len, cap;
	} * wq;
	uint32_t wq_cap;
	uint32_t waiting_len; /* groups waiting now */
	uint32_t *walk;	      /* the SKUs whose queues a wake walks */
	uint32_t walk_len, walk_cap;
	int64_t *pending; /* by SKU index: units pending groups hold */
	uint32_t pending_cap;

	/* Messages for this partition, handled within the step that made them. */
	struct fs_cart_msg *local;
	uint32_t local_len, local_cap;
	/* Since the last commit: messages for other partitions, decisions for buyers, and the
	 * carts and groups that changed. */
	struct fs_cart_msg *out;
	uint32_t out_len, out_cap;
	struct fs_cart_event *events;
	uint32_t events_len, events_cap;
	uint32_t *dirty_carts, *dirty_groups;
	uint32_t dirty_carts_len, dirty_groups_len;

	struct fs_cart_counts counts;
	int64_t step_offset; /* the record of the step under way */
	/* Waiting groups whose units the store refused to take when another record woke them
	 * (issue 47, item 5): when decided, each is refused (rejected store_refused) instead,
	 * answering its coordinator. Not owned: the batch's (fs_batch.refuse_groups). */
	const struct fs_group_ref *refuse_groups;
	uint32_t refuse_groups_len;
	/* The groups refused so since the last commit, and the record that woke each (for the
	 * batch's store_refusals rows). */
	struct {
		uint32_t group;
		int64_t offset;
	} * refused;
	uint32_t refused_len, refused_cap;
};

int fs_carts_init(struct fs_carts *cs, int32_t partition, int32_t partitions, uint32_t lines_max);
void fs_carts_free(struct fs_carts *cs);
void fs_carts_reset(struct fs_carts *cs);
/* The batch committed: the outbox, the events and the dirty lists are cleared. */
void fs_carts_commit(struct fs_carts *cs);

/* Validates a cart request against the rules a worker holds it to (lines 1..lines_max, each
 * SKU once, qty 1..FS_QTY_MAX, valid ids) and fills each line's partition. Returns NULL, or
 * the reason it is rejected (a static string). */
const char *fs_cart_req_check(const struct fs_carts *cs, struct fs_cart_req *req);

/* Each step first moves the clock (fs_core_advance, then the carts whose hold is due expire:
 * their groups released, an `expired` event each), then acts. They return 0, or -ENOMEM (the
 * state is then unusable: reload). */

/* A cart (req checked by fs_cart_req_check). A cart id seen before is a retry when its body
 * hash is the cart's (answered again once decided: nothing while reserving, the answer comes
 * then), else a conflict (intent_id_reused, no effect). */
int fs_cart_step_cart(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_req *req,
		      int64_t ts_ms, int64_t offset);
/* A confirm (confirm = true) or cancel of a cart, at its coordinator. */
int fs_cart_step_followup(struct fs_carts *cs, struct fs_core *c, const char *cart_id, bool confirm,
			  int64_t ts_ms, int64_t offset);
/* A protocol message of this partition's log that the store refused for good (its record
 * rejected store_refused; issue 47, item 5): a reserve is answered refused (outcome
 * rejected, reason store_refused), its group refused with no unit taken, so that its cart's
 * round ends; any other message is left as refused. 0 or -ENOMEM. */
int fs_cart_refuse_msg(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		       int64_t offset);
/* The groups of earlier records that a record at `offset` changed and that hold units now
 * (those it woke and took units for among them), up to
 * max of them into out (names borrowed from cs); returns how many there are in all. */
uint32_t fs_carts_woken(const struct fs_carts *cs, int64_t offset, struct fs_group_ref *out,
			uint32_t max);
/* A protocol message that arrived on this partition's log. */
int fs_cart_step_msg(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		     int64_t ts_ms, int64_t offset);
/* The clock alone (any other record, a tick). */
int fs_cart_step_clock(struct fs_carts *cs, struct fs_core *c, int64_t ts_ms, int64_t offset);

/* Appends the record of a message, as the worker publishes it on the intents topic (under
 * m->key); fs_record_parse_ext reads it back as it was. */
void fs_cart_msg_json(struct fs_buf *b, const struct fs_cart_msg *m);

/* Appends the result of a decision about a cart, for the results topic (keyed by the cart
 * id); partition is the coordinator. */
void fs_cart_event_json(struct fs_buf *b, const struct fs_cart_event *e, int32_t partition);

/* Loading from the store (after fs_carts_reset; then fs_carts_load_done once). A cart's
 * fields as stored; a group's, with its lines' SKUs by name (a SKU not on this partition is
 * FS_MAP_NONE, as when it was decided). Returns 0, -EEXIST (already loaded) or -ENOMEM. */
int fs_carts_load_cart(struct fs_carts *cs, const struct fs_cart *k);
int fs_carts_load_group(struct fs_carts *cs, const struct fs_core *c, const struct fs_group *g,
			const char *const *skus);
/* A stored row's lines (the JSON fs_tx_carts_json wrote): a cart's sku, qty and part; a
 * group's qty and line, and its SKUs' names into skus. 0, or -EINVAL if it is not that. */
int fs_cart_parse_lines(struct fs_cart *k, const char *json);
int fs_group_parse_lines(struct fs_group *g, const char *json, char (*skus)[FS_SKU_LEN_MAX + 1]);
/* The waiting queues (by the groups' offsets), and the pending units by SKU. */
int fs_carts_load_done(struct fs_carts *cs, const struct fs_core *c);
/* The names the store keeps a reason by, as static strings (NULL for an unknown one). */
const char *fs_cart_reason_static(const char *reason);

/* The earliest expiry of a held cart, or -1. */
int64_t fs_carts_next_expiry(const struct fs_carts *cs);
const struct fs_cart *fs_carts_find(const struct fs_carts *cs, const char *cart_id);
const struct fs_group *fs_carts_group(const struct fs_carts *cs, const char *cart_id,
				      int32_t round);
/* Units of a SKU that pending groups hold on this partition. */
int64_t fs_carts_pending_units(const struct fs_carts *cs, uint32_t sku_index);

#endif
