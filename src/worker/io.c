/* io.c: the worker's edges for flashsale-worker: librdkafka's consumer and producer, pthreads,
 * the system clock, signals and the crash points of the fault-injection tests (see io.h). */
#include "worker/io.h"

#include "io/kafka.h"
#include "io/log.h"
#include "io/metrics.h"
#include "worker/loop.h"
#include "worker/metrics.h"
#include "worker/publisher.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct wio {
	struct worker *w;
	rd_kafka_t *consumer;
	rd_kafka_t *producer;
	rd_kafka_topic_t *intents_rkt;	  /* consumer-side handle, for seek */
	rd_kafka_queue_t *consumer_queue; /* to see whether more records are already here */
	rd_kafka_topic_t *results_rkt;	  /* the batch produce's (NULL: one call each) */
	rd_kafka_message_t *cur;	  /* the record wio_poll returned, until wio_release */
	rd_kafka_message_t *msgs;	  /* the batch produce's messages */
	uint32_t msgs_cap;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t threads[SLOTS_MAX];
	/* a rebalance's partitions, in chunks */
	int32_t ids[PARTITIONS_MAX];
	int64_t offsets[PARTITIONS_MAX];
	char err[256];
	/* The consumer is polled while the main thread waits on a retry (issue 28, item 1), so
	 * that the group keeps it (max.poll.interval.ms). What those polls return is held here, in
	 * order, and handed out by wio_poll before anything newer; a rebalance they bring is
	 * deferred to wio_poll too (librdkafka takes the assign call later: the group waits), as
	 * the wait may be inside a partition's batch. */
	pthread_t main_thread;
	bool subscribed;   /* polling is for a consumer with partitions */
	bool in_rebalance; /* a wait inside the rebalance callback does not poll */
	bool waiting;	   /* inside a polling wait: a rebalance is deferred */
	bool paused;	   /* the held queue filled: every partition paused until it drains */
	rd_kafka_message_t **held;
	uint32_t held_len, held_at, held_cap;
	rd_kafka_resp_err_t deferred_err;
	rd_kafka_topic_partition_list_t *deferred; /* a copy, until wio_poll runs it */

	/* The metrics endpoint (metrics.listen). A scrape (the endpoint's thread) raises asked
	 * and waits on metrics_cv for done to reach it; the main thread renders into render_buf
	 * and swaps it with text under metrics_mu. */
	struct fs_metrics *metrics;
	pthread_mutex_t metrics_mu;
	pthread_cond_t metrics_cv; /* on CLOCK_MONOTONIC */
	_Atomic uint64_t metrics_asked;
	uint64_t metrics_done;	   /* under metrics_mu */
	int64_t metrics_text_ms;   /* under metrics_mu: when metrics_text was rendered (0: never) */
	uint64_t metrics_rendered; /* the main thread's copy of metrics_done */
	struct fs_buf metrics_text, render_buf;
	/* A committer woke the loop (wio_wake): its poll returns to finish the commit. A scrape
	 * yields the queue too, without this: the loop serves it and polls on. */
	atomic_bool woken;
};

/* At most this many records are held from the polls of a wait: past it, the partitions are
 * paused (librdkafka then fetches from after the last one held when they resume). */
enum { HELD_MAX = 10000, WAIT_POLL_MS = 50 };

static void metrics_serve(struct wio *io);

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t fatal_error;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

int64_t wio_now_ms(struct wio *io)
{
	(void)io;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wio_now_us(struct wio *io)
{
	(void)io;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t wio_wall_ms(struct wio *io)
{
	(void)io;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_all(struct wio *io, bool pause)
{
	rd_kafka_topic_partition_list_t *l = NULL;
	if (rd_kafka_assignment(io->consumer, &l) == RD_KAFKA_RESP_ERR_NO_ERROR && l) {
		rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(io->consumer, l)
					      : rd_kafka_resume_partitions(io->consumer, l);
		if (e)
			fs_warn("kafka: %s the partitions: %s", pause ? "pausing" : "resuming",
				rd_kafka_err2str(e));
	}
	if (l)
		rd_kafka_topic_partition_list_destroy(l);
	io->paused = pause;
}

/* The held records of one partition (all: -1) are dropped: a seek or a revoke made them
 * stale (librdkafka drops its own fetched records then, and these were fetched before). */
static void held_drop(struct wio *io, int32_t partition)
{
	uint32_t k = io->held_at;
	for (uint32_t i = io->held_at; i < io->held_len; i++) {
		rd_kafka_message_t *m = io->held[i];
		if (partition < 0 || m->partition == partition)
			rd_kafka_message_destroy(m);
		else
			io->held[k++] = m;
	}
	io->held_len = k;
	if (io->held_at == io->held_len)
		io->held_at = io->held_len = 0;
}

/* One poll of a wait: its record (or error) held for wio_poll. */
static void wait_poll(struct wio *io, int64_t ms)
{
	if (io->held_len - io->held_at >= HELD_MAX && !io->paused)
		pause_all(io, true); /* polls go on: paused partitions deliver nothing */
	rd_kafka_message_t *m = rd_kafka_consumer_poll(io->consumer, (int)ms);
	if (!m)
		return;
	if (io->held_len == io->held_cap) { /* (past HELD_MAX: fetched before the pause took) */
		uint32_t cap = io->held_cap ? io->held_cap * 2 : 256;
		rd_kafka_message_t **h = realloc(io->held, cap * sizeof *h);
		if (!h) {
			/* Not held: its partition is read again from its first record held (or
			 * from it), as after a seek. */
			int32_t part = m->partition;
			int64_t from = m->offset;
			for (uint32_t i = io->held_len; i-- > io->held_at;)
				if (io->held[i]->partition == part)
					from = io->held[i]->offset;
			fs_warn("kafka: out of memory holding a record polled during a wait; "
				"partition %" PRId32 " is read again from %" PRId64,
				part, from);
			rd_kafka_message_destroy(m);
			wio_seek(io, part, from);
			return;
		}
		io->held = h;
		io->held_cap = cap;
	}
	io->held[io->held_len++] = m;
}

void wio_sleep_ms(struct wio *io, int64_t ms)
{
	/* Before the subscription, on the main thread: the producer's events are served while
	 * it waits, so that a refused credential (error_cb) stops the worker now, not after
	 * the start-up's retries (they would go on for ever: librdkafka retries it). */
	if (io && !io->subscribed && !io->in_rebalance && io->producer &&
	    pthread_equal(pthread_self(), io->main_thread)) {
		int64_t end = wio_now_ms(io) + ms;
		for (int64_t now = wio_now_ms(io); now < end && !stop_requested;
		     now = wio_now_ms(io))
			rd_kafka_poll(io->producer,
				      (int)(end - now < WAIT_POLL_MS ? end - now : WAIT_POLL_MS));
		return;
	}
	/* Plain sleeps: before the subscription, inside the rebalance callback (no poll may run
	 * there), on a committer thread. */
	if (!io || !io->subscribed || io->in_rebalance ||
	    !pthread_equal(pthread_self(), io->main_thread)) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
		return;
	}
	io->waiting = true;
	int64_t end = wio_now_ms(io) + ms;
	for (int64_t now = wio_now_ms(io); now < end && !stop_requested; now = wio_now_ms(io)) {
		metrics_serve(io);
		wait_poll(io, end - now < WAIT_POLL_MS ? end - now : WAIT_POLL_MS);
	}
	io->waiting = false;
}

bool wio_stopping(struct wio *io)
{
	(void)io;
	return stop_requested;
}

bool wio_failed(struct wio *io)
{
	(void)io;
	return fatal_error;
}

const char *wio_error(const struct wio *io)
{
	return io->err;
}

/* ---- crash points (fault-injection tests) ---------------------------------------------- */

static char crash_name[64];
static long crash_count;
static bool crash_stop; /* FLASHSALE_CRASH=stop:point[:n]: stop (SIGSTOP) instead of dying */

/* FLASHSALE_CRASH=point[:n]: the n-th time (default 1) the worker reaches `point`, it dies at
 * once, as kill -9 would. Points: after_poll, after_lookup, after_cas_sent, idle_in_tx (the
 * transaction idle between its statements and its new rows, in either order), in_copy (a
 * table's rows sent, its COPY still open), before_commit (the last rows sent, not the end of
 * their COPY, which COMMIT follows), commit_sent, after_commit, after_publish, in_revoke; and
 * commit_cut, where the process lives but its Postgres connection is cut with COMMIT in
 * flight (the unknown-outcome path); after_tick, a tick record appended and delivered, not read
 * back yet (the stale tick a stopped worker leaves: issue 47 item 4).
 * FLASHSALE_CRASH=stop:point[:n] stops the process there (SIGSTOP) instead, for fencing tests. */
static pthread_mutex_t crash_mu = PTHREAD_MUTEX_INITIALIZER; /* committer threads call it too */

static bool crash_at(const char *point)
{
	pthread_mutex_lock(&crash_mu);
	bool fire = crash_name[0] && strcmp(crash_name, point) == 0 && --crash_count <= 0;
	if (fire)
		crash_name[0] = '\0'; /* a point fires once */
	pthread_mutex_unlock(&crash_mu);
	if (!fire)
		return false;
	if (crash_stop) {
		/* A pause the test ends with SIGCONT: the group moves on meanwhile (fencing). */
		fprintf(stderr, "flashsale-worker: stop point %s reached, stopping\n", point);
		fflush(stderr);
		raise(SIGSTOP);
		fs_warn("resumed after the stop point %s", point);
		return false;
	}
	if (strcmp(point, "commit_cut") == 0) {
		fs_warn("crash point commit_cut reached: cutting the Postgres connection");
		return true;
	}
	fprintf(stderr, "flashsale-worker: crash point %s reached, exiting abruptly\n", point);
	fflush(stderr);
	kill(getpid(), SIGKILL);
	return false;
}

static void crash_init(void)
{
	const char *v = getenv("FLASHSALE_CRASH");
	if (!v || !*v)
		return;
	if (strncmp(v, "stop:", 5) == 0) {
		crash_stop = true;
		v += 5;
	}
	snprintf(crash_name, sizeof crash_name, "%s", v);
	char *colon = strchr(crash_name, ':');
	crash_count = 1;
	if (colon) {
		*colon = '\0';
		crash_count = strtol(colon + 1, NULL, 10);
		if (crash_count < 1)
			crash_count = 1;
	}
}

bool wio_crash_at(struct wio *io, const char *point)
{
	(void)io;
	return crash_at(point);
}

void wio_store_hook(struct wio *io, struct fs_store *s)
{
	(void)io;
	/* Only when a point is armed (FLASHSALE_CRASH): the store then also flushes what a
	 * point says is on the wire before reaching it. */
	fs_store_set_crash_hook(s, crash_name[0] ? crash_at : NULL);
}

void wio_init(void)
{
	crash_init();
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/* ---- callbacks ----------------------------------------------------------------------------- */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	struct wio *io = opaque;
	/* The broker's stamp of a result (LogAppendTime): trace.batches' end of a batch. */
	rd_kafka_timestamp_type_t tt = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
	int64_t ts = io->w->trace ? rd_kafka_message_timestamp(m, &tt) : 0;
	publisher_delivered(io->w, m->_private, m->err ? rd_kafka_err2str(m->err) : NULL,
			    tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? ts : 0);
}

/* librdkafka's own errors: most are transient (broker down, reconnecting) and it recovers by
 * itself. A fatal one (the idempotent producer lost its sequence) cannot be recovered in
 * place: exit non-zero, and the restarted worker answers again every record whose results
 * were not confirmed delivered (replied_offset). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	(void)opaque;
	char fatal[512];
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		rd_kafka_fatal_error(rk, fatal, sizeof fatal);
		fs_error("kafka fatal error: %s; exiting so that a restart can resume", fatal);
		fatal_error = 1;
		stop_requested = 1;
		return;
	}
	/* A refused credential is not an outage: librdkafka would retry it for ever, and the
	 * worker would sit there deciding nothing, its log full of warnings. Stop with the
	 * reason, non-zero, so that whoever runs it sees it (docs/reference/operations.md: A
	 * secured broker). */
	if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
		fs_error("kafka authentication failed: %s (check kafka.sasl.username and the "
			 "password in kafka.sasl.password.file); exiting",
			 reason);
		fatal_error = 1;
		stop_requested = 1;
		return;
	}
	fs_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* A rebalance: the protocol loads what is assigned (and says where each starts) or forgets
 * what is revoked; then the assignment is made. In chunks of PARTITIONS_MAX. */
static void rebalance(struct wio *io, rd_kafka_t *rk, rd_kafka_resp_err_t err,
		      rd_kafka_topic_partition_list_t *parts)
{
	bool assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
	if (!assign) { /* what was held or paused belonged to the old assignment */
		held_drop(io, -1);
		io->paused = false;
	}
	io->in_rebalance = true;
	int at = 0;
	do { /* once at least: a revoke of nothing still delivers what was committed */
		int n = parts->cnt - at < PARTITIONS_MAX ? parts->cnt - at : PARTITIONS_MAX;
		for (int i = 0; i < n; i++) {
			io->ids[i] = parts->elems[at + i].partition;
			io->offsets[i] = parts->elems[at + i].offset;
		}
		if (assign)
			loop_assigned(io->w, io->ids, io->offsets, n);
		else
			loop_revoked(io->w, io->ids, n);
		for (int i = 0; assign && i < n; i++)
			parts->elems[at + i].offset = io->offsets[i];
	} while ((at += PARTITIONS_MAX) < parts->cnt);
	io->in_rebalance = false;
	rd_kafka_assign(rk, assign ? parts : NULL);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			 rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	struct wio *io = opaque;
	if (io->waiting && !io->deferred) {
		/* Inside a retry's wait, perhaps inside the batch of a partition this revokes:
		 * run it from wio_poll, between records (the group waits for the assign call). */
		io->deferred = rd_kafka_topic_partition_list_copy(parts);
		io->deferred_err = err;
		if (io->deferred) {
			fs_info("kafka: a rebalance during a retry's wait; it is run once the "
				"retry is over");
			return;
		}
	}
	rebalance(io, rk, err, parts);
}

/* The deferred rebalance, if any, now. */
static void run_deferred(struct wio *io)
{
	if (!io->deferred)
		return;
	rd_kafka_topic_partition_list_t *l = io->deferred;
	io->deferred = NULL;
	rebalance(io, io->consumer, io->deferred_err, l);
	rd_kafka_topic_partition_list_destroy(l);
}

/* ---- opening and closing ------------------------------------------------------------------ */

static int open_producer(struct wio *io, const struct fs_config *cfg)
{
	char err[512];
	rd_kafka_conf_t *pc =
		fs_kafka_conf(cfg, RD_KAFKA_PRODUCER, fs_kafka_producer_defaults, err, sizeof err);
	if (!pc) {
		fs_error("producer config: %s", err);
		return -EINVAL;
	}
	rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
	rd_kafka_conf_set_error_cb(pc, error_cb);
	rd_kafka_conf_set_opaque(pc, io);
	io->producer = fs_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof err);
	if (!io->producer) {
		fs_error("producer: %s", err);
		return -EINVAL;
	}
	/* NULL is survivable: results then go one produce call each. */
	io->results_rkt = rd_kafka_topic_new(io->producer, cfg->topic_results, NULL);
	return 0;
}

static int open_consumer(struct wio *io, const struct fs_config *cfg)
{
	char err[512];
	rd_kafka_conf_t *cc =
		fs_kafka_conf(cfg, RD_KAFKA_CONSUMER, fs_kafka_consumer_defaults, err, sizeof err);
	if (!cc) {
		fs_error("consumer config: %s", err);
		return -EINVAL;
	}
	if (rd_kafka_conf_set(cc, "group.id", cfg->group, err, sizeof err) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(cc);
		fs_error("consumer config: %s", err);
		return -EINVAL;
	}
	rd_kafka_conf_set_rebalance_cb(cc, rebalance_cb);
	rd_kafka_conf_set_error_cb(cc, error_cb);
	rd_kafka_conf_set_opaque(cc, io);
	io->consumer = fs_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
	if (!io->consumer) {
		fs_error("consumer: %s", err);
		return -EINVAL;
	}
	rd_kafka_poll_set_consumer(io->consumer);
	io->consumer_queue = rd_kafka_queue_get_consumer(io->consumer);
	io->intents_rkt = rd_kafka_topic_new(io->consumer, cfg->topic_intents, NULL);
	return 0;
}

/* ---- the metrics endpoint ------------------------------------------------------------------ */

/* How long a scrape waits for the main thread's text; past it, the last one rendered is
 * served (the main thread is inside a long call: a commit, a connect). A text younger than
 * SCRAPE_FRESH_MS is served as it is: however often the port is asked, the main thread
 * renders at most that often. */
enum { SCRAPE_WAIT_MS = 250, SCRAPE_FRESH_MS = 100 };

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* On the endpoint's thread: asks the main thread for the text, wakes it from its poll, and
 * waits. False (503) while no text was ever rendered: the worker is still starting. */
static bool scrape(void *ctx, struct fs_buf *out)
{
	struct wio *io = ctx;
	pthread_mutex_lock(&io->metrics_mu);
	if (!io->metrics_text_ms || mono_ms() - io->metrics_text_ms >= SCRAPE_FRESH_MS) {
		uint64_t want = atomic_fetch_add(&io->metrics_asked, 1) + 1;
		if (io->consumer_queue)
			rd_kafka_queue_yield(io->consumer_queue); /* not wio_wake: see woken */
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += SCRAPE_WAIT_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (io->metrics_done < want)
			if (pthread_cond_timedwait(&io->metrics_cv, &io->metrics_mu, &until) ==
			    ETIMEDOUT)
				break;
	}
	bool any = io->metrics_text_ms != 0;
	fs_buf_add(out, io->metrics_text.data, io->metrics_text.len);
	pthread_mutex_unlock(&io->metrics_mu);
	return any;
}

static bool healthy(void *ctx, struct fs_buf *out)
{
	(void)ctx;
	fs_buf_str(out, stop_requested ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}");
	return !stop_requested;
}

/* On the main thread, between records and during a retry's wait: the text a scrape waits for. */
static void metrics_serve(struct wio *io)
{
	uint64_t asked = atomic_load_explicit(&io->metrics_asked, memory_order_relaxed);
	if (!io->metrics || asked == io->metrics_rendered)
		return;
	fs_buf_clear(&io->render_buf);
	metrics_render(io->w, &io->render_buf);
	pthread_mutex_lock(&io->metrics_mu);
	if (fs_buf_ok(&io->render_buf)) { /* out of memory: the last text stays */
		struct fs_buf t = io->metrics_text;
		io->metrics_text = io->render_buf;
		io->render_buf = t;
		io->metrics_text_ms = mono_ms();
	}
	io->metrics_done = asked;
	pthread_cond_broadcast(&io->metrics_cv);
	pthread_mutex_unlock(&io->metrics_mu);
	io->metrics_rendered = asked;
}

static int metrics_start(struct wio *io)
{
	char err[256];
	int port;
	metrics_init(&io->w->n);
	io->w->start_ms = wio_wall_ms(io);
	if (fs_metrics_start(io->w->cfg.metrics_listen, scrape, healthy, io, &io->metrics, &port,
			     err, sizeof err) < 0) {
		fs_error("metrics.listen: %s", err);
		return -EINVAL;
	}
	io->w->metrics = true;
	fs_info("metrics: listening on %s (port %d)", io->w->cfg.metrics_listen, port);
	return 0;
}

int64_t wio_log_end(struct wio *io, int32_t partition)
{
	int64_t lo = -1, hi = -1;
	if (rd_kafka_get_watermark_offsets(io->consumer, io->w->cfg.topic_intents, partition, &lo,
					   &hi) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return -1;
	return hi < 0 ? -1 : hi;
}

int64_t wio_position(struct wio *io, int32_t partition)
{
	/* Records a retry's wait polled are held, not handed to the protocol yet: the position
	 * is the first of them. */
	for (uint32_t i = io->held_at; i < io->held_len; i++)
		if (io->held[i]->partition == partition)
			return io->held[i]->offset;
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(l, io->w->cfg.topic_intents, partition);
	int64_t at = -1;
	if (rd_kafka_position(io->consumer, l) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	    l->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].offset >= 0)
		at = l->elems[0].offset;
	rd_kafka_topic_partition_list_destroy(l);
	return at;
}

int wio_open(struct worker *w, struct wio **out)
{
	struct wio *io = calloc(1, sizeof *io);
	*out = io;
	if (!io) {
		fs_error("out of memory");
		return -ENOMEM;
	}
	io->w = w;
	io->main_thread = pthread_self();
	pthread_mutex_init(&io->mu, NULL);
	pthread_cond_init(&io->cv, NULL);
	pthread_mutex_init(&io->metrics_mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&io->metrics_cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = open_producer(io, &w->cfg);
	if (rc == 0)
		rc = open_consumer(io, &w->cfg);
	return rc < 0 || !w->cfg.metrics_listen[0] ? rc : metrics_start(io);
}

int wio_subscribe(struct wio *io)
{
	const char *topic = io->w->cfg.topic_intents;
	rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
	rd_kafka_resp_err_t kerr = rd_kafka_subscribe(io->consumer, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (kerr) {
		fs_error("subscribe %s: %s", topic, rd_kafka_err2str(kerr));
		return -EINVAL;
	}
	io->subscribed = true;
	return 0;
}

void wio_close(struct wio *io)
{
	if (!io)
		return;
	/* First: a scrape wakes the consumer's queue, destroyed below. */
	fs_metrics_stop(io->metrics);
	io->metrics = NULL;
	if (io->consumer) {
		run_deferred(io);
		held_drop(io, -1);
		free(io->held);
		io->held = NULL;
		io->held_cap = 0;
		rd_kafka_consumer_close(io->consumer); /* runs the revoke callback */
		if (io->intents_rkt)
			rd_kafka_topic_destroy(io->intents_rkt);
		if (io->consumer_queue)
			rd_kafka_queue_destroy(io->consumer_queue);
		rd_kafka_destroy(io->consumer);
	}
	if (io->producer) {
		wio_flush(io, io->w->cfg.flush_timeout_ms);
		if (io->results_rkt)
			rd_kafka_topic_destroy(io->results_rkt);
		rd_kafka_destroy(io->producer);
	}
	io->consumer = io->producer = NULL;
}

void wio_free(struct wio *io)
{
	if (!io)
		return;
	wio_close(io);
	pthread_mutex_destroy(&io->mu);
	pthread_cond_destroy(&io->cv);
	pthread_mutex_destroy(&io->metrics_mu);
	pthread_cond_destroy(&io->metrics_cv);
	fs_buf_free(&io->metrics_text);
	fs_buf_free(&io->render_buf);
	free(io->msgs);
	free(io);
}

/* ---- the consumer ------------------------------------------------------------------------- */

/* A consumer error: -ERANGE stops the worker; the rest are logged. */
static int consumer_error(const rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
		return 0;
	if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
	    m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
		/* The stored offset is not in the log (retention or a different topic): deciding
		 * from elsewhere would silently skip or repeat records. Stop, loudly. */
		fs_error("partition %" PRId32 ": stored offset is outside the log: %s; refusing to "
			 "skip records (restore the topic or the database)",
			 m->partition, rd_kafka_message_errstr(m));
		return -ERANGE;
	}
	fs_warn("kafka: %s", rd_kafka_message_errstr(m));
	return 0;
}

/* The consumer's next message within timeout_ms. A poll that comes back early and empty
 * without a committer's wake was a scrape's yield (metrics.c asks the main thread for its
 * text): it is served and the poll goes on for the time left, so that a scrape is not taken
 * for the end of a quiet spell (which would cut the batches waiting for batch.wait.ms short). */
static rd_kafka_message_t *poll_consumer(struct wio *io, int64_t timeout_ms)
{
	int64_t end = wio_now_ms(io) + timeout_ms;
	for (;;) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(io->consumer, (int)timeout_ms);
		if (m || atomic_exchange(&io->woken, false))
			return m;
		timeout_ms = end - wio_now_ms(io);
		if (timeout_ms <= 0 || stop_requested)
			return NULL;
		metrics_serve(io);
	}
}

int wio_poll(struct wio *io, int64_t timeout_ms, struct fs_msg *out)
{
	run_deferred(io);
	metrics_serve(io);
	rd_kafka_message_t *m = NULL;
	if (io->held_at < io->held_len) { /* what a retry's wait polled, first, in order */
		m = io->held[io->held_at++];
		if (io->held_at == io->held_len) {
			io->held_at = io->held_len = 0;
			if (io->paused)
				pause_all(io, false);
		}
	} else {
		m = poll_consumer(io, timeout_ms);
	}
	if (!m)
		return 0;
	crash_at("after_poll");
	if (m->err) {
		int rc = consumer_error(m);
		rd_kafka_message_destroy(m);
		return rc < 0 ? rc : 2;
	}
	rd_kafka_timestamp_type_t tstype;
	int64_t ts = rd_kafka_message_timestamp(m, &tstype);
	*out = (struct fs_msg){
		.partition = m->partition,
		.offset = m->offset,
		.key = m->key,
		.key_len = m->key_len,
		.payload = m->payload,
		.len = m->len,
		.ts_ms = ts < 0 ? 0 : ts,
	};
	io->cur = m;
	return 1;
}

void wio_release(struct wio *io)
{
	if (io->cur)
		rd_kafka_message_destroy(io->cur);
	io->cur = NULL;
}

size_t wio_backlog(struct wio *io)
{
	return (io->held_len - io->held_at) +
	       (io->consumer_queue ? rd_kafka_queue_length(io->consumer_queue) : 0);
}

void wio_seek(struct wio *io, int32_t partition, int64_t offset)
{
	held_drop(io, partition); /* fetched before the seek, as librdkafka drops its own */
	if (io->paused)		  /* a seek, then the resume's own position, would lose it */
		pause_all(io, false);
	rd_kafka_resp_err_t err = rd_kafka_seek(io->intents_rkt, partition, offset, 0);
	if (err)
		fs_warn("partition %" PRId32 ": seek: %s", partition, rd_kafka_err2str(err));
}

void wio_commit_offset(struct wio *io, int32_t partition, int64_t next)
{
	/* Advisory only (lag tools); the worker never starts from it. */
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(l, io->w->cfg.topic_intents, partition)->offset = next;
	rd_kafka_commit(io->consumer, l, 1);
	rd_kafka_topic_partition_list_destroy(l);
}

/* From the producer: its metadata call also teaches it the intents topic's leaders, so that
 * the first tick does not wait for a metadata round trip (an expiry is late by as much). */
int wio_partitions(struct wio *io, int64_t timeout_ms, int32_t *n)
{
	rd_kafka_topic_t *t = rd_kafka_topic_new(io->producer, io->w->cfg.topic_intents, NULL);
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e = t ? rd_kafka_metadata(io->producer, 0, t, &md, (int)timeout_ms)
				  : rd_kafka_last_error();
	int rc = -EIO;
	if (!e && (md->topic_cnt != 1 || md->topics[0].err))
		e = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
	if (!e && md->topics[0].partition_cnt > 0) {
		*n = md->topics[0].partition_cnt;
		rc = 0;
	}
	if (rc < 0)
		snprintf(io->err, sizeof io->err, "%s", e ? rd_kafka_err2str(e) : "no partitions");
	if (md)
		rd_kafka_metadata_destroy(md);
	if (t)
		rd_kafka_topic_destroy(t);
	return rc;
}

const char *wio_log_clock(struct wio *io, int64_t timeout_ms, int *transient)
{
	return fs_kafka_check_log_clock(io->producer, io->w->cfg.topic_intents, (int)timeout_ms,
					transient);
}

int wio_watermarks(struct wio *io, int32_t partition, int64_t *lo, int64_t *hi)
{
	rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(
		io->consumer, io->w->cfg.topic_intents, partition, lo, hi, 10000);
	if (e) {
		snprintf(io->err, sizeof io->err, "%s", rd_kafka_err2str(e));
		return -EIO;
	}
	/* The end of its records: the log may end with a transaction's marker. */
	int64_t end;
	if (fs_kafka_readable_ends(&io->w->cfg, io->w->cfg.topic_intents, partition, 1, lo, hi,
				   &end, 30000, io->err, sizeof io->err) < 0)
		return -EIO;
	*hi = end;
	return 0;
}

int wio_assign(struct wio *io, const int64_t *offsets, int n)
{
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(l, io->w->cfg.topic_intents, i)->offset =
			offsets[i];
	rd_kafka_resp_err_t e = rd_kafka_assign(io->consumer, l);
	rd_kafka_topic_partition_list_destroy(l);
	return e ? -EIO : 0;
}

/* ---- the producer ------------------------------------------------------------------------- */

static const char *topic_name(const struct wio *io, enum fs_topic t)
{
	const struct fs_config *c = &io->w->cfg;
	return t == FS_TOPIC_INTENTS ? c->topic_intents
	       : t == FS_TOPIC_STOCK ? c->topic_stock
				     : c->topic_results;
}

int wio_produce(struct wio *io, enum fs_topic topic, int32_t partition, const void *key,
		size_t key_len, const void *value, size_t len, struct inflight *tag)
{
	const char *name = topic_name(io, topic);
	for (;;) {
		rd_kafka_resp_err_t err = rd_kafka_producev(
			io->producer, RD_KAFKA_V_TOPIC(name), RD_KAFKA_V_PARTITION(partition),
			RD_KAFKA_V_KEY((void *)key, key_len), RD_KAFKA_V_VALUE((void *)value, len),
			RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(tag),
			RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			return 0;
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
			fs_error("produce to %s: %s", name, rd_kafka_err2str(err));
			return -EIO;
		}
		rd_kafka_poll(io->producer, 100);
	}
}

int wio_produce_results(struct wio *io, uint32_t n, struct inflight *tag)
{
	struct worker *w = io->w;
	if (n > io->msgs_cap) {
		rd_kafka_message_t *m = realloc(io->msgs, n * sizeof *m);
		if (m) {
			io->msgs = m;
			io->msgs_cap = n;
		}
	}
	if (!io->results_rkt || n > io->msgs_cap) {
		for (uint32_t i = 0; i < n; i++)
			w->outs[i].failed = true;
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct fs_out *o = &w->outs[i];
		io->msgs[i] = (rd_kafka_message_t){
			.partition = RD_KAFKA_PARTITION_UA,
			.payload = w->results.data + o->at,
			.len = o->len,
			.key = (void *)o->key,
			.key_len = o->key_len,
			._private = tag,
		};
	}
	int queued = rd_kafka_produce_batch(io->results_rkt, RD_KAFKA_PARTITION_UA,
					    RD_KAFKA_MSG_F_COPY, io->msgs, (int)n);
	for (uint32_t i = 0; queued < (int)n && i < n; i++) /* read only then (publisher.c) */
		w->outs[i].failed = io->msgs[i].err;
	return queued;
}

int wio_append_tick(struct wio *io, int32_t partition)
{
	static const char tick[] = "{\"v\":1,\"type\":\"tick\"}";
	rd_kafka_resp_err_t err = rd_kafka_producev(
		io->producer, RD_KAFKA_V_TOPIC(io->w->cfg.topic_intents),
		RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_VALUE((void *)tick, sizeof tick - 1),
		RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
	/* The crash point after_tick: the tick on the log first, so that it is decided only by
	 * the next owner. Armed only: the flush stalls the loop. */
	if (!err && strcmp(crash_name, "after_tick") == 0) {
		rd_kafka_flush(io->producer, 5000);
		crash_at("after_tick");
	}
	if (!err)
		return 0;
	fs_warn("partition %" PRId32 ": tick: %s", partition, rd_kafka_err2str(err));
	return -EIO;
}

void wio_serve(struct wio *io)
{
	rd_kafka_poll(io->producer, 0);
}

int wio_flush(struct wio *io, int64_t timeout_ms)
{
	rd_kafka_resp_err_t err = rd_kafka_flush(io->producer, (int)timeout_ms);
	if (!err)
		return 0;
	fs_warn("results not all delivered within %" PRId64 " ms: %s", timeout_ms,
		rd_kafka_err2str(err));
	return -ETIMEDOUT;
}

/* ---- the committer threads ---------------------------------------------------------------- */

int wio_thread_start(struct wio *io, int k, void *(*fn)(void *), void *arg)
{
	return pthread_create(&io->threads[k], NULL, fn, arg);
}

void wio_thread_join(struct wio *io, int k)
{
	pthread_join(io->threads[k], NULL);
}

void wio_lock(struct wio *io)
{
	pthread_mutex_lock(&io->mu);
}

void wio_unlock(struct wio *io)
{
	pthread_mutex_unlock(&io->mu);
}

void wio_wait(struct wio *io)
{
	pthread_cond_wait(&io->cv, &io->mu);
}

void wio_broadcast(struct wio *io)
{
	pthread_cond_broadcast(&io->cv);
}

void wio_wake(struct wio *io)
{
	atomic_store(&io->woken, true);
	/* The queue outlives the committer threads: teardown joins them first. */
	if (io->consumer_queue)
		rd_kafka_queue_yield(io->consumer_queue);
}
