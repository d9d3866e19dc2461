/* store.h: the worker's Postgres side: load a partition's state, look up stored decisions,
 * and commit one batch in one pipelined transaction (DESIGN.md section 4).
 *
 * One connection, used by one thread. Every call reports failure as a negative value and
 * leaves a one-line message in fs_store_error(). Connection loss is detected with PQstatus
 * (after a server restart the error may carry no SQLSTATE); fs_store_ensure() reconnects. */
#ifndef FS_STORE_H
#define FS_STORE_H

#include "core/batch.h"
#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

struct fs_store;

struct fs_part_meta {
	int32_t partition;
	int64_t next_offset; /* -1: nothing decided yet */
	int64_t first_offset;
	int64_t replied_offset;
	int64_t clock_ms;
};

enum fs_commit_result {
	FS_COMMIT_OK = 0,
	FS_COMMIT_FENCED = 1,  /* the offset compare-and-set failed: another worker owns it */
	FS_COMMIT_REDO = 2,    /* guard failed or SQL error: rolled back; reload state, redo */
	FS_COMMIT_RETRY = 3,   /* connection lost before COMMIT was sent: not committed */
	FS_COMMIT_UNKNOWN = 4, /* connection lost after COMMIT was sent: read the offset back */
};

/* Test hook: FLASHSALE_CRASH names a point in the batch where the process exits at once. The
 * hook returns true when the point fires without killing the process: at "commit_cut" the
 * store then cuts its own connection right after COMMIT was sent (outcome unknown). */
typedef bool (*fs_crash_fn)(const char *point);

int fs_store_open(const char *conninfo, struct fs_store **out);
void fs_store_close(struct fs_store *s);
const char *fs_store_error(const struct fs_store *s);
/* True when the last commit was rolled back by a data or integrity error (SQLSTATE class 22
 * or 23): sent again, the same rows fail the same way. */
bool fs_store_refused(const struct fs_store *s);
/* True when the last commit was rolled back by Postgres itself rather than by one of the
 * batch's guards or by its records (fs_store_refused): a lock timeout, a deadlock, a
 * serialization failure, a statement timeout (the metrics' cause sql_error, apart from
 * redo). */
bool fs_store_sql_error(const struct fs_store *s);
/* How many sessions of stalled workers this store ended to free their locks. */
int64_t fs_store_stalled_broken(const struct fs_store *s);
/* Reconnects if the connection is bad. Returns 0 when usable. */
int fs_store_ensure(struct fs_store *s);
void fs_store_set_crash_hook(struct fs_store *s, fs_crash_fn fn);

/* Makes sure the partition row exists, reads it and loads the partition's SKUs and buyers into
 * the (reset) core. */
int fs_store_load(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		  struct fs_core *core, struct fs_part_meta *meta);

/* The commit token of this store's last commit attempt ("" before the first). Valid until the
 * next attempt on the store; a copy needs FS_STORE_TOKEN_SIZE bytes. */
#define FS_STORE_TOKEN_SIZE 64
const char *fs_store_token(const struct fs_store *s);

/* Reads the stored next offset, and whether the commit attempt with this token (one of
 * fs_store_token's) was the one that moved it (to resolve an unknown commit outcome). */
int fs_store_read_next(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		       const char *token, int64_t *next_offset, bool *mine);

/* What the intents topic's decisions depend on besides its records (the schema's `topics`):
 * the partition count, what is done with a misrouted record ("forward" or "reject") and the
 * record size cap (record.max.bytes: a record over it is rejected too_large). */
struct fs_topic_rule {
	int32_t partitions;
	char misrouted[16];
	int64_t record_max_bytes;
};
/* Records `mine` if the topic has no row yet (and the size cap if its row predates it), and
 * returns what is recorded in *rec (the caller compares). */
int fs_store_topic_rule(struct fs_store *s, const char *topic, const struct fs_topic_rule *mine,
			struct fs_topic_rule *rec);

/* Records that results were delivered below replied_offset (guarded by next_offset). */
int fs_store_save_replied(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
			  int64_t next_offset, int64_t replied_offset);

/* Whether the record at (partition, offset) was rejected store_refused: the store refused it
 * for good (the answer to it, given again, is its reject). 1 yes, 0 no, -EIO. */
int fs_store_refused_at(struct fs_store *s, int32_t partition, int64_t offset);

/* Calls fn for every hold of the partition that expired at a record in [from, to). */
typedef void (*fs_expired_fn)(void *ctx, const char *intent_id, const char *sku, int64_t qty,
			      int64_t ended_at_ms, int64_t ended_offset);
/* Calls fn for every outbox row of the partition (carts, issue 31) whose record's offset is in
 * [from, to), in order: a protocol message (intents: to_part, key, payload) or a cart's result
 * (results, keyed by the cart id). 0, or -EIO. */
typedef void (*fs_cart_out_fn)(void *ctx, bool intents, int32_t to_part, const char *key,
			       const char *payload, size_t len);
int fs_store_cart_out(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		      fs_cart_out_fn fn, void *ctx);
int fs_store_expired(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		     fs_expired_fn fn, void *ctx);

/* Adds to the batch the decisions already stored for its intent ids. */
int fs_store_lookup(struct fs_store *s, struct fs_batch *b);
/* Loads into the core the stored holds that ended, that the batch's confirms and cancels name
 * and the core does not have: a hold that ended is not kept in memory (fs_core_forget_ended,
 * issue 28 item 12). 0, or -EIO / -ENOMEM. */
int fs_store_lookup_holds(struct fs_store *s, const struct fs_batch *b, struct fs_core *core);

/* Commits a decided batch: offset compare-and-set (expected -> next), decisions, rejects, sale
 * log, reservations, SKU counters (guarded by the committed base values), buyer totals, in one
 * transaction. Rows that are new by the core's account (decisions, holds and buyers it has not
 * stored) go by COPY; careful (a batch redone after a failed attempt) sends holds and buyers
 * by upsert whatever the core says. Returns an enum fs_commit_result. */
int fs_store_commit(struct fs_store *s, const char *grp, const char *topic,
		    const struct fs_part_meta *meta, int64_t next_offset, int64_t replied_offset,
		    const struct fs_batch *b, const struct fs_core *core, bool careful);
/* fs_store_commit in two halves, for a committer thread: _prepare encodes the batch into the
 * store's own buffers (it reads b and core, and does no I/O; 0 or -ENOMEM); _send sends what
 * was prepared and returns an enum fs_commit_result. Between the two, b and core may change.
 * after (NULL: none): the commit token of another transaction of the same partition (ending
 * at meta->next_offset) that may still be in flight on another connection, and on whose
 * decisions b was decided; the COPYs then go before the compare-and-set, which waits for that
 * one's outcome and matches only its commit (FS_COMMIT_FENCED if it did not commit, even when
 * another worker committed the same range). */
int fs_store_commit_prepare(struct fs_store *s, const char *grp, const char *topic,
			    const struct fs_part_meta *meta, int64_t next_offset,
			    int64_t replied_offset, const struct fs_batch *b,
			    const struct fs_core *core, bool careful, const char *after);
/* cas (may be NULL) is called with before = true just before the compare-and-set is sent (after
 * only), and with before = false once its result is in, or it will not be sent. */
typedef void (*fs_cas_fn)(void *ctx, bool before);
int fs_store_commit_send(struct fs_store *s, fs_cas_fn cas, void *ctx);
/* The last fs_store_commit_send's first part, done at this wall-clock microsecond: in line
 * the statements' pipeline (the round trip the COPYs and COMMIT follow), stacked the rows'
 * COPYs (the pipeline with COMMIT follows). 0: it failed before. (trace.batches) */
int64_t fs_store_phase_us(const struct fs_store *s);

#endif
