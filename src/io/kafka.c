/* kafka.c: librdkafka configuration (see kafka.h). */
#include "io/kafka.h"

#include <stdio.h>
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
		char msg[512];
		const char *key = c->kafka[i].key;
		const char *mine = type == RD_KAFKA_CONSUMER ? "consumer." : "producer.";
		const char *other = type == RD_KAFKA_CONSUMER ? "producer." : "consumer.";
		if (strncmp(key, other, strlen(other)) == 0)
			continue;
		if (strncmp(key, mine, strlen(mine)) == 0)
			key += strlen(mine);
		if (rd_kafka_conf_set(conf, key, c->kafka[i].value, msg, sizeof msg) !=
		    RD_KAFKA_CONF_OK) {
			snprintf(err, err_len, "kafka.%s: %s", c->kafka[i].key, msg);
			goto fail;
		}
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
