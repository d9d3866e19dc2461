/* pipeline.h: one batch from decided to answered: repeats from memory (or a lookup), the
 * pure decisions, the commit and its outcome (an unknown one read back by the commit token),
 * a redo on a reloaded state, then the results (DESIGN.md section 4); and the records read
 * again below the stored offset, answered with their stored decisions. */
#ifndef FS_WORKER_PIPELINE_H
#define FS_WORKER_PIPELINE_H

#include "worker/context.h"

/* Decides and commits b (the partition's batch, or one handed to a committer). Returns when
 * it is committed, fenced, or on shutdown: 0 committed on the first attempt, 1 committed after
 * the state was reloaded and b decided again, -1 not committed (fenced, or shutting down; the
 * partition's pending records are dropped then). rc0 is the outcome of a first attempt
 * already made, or -1 to make it here; sl is the committer that made it (its connection, its
 * batch's meta and extras), or NULL. */
int part_process_from(struct worker *w, struct part *p, struct fs_batch *b, int rc0,
		      struct slot *sl);
/* The part of a commit attempt before the commit: repeats from memory (or a lookup), then
 * the decisions. 0, or FS_COMMIT_RETRY (the core's state must be reloaded). in_line: nothing
 * is in flight on the worker's store, which a lookup then uses; otherwise
 * a batch that needs one is not decided: PART_DECIDE_IN_LINE (commit it in line). */
enum { PART_DECIDE_IN_LINE = -2 };
int part_decide(struct worker *w, struct part *p, struct fs_batch *b, bool in_line);
/* The dedupe cache learns the batch's new decisions. */
void seen_add_batch(struct part *p, const struct fs_batch *b);
/* The partition's meta once b, decided on the state `before` describes, is committed. */
struct fs_part_meta meta_after(const struct part *p, const struct fs_part_meta *before,
			       const struct fs_batch *b);
/* b is committed (m: the partition's meta now): answer its records, produce its extras. */
void batch_done(struct worker *w, struct part *p, struct fs_batch *b, const struct fs_part_meta *m,
		const struct extras *ex);
void count_commit(struct counters *n, int64_t us);
/* An attempt's outcome rc (an enum fs_commit_result) on the store att: a failure is counted
 * once, by its cause, for the metrics. Call it before an unknown outcome is resolved. */
void count_attempt(struct worker *w, const struct fs_store *att, int rc);
/* Answers the partition's again batch with the stored decisions (nothing is written). The
 * store must be this thread's: no commit in flight (commit_wait). */
void part_answer_again(struct worker *w, struct part *p);

#endif
