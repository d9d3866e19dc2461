/* topshow.c: what `flashsale top` shows, as a screen or as JSON (see top.h). No I/O. */
#include "cli/top.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum {
	SCREEN_ROWS_MAX = 500,	/* lines of a screen, whatever the terminal says */
	SCREEN_LINE_MAX = 1024, /* bytes of a line before it is cut to the width */
	SCREEN_SKU_WIDTH = 24,	/* the SKU column; a longer SKU is cut, its end shown as ~ */
	SCREEN_PART_MIN = 2,	/* partition rows kept when the SKUs would take them all */
};

static const char *const role_names[] = {"down", "worker", "foreign", "gateway", "other"};

/* ---- the screen ------------------------------------------------------------------------- */

struct screen {
	struct fs_buf *out;
	int width, height, lines;
	bool ansi;
};

/* One line, cut to the width; anything but printable ASCII becomes '?' (a SKU or an error
 * from outside must not move the cursor). Nothing once the screen is full. */
__attribute__((format(printf, 2, 3))) static void line(struct screen *s, const char *fmt, ...)
{
	if (s->lines >= s->height)
		return;
	char buf[SCREEN_LINE_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n >= (int)sizeof buf)
		n = (int)sizeof buf - 1;
	if (n > s->width)
		n = s->width;
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	for (int i = 0; i < n; i++)
		if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
			buf[i] = '?';
	fs_buf_add(s->out, buf, (size_t)n);
	if (s->ansi)
		fs_buf_str(s->out, "\033[K");
	fs_buf_add(s->out, "\n", 1);
	s->lines++;
}

/* A rate, a count or a duration as text; "-" when unknown. */
static const char *rate(char b[32], bool known, double v)
{
	snprintf(b, 32, known && isfinite(v) ? "%.1f" : "-", v);
	return b;
}

static const char *count(char b[32], double v)
{
	snprintf(b, 32, isfinite(v) ? "%.0f" : "-", v);
	return b;
}

static const char *millis(char b[32], double seconds)
{
	double ms = seconds * 1000;
	snprintf(b, 32, !isfinite(ms) ? "-" : ms < 10 ? "%.2f ms" : "%.0f ms", ms);
	return b;
}

/* An endpoint as shown: its URL without http:// and /metrics. */
static const char *short_url(const char *url, char b[TOP_URL_MAX])
{
	const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
	snprintf(b, TOP_URL_MAX, "%s", p);
	size_t n = strlen(b);
	if (n > 8 && strcmp(b + n - 8, "/metrics") == 0)
		b[n - 8] = '\0';
	return b;
}

static void show_header(struct screen *s, const struct top *t)
{
	const struct scrape_view *v = &t->view;
	char clock[16] = "", r[32], c[32], h[32];
	time_t now = (time_t)(t->time_ms / 1000);
	struct tm tm;
	if (localtime_r(&now, &tm))
		strftime(clock, sizeof clock, "%H:%M:%S", &tm);
	line(s, "flashsale top   %s   intents %s, group %s   every %.1f s%s", clock,
	     t->intents_topic, t->group, (double)t->interval_ms / 1000,
	     t->keys ? "   q: quit" : "");
	int up = 0;
	for (int i = 0; i < t->n_urls; i++)
		up += v->roles[i] != SCRAPE_DOWN;
	line(s,
	     "endpoints %d of %d up: workers %d, gateways %d   decisions/s %s   lag %s   "
	     "holds live %s",
	     up, t->n_urls, v->workers, v->gateways, rate(r, v->has_rate, v->records_rate),
	     v->workers ? count(c, v->lag) : "-", v->workers ? count(h, v->holds_live) : "-");
	if (t->stock_error[0])
		line(s, "stock topic %s: %s", t->stock_topic, t->stock_error);
	else if (t->stock_read < t->stock_parts)
		line(s,
		     "stock topic %s: reading (%d of %d partitions read to where they ended at "
		     "the start)",
		     t->stock_topic, t->stock_read, t->stock_parts);
	line(s, "%s", "");
}

static void show_sku_row(struct screen *s, const struct sku_row *r, int w)
{
	char sku[SKUTABLE_SKU_MAX];
	snprintf(sku, sizeof sku, "%s", r->sku);
	if ((int)strlen(sku) > w) {
		sku[w - 1] = '~';
		sku[w] = '\0';
	}
	line(s, "%-*s  %-9s %10" PRId64 " %10" PRId64 " %10" PRId64 " %10" PRId64 " %9" PRId32, w,
	     sku, r->status, r->supply, r->available, r->held, r->sold, r->partition);
}

/* The SKUs in at most rows lines (a last line sums the ones that did not fit). */
static void show_skus(struct screen *s, const struct top *t, int rows)
{
	const struct sku_row *pick[SCREEN_ROWS_MAX];
	struct sku_rest rest;
	int n = skutable_pick(&t->table, t->skus, t->n_skus, rows, pick, &rest);
	if (rest.skus > 0 && n == rows && n > 0)
		n = skutable_pick(&t->table, t->skus, t->n_skus, rows - 1, pick, &rest);
	int w = 3;
	for (int i = 0; i < n; i++)
		if ((int)strlen(pick[i]->sku) > w)
			w = (int)strlen(pick[i]->sku);
	w = w > SCREEN_SKU_WIDTH ? SCREEN_SKU_WIDTH : w;
	line(s, "STOCK      %" PRIu32 " SKU%s on topic %s, %d shown%s", t->table.n,
	     t->table.n == 1 ? "" : "s", t->stock_topic, n,
	     t->n_skus ? " (as named)" : ", the most recently changed first");
	if (t->table.untracked)
		line(s,
		     "           (and SKUs past the first %d not kept: %" PRId64
		     " records of them)",
		     SKUTABLE_MAX, t->table.untracked);
	line(s, "%-*s  %-9s %10s %10s %10s %10s %9s", w, "SKU", "STATUS", "SUPPLY", "AVAILABLE",
	     "HELD", "SOLD", "PARTITION");
	for (int i = 0; i < n; i++)
		show_sku_row(s, pick[i], w);
	for (int k = 0; k < t->n_skus; k++)
		if (!skutable_get(&t->table, t->skus[k]))
			line(s, "%-*s  (not on the stock topic)", w, t->skus[k]);
	if (rest.skus > 0)
		line(s,
		     "... %" PRId64 " more SKUs: supply %" PRId64 ", available %" PRId64
		     ", held %" PRId64 ", sold %" PRId64 " (%" PRId64 " sold out, %" PRId64
		     " closed)",
		     rest.skus, rest.supply, rest.available, rest.held, rest.sold, rest.sold_out,
		     rest.closed);
	if (t->table.n == 0 && t->n_skus == 0)
		line(s, "%s", "(no SKU on the stock topic yet)");
	line(s, "%s", "");
}

/* The partitions in at most rows lines (a last line sums the ones that did not fit). */
static void show_parts(struct screen *s, const struct top *t, int rows)
{
	const struct scrape_view *v = &t->view;
	int n = v->n_parts > rows ? (rows > 1 ? rows - 1 : 0) : v->n_parts;
	char u[TOP_URL_MAX], a[32], b[32], c[32], d[32];
	line(s, "%-9s  %-28s %10s %12s %12s %12s", "PARTITION", "WORKER", "LAG", "DECISIONS/S",
	     "RECORDS", "NEXT OFFSET");
	for (int i = 0; i < n; i++) {
		const struct scrape_view_part *p = &v->parts[i];
		char who[TOP_URL_MAX + 16];
		snprintf(who, sizeof who, "%s%s", short_url(t->urls[p->owner], u),
			 p->others ? " (+1)" : "");
		line(s, "%-9" PRId32 "  %-28s %10s %12s %12s %12s", p->id, who,
		     p->has_lag ? count(a, p->lag) : "-", rate(b, p->has_rate, p->rate),
		     count(c, p->records), count(d, p->next_offset));
	}
	if (n < v->n_parts) {
		double lag = 0, r = 0;
		for (int i = n; i < v->n_parts; i++) {
			lag += v->parts[i].has_lag ? v->parts[i].lag : 0;
			r += v->parts[i].has_rate ? v->parts[i].rate : 0;
		}
		line(s, "... %d more partitions: lag %s, %s decisions/s", v->n_parts - n,
		     count(a, lag), rate(b, v->has_rate, r));
	}
	if (v->n_parts == 0)
		line(s, "%s", "(no partition reported by a worker)");
	line(s, "%s", "");
}

static void show_commits(struct screen *s, const struct top *t)
{
	const struct scrape_view *v = &t->view;
	const struct scrape_commits *ci = &v->commits_interval, *ct = &v->commits_total;
	char a[32], b[32], c[32];
	char last[32];
	snprintf(last, sizeof last, "last %.1f s", v->seconds);
	if (v->has_rate)
		line(s, "COMMITS    %-13s%s batches, mean %s, p99 %s", last, count(a, ci->batches),
		     millis(b, ci->mean_s), millis(c, ci->p99_s));
	line(s, "%-11s%-13s%s batches, mean %s, p99 %s%s", v->has_rate ? "" : "COMMITS",
	     "since start", count(a, ct->batches), millis(b, ct->mean_s), millis(c, ct->p99_s),
	     v->has_rate ? "" : "   (the last interval's at the next refresh)");
	char text[SCREEN_LINE_MAX] = "";
	size_t at = 0;
	for (int i = 0; i < v->n_outcomes && at < sizeof text; i++)
		if (v->outcomes[i].n != 0)
			at += (size_t)snprintf(text + at, sizeof text - at, "%s%s %s",
					       at ? ", " : "", v->outcomes[i].name,
					       count(a, v->outcomes[i].n));
	if (v->has_rate)
		line(s, "DECISIONS  %-13s%s", last, at ? text : "none");
}

static void show_gateways(struct screen *s, const struct top *t)
{
	const struct scrape_view *v = &t->view;
	char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
	line(s, "GATEWAY    requests/s %s (%s in all)   edge answers/s %s (sold_out %s, closed %s)",
	     rate(a, v->gw_has_rate, v->gw_requests_rate), count(b, v->gw_requests),
	     rate(c, v->gw_has_rate, v->gw_edge_rate), count(d, v->gw_edge_sold_out),
	     count(e, v->gw_edge_closed));
	line(s, "           waiting: %s long-polls, %s streams   connections %s   ready %s of %d",
	     count(a, v->gw_long_polls), count(f, v->gw_streams), count(g, v->gw_connections),
	     count(b, v->gw_ready), v->gateways);
}

static void show_endpoints(struct screen *s, const struct top *t)
{
	const struct scrape_view *v = &t->view;
	char u[TOP_URL_MAX];
	for (int i = 0; i < t->n_urls; i++) {
		const struct scrape *c = &t->cur[i];
		char what[SCREEN_LINE_MAX] = "";
		size_t at = 0;
		if (v->roles[i] == SCRAPE_DOWN)
			snprintf(what, sizeof what, "%s", c->error);
		else if (v->roles[i] == SCRAPE_FOREIGN)
			snprintf(what, sizeof what, "serves group %s, intents %s: left out",
				 c->group, c->topic);
		for (int k = 0; v->roles[i] == SCRAPE_WORKER && k < v->n_parts; k++)
			if (v->parts[k].owner == i && at < sizeof what)
				at += (size_t)snprintf(what + at, sizeof what - at, "%s%" PRId32,
						       at ? "," : "partitions ", v->parts[k].id);
		line(s, "  %-30s %-8s %s", short_url(t->urls[i], u), role_names[v->roles[i]], what);
	}
}

void top_screen(const struct top *t, int width, int height, bool ansi, struct fs_buf *out)
{
	struct screen s = {out, width, height > SCREEN_ROWS_MAX ? SCREEN_ROWS_MAX : height, 0,
			   ansi};
	const struct scrape_view *v = &t->view;
	if (ansi)
		fs_buf_str(out, "\033[H");
	show_header(&s, t);
	/* The lines below the tables, then the tables share what is left. */
	int below = (v->workers ? 4 : 0) + (v->gateways ? 3 : 0) + t->n_urls + 1;
	int room = s.height - s.lines - below - 5; /* the tables' heads and blank lines */
	int skus = t->n_skus ? t->n_skus + 1 : (int)t->table.n + 1;
	int parts = v->workers ? v->n_parts + 1 : 0;
	if (room < 2)
		room = 2;
	if (skus + parts > room) { /* the partitions keep a few rows, the SKUs the rest */
		parts = parts < SCREEN_PART_MIN ? parts : SCREEN_PART_MIN;
		parts = room - skus > parts ? room - skus : parts;
		skus = room - parts > 1 ? room - parts : 1;
	}
	show_skus(&s, t, skus > SCREEN_ROWS_MAX ? SCREEN_ROWS_MAX : skus);
	if (v->workers)
		show_parts(&s, t, parts);
	if (v->workers) {
		show_commits(&s, t);
		line(&s, "%s", "");
	}
	if (v->gateways) {
		show_gateways(&s, t);
		line(&s, "%s", "");
	}
	line(&s, "%s", "ENDPOINTS");
	show_endpoints(&s, t);
	if (!t->n_urls)
		line(&s, "%s", "  none given (--metrics URL,... or the top.metrics key)");
	if (ansi)
		fs_buf_str(out, "\033[J");
}

/* ---- JSON ------------------------------------------------------------------------------- */

static json_t *jnum(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *jcount(double v)
{
	return isfinite(v) && fabs(v) < 9e15 ? json_integer((json_int_t)llround(v)) : json_null();
}

static json_t *json_sku(const struct sku_row *r)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:I}", "sku", r->sku, "status",
			 r->status, "supply", (json_int_t)r->supply, "available",
			 (json_int_t)r->available, "held", (json_int_t)r->held, "sold",
			 (json_int_t)r->sold, "partition", (int)r->partition, "offset",
			 (json_int_t)r->offset);
}

static void json_skus(json_t *o, const struct top *t)
{
	const struct sku_row *pick[TOP_JSON_SKUS_MAX];
	struct sku_rest rest;
	int n = skutable_pick(&t->table, t->skus, t->n_skus, TOP_JSON_SKUS_MAX, pick, &rest);
	json_t *a = json_array(), *missing = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_sku(pick[i]));
	for (int k = 0; k < t->n_skus; k++)
		if (!skutable_get(&t->table, t->skus[k]))
			json_array_append_new(missing, json_string(t->skus[k]));
	json_object_set_new(o, "skus", a);
	json_object_set_new(o, "skus_missing", missing);
	json_object_set_new(o, "skus_rest",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "skus",
				      (json_int_t)rest.skus, "supply", (json_int_t)rest.supply,
				      "available", (json_int_t)rest.available, "held",
				      (json_int_t)rest.held, "sold", (json_int_t)rest.sold,
				      "sold_out", (json_int_t)rest.sold_out, "closed",
				      (json_int_t)rest.closed));
	json_object_set_new(
		o, "stock",
		json_pack("{s:s, s:i, s:b, s:I, s:I, s:I, s:I, s:I, s:o}", "topic", t->stock_topic,
			  "partitions", t->stock_parts, "read",
			  t->stock_parts > 0 && t->stock_read == t->stock_parts, "skus",
			  (json_int_t)t->table.n, "records", (json_int_t)t->stock_records,
			  "older_dropped", (json_int_t)t->table.older, "bad",
			  (json_int_t)t->table.bad, "untracked", (json_int_t)t->table.untracked,
			  "error", t->stock_error[0] ? json_string(t->stock_error) : json_null()));
}

static json_t *json_parts(const struct top *t)
{
	const struct scrape_view *v = &t->view;
	json_t *a = json_array();
	for (int i = 0; i < v->n_parts; i++) {
		const struct scrape_view_part *p = &v->parts[i];
		json_array_append_new(
			a, json_pack("{s:i, s:s, s:i, s:o, s:o, s:o, s:o}", "partition", (int)p->id,
				     "worker", t->urls[p->owner], "also_reported_by", p->others,
				     "lag", p->has_lag ? jcount(p->lag) : json_null(), "records",
				     jcount(p->records), "next_offset", jcount(p->next_offset),
				     "rate", p->has_rate ? jnum(p->rate) : json_null()));
	}
	return a;
}

static json_t *json_commits(const struct scrape_commits *c, bool known)
{
	if (!known)
		return json_null();
	return json_pack("{s:o, s:o, s:o}", "batches", jcount(c->batches), "mean_ms",
			 jnum(c->mean_s * 1000), "p99_ms", jnum(c->p99_s * 1000));
}

/* The workers' part: totals, commits, decisions in the interval. */
static void json_workers(json_t *o, const struct top *t)
{
	const struct scrape_view *v = &t->view;
	json_object_set_new(o, "totals",
			    json_pack("{s:i, s:o, s:o, s:o, s:o}", "workers", v->workers, "records",
				      jcount(v->records), "rate",
				      v->has_rate ? jnum(v->records_rate) : json_null(), "lag",
				      jcount(v->lag), "holds_live", jcount(v->holds_live)));
	json_object_set_new(o, "commits",
			    json_pack("{s:o, s:o, s:b}", "interval",
				      json_commits(&v->commits_interval, v->has_rate), "total",
				      json_commits(&v->commits_total, v->workers > 0),
				      "mixed_buckets", v->mixed_buckets));
	json_t *outcomes = v->has_rate ? json_object() : json_null();
	for (int i = 0; v->has_rate && i < v->n_outcomes; i++)
		json_object_set_new(outcomes, v->outcomes[i].name, jcount(v->outcomes[i].n));
	json_object_set_new(o, "decisions", outcomes);
}

static json_t *json_gateways(const struct scrape_view *v)
{
	if (!v->gateways)
		return json_null();
	return json_pack("{s:i, s:o, s:o, s:o, s:{s:o, s:o}, s:{s:o, s:o}, s:o, s:o}", "gateways",
			 v->gateways, "requests", jcount(v->gw_requests), "requests_rate",
			 v->gw_has_rate ? jnum(v->gw_requests_rate) : json_null(),
			 "edge_answers_rate", v->gw_has_rate ? jnum(v->gw_edge_rate) : json_null(),
			 "edge_answers", "sold_out", jcount(v->gw_edge_sold_out), "closed",
			 jcount(v->gw_edge_closed), "waiting", "long_poll",
			 jcount(v->gw_long_polls), "stream", jcount(v->gw_streams), "connections",
			 jcount(v->gw_connections), "ready", jcount(v->gw_ready));
}

static json_t *json_endpoints(const struct top *t)
{
	const struct scrape_view *v = &t->view;
	json_t *a = json_array();
	for (int i = 0; i < t->n_urls; i++) {
		const struct scrape *c = &t->cur[i];
		json_t *e = json_pack("{s:s, s:b, s:s}", "url", t->urls[i], "up", c->up, "role",
				      role_names[v->roles[i]]);
		if (!c->up)
			json_object_set_new(e, "error", json_string(c->error));
		if (v->roles[i] == SCRAPE_FOREIGN)
			json_object_set_new(
				e, "serves",
				json_pack("{s:s, s:s}", "group", c->group, "topic", c->topic));
		if (v->roles[i] == SCRAPE_WORKER) {
			json_t *ids = json_array();
			for (int k = 0; k < v->n_parts; k++)
				if (v->parts[k].owner == i)
					json_array_append_new(ids, json_integer(v->parts[k].id));
			json_object_set_new(e, "partitions", ids);
		}
		json_array_append_new(a, e);
	}
	return a;
}

json_t *top_json(const struct top *t)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "time_ms", json_integer(t->time_ms));
	json_object_set_new(o, "interval_s",
			    t->view.seconds > 0 ? jnum(t->view.seconds) : json_null());
	json_skus(o, t);
	json_object_set_new(o, "partitions", json_parts(t));
	json_workers(o, t);
	json_object_set_new(o, "gateway", json_gateways(&t->view));
	json_object_set_new(o, "endpoints", json_endpoints(t));
	return o;
}
