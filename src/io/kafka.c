/* kafka.c: librdkafka configuration (see kafka.h). */
#include "io/kafka.h"
#include "io/secret.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <time.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
const char *const fs_kafka_producer_defaults[] = {
	/* Off by default in librdkafka 2.0.2: without it a retried send can be written twice
	 * or out of order. */
	"enable.idempotence", "true",
	/* 0 = retry until delivered: a broker outage delays replies, it never drops them. */
	"message.timeout.ms", "0",
	/* A batch's answers are handed over in one rd_kafka_produce_batch call: 1 ms is enough
	 * to gather them into one request; 5 only added latency. */
	"linger.ms", "1",
	/* librdkafka's 100,000 filled up under a flood of bad records (one answer each): the
	 * worker then waited on delivery reports instead of deciding (the flood phase of
	 * 55-poison-flood took ~1,240 ms instead of ~630). A million answers of ~250 bytes is
	 * ~250 MB at worst. */
	"queue.buffering.max.messages", "1000000",
	NULL,
};

const char *const fs_kafka_consumer_defaults[] = {
	"enable.auto.commit", "false",
	"enable.auto.offset.store", "false",
	/* Start offsets always come from Postgres; never jump anywhere on our own. */
	"auto.offset.reset", "error",
	/* Eager assignment: cooperative-sticky had rebalance bugs before 2.2. */
	"partition.assignment.strategy", "range",
	"session.timeout.ms", "10000",
	"heartbeat.interval.ms", "1000",
	"fetch.wait.max.ms", "10",
	/* Larger fetches keep the local queue from running dry under a backlog, so that
	 * batches fill (a partial batch goes when the queue is empty). */
	"max.partition.fetch.bytes", "8388608",
	NULL,
};
/* clang-format on */

/* One kafka.* key: kafka.sasl.password.file is ours (librdkafka has no such property): the
 * password is read from the file, so that neither the configuration nor a command line
 * carries it. */
static int conf_set_passthrough(rd_kafka_conf_t *conf, const char *full, const char *key,
				const char *value, char *err, size_t err_len)
{
	char msg[512];
	if (strcmp(key, FS_KAFKA_PASSWORD_FILE) == 0) {
		char pw[FS_CONF_STR_MAX], what[160];
		snprintf(what, sizeof what, "kafka.%s", full);
		/* The rule of every secret's file (io/secret.h): private, one line. */
		if (fs_secret_file_read(value, what, pw, sizeof pw, err, err_len) < 0)
			return -1;
		rd_kafka_conf_res_t r =
			rd_kafka_conf_set(conf, "sasl.password", pw, msg, sizeof msg);
		OPENSSL_cleanse(pw, sizeof pw);
		if (r != RD_KAFKA_CONF_OK) {
			snprintf(err, err_len, "kafka.%s: %s", full, msg);
			return -1;
		}
		return 0;
	}
	if (rd_kafka_conf_set(conf, key, value, msg, sizeof msg) != RD_KAFKA_CONF_OK) {
		snprintf(err, err_len, "kafka.%s: %s", full, msg);
		return -1;
	}
	return 0;
}

rd_kafka_conf_t *fs_kafka_conf(const struct fs_config *c, rd_kafka_type_t type,
			       const char *const *defaults, char *err, size_t err_len)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", c->brokers, err, err_len) !=
	    RD_KAFKA_CONF_OK)
		goto fail;
	/* Every producer of ours, whatever its own defaults: the intents topic's partitioning
	 * rule is Kafka's Java default (murmur2 of the key), which most web tiers' clients
	 * share; librdkafka's own default is CRC32 (consistent_random). For an empty key
	 * murmur2_random picks a partition at random. kafka.producer.partitioner overrides it
	 * (the tests do, to publish as a CRC32 web tier would). */
	if (type == RD_KAFKA_PRODUCER &&
	    rd_kafka_conf_set(conf, "partitioner", FS_KAFKA_PARTITIONER, err, err_len) !=
		    RD_KAFKA_CONF_OK)
		goto fail;
	for (int i = 0; defaults && defaults[i]; i += 2)
		if (rd_kafka_conf_set(conf, defaults[i], defaults[i + 1], err, err_len) !=
		    RD_KAFKA_CONF_OK)
			goto fail;
	for (int i = 0; i < c->kafka_len; i++) {
		const char *key = c->kafka[i].key;
		const char *mine = type == RD_KAFKA_CONSUMER ? "consumer." : "producer.";
		const char *other = type == RD_KAFKA_CONSUMER ? "producer." : "consumer.";
		if (strncmp(key, other, strlen(other)) == 0)
			continue;
		if (strncmp(key, mine, strlen(mine)) == 0)
			key += strlen(mine);
		if (conf_set_passthrough(conf, c->kafka[i].key, key, c->kafka[i].value, err,
					 err_len) < 0)
			goto fail;
	}
	return conf;
fail:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

rd_kafka_t *fs_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t err_len)
{
	rd_kafka_t *rk = rd_kafka_new(type, conf, err, err_len);
	if (!rk)
		rd_kafka_conf_destroy(conf);
	return rk;
}

int fs_kafka_topic_config(rd_kafka_t *rk, const char *topic, const char *name, int timeout_ms,
			  char *out, size_t out_len, char *err, size_t err_len)
{
	rd_kafka_ConfigResource_t *res =
		rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_AdminOptions_t *o =
		rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
	rd_kafka_AdminOptions_set_request_timeout(o, timeout_ms, NULL, 0);
	rd_kafka_DescribeConfigs(rk, &res, 1, o, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
	int rc = -1;
	snprintf(err, err_len, "no answer from the broker within %d ms", timeout_ms);
	const rd_kafka_DescribeConfigs_result_t *r =
		ev ? rd_kafka_event_DescribeConfigs_result(ev) : NULL;
	if (ev && rd_kafka_event_error(ev)) {
		snprintf(err, err_len, "%s", rd_kafka_event_error_string(ev));
	} else if (r) {
		size_t nres = 0, n = 0;
		const rd_kafka_ConfigResource_t **rs =
			rd_kafka_DescribeConfigs_result_resources(r, &nres);
		if (nres == 1 && rd_kafka_ConfigResource_error(rs[0])) {
			snprintf(err, err_len, "%s", rd_kafka_ConfigResource_error_string(rs[0]));
		} else if (nres == 1) {
			const rd_kafka_ConfigEntry_t **e =
				rd_kafka_ConfigResource_configs(rs[0], &n);
			snprintf(err, err_len, "the broker did not name %s", name);
			for (size_t i = 0; i < n && rc < 0; i++) {
				const char *v = rd_kafka_ConfigEntry_value(e[i]);
				if (strcmp(rd_kafka_ConfigEntry_name(e[i]), name) == 0 && v) {
					snprintf(out, out_len, "%s", v);
					rc = 0;
				}
			}
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(o);
	rd_kafka_queue_destroy(q);
	rd_kafka_ConfigResource_destroy(res);
	return rc;
}

const char *fs_kafka_check_log_clock(rd_kafka_t *rk, const char *topic, int timeout_ms,
				     int *transient)
{
	static char why[768];
	char type[64], err[256];
	*transient = 0;
	if (fs_kafka_topic_config(rk, topic, "message.timestamp.type", timeout_ms, type,
				  sizeof type, err, sizeof err) < 0) {
		*transient = 1;
		snprintf(why, sizeof why, "no message.timestamp.type for topic %s: %s", topic, err);
		return why;
	}
	if (strcmp(type, FS_KAFKA_TIMESTAMP_TYPE) == 0)
		return NULL;
	snprintf(why, sizeof why,
		 "topic %s has message.timestamp.type=%s: its records keep their producers' "
		 "clocks, and the log clock (holds, windows) must be the broker's; set it to "
		 "LogAppendTime (kafka-configs.sh --alter --entity-type topics --entity-name %s "
		 "--add-config message.timestamp.type=LogAppendTime) before any record is "
		 "decided (docs/reference/operations.md: Pointing it at an existing Kafka)",
		 topic, type, topic);
	return why;
}

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* One round of fs_kafka_readable_ends: every partition still open (out[i] < 0) read from
 * max(lo, hi - window) until its last record below hi is seen, or its end. */
static int readable_round(rd_kafka_t *rk, const char *topic, int32_t first, int n,
			  const int64_t *lo, const int64_t *hi, int64_t *out, int64_t window,
			  int64_t deadline, char *err, size_t err_len)
{
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
	int64_t *last = malloc((size_t)n * sizeof *last);
	bool *open = calloc((size_t)n, sizeof *open);
	int left = 0, rc = 0;
	for (int i = 0; last && open && i < n; i++) {
		last[i] = -1;
		if (out[i] >= 0)
			continue;
		int64_t from = hi[i] - window > lo[i] ? hi[i] - window : lo[i];
		rd_kafka_topic_partition_list_add(l, topic, first + i)->offset = from;
		open[i] = true;
		left++;
	}
	rd_kafka_resp_err_t e = last && open ? rd_kafka_assign(rk, l) : RD_KAFKA_RESP_ERR__FAIL;
	if (e) {
		snprintf(err, err_len, "assign: %s", rd_kafka_err2str(e));
		rc = -1;
		left = 0;
	}
	while (left > 0) {
		if (mono_ms() > deadline) {
			snprintf(err, err_len, "topic %s: the end of its records not found in time",
				 topic);
			rc = -1;
			break;
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		if (!m)
			continue;
		int32_t p = m->partition - first;
		bool mine = p >= 0 && p < n && open[p];
		if (mine && m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			open[p] = false;
			left--;
		} else if (mine && m->err) {
			snprintf(err, err_len, "topic %s partition %d: %s", topic,
				 (int)m->partition, rd_kafka_message_errstr(m));
			rc = -1;
			left = 0;
		} else if (mine) {
			if (m->offset < hi[p] && m->offset > last[p])
				last[p] = m->offset;
			if (m->offset >= hi[p] - 1) { /* past every offset below hi */
				open[p] = false;
				left--;
			}
		}
		rd_kafka_message_destroy(m);
	}
	for (int i = 0; rc == 0 && i < n; i++) {
		if (out[i] >= 0 || open[i])
			continue;
		if (last[i] >= 0)
			out[i] = last[i] + 1;
		else if (hi[i] - window <= lo[i])
			out[i] = lo[i]; /* no record from lo on */
	}
	rd_kafka_assign(rk, NULL);
	rd_kafka_topic_partition_list_destroy(l);
	free(last);
	free(open);
	return rc;
}

int fs_kafka_readable_ends(const struct fs_config *c, const char *topic, int32_t first, int n,
			   const int64_t *lo, const int64_t *hi, int64_t *out, int timeout_ms,
			   char *err, size_t err_len)
{
	int todo = 0;
	for (int i = 0; i < n; i++) {
		out[i] = hi[i] <= lo[i] ? hi[i] : -1;
		todo += out[i] < 0;
	}
	if (todo == 0)
		return 0;
	static const char *const defaults[] = {
		"enable.auto.commit",
		"false",
		"enable.auto.offset.store",
		"false",
		"enable.partition.eof",
		"true",
		"fetch.wait.max.ms",
		"10",
		"group.id",
		"flashsale-readable-end",
		NULL,
		NULL,
	};
	rd_kafka_conf_t *conf = fs_kafka_conf(c, RD_KAFKA_CONSUMER, defaults, err, err_len);
	if (!conf)
		return -1;
	rd_kafka_t *rk = fs_kafka_new(RD_KAFKA_CONSUMER, conf, err, err_len);
	if (!rk)
		return -1;
	rd_kafka_poll_set_consumer(rk);
	int64_t deadline = mono_ms() + timeout_ms;
	int rc = 0;
	/* Most logs end with a record (the first round reads one); a transaction's marker
	 * hides the last offset, an aborted transaction a run of them. */
	for (int64_t window = 64; rc == 0; window *= 16) {
		rc = readable_round(rk, topic, first, n, lo, hi, out, window, deadline, err,
				    err_len);
		bool all = true;
		for (int i = 0; i < n; i++)
			all = all && out[i] >= 0;
		if (all)
			break;
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return rc;
}
