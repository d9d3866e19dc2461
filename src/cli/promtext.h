/* promtext.h: a reader of the Prometheus text exposition format, version 0.0.4 (prometheus.io,
 * "Exposition formats"), for what `flashsale top` scrapes: one sample a line, `name`, an
 * optional `{label="value",...}` (a value escapes backslash, double quote and newline as \\,
 * \" and \n; a trailing comma is allowed), the value (a decimal float, +Inf, -Inf or NaN) and
 * an optional timestamp (integer milliseconds). `#` lines (HELP, TYPE, comments) and blank
 * lines carry no sample. Anything else is an error that names the line: a line, a name, a label
 * value or the number of labels past its bound, an unknown escape, a NUL byte, a missing quote.
 *
 * Pure: no I/O, no allocation; a sample is a fixed-size struct the caller owns. */
#ifndef FS_CLI_PROMTEXT_H
#define FS_CLI_PROMTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	PROMTEXT_LINE_MAX = 4096, /* bytes of a line, its newline not counted */
	PROMTEXT_NAME_MAX = 128,  /* bytes of a metric or label name, its NUL counted */
	PROMTEXT_VALUE_MAX = 256, /* bytes of a label value once unescaped, its NUL counted */
	PROMTEXT_NUMBER_MAX = 64, /* bytes of a sample's value or timestamp */
	PROMTEXT_LABELS_MAX = 8,  /* labels of one sample */
	PROMTEXT_ERR_MAX = 160,	  /* an error message, its NUL counted */
};

struct promtext_label {
	char name[PROMTEXT_NAME_MAX];
	char value[PROMTEXT_VALUE_MAX];
};

struct promtext_sample {
	char name[PROMTEXT_NAME_MAX];
	struct promtext_label labels[PROMTEXT_LABELS_MAX];
	int n_labels;
	double value;
	bool has_timestamp;
	int64_t timestamp_ms;
};

/* One line, without its newline: 1 with the sample in *out, 0 for a line that carries none
 * (blank, or a # line), -EINVAL with why in err. */
int promtext_line(const char *line, size_t len, struct promtext_sample *out,
		  char err[PROMTEXT_ERR_MAX]);

/* Called with each sample in turn; a non-zero return stops the parse and is returned. */
typedef int (*promtext_fn)(const struct promtext_sample *s, void *ctx);

/* Every line of text[0..len) (the last one may lack its newline): 0 when every line parsed,
 * fn's non-zero return, or -EINVAL with "line N: why" in err (the samples before it were
 * given to fn). */
int promtext_parse(const char *text, size_t len, promtext_fn fn, void *ctx,
		   char err[PROMTEXT_ERR_MAX]);

/* The value of the sample's label `name`, or NULL when it has none. */
const char *promtext_label(const struct promtext_sample *s, const char *name);

#endif
