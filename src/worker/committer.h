/* committer.h: commit.overlap. Up to `depth` committer threads each render and send one
 * decided batch's transaction on their own connection while the loop reads, parses and (at
 * depth 2) decides the next batch on top of the state the one in flight will commit. Batches
 * are finished in the order they were handed over; a failure recovers the partition's whole
 * chain in flight (its later batches were decided on top of it). Owns worker.slots, fly,
 * n_fly, depth and part.n_fly, ahead, lent. */
#ifndef FS_WORKER_COMMITTER_H
#define FS_WORKER_COMMITTER_H

#include "worker/context.h"

void committers_start(struct worker *w);
/* Ends the committer threads (nothing is in flight): later batches commit in line. */
void committers_stop(struct worker *w);
void committers_free(struct worker *w);
/* Decides p->batch and hands its transaction to a committer (waiting for a free one), or
 * commits it in line (commit.overlap 0, or a lookup needed). */
void part_process_start(struct worker *w, struct part *p);
/* Finishes the oldest transaction in flight (waiting for it if block): false if it is not
 * done yet or none is in flight. commit_finish: every one that is done, in order (block: all);
 * commit_wait: all, after which the worker's store is the loop's. */
bool finish_oldest(struct worker *w, bool block);
void commit_finish(struct worker *w, bool block);
void commit_wait(struct worker *w);
/* A committer is free to take a batch. */
bool slot_free(const struct worker *w);

#endif
