/* sim_store.h: an in-memory model of the worker's Postgres (sql/001_schema.sql + src/io/store.c).
 *
 * The same tables, keys, CHECK constraints and statements as fs_store_*: the offset
 * compare-and-set, the decisions insert that asserts every (intent id, kind) is new (ON
 * CONFLICT DO NOTHING + fs_assert), rejects and sale_log keyed by (part, off), the reservations
 * upsert, SKU counters guarded by their base values, the buyers upsert joined to the
 * partition's SKUs. A commit is one transaction: every statement runs in order against the
 * tables, and any failure rolls all of them back (an undo log). Each call is atomic, as one
 * statement is; a load is two steps, as in fs_store_load: the partition row's insert, then one
 * REPEATABLE READ transaction that reads the row, the SKUs, the buyers, the reservations, the
 * waiting rooms' entries (issue 33) and the carts from one snapshot (one call: nothing can commit
 * inside it). Every commit writes its attempt's token into the partition row
 * (partitions.commit_token), which resolves an unknown outcome.
 *
 * Faults are the caller's: a call told to fail returns -EIO without touching anything; a
 * commit told that its connection dies returns FS_COMMIT_UNKNOWN, applied or not. */
#ifndef FS_SIM_STORE_H
#define FS_SIM_STORE_H

#include "core/commit.h"
#include "sim.h"

struct ss_part {
	bool exists;
	int64_t next_offset, first_offset, replied_offset, clock_ms;
	int64_t n_records, n_fresh, n_repeats, n_conflicts, n_invalid, n_sale, n_ticks, n_batches;
	int64_t n_forwarded;
	int64_t n_carts;
	int64_t n_joins;       /* issue 33 */
	int64_t n_gaps;	       /* the simulated log has none: the check asserts 0 */
	uint64_t commit_token; /* the attempt that moved next_offset last; 0: NULL */
};

struct ss_decision {
	uint64_t idh; /* hash of intent_id, to scan fast */
	char intent_id[FS_UUID_LEN + 1];
	int kind;
	int64_t body_hash;
	int32_t part;
	int64_t off;
	char sku[FS_SKU_LEN_MAX + 1];
	bool has_buyer;
	char buyer[FS_BUYER_LEN_MAX + 1];
	int64_t qty;
	char outcome[24];
	bool has_reason;
	char reason[48];
	bool has_exp;
	int64_t exp;
	int64_t decided_at;
};

/* A run of consecutive bad records of one batch, with one reason and no intent id, is one row
 * covering off..off_end (poison floods); the key is still (part, off). */
struct ss_reject {
	int32_t part;
	int64_t off, off_end;
	bool has_id;
	char intent_id[FS_UUID_LEN + 1];
	char reason[48];
};

struct ss_sale {
	int32_t part;
	int64_t off;
	int kind;
	char sku[FS_SKU_LEN_MAX + 1];
	int64_t amount;
	char outcome[24];
	bool has_reason;
	char reason[48];
};

/* forwards: a misrouted record, and the partition the rule names; key (part, off). */
struct ss_forward {
	int32_t part;
	int64_t off;
	int32_t to_part;
	bool has_id;
	char intent_id[FS_UUID_LEN + 1];
	int kind; /* 0: NULL (a record that names no intent) */
};

struct ss_resv {
	uint64_t idh;
	char intent_id[FS_UUID_LEN + 1];
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer[FS_BUYER_LEN_MAX + 1];
	int64_t qty;
	char status[16];
	int64_t expires_at_ms;
	int32_t part;
	int64_t off;
	bool late;
	bool has_ended; /* ended_at_ms and ended_off are NULL while held */
	int64_t ended_at_ms, ended_off;
};

struct ss_sku {
	char sku[FS_SKU_LEN_MAX + 1];
	int32_t part;
	char status[8];
	int64_t supply, available, held, sold, per_buyer_limit, max_qty, hold_ms, opens_at_ms,
		closes_at_ms;
	/* The waiting room's columns (issue 33): admit_rate 0 when the sale needs none; draw
	 * and draw_seed "" for NULL. */
	int64_t admit_rate, token_ms;
	char draw[8];
	char draw_seed[FS_DRAW_SEED_LEN_MAX + 1];
};

/* room_joins (issue 33): key (sku, buyer_id); the admission columns NULL (has_adm false)
 * while the buyer waits. */
struct ss_join {
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer[FS_BUYER_LEN_MAX + 1];
	int32_t part;
	int64_t off, joined_ms;
	bool early;
	bool has_adm;
	int64_t admitted_ms, decided_ms, decided_off;
	int64_t minted_ms, minted_off; /* its token's tick (issue 47 item 4: a re-mint) */
};

struct ss_buyer {
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer[FS_BUYER_LEN_MAX + 1];
	int64_t units;
};

/* carts (issue 31): carts and cart_groups rows are the cart module's own structs, keyed
 * (cart_id, part) and (cart_id, round, part); cart_out rows keyed (part, off, seq). */
struct ss_cart {
	int32_t part;
	struct fs_cart k;
};

struct ss_group {
	int32_t part;
	struct fs_group g;
};

enum { SS_PAYLOAD_MAX = 1600 };

struct ss_out {
	int32_t part;
	int64_t off;
	int32_t seq;
	bool intents; /* a protocol message (to_part), else a cart's result */
	int32_t to;
	char key[FS_SKU_LEN_MAX + 1];
	char payload[SS_PAYLOAD_MAX];
};

struct ss_undo {
	int table;
	size_t index;
	union {
		struct ss_part part;
		struct ss_resv resv;
		struct ss_sku sku;
		struct ss_buyer buyer;
		struct ss_cart cart;
		struct ss_group group;
		struct ss_join join;
	} old;
};

/* A buyer whose decisions the simulated store refuses for good, as a trigger raising
 * check_violation would (issue 28, item 1): the worker must reject such a buy store_refused
 * and decide the rest of its batch. */
#define SIM_REFUSED_BUYER "refused"
/* The store refuses rows of the refused buyer beyond its decisions (issue 47, item 5): its
 * buyers rows whose units go up (a cart's group takes its units at a participant: that
 * cart_reserve is refused, and must still answer its coordinator; at the coordinator, the
 * cart record itself is refused). A
 * buyer whose holds the store refuses to expire (its reservations rows may not become
 * 'expired'): the expiry is no record's own, it is refused at whatever record moves the
 * clock, and must be recorded against the hold. */
#define SIM_STUCK_BUYER "stuck"

/* store_refusals: a hold whose expiry the store refused, and the record it was due at. */
struct ss_refusal {
	int32_t part;
	int64_t off;
	char intent_id[FS_UUID_LEN + 1];
	int32_t round; /* 0: a hold's expiry; else a cart's group of that round */
};

struct sim_store {
	enum sim_mutation mutation;
	struct ss_part parts[SIM_PARTS_MAX];
	VEC(struct ss_decision) decisions;
	VEC(struct ss_reject) rejects;
	VEC(struct ss_sale) sales;
	VEC(struct ss_forward) forwards;
	VEC(struct ss_resv) resv;
	VEC(struct ss_sku) skus;
	VEC(struct ss_buyer) buyers;
	VEC(struct ss_cart) carts;
	VEC(struct ss_group) groups;
	VEC(struct ss_out) outs;
	VEC(struct ss_join) joins;
	VEC(struct ss_refusal) refusals;
	VEC(struct ss_undo) undo;
	const char *failed_stmt; /* the statement that failed the last commit (diagnostics) */
	bool refused;		 /* the last commit was refused for good (SIM_REFUSED_BUYER) */
	/* The replay's store: without the rules of issue 47's refusals, as a database rebuilt
	 * without the constraint (a buyers row is one per batch: the rule's verdict depends on
	 * the batches, which the replay's are not). */
	bool no_rules;
	/* A CHECK constraint refused a row: never in a correct run (the checker fails on it). */
	char check_failed[160];
	/* Rows of the batch's intent ids that lookups left out because the batch did not ask for
	 * their kind (the rows that made lookup-overflow): a coverage counter. */
	int64_t kinds_left;
	int64_t holds_looked_up; /* ended holds fs_store_lookup_holds loaded (issue 28, item 12) */
	/* Stacked transactions that found the offset at their predecessor's end, but written by
	 * another worker's commit of the same range (the predecessor did not commit): a coverage
	 * counter (fenced; committed under MUT_STACKED_OFFSET_ONLY). */
	int64_t stacked_same_range;
	int64_t room_loads; /* loads that read waiting rooms' entries (a coverage counter) */
};

enum ss_fault {
	SS_FAULT_NONE = 0,
	SS_FAULT_CUT_APPLIED = 1, /* the connection dies after COMMIT reached the server */
	SS_FAULT_CUT_LOST = 2,	  /* the connection dies before COMMIT reached the server */
};

void ss_init(struct sim_store *s, enum sim_mutation m);
void ss_free(struct sim_store *s);

/* fs_store_load in two steps: 0 resets the core and inserts the partition row if it is missing;
 * 1 is the read-only transaction: the partition row, the SKUs, the buyers and the reservations,
 * all from one snapshot. Returns 0 or what fs_core_load_* returned. */
enum { SS_LOAD_STEPS = 2 };
int ss_load_step(struct sim_store *s, int step, int32_t part, struct fs_core *core,
		 struct fs_part_meta *meta);
/* fs_store_read_next: the stored next offset and commit token (0 for NULL). */
int ss_read_next(struct sim_store *s, int32_t part, int64_t *next, uint64_t *token);
int ss_save_replied(struct sim_store *s, int32_t part, int64_t next, int64_t replied);
typedef void (*ss_expired_fn)(void *ctx, const struct ss_resv *r);
int ss_expired(struct sim_store *s, int32_t part, int64_t from, int64_t to, ss_expired_fn fn,
	       void *ctx);
int ss_lookup(struct sim_store *s, struct fs_batch *b);
/* fs_store_cart_out: the partition's outbox rows with off in [from, to), by (off, seq). */
typedef void (*ss_out_fn)(void *ctx, const struct ss_out *o);
int ss_cart_out(struct sim_store *s, int32_t part, int64_t from, int64_t to, ss_out_fn fn,
		void *ctx);
int ss_lookup_holds(struct sim_store *s, const struct fs_batch *b, struct fs_core *core);
/* A transaction as rows (fs_store_commit_prepare's statements): built from the batch and the
 * core when the commit is prepared, applied when it is sent. */
struct ss_tx_sku {
	struct ss_sku row;
	bool stored; /* the core's: a row exists (else it is inserted) */
	int64_t base_supply, base_available, base_held, base_sold; /* the update's guard */
};

struct ss_tx_join {
	struct ss_join row;
	bool copy; /* the COPY of a new entry (else the upsert) */
};

struct ss_tx {
	/* core/commit.c's transaction: its compare-and-set values (built.cas) and COPY flags are
	 * plain values, read at apply; its rows point into the batch and core, copied below. */
	struct fs_tx built;
	bool stacked;	      /* sent while another of its partition is in flight, on whose */
	uint64_t pred_token;  /* decisions it was decided: that one's commit token */
	VEC(int64_t) offsets; /* the batch's records, for the checker */
	VEC(struct ss_decision) decisions;
	VEC(struct ss_reject) rejects;
	VEC(struct ss_sale) sales;
	VEC(struct ss_forward) forwards;
	VEC(struct ss_resv) resv; /* the upsert's rows */
	VEC(struct ss_tx_sku) skus;
	VEC(struct ss_buyer) buyers;
	VEC(struct ss_cart) carts;
	VEC(struct ss_group) groups;
	VEC(struct ss_out) outs;
	VEC(struct ss_tx_join) joins;
	VEC(struct ss_refusal) refusals;
};

/* Reads b and core into t (reused: its arrays are kept); careful as fs_tx_build's. */
void ss_tx_build(struct ss_tx *t, const struct fs_part_meta *meta, int64_t next_offset,
		 int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
		 bool careful);
void ss_tx_free(struct ss_tx *t);
/* fs_store_commit_send: `token` is the attempt's commit token (nonzero, never used twice). For
 * the checker: *before is the stored next offset the transaction saw, *applied whether it took
 * effect (whatever the worker was told). */
int ss_tx_apply(struct sim_store *s, const struct ss_tx *t, uint64_t token, enum ss_fault fault,
		int64_t *before, bool *applied);
/* Both at once (the checker's replay). */
int ss_commit(struct sim_store *s, const struct fs_part_meta *meta, int64_t next_offset,
	      int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
	      uint64_t token, enum ss_fault fault, int64_t *before, bool *applied);

#endif
