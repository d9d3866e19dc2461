/* metrics.h: what the worker counts for its metrics endpoint (metrics.listen;
 * docs/reference/metrics.md), and the text it serves. Both run on the main thread, on the
 * counters it already owns: a committed batch's decisions by type and outcome, its rejects by
 * reason, its size and its transaction's time; the text is rendered when a scrape asks
 * (io.c hands it over), so that no counter is read across threads. */
#ifndef FS_WORKER_METRICS_H
#define FS_WORKER_METRICS_H

#include "worker/context.h"

/* Starts the histograms (once, before the loop). */
void metrics_init(struct counters *n);
/* A committed batch: its decisions by type and outcome, rejects by reason, its size. */
void metrics_count_batch(struct counters *n, const struct fs_batch *b);
/* One batch transaction took us microseconds. */
void metrics_count_commit(struct counters *n, int64_t us);
/* Appends the worker's metrics text (the Prometheus text format) to out. */
void metrics_render(struct worker *w, struct fs_buf *out);

#endif
