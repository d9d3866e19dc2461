/* context.h: the worker's shared state, data only (no functions): a partition, a committer
 * slot, the results of a batch in flight, the counters, and the worker itself. Every file of
 * src/worker/ reads it; each one's header says which fields it owns. */
#ifndef FS_WORKER_CONTEXT_H
#define FS_WORKER_CONTEXT_H

#include "core/batch.h"
#include "core/buf.h"
#include "core/cart.h"
#include "core/core.h"
#include "core/record.h"
#include "core/token.h"
#include "io/config.h"
#include "io/prom.h"
#include "io/store.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum {
	PARTITIONS_MAX = 1024,
	BAD_FACTOR = 10, /* a batch holds up to this many times batch.max records in all */
	BACKOFF_MIN_MS = 50,
	SLOTS_MAX = 2, /* commit.overlap's highest value */
	/* part_process_from's first attempt: not made, a predecessor in flight failed; reload
	 * and redo at once (no backoff: nothing is wrong with the database). */
	COMMIT_AGAIN = 100,
	MISROUTED_WARN_MS = 60000, /* at most one misrouted-records warning a minute */
	METADATA_TIMEOUT_MS = 5000,
	/* The metrics' label sets (metrics.c): record kinds, outcomes, reject reasons. */
	METRIC_KINDS = FS_KIND_TICK + 1,
	METRIC_OUTCOMES = FS_OUT_APPLIED + 1,
	METRIC_REASONS_MAX = 64, /* more distinct reasons than this are counted as "other" */
	METRIC_REASON_LEN = 48,
};

/* Why a batch transaction did not commit (flashsale_transactions_failed_total{cause}). */
enum tx_cause { TX_FENCED, TX_REDO, TX_SQL_ERROR, TX_TRANSIENT, TX_UNKNOWN, TX_CAUSES };

struct wio; /* the edges (io.h) */

/* trace.batches (trace.c): one batch's moments, wall-clock microseconds (0: not reached). The
 * main thread reads its records (read_*), decides them (decide) and hands them to a committer
 * (handed), which renders the statements (start..prepared), sends them (..phase: the
 * statements' pipeline in line, the rows' COPYs when stacked) and the rest with COMMIT
 * (..committed); the main thread takes the outcome (finished), produces the results
 * (produced) and hears the last one delivered (delivered); the broker stamped them by
 * appended_ms (a results topic with LogAppendTime). In line: handed = start. */
struct btrace {
	int64_t append_first_ms, append_last_ms; /* the broker's timestamps of its records */
	int64_t read_first, read_last, decide, handed, start, prepared, phase, committed, finished,
		produced, delivered;
	int64_t appended_ms; /* the broker's latest stamp of its results (LogAppendTime), or 0 */
	/* When the poll that read its first record began: before that record's append, the
	 * worker was waiting for it (its wait was the way's: the broker's and the client
	 * library's); after it, the record may have waited for the worker too (a backlog). */
	int64_t poll_start;
	int64_t offset;
	uint32_t records;
	int32_t partition;
	bool in_line, after;
};

/* Results of one committed batch still on their way to the broker. */
struct inflight {
	int64_t end_offset; /* next offset after the batch */
	int pending;
	struct btrace tr; /* trace.batches: written when pending reaches 0 */
	bool failed;
	bool orphan; /* its partition was revoked meanwhile: free it when done */
	struct inflight *next;
};

struct part {
	bool assigned;
	bool loaded;
	int32_t id;
	struct fs_part_meta meta; /* as committed */
	struct fs_core core;
	struct fs_carts carts;	/* core.carts once the partition count is known (issue 31) */
	struct fs_batch batch;	/* records to decide, contiguous from meta.next_offset */
	struct fs_batch again;	/* records below meta.next_offset: to answer again */
	int64_t first_ms;	/* monotonic ms when the pending batch got its first record */
	int64_t last_record_ms; /* monotonic ms of the last record read */
	int64_t last_tick_ms;	/* monotonic ms of the last tick appended */
	bool tick_pending;	/* a tick was appended and not read back yet */
	int64_t replied;	/* results delivered for every record below this */
	struct inflight *head, *tail;
	struct fs_seen seen;  /* decisions committed here, to answer repeats without a lookup */
	int64_t batch_costly; /* records of the batch that are not invalid */
	bool need_lookup;     /* the last commit found an id decided elsewhere: look them up */
	/* commit.overlap: batches of this partition handed to committer threads and not yet
	 * finished, and the meta as it will be once they are all committed. */
	int n_fly;
	struct fs_part_meta ahead;
	int64_t fences;	   /* times fenced (its batch dropped, reloaded, sought back) */
	int64_t n_records; /* records decided here since the worker started (the metrics) */
	/* The committer slot rendering the statements of this partition's last batch handed
	 * over, which reads the core meanwhile (-1: none): the core is not changed until it is
	 * done (core_settle). */
	int lent;
	struct btrace tr; /* trace.batches: the pending batch's */
};

/* A batch's expiry results and stock records, rendered from the core when the batch is
 * decided and produced once it is committed (by then the core may have moved on). */
struct extra {
	size_t key, key_len, at, len; /* offsets into extras.buf */
	bool stock;		      /* the stock topic (else results) */
	/* A cart's protocol message: the intents topic, partition `to` (issue 31). */
	bool intents;
	int32_t to;
	bool cart; /* a cart's result (not an expiry) */
	bool room; /* an admission (issue 33) */
};
struct extras {
	struct fs_buf buf;
	struct extra *e;
	uint32_t len, cap;
	bool failed; /* out of memory while rendering */
};

struct worker;

/* A committer thread and its own connection (commit.overlap); slot 0's is the worker's. */
struct slot {
	struct worker *w;
	int index;
	bool up;
	struct fs_store *store;
	struct fs_batch batch;	    /* the batch handed over (swapped with the partition's) */
	struct part *p;		    /* whose batch it is */
	struct fs_part_meta before; /* the partition's meta this batch was decided on */
	struct fs_part_meta meta;   /* the partition's meta once this batch is committed */
	int64_t replied;
	bool after; /* a batch of the partition was in flight when this one was handed over */
	struct extras ex;
	/* The partition's batch handed over before this one and still in flight then (slot
	 * index, or -1, and its generation): this one's compare-and-set must not be sent before
	 * that one's ran, or it would find the offset not moved yet. */
	int pred;
	uint64_t pred_gen;
	/* That one's commit token: this one's compare-and-set matches only if it committed (the
	 * same range committed by another worker is not the state this batch was decided on). */
	char pred_token[FS_STORE_TOKEN_SIZE];
	/* guarded by the edges' lock (wio_lock): */
	bool ready, done, quit;
	bool prepared;	   /* its statements are rendered: the core is the main thread's again */
	bool cas_done;	   /* this batch's compare-and-set ran (or will not be sent) */
	uint64_t gen;	   /* batches handed to this slot */
	int rc;		   /* an enum fs_commit_result */
	int64_t us;	   /* time the transaction took, on the committer thread */
	int64_t handed_us; /* when the main thread handed it over (the debug log) */
	struct btrace tr;  /* trace.batches: the batch's, its committer's moments included */
	/* The commit token of its transaction, from its prepare on (a successor's pred_token):
	 * slot 0's store also makes the in-line attempts (a redo), which replace the store's own
	 * before an unknown outcome here is read. */
	char token[FS_STORE_TOKEN_SIZE];
};

struct counters {
	int64_t records, fresh, repeats, conflicts, invalid, sale, expired, ticks, batches, fenced,
		redo, retries, unknown, unknown_committed, answered_again, skipped_stale, gaps,
		published, delivery_failed;
	int64_t holds_forgotten; /* ended holds dropped from memory (fs_core_forget_ended) */
	/* the partitioning rule: records forwarded to their partition (and the copies sent,
	 * again after a restart included), records rejected wrong_partition */
	int64_t forwarded, forwards_sent, wrong_partition;
	int64_t refused;	  /* records the store refused for good, rejected store_refused */
	int64_t expiries_refused; /* holds whose expiry the store refused: held, off the clock */
	int64_t joins, admitted;  /* the waiting rooms' (issue 33): joins read, admissions made */
	/* The metrics' failed batch transactions: each attempt that did not commit, once, by the
	 * cause its outcome names (count_attempt). */
	int64_t tx_failed[TX_CAUSES];
	int64_t us_lookup, us_decide, us_commit, us_publish; /* time spent per step */
	int64_t us_commit_max;	/* the slowest batch transaction (a stalled WAL flush shows) */
	int64_t lookups_forced; /* batches redone with a lookup: an id was decided elsewhere */
	int64_t batches_behind; /* batches past batch.max (batch.max.behind: a backlog) */
	int64_t stacked;	/* batches decided on top of one of theirs in flight */
	int64_t stacked_redone; /* of those, decided again: the one before did not commit */
	/* The metrics endpoint's (metrics.c; counted only with metrics.listen set): first
	 * decisions by record kind and outcome, rejects by reason, batch sizes and transaction
	 * times. */
	int64_t decided[METRIC_KINDS][METRIC_OUTCOMES];
	struct {
		char reason[METRIC_REASON_LEN];
		int64_t n;
	} rejects[METRIC_REASONS_MAX];
	int n_reasons;
	int64_t rejects_other;
	struct fs_prom_hist batch_records, commit_seconds;
};

/* One result on its way out in a batch produce (publisher.c fills it, io.c sends it). */
struct fs_out {
	const char *key;
	size_t key_len;
	size_t at, len; /* the body: offsets into worker.results */
	bool failed;	/* not queued by the batch call: sent on its own */
};

struct worker {
	struct fs_config cfg;
	struct fs_record_limits limits;
	struct fs_record_ext ext; /* the parse's scratch: a cart record's lines or message */
	struct wio *io;
	struct fs_store *store;
	struct part *parts[PARTITIONS_MAX];
	/* The ids of the partitions in parts[] that exist, ascending: the loop runs once per
	 * record, and walking all PARTITIONS_MAX slots cost microseconds each time. */
	int32_t part_ids[PARTITIONS_MAX];
	int n_parts;
	struct fs_buf out;
	/* A batch's results, produced in one call: the bodies one after another, and where each
	 * one is (the edges copy both). */
	struct fs_buf results;
	struct fs_out *outs;
	uint32_t outs_cap;
	struct counters n;
	bool metrics;	  /* metrics.listen is set: batches are counted for the endpoint */
	int64_t start_ms; /* the wall clock at start (the metrics) */
	struct inflight *orphans;
	int64_t last_stats_ms;
	/* The misrouted records' warning: at most one a minute, with the count since the last. */
	int64_t misrouted_warned_ms, misrouted_warned_n;

	/* commit.overlap: up to `depth` committer threads each send one decided batch's
	 * transaction while this thread goes on reading, parsing and (at depth 2) deciding the
	 * next batch on top of the state the one in flight will commit. `fly` lists the slots
	 * in flight in the order their batches were handed over; they are finished in that
	 * order. Every other store call here first waits for all of them (commit_wait): the
	 * store (w->store, slot 0's connection) is then this thread's. */
	int depth;
	struct slot slots[SLOTS_MAX];
	int fly[SLOTS_MAX];
	int n_fly;
	struct extras ex; /* the in-line path's */
	/* trace.batches: the file (NULL: off), and the trace of the batch batch_done answers
	 * (NULL: none, a batch redone after a failure is not traced). */
	FILE *trace;
	/* The waiting room's key ring (admission.keys; issue 33), when has_keys: every
	 * partition's core verifies with it, the publisher signs with it. */
	struct fs_keyring keys;
	bool has_keys;
	const struct btrace *tr_done;
	/* trace.batches: when the last poll began (wall us). */
	int64_t poll_start;

	/* --replay (rebuild.c): decide the log into the database from the stored offsets to the
	 * log end (read at start), as the live worker would, but publish nothing; then exit. */
	bool replay;
	int64_t replay_end[PARTITIONS_MAX];
	int64_t replay_from[PARTITIONS_MAX];
	int64_t replay_start[PARTITIONS_MAX]; /* the offset each is assigned from */
	int replay_parts;
	int64_t replay_total, replay_start_ms, replay_last_ms;
};

#endif
