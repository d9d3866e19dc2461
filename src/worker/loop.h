/* loop.h: the worker's loop: read a record, route it into its partition's batch (making
 * room), finish the commits that are done, decide the batches that are due, move the replied
 * offsets, append ticks, log the stats; and what a rebalance does to the partitions. */
#ifndef FS_WORKER_LOOP_H
#define FS_WORKER_LOOP_H

#include "worker/context.h"

/* Runs until asked to stop (or, for a rebuild, until the log's end), then decides what was
 * read. 0, or -ERANGE: a stored offset is outside the log. */
int loop_run(struct worker *w);
/* Partitions ids[0..n) are assigned: each is loaded and offsets[i] set to where it starts
 * (left as it was if shutting down meanwhile). */
void loop_assigned(struct worker *w, const int32_t *ids, int64_t *offsets, int n);
/* Partitions ids[0..n) are revoked: their results delivered, replied offsets saved, state
 * forgotten. */
void loop_revoked(struct worker *w, const int32_t *ids, int n);
void log_stats(struct worker *w, const char *when);
/* Sessions of stalled workers this worker's connections ended (the stats, the metrics). */
int64_t loop_stalled_broken(const struct worker *w);
/* Frees what the worker holds (partitions, deliveries in flight, committer slots, buffers) and
 * closes its store connections, with no other I/O: teardown's end, after the committers are
 * stopped and the edges closed (and all a simulated crash frees). */
void loop_free(struct worker *w);

#endif
