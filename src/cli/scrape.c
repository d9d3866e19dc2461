/* scrape.c: the metrics endpoints' numbers and the arithmetic over them (see scrape.h). */
#include "cli/scrape.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void scrape_reset(struct scrape *s)
{
	memset(s, 0, sizeof *s);
}

/* The partition a sample names, or NULL (no label, not an integer, out of range). */
static struct scrape_part *part_of(struct scrape *s, const struct promtext_sample *m)
{
	const char *v = promtext_label(m, "partition");
	if (!v || !*v || strlen(v) > 5)
		return NULL;
	int id = 0;
	for (const char *q = v; *q; q++) {
		if (*q < '0' || *q > '9')
			return NULL;
		id = id * 10 + (*q - '0');
	}
	if (id >= SCRAPE_PARTS_MAX)
		return NULL;
	s->parts[id].present = true;
	return &s->parts[id];
}

static bool add_part(struct scrape *s, const struct promtext_sample *m)
{
	struct scrape_part *p = part_of(s, m);
	if (!p)
		return false;
	if (strcmp(m->name, "flashsale_partition_next_offset") == 0) {
		p->has_next = true;
		p->next_offset = m->value;
	} else if (strcmp(m->name, "flashsale_partition_lag_records") == 0) {
		p->has_lag = true;
		p->lag = m->value;
	} else {
		p->has_records = true;
		p->records = m->value;
	}
	return true;
}

/* One bucket of the commit histogram, kept in ascending order of its bound. */
static bool add_bucket(struct scrape_hist *h, const struct promtext_sample *m)
{
	const char *le = promtext_label(m, "le");
	if (!le)
		return false;
	char *end;
	double bound = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, &end);
	if (!isinf(bound) && (end == le || *end || isnan(bound)))
		return false;
	int i = 0;
	while (i < h->n && h->le[i] < bound)
		i++;
	if (i < h->n && h->le[i] == bound) { /* the same bound twice: the last one counts */
		h->count[i] = m->value;
		return true;
	}
	if (h->n == SCRAPE_BUCKETS_MAX)
		return false;
	memmove(&h->le[i + 1], &h->le[i], (size_t)(h->n - i) * sizeof h->le[0]);
	memmove(&h->count[i + 1], &h->count[i], (size_t)(h->n - i) * sizeof h->count[0]);
	h->le[i] = bound;
	h->count[i] = m->value;
	h->n++;
	return true;
}

/* Adds n to the outcome's count (decisions of every type together). */
static bool add_outcome(struct scrape_outcome *o, int *len, const char *name, double n)
{
	for (int i = 0; i < *len; i++)
		if (strcmp(o[i].name, name) == 0) {
			o[i].n += n;
			return true;
		}
	if (*len == SCRAPE_OUTCOMES_MAX)
		return false;
	snprintf(o[*len].name, sizeof o[*len].name, "%s", name);
	o[(*len)++].n = n;
	return true;
}

static void add_gateway(struct scrape *s, const struct promtext_sample *m, const char *what)
{
	const char *l;
	s->gateway = true;
	if (strcmp(what, "start_time_seconds") == 0)
		s->start_time = m->value;
	else if (strcmp(what, "requests_total") == 0)
		s->gw_requests += m->value;
	else if (strcmp(what, "edge_answers_total") == 0 && (l = promtext_label(m, "outcome")))
		*(strcmp(l, "closed") == 0 ? &s->gw_edge_closed : &s->gw_edge_sold_out) += m->value;
	else if (strcmp(what, "waiting_requests") == 0 && (l = promtext_label(m, "kind")))
		*(strcmp(l, "stream") == 0 ? &s->gw_streams : &s->gw_long_polls) += m->value;
	else if (strcmp(what, "connections") == 0)
		s->gw_connections = m->value;
	else if (strcmp(what, "published_total") == 0)
		s->gw_published = m->value;
	else if (strcmp(what, "ready") == 0)
		s->gw_ready = m->value;
}

static void add_worker_info(struct scrape *s, const struct promtext_sample *m)
{
	const char *g = promtext_label(m, "group"), *t = promtext_label(m, "topic");
	snprintf(s->group, sizeof s->group, "%s", g ? g : "");
	snprintf(s->topic, sizeof s->topic, "%s", t ? t : "");
}

int scrape_add(const struct promtext_sample *m, void *ctx)
{
	struct scrape *s = ctx;
	const char *n = m->name, *outcome;
	bool kept = true;
	if (strncmp(n, "flashsale_gateway_", 18) == 0)
		add_gateway(s, m, n + 18);
	else if (strncmp(n, "flashsale_", 10) != 0)
		return 0;
	else if (strcmp(n, "flashsale_worker_info") == 0)
		add_worker_info(s, m);
	else if (strcmp(n, "flashsale_worker_start_time_seconds") == 0)
		s->start_time = m->value;
	else if (strcmp(n, "flashsale_records_total") == 0)
		s->records = m->value;
	else if (strcmp(n, "flashsale_holds_live") == 0)
		s->holds_live = m->value;
	else if (strcmp(n, "flashsale_assigned_partitions") == 0)
		s->assigned = m->value;
	else if (strcmp(n, "flashsale_transactions_failed_total") == 0)
		s->failed += m->value;
	else if (strcmp(n, "flashsale_decisions_total") == 0)
		kept = (outcome = promtext_label(m, "outcome")) &&
		       add_outcome(s->outcomes, &s->n_outcomes, outcome, m->value);
	else if (strncmp(n, "flashsale_partition_", 20) == 0)
		kept = add_part(s, m);
	else if (strcmp(n, "flashsale_batch_commit_seconds_bucket") == 0)
		kept = add_bucket(&s->commit, m);
	else if (strcmp(n, "flashsale_batch_commit_seconds_sum") == 0)
		s->commit.sum = m->value;
	else if (strcmp(n, "flashsale_batch_commit_seconds_count") == 0)
		s->commit.total = m->value;
	if (strncmp(n, "flashsale_gateway_", 18) != 0)
		s->worker = true;
	if (!kept)
		s->dropped++;
	return 0;
}

void scrape_text(struct scrape *s, const char *text, size_t len)
{
	scrape_reset(s);
	char err[PROMTEXT_ERR_MAX];
	if (promtext_parse(text, len, scrape_add, s, err) < 0) {
		scrape_reset(s);
		snprintf(s->error, sizeof s->error, "bad metrics text: %s", err);
		return;
	}
	s->up = true;
}

/* ---- two scrapes --------------------------------------------------------------------------- */

double scrape_increase(double before, double now, bool restarted)
{
	if (restarted || now < before)
		return now;
	return now - before;
}

bool scrape_restarted(const struct scrape *prev, const struct scrape *cur)
{
	return prev->start_time != cur->start_time;
}

static bool same_bounds(const struct scrape_hist *a, const struct scrape_hist *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (a->le[i] != b->le[i])
			return false;
	return true;
}

void scrape_hist_increase(const struct scrape_hist *prev, const struct scrape_hist *cur,
			  bool restarted, struct scrape_hist *out)
{
	*out = *cur;
	/* A count below its earlier value: the process restarted (every count went down with
	 * it, or the bounds changed). Take all of cur, as for any counter. */
	bool reset = restarted || !same_bounds(prev, cur) || cur->total < prev->total;
	for (int i = 0; !reset && i < cur->n; i++)
		reset = cur->count[i] < prev->count[i];
	if (reset)
		return;
	for (int i = 0; i < cur->n; i++)
		out->count[i] = cur->count[i] - prev->count[i];
	out->sum = cur->sum - prev->sum;
	out->total = cur->total - prev->total;
}

int scrape_hist_add(struct scrape_hist *a, const struct scrape_hist *b)
{
	if (b->n == 0)
		return 0;
	if (a->n == 0) {
		*a = *b;
		return 0;
	}
	if (!same_bounds(a, b))
		return -EINVAL;
	for (int i = 0; i < a->n; i++)
		a->count[i] += b->count[i];
	a->sum += b->sum;
	a->total += b->total;
	return 0;
}

double scrape_quantile(double q, const struct scrape_hist *h)
{
	int n = h->n;
	if (n < 2 || !isinf(h->le[n - 1]))
		return NAN;
	/* Counts that go down across buckets (a scrape between two increments, or a bad
	 * endpoint) are raised to the largest before them, as Prometheus does. */
	double count[SCRAPE_BUCKETS_MAX], high = 0;
	for (int i = 0; i < n; i++) {
		count[i] = h->count[i] > high ? h->count[i] : high;
		high = count[i];
	}
	double observations = count[n - 1];
	if (!(observations > 0))
		return NAN;
	double rank = q * observations;
	int b = 0;
	while (b < n - 1 && count[b] < rank)
		b++;
	if (b == n - 1)
		return h->le[n - 2];
	if (b == 0 && h->le[0] <= 0)
		return h->le[0];
	double start = 0, end = h->le[b], in = count[b];
	if (b > 0) {
		start = h->le[b - 1];
		in -= count[b - 1];
		rank -= count[b - 1];
	}
	return start + (end - start) * (rank / in);
}

void scrape_commits_of(const struct scrape_hist *h, struct scrape_commits *out)
{
	out->batches = h->total;
	out->mean_s = h->total > 0 ? h->sum / h->total : NAN;
	out->p99_s = h->total > 0 ? scrape_quantile(0.99, h) : NAN;
}

/* ---- several endpoints --------------------------------------------------------------------- */

static enum scrape_role role_of(const struct scrape *s, const char *group, const char *topic)
{
	if (!s->up)
		return SCRAPE_DOWN;
	if (s->gateway)
		return SCRAPE_GATEWAY;
	if (!s->worker)
		return SCRAPE_OTHER;
	if ((group && strcmp(s->group, group) != 0) || (topic && strcmp(s->topic, topic) != 0))
		return SCRAPE_FOREIGN;
	return SCRAPE_WORKER;
}

/* Partition id: its owner among the workers reporting it, its lag, records and rate (from
 * the owner's earlier scrape, bs[owner], when there is one). */
static void view_part(const struct scrape *cur, const struct scrape *const *bs, int n, int id,
		      struct scrape_view *v)
{
	struct scrape_view_part *vp = &v->parts[v->n_parts];
	*vp = (struct scrape_view_part){.id = id, .owner = -1};
	for (int i = 0; i < n; i++) {
		const struct scrape_part *p = &cur[i].parts[id];
		if (v->roles[i] != SCRAPE_WORKER || !p->present)
			continue;
		if (vp->owner >= 0 && !(p->next_offset > vp->next_offset)) {
			vp->others++;
			continue;
		}
		vp->others += vp->owner >= 0;
		vp->owner = i;
		vp->next_offset = p->next_offset;
	}
	if (vp->owner < 0)
		return;
	const struct scrape_part *p = &cur[vp->owner].parts[id];
	vp->has_lag = p->has_lag;
	vp->lag = p->lag;
	vp->records = p->records;
	const struct scrape *b = bs[vp->owner];
	if (b && p->has_records && b->parts[id].has_records) {
		vp->has_rate = true;
		vp->rate = scrape_increase(b->parts[id].records, p->records,
					   scrape_restarted(b, &cur[vp->owner])) /
			   v->seconds;
	}
	if (vp->has_lag)
		v->lag += vp->lag;
	v->n_parts++;
}

/* The commit histograms (whole and increase) and the decisions in the interval, summed over
 * the workers. */
static void view_worker(const struct scrape *c, const struct scrape *b, struct scrape_view *v)
{
	v->records += c->records;
	v->holds_live += c->holds_live;
	v->dropped += c->dropped;
	if (scrape_hist_add(&v->commit_total, &c->commit) < 0)
		v->mixed_buckets = true;
	if (!b)
		return;
	bool restarted = scrape_restarted(b, c);
	v->has_rate = true;
	v->records_rate += scrape_increase(b->records, c->records, restarted) / v->seconds;
	struct scrape_hist inc;
	scrape_hist_increase(&b->commit, &c->commit, restarted, &inc);
	if (scrape_hist_add(&v->commit_interval, &inc) < 0)
		v->mixed_buckets = true;
	for (int k = 0; k < c->n_outcomes; k++) {
		double then = 0;
		for (int j = 0; j < b->n_outcomes; j++)
			if (strcmp(b->outcomes[j].name, c->outcomes[k].name) == 0)
				then = b->outcomes[j].n;
		double d = scrape_increase(then, c->outcomes[k].n, restarted);
		if (!add_outcome(v->outcomes, &v->n_outcomes, c->outcomes[k].name, d))
			v->dropped++;
	}
}

static void view_gateway(const struct scrape *c, const struct scrape *b, struct scrape_view *v)
{
	v->gw_requests += c->gw_requests;
	v->gw_edge_sold_out += c->gw_edge_sold_out;
	v->gw_edge_closed += c->gw_edge_closed;
	v->gw_long_polls += c->gw_long_polls;
	v->gw_streams += c->gw_streams;
	v->gw_connections += c->gw_connections;
	v->gw_ready += c->gw_ready;
	if (!b)
		return;
	bool restarted = scrape_restarted(b, c);
	v->gw_has_rate = true;
	v->gw_requests_rate +=
		scrape_increase(b->gw_requests, c->gw_requests, restarted) / v->seconds;
	v->gw_edge_rate += scrape_increase(b->gw_edge_sold_out + b->gw_edge_closed,
					   c->gw_edge_sold_out + c->gw_edge_closed, restarted) /
			   v->seconds;
}

void scrape_view(const struct scrape *cur, const struct scrape *prev, int n, double seconds,
		 const char *group, const char *topic, struct scrape_view *v)
{
	memset(v, 0, sizeof *v);
	v->seconds = prev && seconds > 0 ? seconds : 0;
	if (n > SCRAPE_ENDPOINTS_MAX)
		n = SCRAPE_ENDPOINTS_MAX;
	const struct scrape *bs[SCRAPE_ENDPOINTS_MAX] = {0}; /* the scrapes to take rates from */
	for (int i = 0; i < n; i++) {
		v->roles[i] = role_of(&cur[i], group, topic);
		/* Not from an endpoint down either time, or where another kind of process
		 * answers now. */
		if (v->seconds > 0 && role_of(&prev[i], group, topic) == v->roles[i])
			bs[i] = &prev[i];
		if (v->roles[i] == SCRAPE_WORKER) {
			v->workers++;
			view_worker(&cur[i], bs[i], v);
		} else if (v->roles[i] == SCRAPE_GATEWAY) {
			v->gateways++;
			view_gateway(&cur[i], bs[i], v);
		}
	}
	for (int id = 0; id < SCRAPE_PARTS_MAX; id++)
		view_part(cur, bs, n, id, v);
	scrape_commits_of(&v->commit_total, &v->commits_total);
	scrape_commits_of(&v->commit_interval, &v->commits_interval);
}
