/* test_top: the arithmetic of `flashsale top`, without services: the scrapes read from the
 * endpoints' text (src/cli/scrape.c), counters' increases across a restart, histogram
 * increases, the quantile as Prometheus's histogram_quantile() estimates it, the view over
 * several workers and gateways (each partition from the worker that has it, a foreign or
 * down endpoint left out), and the stock table (src/cli/skutable.c): the latest record per
 * SKU, an older copy dropped, bad records counted, its bound, the rows picked and the rest
 * summed; and what is shown of it all (src/cli/topshow.c): a screen that fits its size whatever
 * the counts, with nothing from outside that moves the cursor, and the JSON. */
#include "check.h"
#include "cli/scrape.h"
#include "cli/skutable.h"
#include "cli/top.h"

#include <errno.h>
#include <math.h>

static bool near(double a, double b)
{
	return fabs(a - b) < 1e-9 * (fabs(a) + fabs(b) + 1);
}

#define CHECK_NEAR(a, b)                                                                           \
	do {                                                                                       \
		double a_ = (a), b_ = (b);                                                         \
		char d_[96];                                                                       \
		snprintf(d_, sizeof d_, "%.12g != %.12g", a_, b_);                                 \
		check_report(near(a_, b_), __FILE__, __LINE__, #a " ~ " #b, d_);                   \
	} while (0)

static struct scrape_hist hist(int n, const double *le, const double *count)
{
	struct scrape_hist h = {.n = n};
	for (int i = 0; i < n; i++) {
		h.le[i] = le[i];
		h.count[i] = count[i];
	}
	h.total = n ? count[n - 1] : 0;
	return h;
}

static void test_quantile(void)
{
	const double le[] = {0.001, 0.002, 0.005, 0.01, INFINITY};
	struct scrape_hist h = hist(5, le, (const double[]){0, 0, 1, 2, 2});
	/* rank 1.98 of 2 falls in (0.005, 0.01], 0.98 of the way through its one observation. */
	CHECK_NEAR(scrape_quantile(0.99, &h), 0.005 + 0.005 * 0.98);
	CHECK_NEAR(scrape_quantile(0.5, &h), 0.005);
	/* In the +Inf bucket: the highest finite bound. */
	h = hist(3, (const double[]){0.1, 1, INFINITY}, (const double[]){0, 0, 5});
	CHECK_NEAR(scrape_quantile(0.99, &h), 1);
	/* In the first bucket: from 0. */
	h = hist(3, (const double[]){0.5, 1, INFINITY}, (const double[]){10, 10, 10});
	CHECK_NEAR(scrape_quantile(0.5, &h), 0.25);
	/* Counts going down across buckets are raised to the largest before them. */
	h = hist(3, (const double[]){1, 2, INFINITY}, (const double[]){5, 3, 6});
	CHECK_NEAR(scrape_quantile(0.5, &h), 0.6);
	CHECK_NEAR(scrape_quantile(0.9, &h), 2);
	/* A first bound at or below 0 is the answer when the rank falls there. */
	h = hist(2, (const double[]){-1, INFINITY}, (const double[]){3, 3});
	CHECK_NEAR(scrape_quantile(0.5, &h), -1);
	/* No answer: no observations, no +Inf bucket, a single bucket. */
	h = hist(3, (const double[]){0.5, 1, INFINITY}, (const double[]){0, 0, 0});
	CHECK(isnan(scrape_quantile(0.99, &h)));
	h = hist(2, (const double[]){0.5, 1}, (const double[]){1, 2});
	CHECK(isnan(scrape_quantile(0.99, &h)));
	h = hist(1, (const double[]){INFINITY}, (const double[]){4});
	CHECK(isnan(scrape_quantile(0.99, &h)));
	/* The commits of a histogram: batches, mean, p99. */
	h = hist(5, le, (const double[]){0, 0, 1, 2, 2});
	h.sum = 0.012;
	struct scrape_commits c;
	scrape_commits_of(&h, &c);
	CHECK_NEAR(c.batches, 2);
	CHECK_NEAR(c.mean_s, 0.006);
	CHECK_NEAR(c.p99_s, 0.0099);
	h.total = 0;
	scrape_commits_of(&h, &c);
	CHECK(c.batches == 0 && isnan(c.mean_s) && isnan(c.p99_s));
}

static void test_increase(void)
{
	CHECK_NEAR(scrape_increase(10, 15, false), 5);
	CHECK_NEAR(scrape_increase(10, 4, false), 4); /* went down: a reset, from 0 */
	CHECK_NEAR(scrape_increase(10, 15, true), 15);
	const double le[] = {0.1, INFINITY};
	struct scrape_hist a = hist(2, le, (const double[]){2, 3}),
			   b = hist(2, le, (const double[]){5, 7}), d;
	a.sum = 0.5;
	b.sum = 1.5;
	scrape_hist_increase(&a, &b, false, &d);
	CHECK(d.n == 2 && near(d.count[0], 3) && near(d.count[1], 4));
	CHECK_NEAR(d.sum, 1.0);
	CHECK_NEAR(d.total, 4);
	scrape_hist_increase(&a, &b, true, &d); /* restarted: all of b */
	CHECK(near(d.count[0], 5) && near(d.total, 7));
	scrape_hist_increase(&b, &a, false, &d); /* a count went down: a reset */
	CHECK(near(d.count[0], 2) && near(d.total, 3));
	struct scrape_hist other = hist(2, (const double[]){0.2, INFINITY}, (const double[]){9, 9});
	scrape_hist_increase(&a, &other, false, &d); /* other bounds: all of it */
	CHECK(near(d.count[0], 9));
	/* Sums bucket by bucket; other bounds refused; an empty one adds nothing. */
	struct scrape_hist sum = {0}, empty = {0};
	CHECK_INT(scrape_hist_add(&sum, &a), 0);
	CHECK_INT(scrape_hist_add(&sum, &b), 0);
	CHECK_INT(scrape_hist_add(&sum, &empty), 0);
	CHECK(near(sum.count[0], 7) && near(sum.count[1], 10) && near(sum.total, 10));
	CHECK_INT(scrape_hist_add(&sum, &other), -EINVAL);
	CHECK(near(sum.count[0], 7));
}

/* A worker's text: partitions given as "id:next:lag:records" (lag -1: not served). */
static void worker_text(struct scrape *s, const char *group, double start, double records,
			const char *parts, double held, double commit_fast, double commit_slow)
{
	static char text[16384];
	int n = snprintf(text, sizeof text,
			 "# TYPE flashsale_worker_info gauge\n"
			 "flashsale_worker_info{group=\"%s\",topic=\"intents\"} 1\n"
			 "flashsale_worker_start_time_seconds %.3f\n"
			 "flashsale_records_total %.0f\n"
			 "flashsale_decisions_total{type=\"buy\",outcome=\"held\"} %.0f\n"
			 "flashsale_decisions_total{type=\"buy\",outcome=\"sold_out\"} 7\n"
			 "flashsale_decisions_total{type=\"open\",outcome=\"applied\"} 1\n"
			 "flashsale_holds_live %.0f\n"
			 "flashsale_batch_commit_seconds_bucket{le=\"0.001\"} 0\n"
			 "flashsale_batch_commit_seconds_bucket{le=\"0.01\"} %.0f\n"
			 "flashsale_batch_commit_seconds_bucket{le=\"+Inf\"} %.0f\n"
			 "flashsale_batch_commit_seconds_sum %.3f\n"
			 "flashsale_batch_commit_seconds_count %.0f\n",
			 group, start, records, held, held, commit_fast, commit_fast + commit_slow,
			 commit_fast * 0.005 + commit_slow * 0.05, commit_fast + commit_slow);
	for (const char *p = parts; *p;) {
		int id, used = 0;
		double next, lag, recs;
		if (sscanf(p, "%d:%lf:%lf:%lf%n", &id, &next, &lag, &recs, &used) != 4)
			break;
		n += snprintf(text + n, sizeof text - (size_t)n,
			      "flashsale_partition_next_offset{partition=\"%d\"} %.0f\n"
			      "flashsale_partition_records_total{partition=\"%d\"} %.0f\n",
			      id, next, id, recs);
		if (lag >= 0)
			n += snprintf(text + n, sizeof text - (size_t)n,
				      "flashsale_partition_lag_records{partition=\"%d\"} %.0f\n",
				      id, lag);
		p += used;
		p += *p == ' ';
	}
	if (!CHECK(n < (int)sizeof text))
		return;
	scrape_text(s, text, (size_t)n);
}

static void test_scrape_text(void)
{
	static struct scrape s;
	worker_text(&s, "g", 100, 500, "0:300:2:300 3:200:-1:200", 20, 4, 1);
	CHECK(s.up && s.worker && !s.gateway);
	CHECK_STR(s.group, "g");
	CHECK_STR(s.topic, "intents");
	CHECK_NEAR(s.start_time, 100);
	CHECK_NEAR(s.records, 500);
	CHECK(s.parts[0].present && s.parts[0].has_lag && near(s.parts[0].lag, 2));
	CHECK(s.parts[3].present && !s.parts[3].has_lag && near(s.parts[3].records, 200));
	CHECK(!s.parts[1].present);
	CHECK_INT(s.commit.n, 3);
	CHECK(isinf(s.commit.le[2]) && near(s.commit.count[1], 4) && near(s.commit.total, 5));
	CHECK_INT(s.n_outcomes, 3);
	CHECK_STR(s.outcomes[0].name, "held");
	CHECK_INT(s.dropped, 0);
	/* Buckets out of order are put in order; a partition out of range is dropped. */
	const char *t = "flashsale_batch_commit_seconds_bucket{le=\"+Inf\"} 3\n"
			"flashsale_batch_commit_seconds_bucket{le=\"0.5\"} 2\n"
			"flashsale_partition_lag_records{partition=\"99999\"} 1\n"
			"flashsale_partition_lag_records{partition=\"-1\"} 1\n"
			"flashsale_partition_lag_records 1\n"
			"other_metric{partition=\"1\"} 5\n";
	scrape_text(&s, t, strlen(t));
	CHECK(s.up && s.commit.n == 2 && near(s.commit.le[0], 0.5) && isinf(s.commit.le[1]));
	CHECK_INT(s.dropped, 3);
	CHECK(!s.parts[1].present);
	/* Text that does not parse: down, with the parser's line. */
	t = "flashsale_records_total 5\nflashsale_x{a=\"\\z\"} 1\n";
	scrape_text(&s, t, strlen(t));
	CHECK(!s.up);
	CHECK_STR(s.error, "bad metrics text: line 2: unknown escape \\z in a label value");
	CHECK_NEAR(s.records, 0);
	/* A gateway's. */
	t = "flashsale_gateway_info{topic=\"intents\"} 1\n"
	    "flashsale_gateway_start_time_seconds 50\n"
	    "flashsale_gateway_requests_total{route=\"buy\",code=\"202\"} 30\n"
	    "flashsale_gateway_requests_total{route=\"sku\",code=\"200\"} 12\n"
	    "flashsale_gateway_edge_answers_total{outcome=\"sold_out\"} 9\n"
	    "flashsale_gateway_edge_answers_total{outcome=\"closed\"} 1\n"
	    "flashsale_gateway_waiting_requests{kind=\"long_poll\"} 4\n"
	    "flashsale_gateway_waiting_requests{kind=\"stream\"} 2\n"
	    "flashsale_gateway_connections 6\n"
	    "flashsale_gateway_ready 1\n";
	scrape_text(&s, t, strlen(t));
	CHECK(s.up && s.gateway && !s.worker);
	CHECK(near(s.gw_requests, 42) && near(s.gw_edge_sold_out, 9) && near(s.gw_edge_closed, 1));
	CHECK(near(s.gw_long_polls, 4) && near(s.gw_streams, 2) && near(s.gw_connections, 6));
	CHECK_NEAR(s.start_time, 50);
}

static void gateway_text(struct scrape *s, double requests, double edge)
{
	char text[512];
	int n = snprintf(text, sizeof text,
			 "flashsale_gateway_start_time_seconds 50\n"
			 "flashsale_gateway_requests_total{route=\"buy\",code=\"202\"} %.0f\n"
			 "flashsale_gateway_edge_answers_total{outcome=\"sold_out\"} %.0f\n"
			 "flashsale_gateway_waiting_requests{kind=\"long_poll\"} 3\n"
			 "flashsale_gateway_ready 1\n",
			 requests, edge);
	scrape_text(s, text, (size_t)n);
}

/* Five endpoints: workers A and B (B owns partition 1 during a hand-over: its next offset is
 * higher; B restarted between the scrapes), a worker of another group, one down, a gateway. */
static void test_view(void)
{
	static struct scrape prev[5], cur[5];
	static struct scrape_view v;
	worker_text(&prev[0], "g", 100, 400, "0:100:5:100 1:50:0:50", 10, 3, 0);
	worker_text(&cur[0], "g", 100, 700, "0:300:0:300 1:60:0:60", 15, 5, 1);
	worker_text(&prev[1], "g", 200, 900, "1:40:0:500 2:10:1:10", 20, 8, 0);
	worker_text(&cur[1], "g", 210, 80, "1:70:0:30 2:50:0:50", 25, 2, 0);
	worker_text(&prev[2], "other", 1, 1, "5:1:0:1", 0, 0, 0);
	worker_text(&cur[2], "other", 1, 9, "5:9:0:9", 0, 0, 0);
	scrape_reset(&prev[3]);
	scrape_reset(&cur[3]);
	snprintf(cur[3].error, sizeof cur[3].error, "%s", "Couldn't connect to server");
	gateway_text(&prev[4], 100, 10);
	gateway_text(&cur[4], 160, 40);
	scrape_view(cur, prev, 5, 2.0, "g", "intents", &v);
	CHECK(v.roles[0] == SCRAPE_WORKER && v.roles[1] == SCRAPE_WORKER);
	CHECK(v.roles[2] == SCRAPE_FOREIGN && v.roles[3] == SCRAPE_DOWN);
	CHECK(v.roles[4] == SCRAPE_GATEWAY);
	CHECK_INT(v.workers, 2);
	CHECK_INT(v.gateways, 1);
	if (!CHECK_INT(v.n_parts, 3)) /* 0, 1, 2: not the foreign worker's 5 */
		return;
	CHECK(v.parts[0].id == 0 && v.parts[0].owner == 0 && v.parts[0].others == 0);
	CHECK_NEAR(v.parts[0].rate, 100); /* (300 - 100) / 2 s */
	CHECK(v.parts[1].id == 1 && v.parts[1].owner == 1 && v.parts[1].others == 1);
	CHECK_NEAR(v.parts[1].rate, 15); /* B restarted: 30 from 0, over 2 s */
	CHECK_NEAR(v.parts[1].next_offset, 70);
	CHECK(v.parts[2].owner == 1 && near(v.parts[2].rate, 25) && near(v.parts[2].lag, 0));
	CHECK_NEAR(v.lag, 0);
	CHECK_NEAR(v.records, 780);
	CHECK_NEAR(v.records_rate, (300.0 + 80) / 2);
	CHECK_NEAR(v.holds_live, 40);
	/* Commits in the interval: A's 3 more (2 fast, 1 slow), B's 2 from its restart. */
	CHECK_NEAR(v.commits_interval.batches, 5);
	CHECK_NEAR(v.commits_total.batches, 8);
	CHECK_NEAR(v.commits_interval.mean_s, (2 * 0.005 + 0.05 + 2 * 0.005) / 5);
	/* 4 of 5 at or below 10 ms: the rank 4.95 falls in +Inf, so p99 is its bound below. */
	CHECK_NEAR(v.commits_interval.p99_s, 0.01);
	CHECK(!v.mixed_buckets);
	/* Decisions: held went 10 -> 15 at A, 20 -> 25 from 0 at B; sold_out 7 from B. */
	for (int i = 0; i < v.n_outcomes; i++) {
		CHECK_CTX("outcome %s", v.outcomes[i].name);
		if (strcmp(v.outcomes[i].name, "held") == 0)
			CHECK_NEAR(v.outcomes[i].n, 5 + 25);
		else if (strcmp(v.outcomes[i].name, "sold_out") == 0)
			CHECK_NEAR(v.outcomes[i].n, 0 + 7);
	}
	CHECK_CTX("%s", "");
	CHECK_NEAR(v.gw_requests_rate, 30);
	CHECK_NEAR(v.gw_edge_rate, 15);
	CHECK(near(v.gw_long_polls, 3) && near(v.gw_ready, 1));
	/* One scrape only: no rates, the same owners. */
	scrape_view(cur, NULL, 5, 0, "g", "intents", &v);
	CHECK(!v.has_rate && !v.parts[0].has_rate && v.seconds == 0 && !v.gw_has_rate);
	CHECK(v.n_parts == 3 && v.parts[1].owner == 1);
	CHECK_NEAR(v.commits_total.batches, 8);
	/* Any group: the other worker counts, its partition 5 too. */
	scrape_view(cur, prev, 5, 2.0, NULL, NULL, &v);
	CHECK(v.roles[2] == SCRAPE_WORKER && v.n_parts == 4 && v.parts[3].id == 5);
	/* An endpoint down the first time gives no rate the second. */
	scrape_reset(&prev[0]);
	scrape_view(cur, prev, 5, 2.0, "g", "intents", &v);
	CHECK(!v.parts[0].has_rate && v.parts[2].has_rate);
}

static int apply(struct skutable *t, const char *sku, const char *status, int64_t avail,
		 int32_t part, int64_t off)
{
	char p[512];
	int n = snprintf(
		p, sizeof p,
		"{\"v\":1,\"sku\":\"%s\",\"status\":\"%s\",\"supply\":100,\"available\":%" PRId64
		",\"held\":%" PRId64 ",\"sold\":0,\"partition\":%" PRId32 ",\"offset\":%" PRId64
		",\"clock_ms\":1}",
		sku, status, avail, 100 - avail, part, off);
	return skutable_apply(t, sku, strlen(sku), p, (size_t)n);
}

static void test_skutable(void)
{
	struct skutable t;
	skutable_init(&t);
	CHECK_INT(apply(&t, "A", "open", 90, 0, 10), 1);
	CHECK_INT(apply(&t, "B", "open", 50, 1, 5), 1);
	CHECK_INT(apply(&t, "A", "open", 80, 0, 20), 1);
	CHECK_INT(apply(&t, "A", "open", 95, 0, 15), 0); /* a late copy: older, dropped */
	CHECK_INT(apply(&t, "A", "open", 80, 0, 20), 1); /* the same again (a re-assignment) */
	CHECK_INT(apply(&t, "C", "sold_out", 0, 2, 7), 1);
	CHECK_INT(apply(&t, "B", "open", 60, 3, 1), 1); /* another partition: kept (a move) */
	const struct sku_row *a = skutable_get(&t, "A");
	CHECK(a && a->available == 80 && a->held == 20 && a->offset == 20);
	CHECK(skutable_get(&t, "Z") == NULL);
	CHECK_INT(t.older, 1);
	/* Bad records: key and SKU differ, not JSON, a field missing or of another type, a key
	 * that is not a SKU, a NUL in the key, a key too long. */
	const char *ok = "{\"sku\":\"A\",\"status\":\"open\",\"supply\":1,\"available\":1,"
			 "\"held\":0,\"sold\":0,\"partition\":0,\"offset\":99}";
	CHECK_INT(skutable_apply(&t, "B", 1, ok, strlen(ok)), -EINVAL);
	CHECK_INT(skutable_apply(&t, "A", 1, "{\"sku\":", 7), -EINVAL);
	CHECK_INT(skutable_apply(&t, "A", 1, "{\"sku\":\"A\",\"status\":\"open\"}", 27), -EINVAL);
	const char *str = "{\"sku\":\"A\",\"status\":\"open\",\"supply\":\"1\",\"available\":1,"
			  "\"held\":0,\"sold\":0,\"partition\":0,\"offset\":99}";
	CHECK_INT(skutable_apply(&t, "A", 1, str, strlen(str)), -EINVAL);
	const char *esc = "{\"sku\":\"\\u001b[2J\",\"status\":\"open\",\"supply\":1,\"available\":"
			  "1,\"held\":0,\"sold\":0,\"partition\":0,\"offset\":99}";
	CHECK_INT(skutable_apply(&t, "\033[2J", 4, esc, strlen(esc)), -EINVAL);
	CHECK_INT(skutable_apply(&t, "A\0B", 3, ok, strlen(ok)), -EINVAL);
	char longkey[80];
	memset(longkey, 'K', sizeof longkey);
	CHECK_INT(skutable_apply(&t, longkey, sizeof longkey, ok, strlen(ok)), -EINVAL);
	CHECK_INT(skutable_apply(&t, NULL, 0, ok, strlen(ok)), -EINVAL);
	CHECK_INT(t.bad, 8);
	CHECK(skutable_get(&t, "A")->offset == 20);
	/* The newest first; the rest summed. */
	const struct sku_row *rows[4];
	struct sku_rest rest;
	CHECK_INT(skutable_pick(&t, NULL, 0, 4, rows, &rest), 3);
	CHECK(strcmp(rows[0]->sku, "B") == 0 && strcmp(rows[1]->sku, "C") == 0 &&
	      strcmp(rows[2]->sku, "A") == 0);
	CHECK_INT(rest.skus, 0);
	CHECK_INT(skutable_pick(&t, NULL, 0, 1, rows, &rest), 1);
	CHECK_STR(rows[0]->sku, "B");
	CHECK(rest.skus == 2 && rest.supply == 200 && rest.available == 80 && rest.held == 120);
	CHECK(rest.sold_out == 1 && rest.closed == 0);
	/* Named: in their order, once each, the unknown left out. */
	const char *names[] = {"C", "Z", "A", "C"};
	CHECK_INT(skutable_pick(&t, names, 4, 4, rows, &rest), 2);
	CHECK(strcmp(rows[0]->sku, "C") == 0 && strcmp(rows[1]->sku, "A") == 0);
	CHECK(rest.skus == 1 && rest.available == 60);
	CHECK_INT(skutable_pick(&t, NULL, 0, 0, rows, &rest), 0);
	CHECK_INT(rest.skus, 3);
	skutable_free(&t);
}

/* The bound: SKUs past SKUTABLE_MAX are counted, not kept; the newest still come first. */
static void test_skutable_bound(void)
{
	struct skutable t;
	skutable_init(&t);
	char sku[32];
	for (int i = 0; i < SKUTABLE_MAX + 10; i++) {
		snprintf(sku, sizeof sku, "S%d", i);
		int rc = apply(&t, sku, "open", 1, 0, i);
		if (i < SKUTABLE_MAX ? rc != 1 : rc != -ENOSPC) {
			CHECK_CTX("sku %s", sku);
			CHECK_INT(rc, i < SKUTABLE_MAX ? 1 : -ENOSPC);
			break;
		}
	}
	CHECK_CTX("%s", "");
	CHECK_INT(t.n, SKUTABLE_MAX);
	CHECK_INT(t.untracked, 10);
	CHECK_INT(apply(&t, "S5", "sold_out", 0, 0, SKUTABLE_MAX + 50), 1); /* kept ones change */
	const struct sku_row *rows[3];
	struct sku_rest rest;
	CHECK_INT(skutable_pick(&t, NULL, 0, 3, rows, &rest), 3);
	CHECK_STR(rows[0]->sku, "S5");
	snprintf(sku, sizeof sku, "S%d", SKUTABLE_MAX - 1);
	CHECK_STR(rows[1]->sku, sku);
	CHECK_INT(rest.skus, SKUTABLE_MAX - 3);
	skutable_free(&t);
}

/* The escape sequences the screen writes itself: cursor home, clear to the end of the line and
 * of the screen. Anything else starting with ESC came from outside. */
static bool only_own_escapes(const char *text)
{
	for (const char *p = strchr(text, '\033'); p; p = strchr(p + 1, '\033'))
		if (strncmp(p, "\033[H", 3) != 0 && strncmp(p, "\033[K", 3) != 0 &&
		    strncmp(p, "\033[J", 3) != 0)
			return false;
	return true;
}

/* 30 SKUs and 40 partitions on a screen of 80 x 20; an endpoint whose text has an escape. */
static void test_screen(void)
{
	static struct top t;
	static struct scrape cur[2];
	t = (struct top){.n_urls = 2,
			 .interval_ms = 1000,
			 .stock_topic = "stock",
			 .group = "g",
			 .intents_topic = "intents",
			 .cur = cur,
			 .stock_parts = 2,
			 .stock_read = 2};
	snprintf(t.urls[0], TOP_URL_MAX, "%s", "http://127.0.0.1:9464/metrics");
	snprintf(t.urls[1], TOP_URL_MAX, "%s", "http://127.0.0.1:9465/metrics");
	skutable_init(&t.table);
	char sku[16], parts[2048] = "";
	for (int i = 0; i < 30; i++) {
		snprintf(sku, sizeof sku, "SKU-%d", i);
		apply(&t.table, sku, i % 2 ? "open" : "sold_out", i % 2, i % 40, i);
	}
	for (int i = 0, at = 0; i < 40; i++)
		at += snprintf(parts + at, sizeof parts - (size_t)at, "%d:%d:0:%d ", i, i, i);
	worker_text(&cur[0], "g", 1, 780, parts, 3, 1, 0);
	const char *hostile = "m 1\nm \033[2J\033]0;owned\007\n";
	scrape_text(&cur[1], hostile, strlen(hostile));
	CHECK(!cur[1].up && strchr(cur[1].error, '\033'));
	scrape_view(cur, NULL, 2, 0, "g", "intents", &t.view);
	struct fs_buf b = {0};
	top_screen(&t, 80, 20, true, &b);
	const char *text = fs_buf_cstr(&b);
	if (getenv("TEST_TOP_SHOW"))
		fputs(text, stdout);
	int lines = 0, longest = 0;
	for (const char *p = text, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
		int visible = (int)(nl - p);
		for (const char *q = strstr(p, "\033["); q && q < nl; q = strstr(q + 1, "\033["))
			visible -= 3;
		longest = visible > longest ? visible : longest;
	}
	CHECK(lines >= 18 && lines <= 20); /* the rows it has, a spare one at most */
	CHECK(longest <= 80);
	CHECK(only_own_escapes(text));
	CHECK(strstr(text, "more SKUs: supply") != NULL);
	CHECK(strstr(text, "more partitions: lag 0") != NULL);
	CHECK(strstr(text, "SKU-29 ") != NULL); /* the newest first */
	CHECK(strstr(text, "9465") != NULL && strstr(text, "bad metrics text") != NULL);
	/* Wide and tall enough: every SKU and partition, no summary line. */
	fs_buf_clear(&b);
	top_screen(&t, 200, 200, false, &b);
	text = fs_buf_cstr(&b);
	CHECK(strstr(text, "more SKUs") == NULL && strstr(text, "SKU-0 ") != NULL);
	CHECK(strstr(text, "\n39 ") != NULL && strstr(text, "\033") == NULL);
	CHECK(only_own_escapes(text));
	/* The JSON: no rates from one scrape (null, not NaN), the escape kept as data. */
	json_t *o = top_json(&t);
	char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (CHECK(js != NULL)) {
		CHECK(strstr(js, "\"interval\":null") != NULL);
		CHECK(strstr(js, "\"decisions\":null") != NULL);
		CHECK(strstr(js, "\"rate\":null") != NULL);
		CHECK(strstr(js, "\"skus_rest\":{\"skus\":0") != NULL);
		CHECK(strstr(js, "\"error\":\"bad metrics text: line 2: value '\\u001B[2J") !=
		      NULL);
	}
	free(js);
	json_decref(o);
	fs_buf_free(&b);
	skutable_free(&t.table);
}

int main(int argc, char **argv)
{
	check_parse_args(argc, argv);
	test_quantile();
	test_increase();
	test_scrape_text();
	test_view();
	test_skutable();
	test_skutable_bound();
	test_screen();
	return check_done("test_top");
}
