/* timing.c: `flashsale timing`, the benchmark's end-to-end clock.
 *
 * Both topics carry broker timestamps (LogAppendTime: `flashsale topics create` sets it on the
 * intents and the results topic), so one clock, the broker's, stamps the moment an intent was
 * published and the moment its answer was stored. The command reads the intents topic up to
 * its end, then the results topic until every intent read has its answer (or the timeout), and
 * prints the rate and the per-record latency percentiles. Nothing here decides anything.
 *
 * The broker stamps an intent when it appends it, not when the buyer's client published it:
 * a publisher's producer lingers (10 ms in the client library) to gather intents into one
 * request. A version-7 intent id carries the time its client minted it, just before the
 * publish call, so for those records a second set of percentiles runs from that time to the
 * answer's stamp: the latency a buyer sees, on the client's clock for its start. */
#include "cli/cli.h"

#include "io/config.h"
#include "core/record.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
	POLL_MS = 200,
	TIMING_PARTS_MAX = 1024,
	TIMING_RECORDS_MAX = 50000000, /* 28 bytes a record, 1.4 GB: far beyond any benchmark */
};

/* Unanswered: no answer seen yet; NOT_TIMED: outside the window, a tick, or answered. */
#define UNANSWERED_BIT ((int64_t)1 << 62)
#define NOT_TIMED INT64_MIN
/* No client time: the intent id is not version 7. */
#define NO_LEAD INT32_MIN

struct tm_part {
	int64_t end;
	int64_t *
		ts; /* by offset, 0..end-1: the record's timestamp | UNANSWERED_BIT, or NOT_TIMED */
	int32_t *lead; /* by offset: ms from the id's mint time to the broker's stamp, or NO_LEAD */
};

/* --series: answers per SERIES_MS of the broker's clock from the first record's stamp. */
enum { SERIES_MS = 50, SERIES_MAX = 72000 /* an hour */ };
struct series {
	int64_t *decided, *held; /* per bucket: answers, units held net of those returned */
	size_t len, cap;
};

struct timing {
	int nparts;
	struct series series;
	bool want_series;
	struct tm_part *parts;
	int64_t records, answered, ticks, forwarded, first_ms, last_in_ms, first_reply_ms,
		last_reply_ms;
	int64_t *lat;  /* records entries */
	int64_t *clat; /* records entries: from the client's publish, for client_timed of them */
	int64_t client_timed;
	bool append_time_in, append_time_out;
	struct fs_record_limits limits;
};

static const char usage_timing[] =
	"usage: flashsale timing [--since EPOCH_MS] [--timeout SECONDS] [--json] [--series FILE]\n"
	"\n"
	"Measures a run end to end on the broker's clock: reads the intents topic up to its end\n"
	"(records stamped at or after --since, ticks left out), then the results topic until\n"
	"every such record has its answer, and prints one line:\n"
	"  TIMING records=N answered=N ticks=N seconds=S per_s=R publish_seconds=S\n"
	"         answer_seconds=S p50_ms= p99_ms= p999_ms= max_ms= client_timed=N\n"
	"         client_p50_ms= client_p99_ms= client_p999_ms= client_max_ms= forwarded=N\n"
	"         last_answer_ms=EPOCH_MS\n"
	"seconds runs from the first record published to the last answer stored (publish_seconds:\n"
	"to the last record published; answer_seconds: from the first answer to the last); per_s "
	"is\n"
	"records / seconds; latency is per record, answer's timestamp - record's timestamp (an\n"
	"answer to a repeat counts for the first record only). The broker stamps a record when\n"
	"it appends it, after the publisher's producer lingered (10 ms in the client library):\n"
	"client_* run instead from the time in the record's intent id, for the client_timed\n"
	"records whose id is version 7 (the client library and `load` mint them just before\n"
	"publishing), on the client's clock. Exit 1 if an answer is missing at the timeout\n"
	"(default 120 s). Both topics need LogAppendTime timestamps (flashsale topics create);\n"
	"otherwise the producers' clocks are used and a warning says so. A record on the wrong\n"
	"partition (the rule recorded for the topic) is counted in forwarded, not timed: its\n"
	"forwarded copy is, from the copy's own stamp (client_*: from the publish call).\n"
	"last_answer_ms is when the last answer was stored.\n"
	"--series FILE also writes the run over time, for a chart (scripts/demo draws it): one\n"
	"line per 50 ms of the broker's clock from the first record: seconds, decisions per\n"
	"second (every first answer, expiries too), units held per second (net of those an\n"
	"expiry or a cancel gave back) and the units held so far.\n";

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Ms from the time in the record's intent id to the broker's stamp ts, or NO_LEAD; *tick: a
 * tick as the worker sees it (it answers every record but ticks), *fwd: a record the worker
 * forwards (its copy is answered, and timed, on the partition the rule names): the same
 * parser. */
static int32_t lead_of(const struct timing *t, const rd_kafka_message_t *m, int64_t ts, bool *tick,
		       bool *fwd)
{
	struct fs_record r;
	fs_record_parse(&t->limits, m->key, m->key_len, m->payload, m->len, m->partition, m->offset,
			0, &r);
	*tick = r.kind == FS_KIND_TICK;
	*fwd = r.misrouted;
	int64_t minted = r.intent_id[0] ? fs_uuid_v7_ms(r.intent_id) : -1;
	if (minted < 0 || ts - minted <= INT32_MIN || ts - minted > INT32_MAX)
		return NO_LEAD;
	return (int32_t)(ts - minted);
}

static void take_intent(struct timing *t, const rd_kafka_message_t *m, int64_t since)
{
	struct tm_part *p = &t->parts[m->partition];
	if (m->offset < 0 || m->offset >= p->end)
		return;
	rd_kafka_timestamp_type_t type;
	int64_t ts = rd_kafka_message_timestamp(m, &type);
	if (type != RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME)
		t->append_time_in = false;
	if (ts < since || ts < 0)
		return;
	bool tick, fwd;
	int32_t lead = lead_of(t, m, ts, &tick, &fwd);
	if (tick || fwd) {
		t->ticks += tick;
		t->forwarded += fwd;
		return;
	}
	p->ts[m->offset] = ts | UNANSWERED_BIT;
	p->lead[m->offset] = lead;
	t->records++;
	if (t->first_ms < 0 || ts < t->first_ms)
		t->first_ms = ts;
	if (ts > t->last_in_ms)
		t->last_in_ms = ts;
}

/* One answer stamped ts into its bucket: every first answer counts as a decision (expiries
 * too), and its units move the held total (a hold takes them, an expiry or a cancel gives
 * them back). Past SERIES_MAX buckets, or before the first record, nothing is counted. */
static void series_take(struct timing *t, int64_t ts, const json_t *j)
{
	struct series *s = &t->series;
	if (!t->want_series || t->first_ms < 0 || ts < t->first_ms)
		return;
	size_t k = (size_t)((ts - t->first_ms) / SERIES_MS);
	if (k >= SERIES_MAX)
		return;
	if (k >= s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		while (cap <= k)
			cap *= 2;
		int64_t *d = realloc(s->decided, cap * sizeof *d);
		if (d)
			s->decided = d;
		int64_t *h = d ? realloc(s->held, cap * sizeof *h) : NULL;
		if (!h)
			return; /* out of memory: this answer is left out */
		s->held = h;
		memset(s->decided + s->cap, 0, (cap - s->cap) * sizeof *d);
		memset(s->held + s->cap, 0, (cap - s->cap) * sizeof *h);
		s->cap = cap;
	}
	if (k >= s->len)
		s->len = k + 1;
	s->decided[k]++;
	const char *out = json_string_value(json_object_get(j, "outcome"));
	int64_t qty = json_integer_value(json_object_get(j, "qty"));
	if (out && strcmp(out, "held") == 0)
		s->held[k] += qty;
	else if (out && (strcmp(out, "expired") == 0 || strcmp(out, "cancelled") == 0))
		s->held[k] -= qty;
}

/* The series as a table for gnuplot: seconds from the first record, decisions per second,
 * units held per second, and the units held so far. */
static int series_write(const struct timing *t, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		cli_err("timing: %s: %s", path, strerror(errno));
		return -1;
	}
	fprintf(f,
		"# seconds decided_per_s held_per_s held_total (buckets of %d ms, broker clock "
		"from the first record)\n",
		SERIES_MS);
	int64_t total = 0;
	for (size_t k = 0; k < t->series.len; k++) {
		total += t->series.held[k];
		fprintf(f, "%.3f %" PRId64 " %" PRId64 " %" PRId64 "\n",
			(double)(k * SERIES_MS) / 1000.0, t->series.decided[k] * 1000 / SERIES_MS,
			t->series.held[k] * 1000 / SERIES_MS, total);
	}
	/* The end of the last bucket, so that a chart's steps draw it whole. */
	fprintf(f, "%.3f 0 0 %" PRId64 "\n", (double)(t->series.len * SERIES_MS) / 1000.0, total);
	if (fclose(f) != 0) {
		cli_err("timing: %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static void take_answer(struct timing *t, const rd_kafka_message_t *m)
{
	json_t *j = json_loadb(m->payload, m->len, 0, NULL);
	json_t *part = json_object_get(j, "partition"), *off = json_object_get(j, "offset");
	const char *type = json_string_value(json_object_get(j, "type"));
	bool expire = type && strcmp(type, "expire") == 0;
	bool skip = !json_is_integer(part) || !json_is_integer(off) ||
		    json_is_true(json_object_get(j, "duplicate")) || expire;
	int64_t pi = json_integer_value(part), oi = json_integer_value(off);
	rd_kafka_timestamp_type_t tstype;
	int64_t ts = rd_kafka_message_timestamp(m, &tstype);
	struct tm_part *p = skip || pi < 0 || pi >= t->nparts ? NULL : &t->parts[pi];
	if (p && (oi < 0 || oi >= p->end || p->ts[oi] == NOT_TIMED))
		p = NULL; /* not a record of the run, or answered already */
	/* The series: the run's first answers, and the expiries that give units back. */
	if (p || expire)
		series_take(t, ts, j);
	json_decref(j);
	if (!p)
		return;
	if (tstype != RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME)
		t->append_time_out = false;
	int64_t sent = p->ts[oi] & ~UNANSWERED_BIT;
	p->ts[oi] = NOT_TIMED;
	t->lat[t->answered++] = ts - sent;
	if (p->lead[oi] != NO_LEAD)
		t->clat[t->client_timed++] = ts - sent + p->lead[oi];
	if (ts > t->last_reply_ms)
		t->last_reply_ms = ts;
	if (t->first_reply_ms < 0 || ts < t->first_reply_ms)
		t->first_reply_ms = ts;
}

/* Reads the intents topic up to the ends taken at the start (intents), or the results topic
 * until every record taken has its answer; -ETIMEDOUT at the deadline (monotonic ms). */
static int read_topic(flashsale_t *fs, const char *topic, int nparts, struct timing *t,
		      int64_t since, bool intents, int64_t deadline)
{
	int64_t *lo = calloc((size_t)nparts, sizeof *lo);
	rd_kafka_t *rk = lo ? cli_topic_reader(fs, topic, nparts, "flashsale-timing", lo) : NULL;
	if (!rk) {
		free(lo);
		return -EIO;
	}
	int64_t left = 0;
	for (int i = 0; intents && i < nparts; i++)
		left += t->parts[i].end > lo[i] ? t->parts[i].end - lo[i] : 0;
	free(lo);
	int rc = 0;
	while (intents ? left > 0 : t->answered < t->records) {
		if (mono_ms() > deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, POLL_MS);
		if (!m)
			continue;
		if (!m->err && m->partition >= 0 && m->partition < t->nparts) {
			if (intents) {
				if (m->offset < t->parts[m->partition].end)
					left--;
				take_intent(t, m, since);
			} else {
				take_answer(t, m);
			}
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return rc;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Nearest rank, as bench/peers.c reports its peers' percentiles: the smallest value with at
 * least q of them at or below it. */
static double pct(const int64_t *v, int64_t n, double q)
{
	if (n == 0)
		return 0;
	int64_t k = (int64_t)ceil(q * (double)n);
	return (double)v[k > 0 ? k - 1 : 0];
}

/* Room for every record of the partitions ending at ends[0..t->nparts); false: out of memory
 * (what was allocated is freed by timing_free). */
static bool timing_alloc(struct timing *t, const int64_t *ends, int64_t total)
{
	t->parts = calloc((size_t)t->nparts, sizeof *t->parts);
	t->lat = malloc((size_t)(total ? total : 1) * sizeof *t->lat);
	t->clat = malloc((size_t)(total ? total : 1) * sizeof *t->clat);
	for (int i = 0; t->parts && i < t->nparts; i++) {
		/* Indexed by offset from 0: records below the log start never arrive. */
		size_t n = (size_t)(ends[i] ? ends[i] : 1);
		t->parts[i].end = ends[i];
		t->parts[i].ts = malloc(n * sizeof(int64_t));
		t->parts[i].lead = malloc(n * sizeof(int32_t));
		if (!t->parts[i].ts || !t->parts[i].lead)
			return false;
		for (int64_t k = 0; k < ends[i]; k++)
			t->parts[i].ts[k] = NOT_TIMED;
	}
	return t->parts && t->lat && t->clat;
}

static void timing_free(struct timing *t)
{
	for (int i = 0; t->parts && i < t->nparts; i++) {
		free(t->parts[i].ts);
		free(t->parts[i].lead);
	}
	free(t->parts);
	free(t->lat);
	free(t->clat);
	free(t->series.decided);
	free(t->series.held);
}

/* The TIMING line (or its JSON), from the latencies read. */
static void timing_print(struct timing *t, bool json)
{
	qsort(t->lat, (size_t)t->answered, sizeof *t->lat, cmp_i64);
	qsort(t->clat, (size_t)t->client_timed, sizeof *t->clat, cmp_i64);
	double secs = t->answered && t->last_reply_ms >= t->first_ms
			      ? (double)(t->last_reply_ms - t->first_ms) / 1000.0
			      : 0;
	double per_s = secs > 0 ? (double)t->records / secs : 0;
	const char *fmt =
		json ? "{\"records\":%" PRId64 ",\"answered\":%" PRId64 ",\"ticks\":%" PRId64
		       ",\"seconds\":%.3f,\"per_s\":%.0f,"
		       "\"publish_seconds\":%.3f,\"answer_seconds\":%.3f,\"p50_ms\":%.0f,"
		       "\"p99_ms\":%.0f,\"p999_ms\":%.0f,\"max_ms\":%.0f,\"client_timed\":%" PRId64
		       ",\"client_p50_ms\":%.0f,\"client_p99_ms\":%.0f,\"client_p999_ms\":%.0f,"
		       "\"client_max_ms\":%.0f,\"forwarded\":%" PRId64
		       ",\"last_answer_ms\":%" PRId64 "}\n"
		     : "TIMING records=%" PRId64 " answered=%" PRId64 " ticks=%" PRId64
		       " seconds=%.3f per_s=%.0f publish_seconds=%.3f answer_seconds=%.3f "
		       "p50_ms=%.0f p99_ms=%.0f p999_ms=%.0f max_ms=%.0f client_timed=%" PRId64
		       " client_p50_ms=%.0f client_p99_ms=%.0f client_p999_ms=%.0f "
		       "client_max_ms=%.0f forwarded=%" PRId64 " last_answer_ms=%" PRId64 "\n";
	printf(fmt, t->records, t->answered, t->ticks, secs, per_s,
	       t->records ? (double)(t->last_in_ms - t->first_ms) / 1000.0 : 0.0,
	       t->answered ? (double)(t->last_reply_ms - t->first_reply_ms) / 1000.0 : 0.0,
	       pct(t->lat, t->answered, 0.50), pct(t->lat, t->answered, 0.99),
	       pct(t->lat, t->answered, 0.999), t->answered ? (double)t->lat[t->answered - 1] : 0.0,
	       t->client_timed, pct(t->clat, t->client_timed, 0.50),
	       pct(t->clat, t->client_timed, 0.99), pct(t->clat, t->client_timed, 0.999),
	       t->client_timed ? (double)t->clat[t->client_timed - 1] : 0.0, t->forwarded,
	       t->answered ? t->last_reply_ms : 0);
}

int cli_timing(flashsale_t *fs, int argc, char **argv)
{
	int64_t since = 0, timeout_s = 120;
	bool json = false;
	const char *series = NULL;
	const struct cli_opt spec[] = {
		{"since", CLI_INT, &since, 0, INT64_MAX / 4},
		{"timeout", CLI_TIMEOUT, &timeout_s, 1, 86400},
		{"json", CLI_FLAG, &json},
		{"series", CLI_STR, &series},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_timing, spec, 0, 0);
	if (rc >= 0)
		return rc;
	const struct fs_config *cfg = flashsale_config(fs);
	int64_t deadline = mono_ms() + timeout_s * 1000;
	int64_t *ends = NULL, *rends = NULL;
	struct timing t = {.first_ms = -1,
			   .first_reply_ms = -1,
			   .append_time_in = true,
			   .append_time_out = true,
			   .want_series = series != NULL};
	t.limits.bytes_max = (size_t)cfg->record_max_bytes;
	PGconn *pg = flashsale_pg(fs);
	if (pg && cli_topic_rule(pg, cfg->topic_intents, &t.limits) < 0)
		return 1;
	t.nparts = cli_topic_ends(fs, cfg->topic_intents, &ends);
	int rparts = t.nparts < 0 ? -1 : cli_topic_ends(fs, cfg->topic_results, &rends);
	free(rends);
	if (t.nparts < 0 || rparts < 0) {
		free(ends);
		return 1;
	}
	int64_t total = 0;
	for (int i = 0; i < t.nparts; i++)
		total += ends[i];
	if (t.nparts > TIMING_PARTS_MAX || total > TIMING_RECORDS_MAX) {
		cli_err("timing: %d partitions and %" PRId64 " records: more than it can hold",
			t.nparts, total);
		free(ends);
		return 1;
	}
	bool room = timing_alloc(&t, ends, total);
	free(ends);
	rc = 1;
	if (!room) {
		cli_err("timing: out of memory");
		goto out;
	}
	int e = read_topic(fs, cfg->topic_intents, t.nparts, &t, since, true, deadline);
	if (e == 0)
		e = read_topic(fs, cfg->topic_results, rparts, &t, since, false, deadline);
	if (e == -EIO)
		goto out;
	if (!t.append_time_in || !t.append_time_out)
		cli_err("timing: warning: a topic without LogAppendTime timestamps: the "
			"producers' clocks are used");
	timing_print(&t, json);
	if (series && series_write(&t, series) < 0)
		goto out;
	if (t.answered < t.records)
		cli_err("timing: %" PRId64 " of %" PRId64 " records have no answer after %" PRId64
			" s",
			t.records - t.answered, t.records, timeout_s);
	else
		rc = 0;
out:
	timing_free(&t);
	return rc;
}
