/* scrape.h: what `flashsale top` makes of the metrics endpoints (docs/reference/metrics.md).
 *
 * A scrape is one endpoint's numbers at one moment, taken from its parsed samples: a worker's
 * records, its partitions (next offset, lag, records decided), the histogram of its batches'
 * commit times and its decisions by outcome; a gateway's requests, edge answers, waiting
 * requests and connections. Between two scrapes of an endpoint `seconds` apart, a counter's
 * increase and rate: a counter that went down, or a process whose start time changed, started
 * again from 0, and its increase is its value (as Prometheus's rate() takes a reset). Over
 * several endpoints, a view: each partition from the worker that has it (the one with the
 * highest next offset when two report it during a hand-over), the commit histograms'
 * increases summed bucket by bucket with a quantile estimated from them as Prometheus's
 * histogram_quantile() does, the gateways summed.
 *
 * Pure: no I/O, no clock (the caller gives the seconds). Bounded: partitions 0 to
 * SCRAPE_PARTS_MAX - 1, SCRAPE_BUCKETS_MAX buckets, SCRAPE_OUTCOMES_MAX outcomes; a sample
 * past a bound is counted in `dropped`, never stored. */
#ifndef FS_CLI_SCRAPE_H
#define FS_CLI_SCRAPE_H

#include "cli/promtext.h"

#include <stdbool.h>
#include <stdint.h>

enum {
	SCRAPE_PARTS_MAX = 1024, /* as `flashsale topics create --partitions` */
	SCRAPE_BUCKETS_MAX = 32,
	SCRAPE_OUTCOMES_MAX = 32,
	SCRAPE_ENDPOINTS_MAX = 16,
	SCRAPE_ERR_MAX = 256,
};

/* A histogram as served: cumulative counts by ascending upper bound (le). */
struct scrape_hist {
	int n;
	double le[SCRAPE_BUCKETS_MAX];
	double count[SCRAPE_BUCKETS_MAX];
	double sum, total; /* _sum and _count */
};

struct scrape_part {
	bool present; /* some sample named the partition */
	bool has_next, has_lag, has_records;
	double next_offset, lag, records;
};

struct scrape_outcome {
	char name[PROMTEXT_VALUE_MAX];
	double n;
};

struct scrape {
	bool up;		    /* answered, and its text parsed */
	char error[SCRAPE_ERR_MAX]; /* why not */
	bool worker, gateway;	    /* flashsale_worker_* / flashsale_gateway_* samples seen */
	double start_time;	    /* seconds since the epoch; 0: not served */
	char group[PROMTEXT_VALUE_MAX], topic[PROMTEXT_VALUE_MAX]; /* flashsale_worker_info */
	double records, holds_live, assigned, failed;
	struct scrape_part parts[SCRAPE_PARTS_MAX]; /* by partition id */
	struct scrape_hist commit;		    /* flashsale_batch_commit_seconds */
	int n_outcomes;
	struct scrape_outcome outcomes[SCRAPE_OUTCOMES_MAX]; /* decisions, summed over types */
	/* The gateway's. */
	double gw_requests, gw_edge_sold_out, gw_edge_closed, gw_long_polls, gw_streams;
	double gw_connections, gw_published, gw_ready;
	int64_t dropped; /* samples past a bound, or with a label out of range */
};

/* Empties s (down, nothing seen). */
void scrape_reset(struct scrape *s);
/* Takes one sample into the scrape ctx (a promtext_fn; always 0). Names it does not use are
 * ignored. */
int scrape_add(const struct promtext_sample *sample, void *ctx);
/* Parses an endpoint's text into s: up, or down with the parser's error. */
void scrape_text(struct scrape *s, const char *text, size_t len);

/* The increase of a counter from `before` to `now`: now - before, or now when it went down
 * or restarted (the process restarted: its counters started again from 0). */
double scrape_increase(double before, double now, bool restarted);
/* Whether the endpoint restarted between the two scrapes (another start time). */
bool scrape_restarted(const struct scrape *prev, const struct scrape *cur);
/* cur - prev bucket by bucket into out; cur itself when restarted or when their bounds
 * differ. */
void scrape_hist_increase(const struct scrape_hist *prev, const struct scrape_hist *cur,
			  bool restarted, struct scrape_hist *out);
/* Adds b into a bucket by bucket (a empty: a copy of b). -EINVAL when the bounds differ (a is
 * left as it was), else 0. */
int scrape_hist_add(struct scrape_hist *a, const struct scrape_hist *b);
/* The q-quantile (0 <= q <= 1) of the observations, as Prometheus's histogram_quantile():
 * linear within the bucket the rank falls in (the first bucket from 0), the highest finite
 * bound when it falls in +Inf. NaN without observations, without a +Inf bucket, or with
 * fewer than two buckets. */
double scrape_quantile(double q, const struct scrape_hist *h);

/* What the batches of a histogram (its increase, or its whole) amount to: mean and p99 in
 * seconds, NaN without batches. */
struct scrape_commits {
	double batches, mean_s, p99_s;
};
void scrape_commits_of(const struct scrape_hist *h, struct scrape_commits *out);

/* What each endpoint was found to be, in the last scrape. */
enum scrape_role {
	SCRAPE_DOWN,	/* no answer, or text that did not parse */
	SCRAPE_WORKER,	/* a worker of the sale (the group and topic given) */
	SCRAPE_FOREIGN, /* a worker of another group or intents topic: left out */
	SCRAPE_GATEWAY,
	SCRAPE_OTHER, /* up, but no flashsale metric in its text */
};

struct scrape_view_part {
	int32_t id;
	int owner;  /* the endpoint reporting it */
	int others; /* endpoints reporting it too (a hand-over under way) */
	bool has_lag, has_rate;
	double lag, records, next_offset, rate;
};

struct scrape_view {
	double seconds; /* between the two scrapes; 0: one scrape, no rates */
	enum scrape_role roles[SCRAPE_ENDPOINTS_MAX];
	int workers, gateways; /* endpoints of each role */
	int n_parts;
	struct scrape_view_part parts[SCRAPE_PARTS_MAX]; /* ascending id */
	bool has_rate;					 /* a worker answered both times */
	double records, records_rate, lag, holds_live;
	struct scrape_hist commit_interval, commit_total;
	struct scrape_commits commits_interval, commits_total;
	bool mixed_buckets; /* workers with other bucket bounds: left out of the sums */
	int n_outcomes;
	struct scrape_outcome outcomes[SCRAPE_OUTCOMES_MAX]; /* decisions in the interval */
	bool gw_has_rate;
	double gw_requests, gw_requests_rate, gw_edge_sold_out, gw_edge_closed, gw_edge_rate;
	double gw_long_polls, gw_streams, gw_connections, gw_ready;
	int64_t dropped;
};

/* The view over n endpoints (n <= SCRAPE_ENDPOINTS_MAX): cur[i] now, prev[i] `seconds` before
 * (prev NULL or seconds <= 0: no rates; an endpoint down either time gives none). A worker
 * serving another group or intents topic than group / topic (NULL: any) is left out. */
void scrape_view(const struct scrape *cur, const struct scrape *prev, int n, double seconds,
		 const char *group, const char *topic, struct scrape_view *out);

#endif
