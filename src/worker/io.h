/* io.h: the worker's edges besides the store (io/store.h): the clock, the crash points, the
 * Kafka consumer and producer, and the lock the committer threads share with the loop.
 *
 * The protocol (loop, partition, pipeline, committer, publisher, rebuild) calls only these and
 * fs_store_*; io.c implements them with librdkafka, pthreads and the system clock for
 * flashsale-worker. Nothing here decides anything: each call is one thing the outside world
 * does, so that another implementation (a simulator) can run the same protocol code. */
#ifndef FS_WORKER_IO_H
#define FS_WORKER_IO_H

#include "worker/context.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Start offsets (librdkafka's logical offsets). */
#define FS_OFFSET_BEGINNING (-2)
#define FS_OFFSET_END (-1)
#define FS_PARTITION_ANY (-1) /* the producer's partitioner picks (results, stock) */

enum fs_topic { FS_TOPIC_INTENTS, FS_TOPIC_RESULTS, FS_TOPIC_STOCK };

/* A record read from the intents topic, valid until wio_release. ts_ms: its timestamp, 0 when
 * it has none. */
struct fs_msg {
	int32_t partition;
	int64_t offset;
	const void *key;
	size_t key_len;
	const void *payload;
	size_t len;
	int64_t ts_ms;
};

/* The metrics endpoint (metrics.listen), when set, is the edges' too: wio_open starts it,
 * a scrape waits for the main thread, which renders the text (metrics_render) in wio_poll and
 * in a retry's wait, and wio_free stops it. */

/* flashsale-worker's start: the crash points from FLASHSALE_CRASH, SIGTERM and SIGINT asking
 * to stop. */
void wio_init(void);
/* Opens the edges for w (its cfg): the producer and consumer, with the delivery, error and
 * rebalance callbacks wired to the protocol. -EINVAL: a configuration librdkafka refused
 * (logged). */
int wio_open(struct worker *w, struct wio **out);
/* Leaves the group (the revoke callback runs) and flushes the producer; wio_free then frees
 * what is left (wio_stopping and wio_failed still answer in between). */
void wio_close(struct wio *io);
void wio_free(struct wio *io);
int wio_subscribe(struct wio *io);

/* What the last failed call of the edges said. */
const char *wio_error(const struct wio *io);

/* The clock: monotonic, and the wall's (ticks are asked for by it). */
int64_t wio_now_ms(struct wio *io);
int64_t wio_now_us(struct wio *io);
int64_t wio_wall_ms(struct wio *io);
/* A retry's wait. On the main thread of a subscribed worker it keeps polling the consumer
 * (issue 28, item 1: the group keeps the worker, max.poll.interval.ms), holding what it
 * returns for wio_poll and deferring a rebalance to it; elsewhere a plain sleep. */
void wio_sleep_ms(struct wio *io, int64_t ms);
/* Asked to stop (a signal, a fatal Kafka error), and whether it was an error. */
bool wio_stopping(struct wio *io);
bool wio_failed(struct wio *io);
/* A named crash point (FLASHSALE_CRASH): true when it fires without killing the process. */
bool wio_crash_at(struct wio *io, const char *point);

/* Gives the store its crash points (FLASHSALE_CRASH inside a commit). */
void wio_store_hook(struct wio *io, struct fs_store *s);

/* Waits up to timeout_ms for the next record: 1 a record in *m (wio_release it), 2 something
 * else came (an event, handled), 0 nothing, -ERANGE the stored offset is outside the log. */
int wio_poll(struct wio *io, int64_t timeout_ms, struct fs_msg *m);
void wio_release(struct wio *io);
/* Records already fetched and not yet polled (a backlog). */
size_t wio_backlog(struct wio *io);
void wio_seek(struct wio *io, int32_t partition, int64_t offset);
/* The consumer group's offset: advisory (lag tools), never read back. */
void wio_commit_offset(struct wio *io, int32_t partition, int64_t next);
/* The intents topic: its partition count, one partition's watermarks (hi: where its records
 * end, fs_kafka_readable_ends), and a manual assignment of partitions 0..n-1, partition i from
 * offsets[i] (the rebuild). */
int wio_partitions(struct wio *io, int64_t timeout_ms, int32_t *n);
int wio_watermarks(struct wio *io, int32_t partition, int64_t *lo, int64_t *hi);
/* The end of a partition's log as last seen by the consumer (no request: its fetches' high
 * watermark), or -1 while unknown. The metrics' lag. */
int64_t wio_log_end(struct wio *io, int32_t partition);
/* Where the protocol is on a partition's log: one past the last record wio_poll handed out
 * (past the transaction markers after it; a record a retry's wait holds is not handed out),
 * no request, or -1 while unknown. */
int64_t wio_position(struct wio *io, int32_t partition);
/* NULL when the intents topic's timestamps are the broker's (LogAppendTime), else why not;
 * *transient when the broker could not say (worth asking again). */
const char *wio_log_clock(struct wio *io, int64_t timeout_ms, int *transient);
int wio_assign(struct wio *io, const int64_t *offsets, int n);

/* Produces one message (waiting while the local queue is full); tag comes back in the delivery
 * report (publisher_delivered). 0, or -EIO (logged). */
int wio_produce(struct wio *io, enum fs_topic topic, int32_t partition, const void *key,
		size_t key_len, const void *value, size_t len, struct inflight *tag);
/* Produces w->outs[0..n) (bodies in w->results) to the results topic in one call, each
 * tagged; returns how many it queued. When that is fewer than n it sets .failed on every one
 * (true for those not queued, which the caller sends one by one); otherwise .failed is left
 * as it was and must not be read. */
int wio_produce_results(struct wio *io, uint32_t n, struct inflight *tag);
/* Appends a tick record to the intents topic's partition (not waiting: a full queue fails it,
 * logged). 0 or -EIO. */
int wio_append_tick(struct wio *io, int32_t partition);
/* Serves delivery reports; flushes (every delivery report in, or the timeout: -ETIMEDOUT,
 * logged). */
void wio_serve(struct wio *io);
int wio_flush(struct wio *io, int64_t timeout_ms);

/* The committer threads: thread k runs fn(arg); one lock and one condition for all. */
int wio_thread_start(struct wio *io, int k, void *(*fn)(void *), void *arg);
void wio_thread_join(struct wio *io, int k);
void wio_lock(struct wio *io);
void wio_unlock(struct wio *io);
void wio_wait(struct wio *io); /* with the lock held: until a broadcast */
void wio_broadcast(struct wio *io);
/* Wakes the loop if it waits in wio_poll (a committer finished: its answers can go). */
void wio_wake(struct wio *io);

#endif
