/* echo.c: flashsale-echo, the floor under S5 (scripts/bench).
 *
 * It answers every record of the intents topic on the results topic at once, deciding nothing
 * and storing nothing: the answer carries only the intent's partition and offset, which is all
 * `flashsale timing` needs to match it. Run in place of the worker under the same open loop,
 * it measures what the broker, the two clients' lingers and this machine cost before the
 * worker does any work of its own, so that S5's latency can be read against it. It reads and
 * writes as the worker does: the worker's consumer and producer defaults (src/io/kafka.c), the
 * records drained from the local queue, then their answers in one rd_kafka_produce_batch call.
 *
 * With --sync FILE it also writes each batch's records to FILE and waits for fdatasync before
 * answering them: the durable floor, the WAL flush the worker's commit waits for without the
 * database's work. FILE is a ring of RING_BYTES written with zeros first, overwritten in place
 * as Postgres overwrites its recycled WAL segments, so that a flush carries no change of size.
 *
 * With --probe SECONDS (and --sync FILE) it touches no broker: it writes 8 KiB into the ring and
 * waits for fdatasync every 5 ms for SECONDS, the disk alone under whatever else the machine is
 * doing, and prints the flushes' percentiles. scripts/bench runs it with the services idle, so
 * that S5's tail can be read against what the disk does with no load at all.
 *
 * Not a worker: no group offsets, no Postgres, no dedupe, nothing a buyer may rely on. It reads
 * every partition of the intents topic from the beginning (a fresh run's topic), prints
 * "flashsale-echo: ready" on stderr once it has reached the end of each, and on SIGTERM or
 * SIGINT waits for its answers' delivery and prints a count. */
#include "core/buf.h"
#include "io/config.h"
#include "io/kafka.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
	DRAIN_MAX = 10000,
	ANSWER_MAX = 64,
	PROBE_BYTES = 8192,    /* --probe: one write, as a small commit's WAL */
	PROBE_EVERY_US = 5000, /* --probe: one flush every 5 ms */
	PROBE_SECONDS_MAX = 600,
};
#define RING_BYTES ((off_t)64 << 20)

static volatile sig_atomic_t stop_requested;
static int64_t delivery_failed;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	if (m->err)
		delivery_failed++;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashsale-echo -c FILE [--sync PATH]\n"
		"       flashsale-echo --probe SECONDS --sync PATH\n"
		"       flashsale-echo -c FILE --dump TEXT\n"
		"\n"
		"The floor under scripts/bench's S5: answers every record of topic.intents\n"
		"on topic.results at once, with\n"
		"  {\"type\":\"echo\",\"partition\":P,\"offset\":O}\n"
		"keyed as the record, deciding and storing nothing. `flashsale timing` then\n"
		"measures the broker, the clients and the machine without the worker's own\n"
		"work. Reads every partition from the beginning; prints 'flashsale-echo: ready'\n"
		"on stderr once it is at the end of each; on SIGTERM or SIGINT flushes and\n"
		"prints the count. Uses brokers, topic.intents, topic.results, group (with\n"
		"-echo appended) and kafka.* of FILE, and the worker's consumer and producer\n"
		"defaults. Not a worker: it commits nothing.\n"
		"  --sync PATH  the durable floor: write each batch's records to PATH and\n"
		"               fdatasync it before answering them. PATH is created (or\n"
		"               truncated), filled with 64 MiB of zeros, written as a ring, and\n"
		"               removed at exit; the exit line counts the flushes and gives\n"
		"               their p50, p99, p99.9 and max (us_sync_p50= ... us_sync_max=).\n"
		"  --probe SECONDS  the disk alone, no broker and no FILE needed: write 8 KiB\n"
		"               into the --sync ring and fdatasync it every 5 ms for SECONDS\n"
		"               (1..600), then print the same exit line.\n"
		"  --dump TEXT  answer nothing: read topic.results from its beginning to its\n"
		"               end and print 'TS VALUE' for each record whose value holds TEXT,\n"
		"               TS the broker's stamp in ms (S14 reads its admissions' stamps).\n"
		"Errors the consumer reports are printed and reading goes on. Exit 0; 1 when an\n"
		"answer could not be made durable, queued or delivered, or the topic has no\n"
		"partitions; 2 on a usage error.\n");
}

static rd_kafka_t *new_client(const struct fs_config *cfg, rd_kafka_type_t type)
{
	char err[512], group[FS_CONF_STR_MAX + 8];
	bool consumer = type == RD_KAFKA_CONSUMER;
	rd_kafka_conf_t *conf = fs_kafka_conf(
		cfg, type, consumer ? fs_kafka_consumer_defaults : fs_kafka_producer_defaults, err,
		sizeof err);
	if (!conf) {
		fprintf(stderr, "flashsale-echo: %s\n", err);
		return NULL;
	}
	snprintf(group, sizeof group, "%s-echo", cfg->group);
	if (consumer &&
	    (rd_kafka_conf_set(conf, "group.id", group, err, sizeof err) ||
	     rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof err))) {
		rd_kafka_conf_destroy(conf);
		fprintf(stderr, "flashsale-echo: %s\n", err);
		return NULL;
	}
	if (!consumer)
		rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
	rd_kafka_t *rk = fs_kafka_new(type, conf, err, sizeof err);
	if (!rk)
		fprintf(stderr, "flashsale-echo: %s\n", err);
	return rk;
}

/* Assigns every partition of the intents topic from its beginning; their count, or -1. */
static int assign_all(rd_kafka_t *c, const char *topic)
{
	rd_kafka_topic_t *t = rd_kafka_topic_new(c, topic, NULL);
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e =
		t ? rd_kafka_metadata(c, 0, t, &md, 10000) : RD_KAFKA_RESP_ERR__INVALID_ARG;
	int n = -1;
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && !md->topics[0].err &&
	    md->topics[0].partition_cnt > 0) {
		n = md->topics[0].partition_cnt;
		rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
		for (int i = 0; i < n; i++)
			rd_kafka_topic_partition_list_add(l, topic, md->topics[0].partitions[i].id)
				->offset = RD_KAFKA_OFFSET_BEGINNING;
		e = rd_kafka_assign(c, l);
		rd_kafka_topic_partition_list_destroy(l);
		if (e)
			n = -1;
	}
	if (n < 0)
		fprintf(stderr, "flashsale-echo: topic %s: %s\n", topic,
			e ? rd_kafka_err2str(e)
			: md && md->topic_cnt == 1 && md->topics[0].err
				? rd_kafka_err2str(md->topics[0].err)
				: "no partitions");
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	return n;
}

/* --dump: topic.results from its beginning to its end (every partition's end, as found when
 * the first poll reached it), each record holding `match` printed with its broker stamp. */
static int dump(rd_kafka_t *consumer, const char *topic, const char *match)
{
	int parts = assign_all(consumer, topic);
	if (parts <= 0)
		return 1;
	rd_kafka_poll_set_consumer(consumer);
	int at_end = 0, idle = 0;
	bool *ended = calloc((size_t)parts, sizeof *ended);
	while (ended && at_end < parts && !stop_requested && idle < 300) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 100);
		if (!m) {
			idle++; /* 30 s without a record or an end: the broker is gone */
			continue;
		}
		idle = 0;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			if (m->partition >= 0 && m->partition < parts && !ended[m->partition]) {
				ended[m->partition] = true;
				at_end++;
			}
		} else if (m->err) {
			fprintf(stderr, "flashsale-echo: %s\n", rd_kafka_message_errstr(m));
		} else if (m->len && memmem(m->payload, m->len, match, strlen(match))) {
			printf("%" PRId64 " %.*s\n", rd_kafka_message_timestamp(m, NULL),
			       (int)m->len, (const char *)m->payload);
		}
		rd_kafka_message_destroy(m);
	}
	free(ended);
	return ended && at_end == parts && fflush(stdout) == 0 ? 0 : 1;
}

static int64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

struct ring {
	int fd;
	off_t at;
	struct fs_buf batch; /* the batch's bytes, written at once */
	int64_t syncs, us_total, us_max;
	int64_t *us; /* each flush's time, for the percentiles */
	size_t us_cap;
};

/* Creates the ring: RING_BYTES of zeros, on disk before the first batch. */
static int ring_open(struct ring *r, const char *path)
{
	static const char zeros[1 << 20];
	r->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	bool ok = r->fd >= 0;
	for (off_t at = 0; ok && at < RING_BYTES; at += sizeof zeros) {
		ssize_t w = pwrite(r->fd, zeros, sizeof zeros, at);
		if (w != (ssize_t)sizeof zeros) {
			if (w >= 0)
				errno = EIO; /* short: the ring would grow later */
			ok = false;
		}
	}
	if (!ok || fsync(r->fd) < 0) {
		fprintf(stderr, "flashsale-echo: --sync %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Writes the ring's batch at its position in one write (the ring wraps to its start when the
 * batch does not fit before its end), then fdatasync; the time of both is counted. */
static int ring_flush(struct ring *r)
{
	int64_t t = now_us();
	if (!fs_buf_ok(&r->batch) || (off_t)r->batch.len > RING_BYTES) {
		errno = fs_buf_ok(&r->batch) ? EFBIG : ENOMEM;
		return -1;
	}
	if ((size_t)r->syncs == r->us_cap) {
		size_t cap = r->us_cap ? 2 * r->us_cap : 4096;
		int64_t *us = realloc(r->us, cap * sizeof *us);
		if (!us) {
			errno = ENOMEM;
			return -1;
		}
		r->us = us;
		r->us_cap = cap;
	}
	if (r->at + (off_t)r->batch.len > RING_BYTES)
		r->at = 0;
	ssize_t w = pwrite(r->fd, r->batch.data, r->batch.len, r->at);
	if (w != (ssize_t)r->batch.len) {
		if (w >= 0)
			errno = EIO;
		return -1;
	}
	if (fdatasync(r->fd) < 0)
		return -1;
	r->at += (off_t)r->batch.len;
	t = now_us() - t;
	r->us[r->syncs++] = t;
	r->us_total += t;
	if (t > r->us_max)
		r->us_max = t;
	return 0;
}

/* Writes the records' keys and payloads to the ring, then fdatasync. */
static int ring_sync(struct ring *r, rd_kafka_message_t **in, int n)
{
	fs_buf_clear(&r->batch);
	for (int i = 0; i < n; i++) {
		if (in[i]->key)
			fs_buf_add(&r->batch, in[i]->key, in[i]->key_len);
		if (in[i]->payload)
			fs_buf_add(&r->batch, in[i]->payload, in[i]->len);
	}
	return ring_flush(r);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Percentile q (0..1) of n sorted times, nearest rank. */
static int64_t pct_sorted(const int64_t *us, int64_t n, double q)
{
	if (n == 0)
		return 0;
	int64_t k = (int64_t)(q * (double)n + 0.999999);
	return us[k > 0 ? k - 1 : 0];
}

/* The ring's exit line: its flushes, their total and percentiles (the times get sorted). */
static void ring_report(struct ring *r)
{
	int64_t over = 0;
	if (r->syncs)
		qsort(r->us, (size_t)r->syncs, sizeof *r->us, cmp_i64);
	for (int64_t i = r->syncs; i > 0 && r->us[i - 1] > 20000; i--)
		over++;
	fprintf(stderr,
		" syncs=%" PRId64 " ms_sync=%" PRId64 " ms_sync_max=%" PRId64
		" us_sync_p50=%" PRId64 " us_sync_p99=%" PRId64 " us_sync_p999=%" PRId64
		" us_sync_max=%" PRId64 " syncs_over_20ms=%" PRId64 "\n",
		r->syncs, r->us_total / 1000, r->us_max / 1000, pct_sorted(r->us, r->syncs, 0.5),
		pct_sorted(r->us, r->syncs, 0.99), pct_sorted(r->us, r->syncs, 0.999), r->us_max,
		over);
}

/* --probe: PROBE_BYTES into the ring and fdatasync every PROBE_EVERY_US for `seconds` (a flush
 * that overruns its slot moves the next one on, it does not bunch them), then the exit line.
 * No broker: the disk alone. */
static int probe(struct ring *r, long seconds)
{
	static const char page[PROBE_BYTES] = {'p'};
	int64_t end = now_us() + (int64_t)seconds * 1000000, next = now_us();
	while (!stop_requested && next < end) {
		fs_buf_clear(&r->batch);
		fs_buf_add(&r->batch, page, sizeof page);
		if (ring_flush(r) < 0) {
			fprintf(stderr, "flashsale-echo: --probe: %s\n", strerror(errno));
			return 1;
		}
		next += PROBE_EVERY_US;
		int64_t now = now_us();
		if (next < now)
			next = now;
		else
			usleep((useconds_t)(next - now));
	}
	fprintf(stderr, "flashsale-echo: exit: probe_s=%ld", seconds);
	ring_report(r);
	return 0;
}

/* Answers the records drained from the consumer, in one call; how many were queued (all of
 * them, or the first refusal is printed). */
static int answer(rd_kafka_topic_t *results, rd_kafka_message_t **in, int n, char *bodies,
		  rd_kafka_message_t *out)
{
	for (int i = 0; i < n; i++) {
		char *b = bodies + (size_t)i * ANSWER_MAX;
		int len = snprintf(b, ANSWER_MAX,
				   "{\"type\":\"echo\",\"partition\":%" PRId32
				   ",\"offset\":%" PRId64 "}",
				   in[i]->partition, in[i]->offset);
		out[i] = (rd_kafka_message_t){
			.partition = RD_KAFKA_PARTITION_UA,
			.payload = b,
			.len = (size_t)len,
			.key = in[i]->key,
			.key_len = in[i]->key_len,
		};
	}
	int queued =
		rd_kafka_produce_batch(results, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, out, n);
	for (int i = 0; i < n && queued < n; i++)
		if (out[i].err) {
			fprintf(stderr, "flashsale-echo: answer to %" PRId32 "/%" PRId64 ": %s\n",
				in[i]->partition, in[i]->offset, rd_kafka_err2str(out[i].err));
			break;
		}
	return queued;
}

int main(int argc, char **argv)
{
	static struct fs_config cfg;
	fs_config_defaults(&cfg);
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"sync", required_argument, NULL, 'S'},
		{"probe", required_argument, NULL, 'P'},  {"dump", required_argument, NULL, 'D'},
		{"help", no_argument, NULL, 'h'},	  {NULL, 0, NULL, 0},
	};
	char err[FS_CONF_ERR_MAX];
	bool have_config = false;
	const char *sync_path = NULL, *dump_match = NULL;
	long probe_s = 0;
	int c;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == 'S') {
			sync_path = optarg;
			continue;
		}
		if (c == 'D') {
			dump_match = optarg;
			continue;
		}
		if (c == 'P') {
			char *end;
			errno = 0;
			probe_s = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || probe_s < 1 ||
			    probe_s > PROBE_SECONDS_MAX) {
				fprintf(stderr,
					"flashsale-echo: --probe takes 1..%d seconds, not '%s'\n",
					PROBE_SECONDS_MAX, optarg);
				return 2;
			}
			continue;
		}
		if (c != 'c') {
			usage(stderr);
			return 2;
		}
		if (fs_config_load_file(&cfg, optarg, err) < 0) {
			fprintf(stderr, "flashsale-echo: %s\n", err);
			return 2;
		}
		have_config = true;
	}
	if (probe_s > 0 && (!sync_path || optind < argc)) {
		fprintf(stderr, "flashsale-echo: --probe needs --sync PATH (and nothing else)\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	struct ring ring = {.fd = -1};
	if (probe_s > 0) {
		int prc = ring_open(&ring, sync_path) == 0 ? probe(&ring, probe_s) : 1;
		if (ring.fd >= 0) {
			close(ring.fd);
			unlink(sync_path);
		}
		fs_buf_free(&ring.batch);
		free(ring.us);
		return prc;
	}
	if (!have_config || optind < argc) {
		usage(stderr);
		return 2;
	}
	if (fs_config_apply_env(&cfg, err) < 0) {
		fprintf(stderr, "flashsale-echo: %s\n", err);
		return 2;
	}
	if (dump_match) {
		rd_kafka_t *rk = sync_path ? NULL : new_client(&cfg, RD_KAFKA_CONSUMER);
		int drc = rk ? dump(rk, cfg.topic_results, dump_match) : 2;
		if (rk) {
			rd_kafka_consumer_close(rk);
			rd_kafka_destroy(rk);
		} else if (sync_path) {
			usage(stderr);
		}
		return drc;
	}
	rd_kafka_t *producer = new_client(&cfg, RD_KAFKA_PRODUCER);
	rd_kafka_t *consumer = producer ? new_client(&cfg, RD_KAFKA_CONSUMER) : NULL;
	rd_kafka_topic_t *results =
		consumer ? rd_kafka_topic_new(producer, cfg.topic_results, NULL) : NULL;
	rd_kafka_message_t **in = calloc(DRAIN_MAX, sizeof *in);
	rd_kafka_message_t *out = calloc(DRAIN_MAX, sizeof *out);
	char *bodies = calloc(DRAIN_MAX, ANSWER_MAX);
	int rc = 1, parts = -1;
	if (!results || !in || !out || !bodies)
		fprintf(stderr, "flashsale-echo: could not start (%s)\n",
			results ? strerror(ENOMEM) : "see above");
	else if ((!sync_path || ring_open(&ring, sync_path) == 0) &&
		 (parts = assign_all(consumer, cfg.topic_intents)) > 0)
		rc = 0;
	if (consumer && parts > 0)
		rd_kafka_poll_set_consumer(consumer);

	int64_t answered = 0;
	int at_end = 0; /* partitions read to their end at least once */
	bool *ended = parts > 0 ? calloc((size_t)parts, sizeof *ended) : NULL;
	if (parts > 0 && !ended)
		rc = 1;
	while (rc == 0 && !stop_requested) {
		int n = 0;
		/* Wait for one record, then take what is already here, as the worker batches. */
		for (int wait_ms = 100; n < DRAIN_MAX; wait_ms = 0) {
			rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, wait_ms);
			if (!m)
				break;
			if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
				/* A partition reports its end each time it catches up: count each
				 * once. */
				if (m->partition >= 0 && m->partition < parts &&
				    !ended[m->partition]) {
					ended[m->partition] = true;
					if (++at_end == parts)
						fprintf(stderr, "flashsale-echo: ready\n");
				}
				rd_kafka_message_destroy(m);
			} else if (m->err) {
				fprintf(stderr, "flashsale-echo: %s\n", rd_kafka_message_errstr(m));
				rd_kafka_message_destroy(m);
			} else {
				in[n++] = m;
			}
		}
		bool durable = n == 0 || !sync_path || ring_sync(&ring, in, n) == 0;
		if (!durable) { /* not answered: an answer here promises a durable write */
			fprintf(stderr, "flashsale-echo: --sync %s: %s\n", sync_path,
				strerror(errno));
			rc = 1;
		}
		int queued = n && durable ? answer(results, in, n, bodies, out) : 0;
		if (durable && queued < n)
			rc = 1;
		answered += queued;
		for (int i = 0; i < n; i++)
			rd_kafka_message_destroy(in[i]);
		rd_kafka_poll(producer, 0);
	}
	if (producer && rd_kafka_flush(producer, (int)cfg.flush_timeout_ms))
		fprintf(stderr, "flashsale-echo: %d answers not delivered at exit\n",
			rd_kafka_outq_len(producer));
	if (producer && (rd_kafka_outq_len(producer) > 0 || delivery_failed > 0))
		rc = 1;
	fprintf(stderr, "flashsale-echo: exit: answered=%" PRId64 " delivery_failed=%" PRId64,
		answered, delivery_failed);
	ring_report(&ring);
	if (ring.fd >= 0) {
		close(ring.fd);
		unlink(sync_path);
	}
	fs_buf_free(&ring.batch);
	free(ring.us);
	if (consumer) {
		rd_kafka_consumer_close(consumer);
		rd_kafka_destroy(consumer);
	}
	if (results)
		rd_kafka_topic_destroy(results);
	if (producer)
		rd_kafka_destroy(producer);
	free(ended);
	free(in);
	free(out);
	free(bodies);
	return rc;
}
