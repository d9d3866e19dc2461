/* trace.h: trace.batches, the account of each batch's time (issue 32): one line per batch,
 * written once its results are all delivered, with the wall-clock moments it went through.
 * Off (every call a no-op) unless trace.batches names a file. Owns worker.trace and the
 * btrace fields of part, slot and inflight; docs/reference/operations.md reads a line. */
#ifndef FS_WORKER_TRACE_H
#define FS_WORKER_TRACE_H

#include "worker/context.h"

/* Opens cfg.trace_batches for appending (0, or -errno after logging why). */
int trace_open(struct worker *w);
void trace_close(struct worker *w);
/* The wall clock in microseconds when tracing, else 0 (no clock read). */
int64_t trace_now(const struct worker *w);
/* A record read into p's pending batch (its first starts the batch's trace). */
void trace_read(struct worker *w, struct part *p, int64_t ts_ms);
/* p's pending batch is decided (from DECIDE on) and handed to a committer, or (in_line) its
 * transaction starts now on this thread. */
void trace_handed(struct worker *w, struct part *p, int64_t decide, bool in_line);
/* The batch's results were all delivered: its line. */
void trace_write(struct worker *w, const struct btrace *t);

#endif
