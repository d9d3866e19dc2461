/* top.h: `flashsale top`, a live view of a running sale. top.c is the command: its options,
 * the stock topic's reader, the scrapes, the refresh loop and the terminal; topshow.c is what
 * it shows, as a screen or as one JSON object, from the state below (no I/O there). */
#ifndef FS_CLI_TOP_H
#define FS_CLI_TOP_H

#include "cli/scrape.h"
#include "cli/skutable.h"
#include "core/buf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum {
	TOP_URL_MAX = 256,
	TOP_SKUS_ARGS_MAX = 100, /* SKUs named on the command line */
	TOP_JSON_SKUS_MAX = 100, /* SKUs listed in the JSON; the rest are summed */
	TOP_ERR_MAX = 256,
};

struct top {
	/* What was asked. */
	int n_urls;
	char urls[SCRAPE_ENDPOINTS_MAX][TOP_URL_MAX];
	const char *const *skus; /* the SKU arguments, n_skus of them */
	int n_skus;
	int64_t interval_ms;
	bool keys; /* q quits (stdin is a terminal) */
	const char *stock_topic, *group, *intents_topic;
	/* The stock topic. */
	struct skutable table;
	int stock_parts;       /* its partitions; 0 until its metadata is read */
	int stock_read;	       /* partitions read to where they ended when assigned */
	int64_t stock_records; /* records read */
	char stock_error[TOP_ERR_MAX];
	/* The scrapes: cur now, prev one refresh before (n_urls each). */
	struct scrape *cur, *prev;
	bool have_prev;
	double seconds;	 /* between the two */
	int64_t time_ms; /* wall clock of the last scrape */
	struct scrape_view view;
};

/* The view as a screen of at most width x height characters into out: lines ending with
 * "\n"; with ansi, each line also clears the rest of its row ("\033[K") and the screen is
 * cleared below the last. Text from outside (SKUs, errors, URLs) is written with anything but
 * printable ASCII replaced by '?'. */
void top_screen(const struct top *t, int width, int height, bool ansi, struct fs_buf *out);
/* The view as one JSON object (a new reference; NULL when out of memory). */
json_t *top_json(const struct top *t);

#endif
