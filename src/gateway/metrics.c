/* metrics.c: the gateway's metrics endpoint (metrics.listen): requests by route and status and
 * their durations, counted as each answer is queued, and the counters and gauges the gateway
 * keeps anyway (see gateway.h; the names are docs/reference/metrics.md's). */
#include "gateway/gateway.h"

#include "io/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const unsigned codes[GW_CODES - 1] = {200, 202, 400, 401, 403, 404, 405, 409,
					     413, 415, 422, 429, 431, 500, 503};

static int code_index(unsigned status)
{
	for (int i = 0; i < GW_CODES - 1; i++)
		if (codes[i] == status)
			return i;
	return GW_CODES - 1; /* "other" */
}

void gw_metrics_answered(struct gw *g, enum gw_route route, unsigned status, int64_t start_us)
{
	if (!g->metrics)
		return;
	enum gw_route_label l = gw_route_label(route);
	double seconds = (double)(gw_now_us() - start_us) / 1e6;
	pthread_mutex_lock(&g->reqs.mu);
	g->reqs.count[l][code_index(status)]++;
	fs_prom_hist_observe(&g->reqs.seconds[l], seconds);
	pthread_mutex_unlock(&g->reqs.mu);
}

static void requests_text(struct gw *g, struct fs_buf *b)
{
	/* A copy, so that requests wait on the lock for a memcpy, not for the text. */
	static struct gw_requests r; /* one scrape at a time (the endpoint's one thread) */
	pthread_mutex_lock(&g->reqs.mu);
	memcpy(r.count, g->reqs.count, sizeof r.count);
	memcpy(r.seconds, g->reqs.seconds, sizeof r.seconds);
	pthread_mutex_unlock(&g->reqs.mu);
	fs_prom_family(b, "flashsale_gateway_requests_total", "counter",
		       "Requests answered, by route and HTTP status code.");
	for (int l = 0; l < GW_L_COUNT; l++)
		for (int c = 0; c < GW_CODES; c++) {
			if (!r.count[l][c])
				continue;
			char code[16];
			snprintf(code, sizeof code, "%u", codes[c < GW_CODES - 1 ? c : 0]);
			struct fs_prom_label lab[] = {
				{"route", gw_route_label_name((enum gw_route_label)l)},
				{"code", c < GW_CODES - 1 ? code : "other"}};
			fs_prom_int(b, "flashsale_gateway_requests_total", lab, 2, r.count[l][c]);
		}
	fs_prom_family(b, "flashsale_gateway_request_duration_seconds", "histogram",
		       "From a request's arrival to its answer's headers (a long-poll's wait "
		       "included).");
	for (int l = 0; l < GW_L_COUNT; l++) {
		if (!r.seconds[l].count)
			continue;
		struct fs_prom_label lab[] = {
			{"route", gw_route_label_name((enum gw_route_label)l)}};
		fs_prom_hist_write(b, "flashsale_gateway_request_duration_seconds", lab, 1,
				   &r.seconds[l]);
	}
}

/* Issue 48, item 5: the bounds at the door. */
static void edge_text(struct gw *g, struct fs_buf *b)
{
	const struct gw_stats *s = &g->stats;
	fs_prom_family(b, "flashsale_gateway_refused_total", "counter",
		       "Requests and connections refused at the door, by reason: bad_framing "
		       "(conflicting Content-Length / Transfer-Encoding, 400), bad_path (400), "
		       "request_deadline (connections cut at http.request.deadline.s), "
		       "rate_limited and too_many_waits (429, per client address).");
	struct {
		const char *reason;
		const atomic_llong *v;
	} rows[] = {{"bad_framing", &s->refused_framing},
		    {"bad_path", &s->refused_path},
		    {"request_deadline", &s->refused_deadline},
		    {"rate_limited", &s->refused_rate},
		    {"too_many_waits", &s->refused_waits}};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct fs_prom_label lab[] = {{"reason", rows[i].reason}};
		fs_prom_int(b, "flashsale_gateway_refused_total", lab, 1, atomic_load(rows[i].v));
	}
	fs_prom_one(b, "flashsale_gateway_clients_gone_total", "counter",
		    "Long-polls and event streams ended because their client closed the "
		    "connection while they waited (its slot freed within a second).",
		    atomic_load(&s->peers_gone));
}

static void counters_text(struct gw *g, struct fs_buf *b)
{
	const struct gw_stats *s = &g->stats;
	fs_prom_family(b, "flashsale_gateway_edge_answers_total", "counter",
		       "Buys answered at the edge without publishing, by outcome.");
	struct fs_prom_label sold[] = {{"outcome", "sold_out"}}, cl[] = {{"outcome", "closed"}};
	fs_prom_int(b, "flashsale_gateway_edge_answers_total", sold, 1,
		    atomic_load(&s->edge_sold_out));
	fs_prom_int(b, "flashsale_gateway_edge_answers_total", cl, 1, atomic_load(&s->edge_closed));
	fs_prom_one(b, "flashsale_gateway_published_total", "counter",
		    "Records published to the intents topic and acknowledged (acks=all).",
		    atomic_load(&s->published));
	fs_prom_one(b, "flashsale_gateway_publish_failures_total", "counter",
		    "Publications the broker did not acknowledge in time (answered 503).",
		    atomic_load(&s->publish_failed));
	fs_prom_one(b, "flashsale_gateway_results_total", "counter",
		    "Results read from the results topic.", atomic_load(&s->results));
	fs_prom_one(b, "flashsale_gateway_stock_records_total", "counter",
		    "Stock records read from the stock topic.", atomic_load(&s->stock_records));
	fs_prom_one(b, "flashsale_gateway_lookups_total", "counter",
		    "Decisions looked up in Postgres (not in memory).", atomic_load(&s->lookups));
	fs_prom_one(b, "flashsale_gateway_overloaded_total", "counter",
		    "Requests refused 503 for too many connections.", atomic_load(&s->overloaded));
	edge_text(g, b);
	fs_prom_family(b, "flashsale_gateway_payment_refusals_total", "counter",
		       "Confirms refused for their payment signature (nothing published), by "
		       "reason.");
	for (int v = GW_PAY_MISSING; v < GW_PAY_VERDICTS; v++) {
		struct fs_prom_label why[] = {{"reason", gw_pay_reason((enum gw_pay_verdict)v)}};
		fs_prom_int(b, "flashsale_gateway_payment_refusals_total", why, 1,
			    atomic_load(&s->pay_refused[v]));
	}
	fs_prom_family(b, "flashsale_gateway_auth_refusals_total", "counter",
		       "Buyer requests refused for their bearer token (401) or for naming another "
		       "buyer than its sub (403 other_buyer), nothing published, by reason.");
	for (int v = GW_JWT_OK; v < GW_JWT_VERDICTS; v++) {
		struct fs_prom_label why[] = {
			{"reason",
			 v == GW_JWT_OK ? "other_buyer" : gw_jwt_reason((enum gw_jwt_verdict)v)}};
		fs_prom_int(b, "flashsale_gateway_auth_refusals_total", why, 1,
			    atomic_load(&s->auth_refused[v]));
	}
}

/* The tables and queues and their bounds (issue 48, item 5): a full one fails /readyz. */
static void tables_text(struct gw *g, struct fs_buf *b)
{
	const struct gw_stats *s = &g->stats;
	pthread_mutex_lock(&g->lock);
	int64_t skus = (int64_t)g->cache.slen, intents = (int64_t)g->cache.len;
	int64_t srefused = g->cache.srefused, refused = g->cache.refused;
	int64_t queue = (int64_t)g->lookup_len;
	const char *full = gw_full(g); /* a static string */
	pthread_mutex_unlock(&g->lock);
	fs_prom_one(b, "flashsale_gateway_skus", "gauge",
		    "SKUs in the SKU table (only SKUs the stock topic named).", skus);
	fs_prom_one(b, "flashsale_gateway_skus_max", "gauge", "The SKU table's size (skus.max).",
		    g->cfg.skus_max);
	fs_prom_one(b, "flashsale_gateway_skus_refused_total", "counter",
		    "New SKUs' stock records not kept: the SKU table was full.", srefused);
	fs_prom_one(b, "flashsale_gateway_intents_cached", "gauge",
		    "Entries in the intent cache (intents, carts, admissions).", intents);
	fs_prom_one(b, "flashsale_gateway_intents_cached_max", "gauge",
		    "The intent cache's size (results.cache.max).", g->cfg.results_cache_max);
	fs_prom_one(b, "flashsale_gateway_intents_refused_total", "counter",
		    "Requests refused 503 busy: every entry of the intent cache was in use.",
		    refused);
	fs_prom_one(b, "flashsale_gateway_lookup_queue", "gauge",
		    "Requests waiting for the Postgres lookup thread.", queue);
	fs_prom_one(b, "flashsale_gateway_lookup_queue_max", "gauge",
		    "The lookup queue's bound (past it: 503 busy).", GW_LOOKUP_QUEUE_MAX);
	fs_prom_one(b, "flashsale_gateway_connections_max", "gauge",
		    "The connection cap (http.connections.max).", g->cfg.http_connections_max);
	fs_prom_family(b, "flashsale_gateway_full", "gauge",
		       "1 for the table or queue that fails /readyz (at most one is named).");
	static const char *const names[] = {"sku_table_full", "intent_cache_full",
					    "lookup_queue_full", "connections_near_cap"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct fs_prom_label l[] = {{"table", names[i]}};
		fs_prom_int(b, "flashsale_gateway_full", l, 1, full && strcmp(full, names[i]) == 0);
	}
	fs_prom_family(b, "flashsale_gateway_unknown_lookups_total", "counter",
		       "Postgres reads for ids and rooms this gateway never saw, by verdict of "
		       "the bucket (lookups.unknown.rate).");
	struct fs_prom_label t[] = {{"verdict", "taken"}}, r[] = {{"verdict", "refused"}};
	fs_prom_int(b, "flashsale_gateway_unknown_lookups_total", t, 1,
		    atomic_load(&s->unknown_lookups));
	fs_prom_int(b, "flashsale_gateway_unknown_lookups_total", r, 1,
		    atomic_load(&s->unknown_refused));
	fs_prom_family(b, "flashsale_gateway_room_reads_total", "counter",
		       "Waiting rooms read from Postgres: of rooms the stock topic named (cached) "
		       "and of others (never cached).");
	struct fs_prom_label n[] = {{"room", "named"}}, o[] = {{"room", "other"}};
	fs_prom_int(b, "flashsale_gateway_room_reads_total", n, 1,
		    atomic_load(&s->room_reads_named));
	fs_prom_int(b, "flashsale_gateway_room_reads_total", o, 1,
		    atomic_load(&s->room_reads_other));
}

static bool render(void *ctx, struct fs_buf *b)
{
	struct gw *g = ctx;
	pthread_mutex_lock(&g->lock);
	int64_t polls = gw_waiter_count(&g->polls), streams = gw_waiter_count(&g->streams);
	int64_t clients = (int64_t)g->clients.len;
	bool ready = gw_ready(g);
	pthread_mutex_unlock(&g->lock);
	fs_prom_family(b, "flashsale_gateway_info", "gauge",
		       "1; the intents topic the gateway publishes to.");
	struct fs_prom_label topic[] = {{"topic", g->cfg.topic_intents}};
	fs_prom_int(b, "flashsale_gateway_info", topic, 1, 1);
	fs_prom_family(b, "flashsale_gateway_start_time_seconds", "gauge",
		       "When the process started, seconds since the epoch.");
	fs_prom_double(b, "flashsale_gateway_start_time_seconds", NULL, 0,
		       (double)g->start_ms / 1000.0);
	fs_prom_one(b, "flashsale_gateway_ready", "gauge", "1 when /readyz would answer 200.",
		    ready);
	fs_prom_one(b, "flashsale_gateway_connections", "gauge", "Open HTTP connections.",
		    atomic_load(&g->connections));
	fs_prom_family(b, "flashsale_gateway_waiting_requests", "gauge",
		       "Requests waiting for a result: long-polls and event streams.");
	struct fs_prom_label lp[] = {{"kind", "long_poll"}}, st[] = {{"kind", "stream"}};
	fs_prom_int(b, "flashsale_gateway_waiting_requests", lp, 1, polls);
	fs_prom_int(b, "flashsale_gateway_waiting_requests", st, 1, streams);
	fs_prom_one(b, "flashsale_gateway_clients", "gauge",
		    "Client addresses the per-address bounds track (http.client.rate, "
		    "http.client.waits.max; 0 when both are off).",
		    clients);
	counters_text(g, b);
	tables_text(g, b);
	requests_text(g, b);
	return true;
}

static bool healthy(void *ctx, struct fs_buf *out)
{
	struct gw *g = ctx;
	bool stopping = atomic_load(&g->stopping);
	fs_buf_str(out, stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}");
	return !stopping;
}

int gw_metrics_start(struct gw *g, char *err, size_t err_len)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	g->start_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	pthread_mutex_init(&g->reqs.mu, NULL);
	for (int l = 0; l < GW_L_COUNT; l++)
		fs_prom_hist_init(&g->reqs.seconds[l], fs_prom_seconds_bounds, fs_prom_seconds_n);
	if (!g->cfg.metrics_listen[0])
		return 0;
	int port;
	char why[256];
	if (fs_metrics_start(g->cfg.metrics_listen, render, healthy, g, &g->metrics, &port, why,
			     sizeof why) < 0) {
		snprintf(err, err_len, "metrics.listen: %s", why);
		return -EINVAL;
	}
	fs_info("metrics: listening on %s (port %d)", g->cfg.metrics_listen, port);
	return 0;
}

void gw_metrics_stop(struct gw *g)
{
	fs_metrics_stop(g->metrics);
	g->metrics = NULL;
}
