/* prom.h: the Prometheus text exposition format, version 0.0.4 (prometheus.io, "Exposition
 * formats"): a family's # HELP and # TYPE lines, then its samples, `name{k="v",...} value`,
 * label values escaped (backslash, double quote, newline). Writers only, appending to an
 * fs_buf (its sticky failure flag says whether it all fit); and a histogram with fixed bucket
 * bounds, observed by its one owner. No I/O, no clock, no locks: the caller renders from
 * values it owns. The names served are in docs/reference/metrics.md. */
#ifndef FS_PROM_H
#define FS_PROM_H

#include "core/buf.h"

#include <stdint.h>

/* One label pair of a sample; a sample has at most FS_PROM_LABELS_MAX. */
struct fs_prom_label {
	const char *name;
	const char *value;
};
enum { FS_PROM_LABELS_MAX = 3, FS_PROM_BUCKETS_MAX = 16 };

/* # HELP and # TYPE (type: counter, gauge or histogram). help is one line of text. */
void fs_prom_family(struct fs_buf *b, const char *name, const char *type, const char *help);
/* One sample with n labels (0..FS_PROM_LABELS_MAX). */
void fs_prom_int(struct fs_buf *b, const char *name, const struct fs_prom_label *labels, int n,
		 int64_t value);
void fs_prom_double(struct fs_buf *b, const char *name, const struct fs_prom_label *labels, int n,
		    double value);
/* A family of one unlabelled sample: # HELP, # TYPE and the value. */
void fs_prom_one(struct fs_buf *b, const char *name, const char *type, const char *help,
		 int64_t value);

/* A histogram: n upper bounds, ascending (the +Inf bucket is implied); counts are per
 * bucket, not cumulative (the writer sums them). */
struct fs_prom_hist {
	const double *bounds;
	int n;
	uint64_t counts[FS_PROM_BUCKETS_MAX + 1]; /* the last one: above every bound */
	double sum;
	uint64_t count;
};
void fs_prom_hist_init(struct fs_prom_hist *h, const double *bounds, int n);
void fs_prom_hist_observe(struct fs_prom_hist *h, double v);
/* name_bucket{labels,le="..."} cumulative, then name_sum and name_count (no # lines: write
 * the family first, once for every label set). */
void fs_prom_hist_write(struct fs_buf *b, const char *name, const struct fs_prom_label *labels,
			int n, const struct fs_prom_hist *h);

/* The bucket bounds the worker and the gateway use: seconds for latencies (1 ms .. 10 s),
 * and records for batch sizes (1 .. 10,000). */
extern const double fs_prom_seconds_bounds[];
extern const int fs_prom_seconds_n;
extern const double fs_prom_records_bounds[];
extern const int fs_prom_records_n;

#endif
