/* prom.c: the Prometheus text exposition writers (see prom.h). */
#include "io/prom.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>

const double fs_prom_seconds_bounds[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
					 0.2,	0.5,   1,     2,    5,	  10};
const int fs_prom_seconds_n = sizeof fs_prom_seconds_bounds / sizeof fs_prom_seconds_bounds[0];
const double fs_prom_records_bounds[] = {1,   2,   5,	 10,   20,   50,   100,
					 200, 500, 1000, 2000, 5000, 10000};
const int fs_prom_records_n = sizeof fs_prom_records_bounds / sizeof fs_prom_records_bounds[0];

void fs_prom_family(struct fs_buf *b, const char *name, const char *type, const char *help)
{
	/* HELP text escapes backslash and newline; ours are plain sentences. */
	fs_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void escaped(struct fs_buf *b, const char *s)
{
	for (const char *p = s; *p; p++) {
		if (*p == '\\' || *p == '"')
			fs_buf_add(b, "\\", 1);
		if (*p == '\n')
			fs_buf_add(b, "\\n", 2);
		else
			fs_buf_add(b, p, 1);
	}
}

static void labels_open(struct fs_buf *b, const struct fs_prom_label *labels, int n, bool more)
{
	assert(n >= 0 && n <= FS_PROM_LABELS_MAX);
	if (n == 0 && !more)
		return;
	fs_buf_add(b, "{", 1);
	for (int i = 0; i < n; i++) {
		if (i)
			fs_buf_add(b, ",", 1);
		fs_buf_str(b, labels[i].name);
		fs_buf_add(b, "=\"", 2);
		escaped(b, labels[i].value);
		fs_buf_add(b, "\"", 1);
	}
	if (!more)
		fs_buf_add(b, "}", 1);
}

/* name{labels} and the space before the value. */
static void sample_open(struct fs_buf *b, const char *name, const char *suffix,
			const struct fs_prom_label *labels, int n)
{
	fs_buf_str(b, name);
	fs_buf_str(b, suffix);
	labels_open(b, labels, n, false);
	fs_buf_add(b, " ", 1);
}

void fs_prom_int(struct fs_buf *b, const char *name, const struct fs_prom_label *labels, int n,
		 int64_t value)
{
	sample_open(b, name, "", labels, n);
	fs_buf_int(b, value);
	fs_buf_add(b, "\n", 1);
}

static void number(struct fs_buf *b, double v)
{
	if (isinf(v))
		fs_buf_str(b, v > 0 ? "+Inf" : "-Inf");
	else if (isnan(v))
		fs_buf_str(b, "NaN");
	else
		fs_buf_printf(b, "%.17g", v);
}

void fs_prom_double(struct fs_buf *b, const char *name, const struct fs_prom_label *labels, int n,
		    double value)
{
	sample_open(b, name, "", labels, n);
	number(b, value);
	fs_buf_add(b, "\n", 1);
}

void fs_prom_one(struct fs_buf *b, const char *name, const char *type, const char *help,
		 int64_t value)
{
	fs_prom_family(b, name, type, help);
	fs_prom_int(b, name, NULL, 0, value);
}

void fs_prom_hist_init(struct fs_prom_hist *h, const double *bounds, int n)
{
	assert(n > 0 && n <= FS_PROM_BUCKETS_MAX);
	*h = (struct fs_prom_hist){.bounds = bounds, .n = n};
}

void fs_prom_hist_observe(struct fs_prom_hist *h, double v)
{
	int i = 0;
	while (i < h->n && v > h->bounds[i])
		i++;
	h->counts[i]++;
	h->sum += v;
	h->count++;
}

void fs_prom_hist_write(struct fs_buf *b, const char *name, const struct fs_prom_label *labels,
			int n, const struct fs_prom_hist *h)
{
	uint64_t cum = 0;
	for (int i = 0; i <= h->n; i++) {
		cum += h->counts[i];
		fs_buf_str(b, name);
		fs_buf_add(b, "_bucket", 7);
		labels_open(b, labels, n, true);
		if (n)
			fs_buf_add(b, ",", 1);
		fs_buf_add(b, "le=\"", 4);
		if (i < h->n) /* %g: "0.1", where %.17g would write 0.10000000000000001 */
			fs_buf_printf(b, "%g", h->bounds[i]);
		else
			fs_buf_str(b, "+Inf");
		fs_buf_add(b, "\"} ", 3);
		fs_buf_int(b, (int64_t)cum);
		fs_buf_add(b, "\n", 1);
	}
	sample_open(b, name, "_sum", labels, n);
	number(b, h->sum);
	fs_buf_add(b, "\n", 1);
	sample_open(b, name, "_count", labels, n);
	fs_buf_int(b, (int64_t)h->count);
	fs_buf_add(b, "\n", 1);
}
