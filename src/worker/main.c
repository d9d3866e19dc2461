/* main.c: flashsale-worker, the order worker daemon.
 *
 * One thread. A consumer-group member of the intents topic; per partition, records are
 * gathered into a batch, decided by the pure core, committed to Postgres in one transaction
 * (fs_store_commit), and only then answered on the results topic (DESIGN.md section 4). */
#include "core/batch.h"
#include "core/buf.h"
#include "io/config.h"
#include "core/core.h"
#include "io/kafka.h"
#include "io/log.h"
#include "core/record.h"
#include "core/result.h"
#include "io/store.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
	PARTITIONS_MAX = 1024,
	BAD_FACTOR = 10, /* a batch holds up to this many times batch.max records in all */
	BACKOFF_MIN_MS = 50,
	SLOTS_MAX = 2, /* commit.overlap's highest value */
	/* part_process_from's first attempt: not made, a predecessor in flight failed; reload
	 * and redo at once (no backoff: nothing is wrong with the database). */
	COMMIT_AGAIN = 100,
	MISROUTED_WARN_MS = 60000, /* at most one misrouted-records warning a minute */
	METADATA_TIMEOUT_MS = 5000,
};

/* Results of one committed batch still on their way to the broker. */
struct inflight {
	int64_t end_offset; /* next offset after the batch */
	int pending;
	bool failed;
	bool orphan; /* its partition was revoked meanwhile: free it when done */
	struct inflight *next;
};

struct part {
	bool assigned;
	bool loaded;
	int32_t id;
	struct fs_part_meta meta; /* as committed */
	struct fs_core core;
	struct fs_batch batch;	/* records to decide, contiguous from meta.next_offset */
	struct fs_batch again;	/* records below meta.next_offset: to answer again */
	int64_t first_ms;	/* monotonic ms when the pending batch got its first record */
	int64_t last_record_ms; /* monotonic ms of the last record read */
	int64_t last_tick_ms;	/* monotonic ms of the last tick appended */
	bool tick_pending;	/* a tick was appended and not read back yet */
	int64_t replied;	/* results delivered for every record below this */
	struct inflight *head, *tail;
	struct fs_seen seen;  /* decisions committed here, to answer repeats without a lookup */
	int64_t batch_costly; /* records of the batch that are not invalid */
	bool need_lookup;     /* the last commit found an id decided elsewhere: look them up */
	/* commit.overlap: batches of this partition handed to committer threads and not yet
	 * finished, and the meta as it will be once they are all committed. */
	int n_fly;
	struct fs_part_meta ahead;
	int64_t fences; /* times fenced (its batch dropped, reloaded, sought back) */
	/* The committer slot rendering the statements of this partition's last batch handed
	 * over, which reads the core meanwhile (-1: none): the core is not changed until it is
	 * done (core_settle). */
	int lent;
};

/* A batch's expiry results and stock records, rendered from the core when the batch is
 * decided and produced once it is committed (by then the core may have moved on). */
struct extra {
	size_t key, key_len, at, len; /* offsets into extras.buf */
	bool stock;		      /* the stock topic (else results) */
};
struct extras {
	struct fs_buf buf;
	struct extra *e;
	uint32_t len, cap;
	bool failed; /* out of memory while rendering */
};

struct worker;

/* A committer thread and its own connection (commit.overlap); slot 0's is the worker's. */
struct slot {
	struct worker *w;
	pthread_t thread;
	bool up;
	struct fs_store *store;
	struct fs_batch batch;	    /* the batch handed over (swapped with the partition's) */
	struct part *p;		    /* whose batch it is */
	struct fs_part_meta before; /* the partition's meta this batch was decided on */
	struct fs_part_meta meta;   /* the partition's meta once this batch is committed */
	int64_t replied;
	bool after; /* a batch of the partition was in flight when this one was handed over */
	struct extras ex;
	/* The partition's batch handed over before this one and still in flight then (slot
	 * index, or -1, and its generation): this one's compare-and-set must not be sent before
	 * that one's ran, or it would find the offset not moved yet. */
	int pred;
	uint64_t pred_gen;
	/* guarded by worker.mu: */
	bool ready, done, quit;
	bool prepared;	   /* its statements are rendered: the core is the main thread's again */
	bool cas_done;	   /* this batch's compare-and-set ran (or will not be sent) */
	uint64_t gen;	   /* batches handed to this slot */
	int rc;		   /* an enum fs_commit_result */
	int64_t us;	   /* time the transaction took, on the committer thread */
	int64_t handed_us; /* when the main thread handed it over (the debug log) */
	/* The commit token of its transaction: slot 0's store also makes the in-line attempts
	 * (a redo), which replace the store's own before an unknown outcome here is read. */
	char token[FS_STORE_TOKEN_SIZE];
};

struct counters {
	int64_t records, fresh, repeats, conflicts, invalid, sale, expired, ticks, batches, fenced,
		redo, retries, unknown, unknown_committed, answered_again, skipped_stale, gaps,
		published, delivery_failed;
	/* the partitioning rule: records forwarded to their partition (and the copies sent,
	 * again after a restart included), records rejected wrong_partition */
	int64_t forwarded, forwards_sent, wrong_partition;
	int64_t us_lookup, us_decide, us_commit, us_publish; /* time spent per step */
	int64_t us_commit_max;	/* the slowest batch transaction (a stalled WAL flush shows) */
	int64_t lookups_forced; /* batches redone with a lookup: an id was decided elsewhere */
	int64_t batches_behind; /* batches past batch.max (batch.max.behind: a backlog) */
	int64_t stacked;	/* batches decided on top of one of theirs in flight */
	int64_t stacked_redone; /* of those, decided again: the one before did not commit */
};

static void count_commit(struct counters *n, int64_t us)
{
	n->us_commit += us;
	if (us > n->us_commit_max)
		n->us_commit_max = us;
}

struct worker {
	struct fs_config cfg;
	struct fs_record_limits limits;
	rd_kafka_t *consumer;
	rd_kafka_t *producer;
	rd_kafka_topic_t *intents_rkt;	  /* consumer-side handle, for seek */
	rd_kafka_queue_t *consumer_queue; /* to see whether more records are already here */
	struct fs_store *store;
	struct part *parts[PARTITIONS_MAX];
	/* The ids of the partitions in parts[] that exist, ascending: the loop runs once per
	 * record, and walking all PARTITIONS_MAX slots cost microseconds each time. */
	int32_t part_ids[PARTITIONS_MAX];
	int n_parts;
	struct fs_buf out;
	/* A batch's results, produced in one call: the bodies one after another, the messages
	 * pointing into them (librdkafka copies both). */
	rd_kafka_topic_t *results_rkt;
	struct fs_buf replies;
	rd_kafka_message_t *msgs;
	size_t *msg_at;
	uint32_t msgs_cap;
	struct counters n;
	struct inflight *orphans;
	int64_t last_stats_ms;
	/* The misrouted records' warning: at most one a minute, with the count since the last. */
	int64_t misrouted_warned_ms, misrouted_warned_n;

	/* commit.overlap: up to `depth` committer threads each send one decided batch's
	 * transaction while this thread goes on reading, parsing and (at depth 2) deciding the
	 * next batch on top of the state the one in flight will commit. `fly` lists the slots
	 * in flight in the order their batches were handed over; they are finished in that
	 * order. Every other store call here first waits for all of them (commit_wait): the
	 * store (w->store, slot 0's connection) is then this thread's. */
	int depth;
	struct slot slots[SLOTS_MAX];
	int fly[SLOTS_MAX];
	int n_fly;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct extras ex; /* the in-line path's */

	/* --replay: decide the log into the database from the stored offsets to the log end
	 * (read at start), as the live worker would, but publish nothing; then exit. */
	bool replay;
	int64_t replay_end[PARTITIONS_MAX];
	int64_t replay_from[PARTITIONS_MAX];
	int replay_parts;
	int64_t replay_total, replay_start_ms, replay_last_ms;
};

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t fatal_error;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
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
 * flight (the unknown-outcome path).
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

/* ---- results ----------------------------------------------------------------------------- */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	struct worker *w = opaque;
	struct inflight *f = m->_private;
	if (m->err) {
		w->n.delivery_failed++;
		fs_error("result delivery failed: %s", rd_kafka_err2str(m->err));
	}
	if (!f)
		return;
	if (m->err)
		f->failed = true;
	f->pending--;
}

/* Produces one message, waiting (serving delivery reports) while the local queue is full. */
static int produce(struct worker *w, const char *topic, int32_t partition, const void *key,
		   size_t key_len, const struct fs_buf *value, struct inflight *f)
{
	for (;;) {
		rd_kafka_resp_err_t err = rd_kafka_producev(
			w->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
			RD_KAFKA_V_KEY((void *)key, key_len),
			RD_KAFKA_V_VALUE(value->data, value->len),
			RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(f),
			RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
			if (f)
				f->pending++;
			w->n.published++;
			return 0;
		}
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
			fs_error("produce to %s: %s", topic, rd_kafka_err2str(err));
			return -EIO;
		}
		rd_kafka_poll(w->producer, 100);
	}
}

/* Re-publishes a misrouted record, key and payload unchanged, to the partition the rule
 * names; tracked with the batch's results, so that a crash before its delivery forwards it
 * again (the target's dedupe on the intent id makes the second copy a repeat). */
static void forward(struct worker *w, const struct fs_batch *b, const struct fs_item *it,
		    struct inflight *f)
{
	if (it->fwd_at == SIZE_MAX) {
		/* Its bytes were not kept (out of memory): replied stops here, a restart reads
		 * the record again and forwards it then. */
		if (f)
			f->failed = true;
		return;
	}
	struct fs_buf one = {.data = (char *)fs_item_fwd_payload(b, it), .len = it->fwd_len};
	if (produce(w, w->cfg.topic_intents, it->rec.route, fs_item_fwd_key(b, it), it->fwd_key_len,
		    &one, f) < 0) {
		if (f)
			f->failed = true;
		return;
	}
	w->n.forwards_sent++;
}

/* Room for n messages in the produce arrays. */
static bool msgs_reserve(struct worker *w, uint32_t n)
{
	if (n <= w->msgs_cap)
		return true;
	rd_kafka_message_t *m = realloc(w->msgs, n * sizeof *m);
	if (m)
		w->msgs = m;
	size_t *at = m ? realloc(w->msg_at, n * sizeof *at) : NULL;
	if (at)
		w->msg_at = at;
	if (!m || !at)
		return false;
	w->msgs_cap = n;
	return true;
}

/* Publishes one result per record of the batch (ticks excepted), in one produce call: a
 * flood of bad records is one answer each, and one call for them all is cheaper than one call
 * each (S1: 94 -> 71 ms per 100,000 answers). What the call could not queue is produced one
 * by one (waiting while the local queue is full). */
static void publish_results(struct worker *w, struct part *p, struct fs_batch *b, int64_t end)
{
	struct inflight *f = calloc(1, sizeof *f);
	if (f) {
		f->end_offset = end;
		f->pending = 0;
	}
	fs_buf_clear(&w->replies);
	uint32_t n = 0;
	bool batched = w->results_rkt && msgs_reserve(w, b->len);
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		if (it->cls == FS_ITEM_TICK)
			continue;
		if (it->cls == FS_ITEM_FORWARD) {
			forward(w, b, it, f);
			continue;
		}
		const char *key = it->rec.has_intent ? it->rec.intent_id : it->rec.sku;
		if (!batched) {
			fs_buf_clear(&w->out);
			fs_reply_result(&w->out, it);
			if (produce(w, w->cfg.topic_results, RD_KAFKA_PARTITION_UA, key,
				    strlen(key), &w->out, f) < 0 &&
			    f)
				f->failed = true;
			continue;
		}
		w->msg_at[n] = w->replies.len;
		fs_reply_result(&w->replies, it);
		w->msgs[n] = (rd_kafka_message_t){
			.partition = RD_KAFKA_PARTITION_UA,
			.key = (void *)key,
			.key_len = strlen(key),
			._private = f,
		};
		n++;
	}
	if (batched && n > 0 && !fs_buf_ok(&w->replies)) {
		fs_error("out of memory for results; they will be answered again after a restart");
		if (f)
			f->failed = true;
		n = 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t to = i + 1 < n ? w->msg_at[i + 1] : w->replies.len;
		w->msgs[i].payload = w->replies.data + w->msg_at[i];
		w->msgs[i].len = to - w->msg_at[i];
	}
	int queued = n ? rd_kafka_produce_batch(w->results_rkt, RD_KAFKA_PARTITION_UA,
						RD_KAFKA_MSG_F_COPY, w->msgs, (int)n)
		       : 0;
	if (f)
		f->pending += queued;
	w->n.published += queued;
	for (uint32_t i = 0; queued < (int)n && i < n; i++) {
		if (!w->msgs[i].err)
			continue;
		struct fs_buf one = {.data = w->msgs[i].payload, .len = w->msgs[i].len};
		if (produce(w, w->cfg.topic_results, RD_KAFKA_PARTITION_UA, w->msgs[i].key,
			    w->msgs[i].key_len, &one, f) < 0 &&
		    f)
			f->failed = true;
	}
	if (!f) {
		fs_error("out of memory tracking result delivery; replies will be resent later");
		return;
	}
	if (p->tail)
		p->tail->next = f;
	else
		p->head = f;
	p->tail = f;
}

static void extras_add(struct extras *ex, const char *key, bool stock, size_t at)
{
	if (ex->len == ex->cap) {
		uint32_t cap = ex->cap ? ex->cap * 2 : 16;
		struct extra *e = realloc(ex->e, cap * sizeof *e);
		if (!e) {
			ex->failed = true;
			return;
		}
		ex->e = e;
		ex->cap = cap;
	}
	size_t key_at = ex->buf.len;
	fs_buf_add(&ex->buf, key, strlen(key));
	ex->e[ex->len++] = (struct extra){.key = key_at,
					  .key_len = strlen(key),
					  .at = at,
					  .len = key_at - at,
					  .stock = stock};
}

/* Renders what the core's last decisions owe besides the batch's own results: one `expired`
 * result per hold the clock ended (tracked with the batch's results, so that a crash before
 * delivery answers them again), and the stock record of every SKU that changed. Before
 * fs_core_commit, which forgets both lists. */
static void render_extras(struct extras *ex, const struct part *p)
{
	const struct fs_core *c = &p->core;
	fs_buf_clear(&ex->buf);
	ex->len = 0;
	ex->failed = false;
	for (uint32_t k = 0; k < c->expired_len; k++) {
		const struct fs_hold *h = &c->holds[c->expired[k]];
		size_t at = ex->buf.len;
		fs_reply_expired(&ex->buf, h->intent_id, c->skus[h->sku_index].sku, h->qty,
				 c->expired_at_ms[k], p->id, c->expired_offset[k]);
		extras_add(ex, h->intent_id, false, at);
	}
	for (uint32_t d = 0; d < c->dirty_skus_len; d++) {
		const struct fs_sku *s = &c->skus[c->dirty_skus[d]];
		size_t at = ex->buf.len;
		fs_reply_stock(&ex->buf, s);
		extras_add(ex, s->sku, true, at);
	}
	if (!fs_buf_ok(&ex->buf))
		ex->failed = true;
}

static void produce_extras(struct worker *w, struct part *p, const struct extras *ex)
{
	if (ex->failed) {
		fs_error("partition %" PRId32 ": out of memory for expiry and stock records; "
			 "expiries are answered again after a restart",
			 p->id);
		if (p->tail)
			p->tail->failed = true; /* replied stops here */
		return;
	}
	for (uint32_t i = 0; i < ex->len; i++) {
		const struct extra *e = &ex->e[i];
		struct fs_buf one = {.data = ex->buf.data + e->at, .len = e->len};
		const char *key = ex->buf.data + e->key;
		if (e->stock) {
			produce(w, w->cfg.topic_stock, RD_KAFKA_PARTITION_UA, key, e->key_len, &one,
				NULL);
			continue;
		}
		w->n.expired++;
		if (produce(w, w->cfg.topic_results, RD_KAFKA_PARTITION_UA, key, e->key_len, &one,
			    p->tail) < 0 &&
		    p->tail)
			p->tail->failed = true;
	}
}

static void extras_free(struct extras *ex)
{
	fs_buf_free(&ex->buf);
	free(ex->e);
	memset(ex, 0, sizeof *ex);
}

/* Moves p->replied over every batch whose results were all delivered, in order. */
static void advance_replied(struct worker *w, struct part *p)
{
	(void)w;
	while (p->head && p->head->pending == 0) {
		struct inflight *f = p->head;
		if (f->failed) {
			/* Stop here: a restart answers again from p->replied (INV-2). */
			break;
		}
		p->replied = f->end_offset;
		p->head = f->next;
		if (!p->head)
			p->tail = NULL;
		free(f);
	}
}

static void reap_orphans(struct worker *w)
{
	struct inflight **pp = &w->orphans;
	while (*pp) {
		if ((*pp)->pending == 0) {
			struct inflight *f = *pp;
			*pp = f->next;
			free(f);
		} else {
			pp = &(*pp)->next;
		}
	}
}

/* ---- partitions -------------------------------------------------------------------------- */

static int64_t backoff_next(const struct worker *w, int64_t ms)
{
	ms = ms ? ms * 2 : BACKOFF_MIN_MS;
	return ms > w->cfg.retry_backoff_max_ms ? w->cfg.retry_backoff_max_ms : ms;
}

/* Connects (again) to Postgres, waiting with backoff; gives up only on shutdown. */
static int store_ready(struct worker *w)
{
	int64_t backoff = 0;
	for (;;) {
		if (fs_store_ensure(w->store) == 0)
			return 0;
		w->n.retries++;
		backoff = backoff_next(w, backoff);
		fs_warn("%s; retrying in %" PRId64 " ms", fs_store_error(w->store), backoff);
		if (stop_requested)
			return -EINTR;
		sleep_ms(backoff);
		rd_kafka_poll(w->producer, 0);
	}
}

static void batch_clear(struct part *p)
{
	fs_batch_clear(&p->batch);
	p->batch_costly = 0;
}

/* Shutting down with the partition's state not known (a batch not committed, or not loaded):
 * nothing more is decided here; whoever owns the partition next decides what was read. */
static void part_abandon(struct part *p)
{
	batch_clear(p);
	fs_core_reset(&p->core);
	p->loaded = false;
}

/* Loads a partition's state from Postgres, retrying transient failures. */
static int part_load(struct worker *w, struct part *p)
{
	int64_t backoff = 0;
	for (;;) {
		if (store_ready(w) < 0) {
			part_abandon(p);
			return -EINTR;
		}
		if (fs_store_load(w->store, w->cfg.group, w->cfg.topic_intents, p->id, &p->core,
				  &p->meta) == 0) {
			p->loaded = true;
			if (p->replied < p->meta.replied_offset)
				p->replied = p->meta.replied_offset;
			return 0;
		}
		w->n.retries++;
		backoff = backoff_next(w, backoff);
		fs_warn("partition %" PRId32 ": load: %s; retrying in %" PRId64 " ms", p->id,
			fs_store_error(w->store), backoff);
		sleep_ms(backoff);
	}
}

/* Where consumption starts: the stored offset (Postgres is the truth, DESIGN.md section 3),
 * or earlier if some decided records were never answered. */
static int64_t start_offset(const struct part *p)
{
	if (p->meta.next_offset < 0)
		return RD_KAFKA_OFFSET_BEGINNING;
	if (p->meta.replied_offset >= 0 && p->meta.replied_offset < p->meta.next_offset)
		return p->meta.replied_offset;
	return p->meta.next_offset;
}

/* A batch holds up to batch.max records that cost a database row each (buys, confirms, sale
 * records ...), batch.max.behind while the worker is far behind, and BAD_FACTOR times
 * batch.max in all besides: bad records are cheap (a run of them is one rejects row), so a
 * poison flood does not cut batches short for the valid ones. */
static int64_t batch_extra(const struct worker *w)
{
	return w->cfg.batch_max_behind > w->cfg.batch_max
		       ? w->cfg.batch_max_behind - w->cfg.batch_max
		       : 0;
}

static uint32_t batch_room(const struct worker *w)
{
	return (uint32_t)(w->cfg.batch_max * BAD_FACTOR + batch_extra(w));
}

static struct part *part_get(struct worker *w, int32_t id)
{
	if (id < 0 || id >= PARTITIONS_MAX)
		return NULL;
	if (!w->parts[id]) {
		struct part *p = calloc(1, sizeof *p);
		if (!p)
			return NULL;
		p->id = id;
		p->lent = -1;
		fs_seen_init(&p->seen, (uint32_t)w->cfg.dedupe_cache_max);
		if (fs_core_init(&p->core, id) < 0 || fs_batch_init(&p->batch, batch_room(w)) < 0 ||
		    fs_batch_init(&p->again, (uint32_t)w->cfg.batch_max) < 0) {
			fs_batch_free(&p->batch);
			fs_batch_free(&p->again);
			free(p);
			return NULL;
		}
		w->parts[id] = p;
		int j = w->n_parts++;
		for (; j > 0 && w->part_ids[j - 1] > id; j--)
			w->part_ids[j] = w->part_ids[j - 1];
		w->part_ids[j] = id;
	}
	return w->parts[id];
}

/* A partial batch waits batch.max.wait ms for more records; but while records are already
 * waiting in the consumer's queue (a backlog), it waits up to ten times that, to fill. */
static bool batch_waited(const struct worker *w, const struct part *p, int64_t now)
{
	int64_t age = now - p->first_ms;
	if (age >= 10 * w->cfg.batch_wait_ms)
		return true;
	return age >= w->cfg.batch_wait_ms &&
	       (!w->consumer_queue || rd_kafka_queue_length(w->consumer_queue) == 0);
}

/* Full: no room, or batch.max costly records; past batch.max, a batch goes on filling while
 * it and the records waiting in the consumer's queue are at least batch.max.behind together,
 * up to that many (the batch's own count in it: the last of a crowd then goes in fewer
 * transactions, docs/PERFORMANCE.md item 36). A sale's crowd arrives at once (S1, S4 in
 * docs/BENCHMARKS.md): each transaction has a fixed cost (its round trips, its flush), and
 * fewer of them drain the backlog sooner. A worker that keeps up (S5) never has that many
 * queued, and its batches stay small: a record waits for its whole batch's commit, so a larger
 * batch after a short stall would only make the first of its records wait longer (item 34). */
static bool batch_full(const struct worker *w, const struct part *p)
{
	const struct fs_batch *t = &p->batch;
	int64_t costly = p->batch_costly;
	if (t->len == t->cap || costly >= w->cfg.batch_max + batch_extra(w))
		return true;
	if (costly < w->cfg.batch_max)
		return false;
	return !w->consumer_queue ||
	       costly + (int64_t)rd_kafka_queue_length(w->consumer_queue) < w->cfg.batch_max_behind;
}

/* Drops what is pending and forgets the state; deliveries still in flight become orphans. The
 * partition has no batch in flight (commit_wait first). */
static void part_drop(struct worker *w, struct part *p)
{
	batch_clear(p);
	fs_batch_clear(&p->again);
	fs_core_reset(&p->core);
	fs_seen_clear(&p->seen);
	p->need_lookup = false;
	p->loaded = false;
	p->assigned = false;
	p->replied = -1;
	while (p->head) {
		struct inflight *f = p->head;
		p->head = f->next;
		f->orphan = true;
		f->next = w->orphans;
		w->orphans = f;
	}
	p->tail = NULL;
}

/* ---- deciding a batch -------------------------------------------------------------------- */

static void count_batch(struct worker *w, const struct fs_batch *b)
{
	w->n.records += b->counts.records;
	w->n.fresh += b->counts.fresh;
	w->n.repeats += b->counts.repeats;
	w->n.conflicts += b->counts.conflicts;
	w->n.invalid += b->counts.invalid;
	w->n.sale += b->counts.sale;
	w->n.forwarded += b->counts.forwarded;
	w->n.wrong_partition += b->counts.wrong_partition;
	w->n.batches++;
	if (b->counts.records - b->counts.invalid > w->cfg.batch_max)
		w->n.batches_behind++;
}

static void commit_kafka_offset(struct worker *w, int32_t part, int64_t next)
{
	/* Advisory only (lag tools); the worker never starts from it. */
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(l, w->cfg.topic_intents, part)->offset = next;
	rd_kafka_commit(w->consumer, l, 1);
	rd_kafka_topic_partition_list_destroy(l);
}

/* The partition was fenced: another worker committed past us. Forget our state, reload,
 * and go on from the stored offset (the group will revoke the partition if it is not ours).
 * No batch of it is in flight. */
static void part_fenced(struct worker *w, struct part *p)
{
	w->n.fenced++;
	p->fences++;
	int64_t old = p->meta.next_offset;
	batch_clear(p); /* and what was read after it: the seek below reads it again */
	fs_batch_clear(&p->again);
	if (part_load(w, p) < 0)
		return;
	fs_warn("partition %" PRId32 ": fenced (expected offset %" PRId64 ", stored %" PRId64
		"); batch dropped, state reloaded",
		p->id, old, p->meta.next_offset);
	/* Records in [replied, next) may have been committed without being answered (by us, in a
	 * batch whose outcome we misjudged, or by a worker that died): answer them again. */
	int64_t from = p->meta.next_offset;
	if (from >= 0 && p->replied >= 0 && p->replied < from)
		from = p->replied;
	rd_kafka_resp_err_t err = rd_kafka_seek(w->intents_rkt, p->id,
						from < 0 ? RD_KAFKA_OFFSET_BEGINNING : from, 0);
	if (err)
		fs_warn("partition %" PRId32 ": seek: %s", p->id, rd_kafka_err2str(err));
}

/* The part of a commit attempt before the commit: repeats from memory (or a lookup), then
 * the decisions. 0, or FS_COMMIT_RETRY (the core's state must be reloaded). */
static int part_decide(struct worker *w, struct part *p, struct fs_batch *b)
{
	if (p->replied < 0)
		p->replied = b->items[0].rec.offset; /* nothing below the first record to answer */
	fs_batch_reset_decisions(b);
	int64_t t0 = now_us();
	/* Repeats are answered from memory. Ids not in memory are taken for new: the decisions
	 * insert asserts it, and if one was decided before (another run, another worker), the
	 * transaction aborts and the batch is redone with a lookup. */
	fs_batch_add_seen(b, &p->seen);
	int rc = p->need_lookup ? fs_store_lookup(w->store, b) : 0;
	crash_at("after_lookup");
	int64_t t1 = now_us();
	if (rc == 0)
		rc = fs_batch_decide(b, &p->core);
	w->n.us_lookup += t1 - t0;
	w->n.us_decide += now_us() - t1;
	return rc == 0 ? 0 : FS_COMMIT_RETRY;
}

static int64_t end_of(const struct fs_batch *b)
{
	return b->items[b->len - 1].rec.offset + 1;
}

/* The dedupe cache learns the batch's new decisions. */
static void seen_add_batch(struct part *p, const struct fs_batch *b)
{
	for (uint32_t i = 0; i < b->len; i++)
		if (b->items[i].cls == FS_ITEM_NEW && fs_seen_add(&p->seen, &b->items[i]) < 0)
			fs_seen_clear(&p->seen); /* out of memory: forget; lookups cover it */
}

/* The partition's meta once b, decided on the state `before` describes, is committed. */
static struct fs_part_meta meta_after(const struct part *p, const struct fs_part_meta *before,
				      const struct fs_batch *b)
{
	struct fs_part_meta m = *before;
	m.next_offset = end_of(b);
	if (m.first_offset < 0)
		m.first_offset = b->items[0].rec.offset;
	m.clock_ms = p->core.clock_ms;
	return m;
}

/* b is committed (m: the partition's meta now): answer its records, produce its extras. */
static void batch_done(struct worker *w, struct part *p, struct fs_batch *b,
		       const struct fs_part_meta *m, const struct extras *ex)
{
	crash_at("after_commit");
	p->need_lookup = false;
	int64_t next = m->next_offset;
	p->meta.next_offset = next;
	p->meta.first_offset = m->first_offset;
	p->meta.clock_ms = m->clock_ms;
	count_batch(w, b);
	if (w->replay) {
		p->replied = next; /* the live run answered these; a replay answers nothing */
	} else {
		int64_t t0 = now_us();
		publish_results(w, p, b, next);
		produce_extras(w, p, ex);
		w->n.us_publish += now_us() - t0;
	}
	crash_at("after_publish");
	if (!w->replay)
		commit_kafka_offset(w, p->id, next);
	fs_batch_clear(b);
	if (b == &p->batch)
		p->batch_costly = 0;
}

/* Reads the stored offset back on s and whether the attempt with this commit token moved it,
 * retrying until it answers or shutdown. */
static void read_stored(struct worker *w, struct fs_store *s, const char *token, int32_t part,
			int64_t *stored, bool *mine)
{
	int64_t backoff = 0;
	*stored = -2;
	*mine = false;
	while (!stop_requested) {
		if (fs_store_ensure(s) == 0 &&
		    fs_store_read_next(s, w->cfg.group, w->cfg.topic_intents, part, token, stored,
				       mine) == 0)
			return;
		fs_warn("partition %" PRId32 ": reading the stored offset: %s", part,
			fs_store_error(s));
		sleep_ms(backoff = backoff_next(w, backoff));
	}
}

/* Decides and commits b (the partition's batch, or one handed to a committer). Returns when
 * it is committed, fenced, or on shutdown: 0 committed on the first attempt, 1 committed after
 * the state was reloaded and b decided again, -1 not committed (fenced, or shutting down; the
 * partition's pending records are dropped then). rc0 is the outcome of a first attempt
 * already made, or -1 to make it here; sl is the committer that made it (its connection, its
 * batch's meta and extras), or NULL. */
static int part_process_from(struct worker *w, struct part *p, struct fs_batch *b, int rc0,
			     struct slot *sl)
{
	if (b->len == 0)
		return 0;
	int64_t expected = p->meta.next_offset;
	int64_t next = end_of(b);
	int64_t backoff = 0;
	bool reloaded = false;
	for (;;) {
		int rc = rc0;
		struct fs_store *att = sl ? sl->store : w->store;
		rc0 = -1;
		if (rc < 0) {
			if (store_ready(w) < 0) {
				part_abandon(p);
				return -1;
			}
			rc = part_decide(w, p, b);
			if (rc == 0) {
				int64_t t = now_us();
				rc = fs_store_commit(w->store, w->cfg.group, w->cfg.topic_intents,
						     &p->meta, next,
						     p->replied < 0 ? -1 : p->replied, b, &p->core,
						     p->need_lookup);
				count_commit(&w->n, now_us() - t);
			}
		}
		fs_debug("partition %" PRId32 ": batch of %u at %" PRId64 ": %d", p->id, b->len,
			 expected, rc);

		if (rc == FS_COMMIT_UNKNOWN) {
			/* The connection died with COMMIT in flight: only the stored offset knows.
			 */
			w->n.unknown++;
			int64_t stored;
			bool mine;
			read_stored(w, att, sl ? sl->token : fs_store_token(w->store), p->id,
				    &stored, &mine);
			/* The offset at our batch's end is not enough: another worker may have
			 * committed the same range. The commit token says whose commit it was. */
			if (stored == next && mine) {
				w->n.unknown_committed++;
				rc = FS_COMMIT_OK;
			} else if (stored == expected) {
				rc = FS_COMMIT_RETRY;
			} else {
				rc = FS_COMMIT_FENCED;
			}
			fs_warn("partition %" PRId32
				": commit outcome unknown, stored offset %" PRId64 ": %s",
				p->id, stored,
				rc == FS_COMMIT_OK	? "committed"
				: rc == FS_COMMIT_RETRY ? "not committed"
							: "fenced");
		}
		if (rc == FS_COMMIT_OK)
			break;
		if (rc == FS_COMMIT_FENCED) {
			part_fenced(w, p);
			return -1;
		}
		/* Not committed: the core's state moved while deciding; reload it from the truth.
		 */
		sl = NULL; /* from here on decided and committed in line */
		if (rc == FS_COMMIT_REDO) {
			w->n.redo++;
			if (!p->need_lookup)
				w->n.lookups_forced++;
			p->need_lookup = true;
		} else if (rc != COMMIT_AGAIN) {
			w->n.retries++;
		}
		if (rc != COMMIT_AGAIN) {
			backoff = backoff_next(w, backoff);
			fs_warn("partition %" PRId32 ": batch at %" PRId64
				" not committed (%s); reloading, "
				"retry in %" PRId64 " ms",
				p->id, expected, fs_store_error(att), backoff);
		}
		if (stop_requested) {
			part_abandon(p); /* the core holds this attempt's decisions */
			return -1;
		}
		if (rc != COMMIT_AGAIN)
			sleep_ms(backoff);
		if (part_load(w, p) < 0)
			return -1;
		reloaded = true;
		if (p->meta.next_offset != expected) {
			part_fenced(w, p);
			return -1;
		}
	}
	if (sl) {
		/* Committed as handed over: the core moved past it then. */
		batch_done(w, p, b, &sl->meta, &sl->ex);
		return 0;
	}
	seen_add_batch(p, b);
	struct fs_part_meta m = meta_after(p, &p->meta, b);
	render_extras(&w->ex, p);
	fs_core_commit(&p->core);
	batch_done(w, p, b, &m, &w->ex);
	return reloaded ? 1 : 0;
}

/* ---- the committer threads (commit.overlap) ---------------------------------------------- */

/* Committer thread: around its compare-and-set (fs_store_commit_send's hook). */
static void on_cas(void *ctx, bool before)
{
	struct slot *sl = ctx;
	struct worker *w = sl->w;
	pthread_mutex_lock(&w->mu);
	if (before) {
		const struct slot *pr = sl->pred >= 0 ? &w->slots[sl->pred] : NULL;
		while (pr && pr->gen == sl->pred_gen && !pr->cas_done && !pr->done)
			pthread_cond_wait(&w->cv, &w->mu);
	} else {
		sl->cas_done = true;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
}

static void *committer_main(void *arg)
{
	struct slot *sl = arg;
	struct worker *w = sl->w;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!sl->ready && !sl->quit)
			pthread_cond_wait(&w->cv, &w->mu);
		if (sl->quit)
			break;
		sl->ready = false;
		pthread_mutex_unlock(&w->mu);
		int64_t t = now_us();
		/* The statements are rendered here, off the main thread (about a tenth of its
		 * work per record, scripts/profile), while it reads the next records. */
		bool ok = fs_store_commit_prepare(sl->store, w->cfg.group, w->cfg.topic_intents,
						  &sl->before, end_of(&sl->batch), sl->replied,
						  &sl->batch, &sl->p->core, false, sl->after) == 0;
		pthread_mutex_lock(&w->mu);
		sl->prepared = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		/* Out of memory, or a connection that cannot be made: nothing was sent. */
		int rc = ok && fs_store_ensure(sl->store) == 0
				 ? fs_store_commit_send(sl->store, on_cas, sl)
				 : FS_COMMIT_RETRY;
		snprintf(sl->token, sizeof sl->token, "%s", ok ? fs_store_token(sl->store) : "");
		t = now_us() - t;
		pthread_mutex_lock(&w->mu);
		sl->rc = rc;
		sl->us = t;
		sl->cas_done = true;
		sl->prepared = true;
		sl->done = true;
		pthread_cond_broadcast(&w->cv);
		/* Wake the main thread if it waits in the consumer's poll: the batch's answers
		 * can go. (The queue outlives this thread: teardown joins it first.) */
		pthread_mutex_unlock(&w->mu);
		if (w->consumer_queue)
			rd_kafka_queue_yield(w->consumer_queue);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Waits until every slot in flight is done. */
static void wait_all(struct worker *w)
{
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < w->n_fly; i++)
		while (!w->slots[w->fly[i]].done)
			pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* Once the committer that was handed p's last batch has rendered its statements, the core's
 * decided state becomes its base (fs_core_commit), as if that batch were committed: the next
 * batch is decided on top of it. Any failure reloads the core (recover). */
static void core_settle(struct worker *w, struct part *p)
{
	if (p->lent < 0)
		return;
	const struct slot *sl = &w->slots[p->lent];
	pthread_mutex_lock(&w->mu);
	while (!sl->prepared)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	fs_core_commit(&p->core);
	p->lent = -1;
}

/* Takes the slot at fly[i] out of flight (it is done). */
static struct slot *fly_take(struct worker *w, int i)
{
	struct slot *sl = &w->slots[w->fly[i]];
	for (int j = i + 1; j < w->n_fly; j++)
		w->fly[j - 1] = w->fly[j];
	w->n_fly--;
	core_settle(w, sl->p);
	count_commit(&w->n, sl->us);
	sl->p->n_fly--;
	return sl;
}

/* sl0's transaction, the oldest of its partition in flight, did not commit (or its outcome is
 * unknown). The partition's later batches in flight were decided on top of it: wait for them
 * all, then settle the partition's batches in order, the first through part_process_from's
 * retry paths and the later ones decided again on the state it leaves (their transactions'
 * compare-and-set failed, as their predecessor's had not committed; or one of them committed,
 * and then so did sl0's). Other partitions' batches stay in flight, finished in turn. */
static void recover(struct worker *w, struct slot *sl0)
{
	struct part *p = sl0->p;
	wait_all(w);
	struct slot *chain[SLOTS_MAX];
	int n = 0;
	chain[n++] = sl0;
	for (int i = 0; i < w->n_fly;) {
		if (w->slots[w->fly[i]].p == p)
			chain[n++] = fly_take(w, i);
		else
			i++;
	}
	/* The cache has the ids of the batches handed over: a redo would answer its own records
	 * as repeats. Committed decisions are in Postgres; lookups cover what it forgets. */
	fs_seen_clear(&p->seen);
	bool live = true, redone = false;
	for (int i = 0; i < n; i++) {
		struct slot *sl = chain[i];
		if (!live || !p->loaded) {
			fs_batch_clear(&sl->batch); /* read again after the seek, or dropped */
			continue;
		}
		int rc = sl->rc;
		for (int j = i + 1; rc == FS_COMMIT_UNKNOWN && j < n; j++) {
			if (chain[j]->rc == FS_COMMIT_OK) {
				/* A successor's compare-and-set found this batch's end. */
				w->n.unknown++;
				w->n.unknown_committed++;
				rc = FS_COMMIT_OK;
				fs_warn("partition %" PRId32 ": commit outcome unknown, stored "
					"offset %" PRId64 ": committed (the batch after it "
					"committed on top of it)",
					p->id, chain[j]->meta.next_offset);
			}
		}
		if (rc == FS_COMMIT_OK && !redone) {
			batch_done(w, p, &sl->batch, &sl->meta, &sl->ex);
			continue;
		}
		/* Decided on a state that did not commit: decide again. A successor's failed
		 * compare-and-set is its predecessor's failure, not a fence (the reload checks). */
		if (redone || (i > 0 && rc == FS_COMMIT_FENCED))
			rc = COMMIT_AGAIN;
		int r = part_process_from(w, p, &sl->batch, rc, redone ? NULL : sl);
		if (r < 0)
			live = false;
		if (r > 0)
			redone = true;
		if (r > 0 && i > 0)
			w->n.stacked_redone++;
		fs_batch_clear(&sl->batch);
	}
}

/* Finishes the oldest transaction in flight (waiting for it if block): answers its batch, or
 * takes the retry and fencing paths. false if it is not done yet (or none is in flight). */
static bool finish_oldest(struct worker *w, bool block)
{
	if (w->n_fly == 0)
		return false;
	struct slot *sl = &w->slots[w->fly[0]];
	pthread_mutex_lock(&w->mu);
	while (block && !sl->done)
		pthread_cond_wait(&w->cv, &w->mu);
	bool done = sl->done;
	pthread_mutex_unlock(&w->mu);
	if (!done)
		return false;
	fly_take(w, 0);
	fs_debug("partition %" PRId32 ": batch of %u at %" PRId64 "%s: %d, transaction %" PRId64
		 " us, handed over %" PRId64 " us before",
		 sl->p->id, sl->batch.len, sl->before.next_offset, sl->after ? " (stacked)" : "",
		 sl->rc, sl->us, now_us() - sl->handed_us);
	if (sl->rc == FS_COMMIT_OK)
		batch_done(w, sl->p, &sl->batch, &sl->meta, &sl->ex);
	else
		recover(w, sl);
	return true;
}

/* Finishes every transaction in flight that is done, in order (or block: all of them). */
static void commit_finish(struct worker *w, bool block)
{
	while (finish_oldest(w, block))
		;
}

static void commit_wait(struct worker *w)
{
	commit_finish(w, true);
}

static bool slot_free(const struct worker *w)
{
	return w->n_fly < w->depth;
}

static bool slot_busy(const struct worker *w, int k)
{
	for (int i = 0; i < w->n_fly; i++)
		if (w->fly[i] == k)
			return true;
	return false;
}

/* Decides p->batch and, with commit.overlap, hands its transaction to a committer thread and
 * returns (waiting first for a free one); otherwise, or when it needs the store (a lookup),
 * commits it in line. Its expiry and stock records are rendered now and its new ids go into
 * the dedupe cache; the committer renders its statements from the core, which then takes the
 * decided state as its base (core_settle). At depth 2 the next batch is decided on top of
 * it while it is in flight; a failure of either undoes all that (recover). */
static void part_process_start(struct worker *w, struct part *p)
{
	while (w->depth > 0 && !slot_free(w))
		finish_oldest(w, true);
	if (!p->loaded || p->batch.len == 0)
		return;
	if (w->depth == 0 || p->need_lookup) {
		commit_wait(w);
		if (p->loaded)
			part_process_from(w, p, &p->batch, -1, NULL);
		return;
	}
	int k = 0;
	while (slot_busy(w, k))
		k++;
	struct slot *sl = &w->slots[k];
	core_settle(w, p);
	int rc = part_decide(w, p, &p->batch);
	if (rc != 0) {
		commit_wait(w);
		if (p->loaded)
			part_process_from(w, p, &p->batch, rc, NULL);
		return;
	}
	render_extras(&sl->ex, p);
	seen_add_batch(p, &p->batch);
	sl->before = p->n_fly ? p->ahead : p->meta;
	sl->meta = meta_after(p, &sl->before, &p->batch);
	sl->replied = p->replied < 0 ? -1 : p->replied;
	sl->after = p->n_fly > 0;
	p->ahead = sl->meta;
	p->lent = k;
	struct fs_batch t = sl->batch;
	sl->batch = p->batch;
	p->batch = t;
	p->batch_costly = 0;
	sl->p = p;
	sl->pred = -1;
	for (int i = 0; i < w->n_fly; i++) {
		if (w->slots[w->fly[i]].p == p) {
			sl->pred = w->fly[i];
			sl->pred_gen = w->slots[w->fly[i]].gen;
		}
	}
	if (p->n_fly)
		w->n.stacked++;
	p->n_fly++;
	w->fly[w->n_fly++] = k;
	sl->handed_us = now_us();
	pthread_mutex_lock(&w->mu);
	sl->gen++;
	sl->done = false;
	sl->prepared = false;
	sl->cas_done = false;
	sl->ready = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

struct again_ctx {
	struct worker *w;
	struct part *p;
};

static void answer_expired_again(void *ctx, const char *intent_id, const char *sku, int64_t qty,
				 int64_t ended_at_ms, int64_t ended_offset)
{
	struct again_ctx *a = ctx;
	fs_buf_clear(&a->w->out);
	fs_reply_expired(&a->w->out, intent_id, sku, qty, ended_at_ms, a->p->id, ended_offset);
	if (produce(a->w, a->w->cfg.topic_results, RD_KAFKA_PARTITION_UA, intent_id,
		    strlen(intent_id), &a->w->out, a->p->tail) < 0 &&
	    a->p->tail)
		a->p->tail->failed = true;
}

/* Answers again records that were decided before but maybe never answered (a crash between
 * commit and delivery): each gets its stored decision. Nothing is written. */
static void part_answer_again(struct worker *w, struct part *p)
{
	struct fs_batch *b = &p->again;
	if (b->len == 0)
		return;
	commit_wait(w); /* it asks the store */
	int64_t backoff = 0;
	while (store_ready(w) == 0) {
		fs_batch_reset_decisions(b);
		if (fs_store_lookup(w->store, b) == 0)
			break;
		sleep_ms(backoff = backoff_next(w, backoff));
	}
	if (stop_requested)
		return;
	for (uint32_t i = 0; i < b->len; i++) {
		struct fs_item *it = &b->items[i];
		it->first_partition = it->rec.partition;
		it->first_offset = it->rec.offset;
		if (it->rec.misrouted) {
			/* Parsing is pure: misrouted then, misrouted now; forwarded again. */
			it->cls = FS_ITEM_FORWARD;
			continue;
		}
		if (it->rec.kind == FS_KIND_INVALID) {
			/* Parsing is pure: the same bytes give the same reason. */
			it->cls = FS_ITEM_INVALID;
			it->dec.outcome = FS_OUT_REJECTED;
			it->dec.reason = it->rec.reject_reason;
			it->dec.decided_at_ms = it->rec.ts_ms; /* as the live answer (batch.c) */
			continue;
		}
		if (!fs_item_has_key(it)) {
			it->cls = FS_ITEM_TICK; /* sale records and ticks: not buyer-facing */
			continue;
		}
		bool found = false;
		for (uint32_t k = 0; k < b->stored_len && !found; k++) {
			const struct fs_stored *s = &b->stored[k];
			if (s->kind != it->rec.kind || strcmp(s->intent_id, it->rec.intent_id) != 0)
				continue;
			found = true;
			it->dec = s->dec;
			it->first_partition = s->partition;
			it->first_offset = s->offset;
			if (s->body_hash != it->rec.body_hash) {
				/* As the live answer (batch.c): the record's own qty and time. */
				memset(&it->dec, 0, sizeof it->dec);
				it->dec.outcome = FS_OUT_CONFLICT;
				it->dec.reason = "intent_id_reused";
				it->dec.qty = it->rec.qty;
				it->dec.decided_at_ms = it->rec.ts_ms;
				it->first_partition = it->rec.partition;
				it->first_offset = it->rec.offset;
			} else {
				it->dec.duplicate = s->offset != it->rec.offset;
			}
		}
		if (!found) {
			fs_error("partition %" PRId32 ": record at %" PRId64 " is below the stored "
				 "offset but has no decision",
				 p->id, it->rec.offset);
			it->cls = FS_ITEM_TICK;
		}
	}
	int64_t end = b->items[b->len - 1].rec.offset + 1;
	w->n.answered_again += b->len;
	publish_results(w, p, b, end);
	struct again_ctx ctx = {w, p};
	if (fs_store_expired(w->store, p->id, b->items[0].rec.offset, end, answer_expired_again,
			     &ctx) < 0 &&
	    p->tail) {
		fs_warn("partition %" PRId32 ": expiries not answered again: %s", p->id,
			fs_store_error(w->store));
		p->tail->failed = true; /* replied stops here: the next start tries again */
	}
	fs_batch_clear(b);
}

/* ---- consuming --------------------------------------------------------------------------- */

static void on_message(struct worker *w, rd_kafka_message_t *m)
{
	struct part *p =
		m->partition >= 0 && m->partition < PARTITIONS_MAX ? w->parts[m->partition] : NULL;
	if (!p || !p->assigned || !p->loaded)
		return; /* not ours (any more) */
	int64_t off = m->offset;
	/* The batch follows those in flight (commit.overlap), if any, or the stored offset. */
	int64_t expected = p->n_fly ? p->ahead.next_offset : p->meta.next_offset;
	if (expected >= 0)
		expected += p->batch.len;
	else if (p->batch.len)
		expected = end_of(&p->batch);

	struct fs_batch *target = &p->batch;
	if (p->meta.next_offset >= 0 && off < p->meta.next_offset) {
		if (off < p->replied) {
			w->n.skipped_stale++;
			return;
		}
		target = &p->again;
	} else if (expected >= 0 && off < expected) {
		w->n.skipped_stale++; /* already in the batch: a fetch from before a seek */
		return;
	} else if (expected >= 0 && off > expected) {
		/* Our topic has no gaps (no compaction, no transactions); say so loudly. */
		w->n.gaps++;
		fs_warn("partition %" PRId32 ": offset gap %" PRId64 " -> %" PRId64, p->id,
			expected, off);
	}
	if (target == &p->again && target->len == target->cap) {
		part_answer_again(w, p);
		if (!p->loaded || target->len == target->cap)
			return;
	}
	/* A full batch is decided and committed (handed to a committer, once one is free). */
	int64_t fences = p->fences;
	for (int n = 0; target != &p->again && batch_full(w, p); n++) {
		if (n == 3)
			return; /* could not make room (shutting down): read again later */
		part_process_start(w, p);
		if (!p->loaded)
			return;
		/* Fenced while making room: the batch was dropped and the partition reloaded and
		 * sought back, so this message comes again. Pushed now into the emptied batch, it
		 * would sit where the stored offset's record belongs, the re-read records up to it
		 * would be skipped as stale, and the offset would move past them undecided (seen
		 * in 70-crash-points' commit_cut: 200 records lost; issue 28, item 2). */
		if (p->fences != fences)
			return;
	}
	if (target != &p->again && target->len == 0)
		p->first_ms = now_ms();
	p->last_record_ms = now_ms();
	struct fs_item *it = fs_batch_push(target);
	rd_kafka_timestamp_type_t tstype;
	int64_t ts = rd_kafka_message_timestamp(m, &tstype);
	fs_record_parse(&w->limits, m->key, m->key_len, m->payload, m->len, m->partition, off,
			ts < 0 ? 0 : ts, &it->rec);
	if (it->rec.kind == FS_KIND_TICK)
		p->tick_pending = false;
	if (it->rec.misrouted &&
	    fs_batch_keep(target, it, m->key, m->key_len, m->payload, m->len) < 0) {
		fs_error("partition %" PRId32 ": out of memory keeping a misrouted record at "
			 "%" PRId64 "; it is forwarded after a restart",
			 p->id, off);
		it->fwd_at = SIZE_MAX;
	}
	if (target != &p->again && it->rec.kind != FS_KIND_INVALID && !it->rec.misrouted)
		p->batch_costly++;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Time on a partition moves only with its records. When a partition with live holds has been
 * idle for a tick interval and its earliest hold is due by the wall clock, the worker appends
 * a `tick` record to it: the broker stamps it (LogAppendTime), the clock moves, the hold
 * expires, and a replay sees the same tick. The wall clock only decides when to ask; the
 * decision reads the tick's timestamp. */
static void maybe_tick(struct worker *w, struct part *p, int64_t now)
{
	int64_t due = fs_core_next_expiry(&p->core);
	/* One tick in flight at a time (until it is read back, or ten intervals if it got lost). */
	bool in_flight = p->tick_pending && now - p->last_tick_ms < 10 * w->cfg.tick_interval_ms;
	if (due < 0 || p->batch.len || p->n_fly || in_flight ||
	    now - p->last_record_ms < w->cfg.tick_interval_ms || wall_ms() < due)
		return;
	static const char tick[] = "{\"v\":1,\"type\":\"tick\"}";
	rd_kafka_resp_err_t err = rd_kafka_producev(
		w->producer, RD_KAFKA_V_TOPIC(w->cfg.topic_intents), RD_KAFKA_V_PARTITION(p->id),
		RD_KAFKA_V_VALUE((void *)tick, sizeof tick - 1),
		RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
	p->last_tick_ms = now;
	p->tick_pending = !err;
	if (err)
		fs_warn("partition %" PRId32 ": tick: %s", p->id, rd_kafka_err2str(err));
	else
		w->n.ticks++;
}

static void process_due(struct worker *w, bool all)
{
	int64_t now = now_ms();
	for (int j = 0; j < w->n_parts; j++) {
		struct part *p = w->parts[w->part_ids[j]];
		if (!p->assigned)
			continue;
		if (p->again.len)
			part_answer_again(w, p);
		/* With every committer busy, a batch waits for the loop to finish one (all: it
		 * waits here). */
		if (p->loaded && p->batch.len && (all || slot_free(w) || w->depth == 0) &&
		    (all || batch_full(w, p) || (!p->n_fly && batch_waited(w, p, now))))
			part_process_start(w, p);
		if (p->loaded && !stop_requested && !w->replay)
			maybe_tick(w, p, now);
	}
}

static int64_t next_due_ms(const struct worker *w)
{
	/* A committer that finishes wakes the poll (rd_kafka_queue_yield): no need to look for
	 * the commits' end on a clock. */
	int64_t wait = w->cfg.poll_timeout_ms, now = now_ms();
	for (int j = 0; j < w->n_parts; j++) {
		const struct part *p = w->parts[w->part_ids[j]];
		if (!p->assigned || p->batch.len == 0 || (w->depth > 0 && !slot_free(w)))
			continue;
		int64_t left = p->first_ms + w->cfg.batch_wait_ms - now;
		if (left < wait)
			wait = left < 0 ? 0 : left;
	}
	return wait;
}

/* Writes the replied offsets of the given partitions (best effort: a restart answers again). */
static void save_replied(struct worker *w, struct part *p)
{
	advance_replied(w, p);
	if (p->replied <= p->meta.replied_offset || p->meta.next_offset < 0 || !p->loaded)
		return;
	/* One try: this runs in the revoke callback, which must not stall the group. */
	if (fs_store_ensure(w->store) < 0)
		return;
	/* Reuse the commit path with an empty batch would move counters; a plain guarded update
	 * is enough: the replied offset never passes the stored next offset. */
	(void)fs_store_save_replied(w->store, w->cfg.group, w->cfg.topic_intents, p->id,
				    p->meta.next_offset, p->replied);
	p->meta.replied_offset = p->replied;
}

static void flush_producer(struct worker *w)
{
	rd_kafka_resp_err_t err = rd_kafka_flush(w->producer, (int)w->cfg.flush_timeout_ms);
	if (err)
		fs_warn("results not all delivered within %" PRId64 " ms: %s",
			w->cfg.flush_timeout_ms, rd_kafka_err2str(err));
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			 rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	struct worker *w = opaque;
	commit_wait(w); /* the commits in flight finish first (and the store is free) */
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		for (int i = 0; i < parts->cnt; i++) {
			rd_kafka_topic_partition_t *tp = &parts->elems[i];
			if (tp->partition >= w->limits.partitions) {
				/* The topic grew while we ran: the rule's count is the recorded
				 * one. */
				fs_error(
					"partition %" PRId32 " of %s is beyond the %" PRId32
					" recorded for the topic: it grew, and the partitioning "
					"rule would move SKUs away from their state; not consuming "
					"it (README: Growing the intents topic)",
					tp->partition, w->cfg.topic_intents, w->limits.partitions);
				tp->offset = RD_KAFKA_OFFSET_END;
				continue;
			}
			struct part *p = part_get(w, tp->partition);
			if (!p) {
				fs_error("partition %" PRId32 " out of range or out of memory; "
					 "not consuming it",
					 tp->partition);
				tp->offset = RD_KAFKA_OFFSET_END; /* never decided: stays pending */
				continue;
			}
			p->assigned = true;
			p->replied = -1;
			if (part_load(w, p) < 0)
				continue;
			tp->offset = start_offset(p);
			fs_info("partition %" PRId32 " assigned: next offset %" PRId64
				", replied %" PRId64 ", start %" PRId64,
				p->id, p->meta.next_offset, p->meta.replied_offset, tp->offset);
		}
		rd_kafka_assign(rk, parts);
		return;
	}
	/* Revoked (or an error): stop deciding; deliver what was committed; forget the state. */
	crash_at("in_revoke");
	flush_producer(w);
	for (int i = 0; i < parts->cnt; i++) {
		struct part *p = part_get(w, parts->elems[i].partition);
		if (!p || !p->assigned)
			continue;
		save_replied(w, p);
		part_drop(w, p);
		fs_info("partition %" PRId32 " revoked", p->id);
	}
	rd_kafka_assign(rk, NULL);
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
	fs_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static int64_t stalled_broken(const struct worker *w)
{
	int64_t n = w->store ? fs_store_stalled_broken(w->store) : 0;
	for (int i = 1; i < SLOTS_MAX; i++)
		if (w->slots[i].store)
			n += fs_store_stalled_broken(w->slots[i].store);
	return n;
}

static void log_stats(struct worker *w, const char *when)
{
	fs_info("%s: records=%" PRId64 " fresh=%" PRId64 " repeats=%" PRId64 " conflicts=%" PRId64
		" invalid=%" PRId64 " sale=%" PRId64 " expired=%" PRId64 " ticks_sent=%" PRId64
		" batches=%" PRId64 " fenced=%" PRId64 " redo=%" PRId64 " retries=%" PRId64
		" unknown=%" PRId64 " unknown_committed=%" PRId64 " answered_again=%" PRId64
		" stale=%" PRId64 " gaps=%" PRId64 " published=%" PRId64 " delivery_failed=%" PRId64
		" stalled_broken=%" PRId64 " ms_lookup=%" PRId64 " ms_decide=%" PRId64
		" ms_commit=%" PRId64 " ms_commit_max=%" PRId64 " ms_publish=%" PRId64
		" lookups_forced=%" PRId64 " batches_behind=%" PRId64 " stacked=%" PRId64
		" stacked_redone=%" PRId64 " forwarded=%" PRId64 " forwards_sent=%" PRId64
		" wrong_partition=%" PRId64,
		when, w->n.records, w->n.fresh, w->n.repeats, w->n.conflicts, w->n.invalid,
		w->n.sale, w->n.expired, w->n.ticks, w->n.batches, w->n.fenced, w->n.redo,
		w->n.retries, w->n.unknown, w->n.unknown_committed, w->n.answered_again,
		w->n.skipped_stale, w->n.gaps, w->n.published, w->n.delivery_failed,
		stalled_broken(w), w->n.us_lookup / 1000, w->n.us_decide / 1000,
		w->n.us_commit / 1000, w->n.us_commit_max / 1000, w->n.us_publish / 1000,
		w->n.lookups_forced, w->n.batches_behind, w->n.stacked, w->n.stacked_redone,
		w->n.forwarded, w->n.forwards_sent, w->n.wrong_partition);
}

/* One line a minute at most while records arrive on the wrong partition: how many, and the
 * fix, so that the producer's owner sees the cause without reading the stats. */
static void warn_misrouted(struct worker *w, int64_t now)
{
	int64_t n = w->n.forwarded + w->n.wrong_partition;
	if (n == w->misrouted_warned_n ||
	    (w->misrouted_warned_ms && now - w->misrouted_warned_ms < MISROUTED_WARN_MS))
		return;
	fs_warn("%" PRId64 " record(s) arrived on the wrong partition of %s since the last "
		"warning (%s); the rule is Kafka's default, toPositive(murmur2(key)) %% "
		"%" PRId32 ": set the producer's partitioner to murmur2 (librdkafka and "
		"confluent-kafka: partitioner=murmur2_random; sarama: "
		"NewMurmur2Partitioner; README: Publishing from your web tier)",
		n - w->misrouted_warned_n, w->cfg.topic_intents,
		w->limits.misrouted_reject ? "rejected wrong_partition" : "forwarded",
		w->limits.partitions);
	w->misrouted_warned_n = n;
	w->misrouted_warned_ms = now;
}

static int handle_consumer_error(struct worker *w, rd_kafka_message_t *m)
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
	(void)w;
	fs_warn("kafka: %s", rd_kafka_message_errstr(m));
	return 0;
}

static bool replay_progress(struct worker *w, bool final);

static int run(struct worker *w)
{
	int rc = 0;
	while (!stop_requested) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, (int)next_due_ms(w));
		if (m) {
			crash_at("after_poll");
			if (m->err)
				rc = handle_consumer_error(w, m);
			else
				on_message(w, m);
			rd_kafka_message_destroy(m);
			if (rc < 0)
				break;
		}
		rd_kafka_poll(w->producer, 0);
		commit_finish(w, false);
		process_due(w, m == NULL);
		for (int j = 0; j < w->n_parts; j++)
			if (w->parts[w->part_ids[j]]->assigned)
				advance_replied(w, w->parts[w->part_ids[j]]);
		reap_orphans(w);
		int64_t now = now_ms();
		if (w->cfg.stats_interval_ms &&
		    now - w->last_stats_ms >= w->cfg.stats_interval_ms) {
			log_stats(w, "stats");
			w->last_stats_ms = now;
		}
		warn_misrouted(w, now);
		if (w->replay && replay_progress(w, false))
			break;
	}
	/* Drain: decide what was already read (one try each), then leave the group cleanly. */
	commit_wait(w);
	if (rc == 0) {
		process_due(w, true);
		commit_wait(w);
		process_due(w, true); /* what was read during the last commit */
		commit_wait(w);
	}
	return rc;
}

/* Replay: a progress bar with the rate on stderr; true once every partition reached the end
 * offset it had when the replay started. */
static bool replay_progress(struct worker *w, bool final)
{
	int64_t done = 0;
	bool all = true;
	for (int i = 0; i < w->replay_parts; i++) {
		const struct part *p = w->parts[i];
		int64_t next = p && p->loaded ? p->meta.next_offset : -1;
		/* Loaded with nothing decided yet: at 0, which is also the end of an empty
		 * partition (a replay of a topic with one waited for it forever). */
		if (next < 0 && p && p->loaded)
			next = 0;
		if (next < w->replay_end[i])
			all = false;
		if (next > w->replay_from[i])
			done += next - w->replay_from[i];
	}
	int64_t now = now_ms();
	if (!final && !all && now - w->replay_last_ms < 1000)
		return false;
	w->replay_last_ms = now;
	double el = (double)(now - w->replay_start_ms) / 1000.0;
	int64_t total = w->replay_total > 0 ? w->replay_total : 1;
	int filled = (int)(30 * (done > total ? total : done) / total);
	fprintf(stderr, "replay [%.*s%.*s] %" PRId64 "/%" PRId64 " records, %.0f records/s%s",
		filled, "##############################", 30 - filled,
		"..............................", done, w->replay_total,
		el > 0 ? (double)done / el : 0.0, all || final ? "\n" : "\r");
	return all;
}

/* Assigns every partition of the intents topic, each from its stored offset, and notes where
 * the log ends now. */
static int replay_assign(struct worker *w)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e = rd_kafka_metadata(w->consumer, 0, w->intents_rkt, &md, 10000);
	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		fs_error("replay: topic %s: %s", w->cfg.topic_intents,
			 rd_kafka_err2str(e ? e : md->topics[0].err));
		if (md)
			rd_kafka_metadata_destroy(md);
		return -EIO;
	}
	int n = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	if (n > PARTITIONS_MAX) {
		fs_error("replay: %d partitions, at most %d", n, PARTITIONS_MAX);
		return -EINVAL;
	}
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
	w->replay_parts = n;
	for (int i = 0; i < n; i++) {
		int64_t lo, hi;
		e = rd_kafka_query_watermark_offsets(w->consumer, w->cfg.topic_intents, i, &lo, &hi,
						     10000);
		struct part *p = part_get(w, i);
		if (e || !p) {
			fs_error("replay: partition %d: %s", i,
				 e ? rd_kafka_err2str(e) : "no memory");
			rd_kafka_topic_partition_list_destroy(l);
			return -EIO;
		}
		p->assigned = true;
		if (part_load(w, p) < 0) {
			rd_kafka_topic_partition_list_destroy(l);
			return -EINTR;
		}
		w->replay_end[i] = hi;
		int64_t from = p->meta.next_offset < 0 ? 0 : p->meta.next_offset;
		w->replay_from[i] = from;
		/* A rebuild must see every record: an empty database needs the log from 0. */
		if (from < lo) {
			fs_error("replay: partition %d: the database needs records from offset "
				 "%" PRId64 " but the log starts at %" PRId64
				 " (below the log's start): records "
				 "are gone, refusing to skip them",
				 i, from, lo);
			rd_kafka_topic_partition_list_destroy(l);
			return -ERANGE;
		}
		w->replay_total += hi - from;
		rd_kafka_topic_partition_list_add(l, w->cfg.topic_intents, i)->offset =
			p->meta.next_offset < 0 ? RD_KAFKA_OFFSET_BEGINNING : p->meta.next_offset;
		fs_info("replay: partition %d from %" PRId64 " to %" PRId64, i, from, hi);
	}
	e = rd_kafka_assign(w->consumer, l);
	rd_kafka_topic_partition_list_destroy(l);
	w->replay_start_ms = now_ms();
	return e ? -EIO : 0;
}

/* ---- start-up ---------------------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashsale-worker [-c FILE] [--set KEY=VALUE]... [--replay] [--help]\n"
		"                        [--help-config]\n"
		"\n"
		"The flashsale order worker: consumes the intents topic as a member of a consumer\n"
		"group, decides every record in memory, commits each batch of decisions to\n"
		"PostgreSQL in one transaction, then publishes one result per record.\n"
		"\n"
		"  -c, --config FILE   configuration file (key = value; see "
		"config/flashsale.conf)\n"
		"  -s, --set K=V       set one configuration key (after the file)\n"
		"      --replay        rebuild: decide the intents topic into the database from "
		"the\n"
		"                      stored offsets (the beginning, for an empty database) to "
		"the\n"
		"                      log end, publishing nothing, with a progress bar; then "
		"exit\n"
		"      --help-config   list every configuration key\n"
		"  -h, --help          this text\n"
		"\n"
		"Environment: FLASHSALE_KAFKA (bootstrap servers) and FLASHSALE_PG (libpq "
		"conninfo)\n"
		"override the file. FLASHSALE_CRASH=point[:n] is a test hook (see docs).\n"
		"SIGTERM or SIGINT: finish the batches already read, deliver results, exit 0.\n");
}

/* The intents topic's partition count, from the broker. */
static int topic_partitions(struct worker *w, int32_t *out)
{
	rd_kafka_topic_t *t = rd_kafka_topic_new(w->producer, w->cfg.topic_intents, NULL);
	const struct rd_kafka_metadata *md = NULL;
	int rc = -EAGAIN;
	if (t && rd_kafka_metadata(w->producer, 0, t, &md, METADATA_TIMEOUT_MS) ==
			 RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
			*out = md->topics[0].partition_cnt;
			rc = 0;
		}
		rd_kafka_metadata_destroy(md);
	}
	if (t)
		rd_kafka_topic_destroy(t);
	return rc;
}

/* The partitioning rule's inputs (README, "Records"): the intents topic's partition count
 * and what is done with a misrouted record, recorded for the topic at the first start. A
 * topic grown since would move SKUs away from their state, and another mode would decide
 * the log otherwise than a replay of it: refuse to start. Waits while the broker or Postgres
 * cannot be reached (they may come up after us). */
static int rule_check(struct worker *w)
{
	int64_t backoff = 0;
	while (!stop_requested) {
		int32_t n = 0, rec_n = 0;
		char rec_mode[16] = "";
		if (topic_partitions(w, &n) < 0) {
			fs_warn("no partition count for topic %s from the broker yet (will retry)",
				w->cfg.topic_intents);
		} else if (fs_store_ensure(w->store) < 0 ||
			   fs_store_topic_rule(w->store, w->cfg.topic_intents, n, w->cfg.misrouted,
					       &rec_n, rec_mode) < 0) {
			fs_warn("%s (will retry)", fs_store_error(w->store));
		} else if (rec_n != n) {
			fs_error(
				"topic %s has %" PRId32 " partitions, but this database recorded "
				"%" PRId32 " at its first start: the partitioning rule (murmur2 %% "
				"partitions) would move SKUs away from their state; use a topic of "
				"%" PRId32 " partitions, or move the sale (README: Growing the "
				"intents topic)",
				w->cfg.topic_intents, n, rec_n, rec_n);
			return -EPERM;
		} else if (strcmp(rec_mode, w->cfg.misrouted) != 0) {
			fs_error("misrouted = %s, but this database decided topic %s with "
				 "misrouted = %s (a replay must decide alike): set misrouted = %s, "
				 "or start a new database",
				 w->cfg.misrouted, w->cfg.topic_intents, rec_mode, rec_mode);
			return -EPERM;
		} else {
			w->limits.partitions = n;
			w->limits.misrouted_reject = strcmp(rec_mode, "reject") == 0;
			fs_info("topic %s: %" PRId32 " partitions, partitioner %s, misrouted "
				"records: %s",
				w->cfg.topic_intents, n, FS_PARTITIONER_NAME, rec_mode);
			return 0;
		}
		sleep_ms(backoff = backoff_next(w, backoff));
	}
	return -EINTR;
}

static int setup(struct worker *w)
{
	char err[512];
	fs_log_set_level(w->cfg.log_level);
	w->limits.bytes_max = (size_t)w->cfg.record_max_bytes;

	rd_kafka_conf_t *pc = fs_kafka_conf(&w->cfg, RD_KAFKA_PRODUCER, fs_kafka_producer_defaults,
					    err, sizeof err);
	if (!pc) {
		fs_error("producer config: %s", err);
		return -EINVAL;
	}
	rd_kafka_conf_set_dr_msg_cb(pc, dr_cb);
	rd_kafka_conf_set_error_cb(pc, error_cb);
	rd_kafka_conf_set_opaque(pc, w);
	w->producer = fs_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof err);
	if (!w->producer) {
		fs_error("producer: %s", err);
		return -EINVAL;
	}
	/* NULL is survivable: results then go one produce call each. */
	w->results_rkt = rd_kafka_topic_new(w->producer, w->cfg.topic_results, NULL);

	rd_kafka_conf_t *cc = fs_kafka_conf(&w->cfg, RD_KAFKA_CONSUMER, fs_kafka_consumer_defaults,
					    err, sizeof err);
	if (!cc) {
		fs_error("consumer config: %s", err);
		return -EINVAL;
	}
	if (rd_kafka_conf_set(cc, "group.id", w->cfg.group, err, sizeof err) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(cc);
		fs_error("consumer config: %s", err);
		return -EINVAL;
	}
	rd_kafka_conf_set_rebalance_cb(cc, rebalance_cb);
	rd_kafka_conf_set_error_cb(cc, error_cb);
	rd_kafka_conf_set_opaque(cc, w);
	w->consumer = fs_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
	if (!w->consumer) {
		fs_error("consumer: %s", err);
		return -EINVAL;
	}
	rd_kafka_poll_set_consumer(w->consumer);
	w->consumer_queue = rd_kafka_queue_get_consumer(w->consumer);
	w->intents_rkt = rd_kafka_topic_new(w->consumer, w->cfg.topic_intents, NULL);

	int rc = fs_store_open(w->cfg.pg, &w->store);
	if (rc < 0) {
		/* Postgres may come up after us: the loop retries; only report it. */
		fs_warn("%s (will retry)", fs_store_error(w->store));
	}
	fs_store_set_crash_hook(w->store, crash_at);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	for (int i = 0; i < w->cfg.commit_overlap && i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		sl->w = w;
		if (i == 0) {
			sl->store = w->store;
		} else if (fs_store_open(w->cfg.pg, &sl->store) < 0) {
			if (!sl->store) {
				fs_warn("commit.overlap: out of memory for a connection");
				break;
			}
			fs_warn("%s (will retry)", fs_store_error(sl->store));
		}
		fs_store_set_crash_hook(sl->store, crash_at);
		int e = fs_batch_init(&sl->batch, batch_room(w)) < 0 ? ENOMEM : 0;
		if (e == 0)
			e = pthread_create(&sl->thread, NULL, committer_main, sl);
		if (e) {
			fs_warn("commit.overlap: no committer thread %d (%s); %d in flight at most",
				i, strerror(e), i);
			break;
		}
		sl->up = true;
		w->depth = i + 1;
	}

	/* Its metadata call also teaches the producer the intents topic's leaders: the first
	 * tick does not wait for a metadata round trip (an expiry is late by as much). */
	rc = rule_check(w);
	if (rc < 0)
		return rc;
	if (w->replay)
		return replay_assign(w);
	rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, w->cfg.topic_intents, RD_KAFKA_PARTITION_UA);
	rd_kafka_resp_err_t kerr = rd_kafka_subscribe(w->consumer, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (kerr) {
		fs_error("subscribe %s: %s", w->cfg.topic_intents, rd_kafka_err2str(kerr));
		return -EINVAL;
	}
	return 0;
}

/* Ends the committer threads (nothing is in flight): the batches that come after, if any,
 * commit in line. */
static void committers_stop(struct worker *w)
{
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < SLOTS_MAX; i++)
		w->slots[i].quit = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (int i = 0; i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		if (sl->up)
			pthread_join(sl->thread, NULL);
		sl->up = false;
	}
	w->depth = 0;
}

static void teardown(struct worker *w)
{
	commit_wait(w);
	/* Before the consumer's queue goes: a committer wakes the poll through it. */
	committers_stop(w);
	if (w->consumer) {
		rd_kafka_consumer_close(w->consumer); /* runs the revoke callback */
		if (w->intents_rkt)
			rd_kafka_topic_destroy(w->intents_rkt);
		if (w->consumer_queue)
			rd_kafka_queue_destroy(w->consumer_queue);
		rd_kafka_destroy(w->consumer);
	}
	if (w->producer) {
		flush_producer(w);
		if (w->results_rkt)
			rd_kafka_topic_destroy(w->results_rkt);
		rd_kafka_destroy(w->producer);
	}
	for (int i = 0; i < PARTITIONS_MAX; i++) {
		struct part *p = w->parts[i];
		if (!p)
			continue;
		part_drop(w, p);
		fs_core_free(&p->core);
		fs_batch_free(&p->batch);
		fs_batch_free(&p->again);
		fs_seen_free(&p->seen);
		free(p);
	}
	reap_orphans(w);
	while (w->orphans) {
		struct inflight *f = w->orphans;
		w->orphans = f->next;
		free(f);
	}
	for (int i = 0; i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		if (sl->store != w->store)
			fs_store_close(sl->store);
		sl->store = NULL;
		fs_batch_free(&sl->batch);
		extras_free(&sl->ex);
	}
	extras_free(&w->ex);
	fs_store_close(w->store);
	w->store = NULL; /* log_stats runs after teardown */
	fs_buf_free(&w->out);
	fs_buf_free(&w->replies);
	free(w->msgs);
	free(w->msg_at);
}

int main(int argc, char **argv)
{
	static struct worker w; /* large: keep it off the stack */
	fs_config_defaults(&w.cfg);
	fs_log_set_prefix("flashsale-worker");
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},	  {"help-config", no_argument, NULL, 'H'},
		{"replay", no_argument, NULL, 'R'},	  {NULL, 0, NULL, 0},
	};
	char err[FS_CONF_ERR_MAX];
	const char *sets[64];
	int nsets = 0, c;
	while ((c = getopt_long(argc, argv, "c:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (fs_config_load_file(&w.cfg, optarg, err) < 0) {
				fprintf(stderr, "flashsale-worker: %s\n", err);
				return 2;
			}
			break;
		case 's':
			if (nsets == 64) {
				fprintf(stderr, "flashsale-worker: too many --set options\n");
				return 2;
			}
			sets[nsets++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'H':
			fs_config_describe(stdout);
			return 0;
		case 'R':
			w.replay = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flashsale-worker: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (fs_config_apply_env(&w.cfg, err) < 0) {
		fprintf(stderr, "flashsale-worker: %s\n", err);
		return 2;
	}
	for (int i = 0; i < nsets; i++) {
		char kv[1024];
		snprintf(kv, sizeof kv, "%s", sets[i]);
		char *eq = strchr(kv, '=');
		if (!eq) {
			fprintf(stderr, "flashsale-worker: --set %s: expected KEY=VALUE\n",
				sets[i]);
			return 2;
		}
		*eq = '\0';
		if (fs_config_set(&w.cfg, kv, eq + 1, "--set", err) < 0) {
			fprintf(stderr, "flashsale-worker: %s\n", err);
			return 2;
		}
	}
	crash_init();
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	int rc = setup(&w);
	if (rc == -EINVAL) {
		/* A configuration librdkafka refused: a usage error, like a bad file. */
		teardown(&w);
		return 2;
	}
	if (rc == 0) {
		fs_info("started: brokers %s, group %s, topic %s, batch.max %" PRId64,
			w.cfg.brokers, w.cfg.group, w.cfg.topic_intents, w.cfg.batch_max);
		rc = run(&w);
		if (w.replay && rc == 0 && !stop_requested) {
			replay_progress(&w, true);
			fs_info("replay: done");
		}
	}
	teardown(&w);
	log_stats(&w, "exit");
	if (rc == -EINTR)
		rc = 0; /* stopped while waiting for the services at start */
	if (rc == 0 && fatal_error)
		rc = -EIO;
	return rc == 0 ? 0 : rc == -ERANGE ? 3 : 1;
}
