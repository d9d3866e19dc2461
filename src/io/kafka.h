/* kafka.h: librdkafka handles built from the configuration: bootstrap servers, the caller's
 * defaults, then every kafka.* key of the configuration (the user's word wins). */
#ifndef FS_KAFKA_H
#define FS_KAFKA_H

#include "io/config.h"

#include <librdkafka/rdkafka.h>
#include <stddef.h>

/* The partitioner of every producer built here: the intents topic's partitioning rule
 * (fs_partition_of in core/record.h) for a non-empty key. */
#define FS_KAFKA_PARTITIONER "murmur2_random"

/* defaults: a NULL-terminated list of key, value pairs; a producer gets FS_KAFKA_PARTITIONER
 * first. type picks which passthrough keys
 * apply: kafka.X to both, kafka.consumer.X only to consumers, kafka.producer.X only to
 * producers (so that neither warns about the other's properties). */
rd_kafka_conf_t *fs_kafka_conf(const struct fs_config *c, rd_kafka_type_t type,
			       const char *const *defaults, char *err, size_t err_len);
/* kafka.sasl.password.file = PATH (also kafka.consumer./kafka.producer.): librdkafka's
 * sasl.password read from PATH, a private file holding the password alone (io/secret.h's
 * rule: this user's, mode 0600, one line); any other file fails fs_kafka_conf (at start). */
#define FS_KAFKA_PASSWORD_FILE "sasl.password.file"

/* Creates the handle (takes ownership of conf in every case). */
rd_kafka_t *fs_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t err_len);

/* One configuration entry of a topic as the broker applies it (the admin API's
 * DescribeConfigs: the topic's own value, else the broker's default), into out. 0, or -1
 * with err. Any handle can ask (the worker asks with its producer). */
int fs_kafka_topic_config(rd_kafka_t *rk, const char *topic, const char *name, int timeout_ms,
			  char *out, size_t out_len, char *err, size_t err_len);

/* The log clock is the broker's: a topic whose records keep their producers' timestamps
 * (CreateTime) would let one producer's clock expire every hold. NULL when the intents
 * topic's message.timestamp.type is LogAppendTime, else why not (static storage), with the
 * command that sets it. */
#define FS_KAFKA_TIMESTAMP_TYPE "LogAppendTime"
const char *fs_kafka_check_log_clock(rd_kafka_t *rk, const char *topic, int timeout_ms,
				     int *transient);

/* Where the records of each partition end for a consumer (issue 28, item 9): one past the
 * last record below hi[i] that a consumer of this configuration is given (read_committed by
 * default: a transaction's marker, an aborted transaction's records are not), so a log that
 * ends with a marker is decided once its last record is; hi[i] itself when the last offset
 * holds a record, lo[i] when no offset from lo[i] does. Reads back from hi[i] in a widening
 * window, with a consumer of its own (no group, no commits). Index i is partition first + i.
 * 0, or -1 with err. */
int fs_kafka_readable_ends(const struct fs_config *c, const char *topic, int32_t first, int n,
			   const int64_t *lo, const int64_t *hi, int64_t *out, int timeout_ms,
			   char *err, size_t err_len);

/* Producer defaults shared by the worker and the clients: idempotent, never gives up. */
extern const char *const fs_kafka_producer_defaults[];
/* The worker's consumer defaults (also flashsale-echo's, the benchmark's floor, so that the
 * two read alike): no automatic commits or offset resets, eager assignment, short fetch waits,
 * large fetches. */
extern const char *const fs_kafka_consumer_defaults[];

#endif
