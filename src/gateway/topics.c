/* topics.c: the gateway's Kafka side: one idempotent producer (acks=all) whose delivery
 * reports resume the requests that wait for them, and one consumer that follows the results
 * topic (from its end) and the stock topic (from its beginning) for every request of this
 * process (see gateway.h). */
#include "gateway/gateway.h"

#include "io/kafka.h"
#include "io/log.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uuid/uuid.h>

enum { PROBE_EVERY_MS = 1000, PROBE_TIMEOUT_MS = 1000, EOF_MAX = 1024 };

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	struct gw *g = opaque;
	struct gw_req *r = m->_private;
	struct gw_wakes w;
	gw_wakes_init(&w);
	pthread_mutex_lock(&g->lock);
	r->pub_done = true;
	r->pub_err = m->err;
	r->pub_part = m->partition;
	r->pub_off = m->offset;
	struct gw_entry *e = r->entry;
	if (e && e->state == GW_S_PUBLISHING) {
		/* Not on the log (or not known to be): forgotten, so that a retry publishes
		 * again (a copy that did land is deduplicated by the worker). */
		e->state = m->err ? GW_S_STUB : GW_S_QUEUED;
		e->asked_ms = gw_now_ms(); /* Postgres is asked GW_RECHECK_MS after, if need be */
		if (m->err)
			e->fp = 0;
		gw_wake_list(&w, &e->waiters);
	}
	gw_wake_req(&w, r);
	pthread_mutex_unlock(&g->lock);
	gw_wakes_run(&w);
	if (m->err) {
		atomic_fetch_add(&g->stats.publish_failed, 1);
		fs_warn("publish failed: %s", rd_kafka_err2str(m->err));
	} else {
		atomic_fetch_add(&g->stats.published, 1);
	}
}

static atomic_bool auth_failed;

bool gw_kafka_auth_failed(void)
{
	return atomic_load(&auth_failed);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	(void)rk;
	struct gw *g = opaque;
	/* A refused credential is not an outage that passes: librdkafka would retry it for
	 * ever while every buy is answered 503. Stop (main's sigwait takes the signal), with
	 * the reason and a non-zero exit. */
	if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
		fs_error("kafka authentication failed: %s (check kafka.sasl.username and the "
			 "password in kafka.sasl.password.file); stopping",
			 reason);
		if (!atomic_exchange(&auth_failed, true))
			kill(getpid(), SIGTERM);
		return;
	}
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		atomic_store(&g->producer_up, false);
	fs_warn("kafka: %s: %s", rd_kafka_err2name(err), reason);
}

int gw_publish(struct gw *g, struct gw_req *r, const char *key, const struct fs_buf *payload)
{
	rd_kafka_resp_err_t err = rd_kafka_producev(
		g->producer, RD_KAFKA_V_TOPIC(g->cfg.topic_intents),
		RD_KAFKA_V_KEY((void *)key, strlen(key)),
		RD_KAFKA_V_VALUE(payload->data, payload->len),
		RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
	if (err) {
		fs_warn("produce: %s", rd_kafka_err2str(err));
		return -EIO;
	}
	r->pub_done = false;
	r->phase = GW_PH_PUBLISHING;
	gw_park(r);
	return 0;
}

/* Serves delivery reports, and asks for the cluster's metadata every second: /readyz and the
 * POST endpoints answer 503 at once while no broker answers. */
static void *producer_main(void *arg)
{
	struct gw *g = arg;
	int64_t next_probe = 0;
	while (!atomic_load(&g->stopping)) {
		rd_kafka_poll(g->producer, 100);
		int64_t now = gw_now_ms();
		if (now < next_probe)
			continue;
		next_probe = now + PROBE_EVERY_MS;
		const struct rd_kafka_metadata *md = NULL;
		rd_kafka_resp_err_t e =
			rd_kafka_metadata(g->producer, 0, NULL, &md, PROBE_TIMEOUT_MS);
		bool up = e == RD_KAFKA_RESP_ERR_NO_ERROR && md->broker_cnt > 0;
		if (md)
			rd_kafka_metadata_destroy(md);
		if (up != atomic_load(&g->producer_up))
			fs_info("brokers %s", up ? "reachable" : "unreachable");
		atomic_store(&g->producer_up, up);
	}
	return NULL;
}

/* ---- the consumer -------------------------------------------------------------------------- */

static json_t *object_of(const void *p, size_t n)
{
	json_error_t e;
	json_t *o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &e);
	if (!json_is_object(o)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static const char *str_member(json_t *o, const char *name)
{
	const char *v = json_string_value(json_object_get(o, name));
	return v ? v : "";
}

/* A result: the decision of its (intent, type), and an event of the buy's stream. */
/* An admission (issue 33): kept under the buyer's queue id, so that a GET .../queue/{buyer}
 * waiting for it (?wait=) is answered with it, token included, and a later one without asking
 * Postgres. */
static void on_admission(struct gw *g, json_t *o, const rd_kafka_message_t *m, const char *sku,
			 int32_t part, int64_t off)
{
	const char *buyer = str_member(o, "buyer_id");
	if (!fs_sku_valid(sku) || !fs_buyer_valid(buyer))
		return;
	char qid[FS_UUID_LEN + 1];
	gw_queue_id(sku, buyer, qid);
	char *text = strndup(m->payload, m->len);
	if (!text)
		return;
	struct gw_wakes w;
	gw_wakes_init(&w);
	pthread_mutex_lock(&g->lock);
	struct gw_entry *e = gw_cache_put(&g->cache, qid, GW_K_QUEUE);
	if (e && gw_entry_decide(e, text, sku, part, off, false))
		gw_wake_list(&w, &e->waiters);
	pthread_mutex_unlock(&g->lock);
	gw_wakes_run(&w);
	free(text);
}

static void on_result(struct gw *g, const rd_kafka_message_t *m)
{
	json_t *o = object_of(m->payload, m->len);
	if (!o)
		return;
	char id[FS_UUID_LEN + 1];
	const char *type = str_member(o, "type"), *outcome = str_member(o, "outcome");
	const char *sku = str_member(o, "sku");
	int32_t part = (int32_t)json_integer_value(json_object_get(o, "partition"));
	int64_t off = json_integer_value(json_object_get(o, "offset"));
	if (strcmp(type, "admission") == 0 ||
	    (strcmp(type, "join") == 0 && strcmp(outcome, "admitted") == 0)) {
		on_admission(g, o, m, sku, part, off);
		json_decref(o);
		return;
	}
	if (!fs_uuid_canon(str_member(o, "intent_id"), id)) {
		json_decref(o); /* a sale record's result, or a reject without an id */
		return;
	}
	/* The record as published, with "duplicate" as it came: a repeat's answer carries the
	 * first decision, which is what a reader is given. */
	char *text = strndup(m->payload, m->len);
	if (!text) {
		json_decref(o);
		return;
	}
	atomic_fetch_add(&g->stats.results, 1);
	struct gw_wakes w;
	gw_wakes_init(&w);
	pthread_mutex_lock(&g->lock);
	struct gw_entry *e = NULL, *b = NULL;
	bool buy = strcmp(type, "buy") == 0;
	if (buy || strcmp(type, "invalid") == 0) {
		/* Every buy's result is kept (one asked for later is found here); a reject of an
		 * unreadable record only when this gateway waits for that id. */
		e = buy ? gw_cache_put(&g->cache, id, GW_K_BUY)
			: gw_cache_get(&g->cache, id, GW_K_BUY);
		/* A buy refused for its token did not use up its id (issue 47 item 1): a later
		 * decision of it, with a valid token, replaces this one. */
		const char *why = str_member(o, "reason");
		bool token_refused =
			buy && strcmp(outcome, "rejected") == 0 && strstr(why, "token");
		if (e && gw_entry_decide(e, text, sku, part, off, token_refused))
			gw_entry_event(e, "decided", part, off, text);
	} else if (strcmp(type, "confirm") == 0 || strcmp(type, "cancel") == 0) {
		bool unknown = strcmp(outcome, "unknown_intent") == 0;
		b = gw_cache_get(&g->cache, id, GW_K_BUY);
		/* One that took effect on another partition than the buy's known here is another
		 * buy's with the same id (issue 47, item 7): not this intent's answer. */
		bool other = b && b->state == GW_S_DECIDED && b->part != part && !unknown;
		e = other ? NULL
			  : gw_cache_put(&g->cache, id,
					 type[1] == 'o' ? GW_K_CONFIRM : GW_K_CANCEL);
		if (e)
			gw_entry_decide(e, text, sku, part, off, unknown);
		if (unknown || other)
			b = NULL;
		if (b)
			gw_entry_event(b, outcome, part, off, text);
	} else if (strcmp(type, "expire") == 0) {
		b = gw_cache_get(&g->cache, id, GW_K_BUY);
		if (b)
			gw_entry_event(b, "expired", part, off, text);
	} else if (strcmp(type, "cart") == 0) {
		/* Carts (issue 31): the cart's answer, then what became of it. */
		e = gw_cache_put(&g->cache, id, GW_K_CART);
		if (e && gw_entry_decide(e, text, "", part, off, false))
			gw_entry_event(e, "decided", part, off, text);
	} else if (strcmp(type, "cart_confirm") == 0 || strcmp(type, "cart_cancel") == 0) {
		bool unknown = strcmp(outcome, "unknown_intent") == 0;
		e = gw_cache_put(&g->cache, id,
				 strcmp(type, "cart_confirm") == 0 ? GW_K_CART_CONFIRM
								   : GW_K_CART_CANCEL);
		if (e)
			gw_entry_decide(e, text, "", part, off, unknown);
		b = unknown ? NULL : gw_cache_get(&g->cache, id, GW_K_CART);
		if (b)
			gw_entry_event(b, outcome, part, off, text);
	} else if (strcmp(type, "cart_expire") == 0) {
		b = gw_cache_get(&g->cache, id, GW_K_CART);
		if (b)
			gw_entry_event(b, "expired", part, off, text);
	}
	if (e)
		gw_wake_list(&w, &e->waiters);
	if (b)
		gw_wake_list(&w, &b->waiters);
	pthread_mutex_unlock(&g->lock);
	gw_wakes_run(&w);
	free(text);
	json_decref(o);
}

/* A SKU new to the table: the streams that wait for its first record (sku_events) follow it
 * from now on. Under the lock. */
static void take_pending(struct gw *g, struct gw_stock *s)
{
	for (struct gw_waiter *x = g->sku_pending.next, *n; x != &g->sku_pending; x = n) {
		n = x->next;
		struct gw_req *r = x->owner;
		if (strcmp(r->sku, s->sku) != 0)
			continue;
		gw_waiter_remove(x);
		r->stock = s;
		gw_waiter_add(&s->waiters, x, r);
	}
}

/* The SKU table is full (skus.max): said once a minute at most; /readyz says it meanwhile. */
static void warn_table_full(struct gw *g, const char *sku)
{
	static int64_t last_ms;
	int64_t now = gw_now_ms();
	if (last_ms && now - last_ms < 60000)
		return;
	last_ms = now;
	fs_warn("SKU table full (skus.max = %lld): the stock of %s is not kept",
		(long long)g->cfg.skus_max, sku);
}

/* A stock record: the SKU's latest state (the sold-out flag at the edge). */
static void on_stock(struct gw *g, const rd_kafka_message_t *m)
{
	json_t *o = object_of(m->payload, m->len);
	if (!o)
		return;
	const char *sku = str_member(o, "sku"), *status = str_member(o, "status");
	int32_t part = (int32_t)json_integer_value(json_object_get(o, "partition"));
	int64_t off = json_integer_value(json_object_get(o, "offset"));
	char *text = fs_sku_valid(sku) ? strndup(m->payload, m->len) : NULL;
	if (text) {
		atomic_fetch_add(&g->stats.stock_records, 1);
		struct gw_wakes w;
		gw_wakes_init(&w);
		pthread_mutex_lock(&g->lock);
		bool known = gw_stock_get(&g->cache, sku) != NULL;
		struct gw_stock *s = gw_stock_put(&g->cache, sku);
		if (s && !known)
			take_pending(g, s);
		if (s && gw_stock_update(s, text, status, part, off)) {
			s->room = json_object_get(o, "room") != NULL;
			gw_wake_list(&w, &s->waiters);
		} else if (!s) {
			warn_table_full(g, sku);
		}
		pthread_mutex_unlock(&g->lock);
		gw_wakes_run(&w);
		free(text);
	}
	json_decref(o);
}

/* The partition count of a topic, or -1 (logged once per cause by the caller). */
static int partitions_of(rd_kafka_t *rk, const char *topic)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, 5000);
	rd_kafka_topic_destroy(t);
	int n = -1;
	if (!e && md->topic_cnt == 1 && !md->topics[0].err)
		n = md->topics[0].partition_cnt;
	if (md)
		rd_kafka_metadata_destroy(md);
	return n;
}

struct follow {
	int stock_parts;
	bool eof[EOF_MAX];
	int eofs;
};

/* Assigns every results partition at its end (a result from before is in Postgres) and
 * every stock partition at its beginning (the compacted topic is the SKUs' state). */
static int assign(struct gw *g, struct follow *f)
{
	int nr = partitions_of(g->consumer, g->cfg.topic_results);
	if (nr < 1) /* no broker answers: not a second 5 s wait for the other topic */
		return -1;
	int ns = partitions_of(g->consumer, g->cfg.topic_stock);
	if (ns < 1 || ns > EOF_MAX)
		return -1;
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nr + ns);
	for (int i = 0; i < nr; i++) {
		int64_t lo = 0, hi = 0;
		if (rd_kafka_query_watermark_offsets(g->consumer, g->cfg.topic_results, i, &lo, &hi,
						     5000)) {
			rd_kafka_topic_partition_list_destroy(l);
			return -1;
		}
		rd_kafka_topic_partition_list_add(l, g->cfg.topic_results, i)->offset = hi;
	}
	for (int i = 0; i < ns; i++)
		rd_kafka_topic_partition_list_add(l, g->cfg.topic_stock, i)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_resp_err_t e = rd_kafka_assign(g->consumer, l);
	rd_kafka_topic_partition_list_destroy(l);
	if (e)
		return -1;
	memset(f, 0, sizeof *f);
	f->stock_parts = ns;
	atomic_store(&g->results_assigned, true);
	fs_info("following %s (%d partitions, from their ends) and %s (%d, from the beginning)",
		g->cfg.topic_results, nr, g->cfg.topic_stock, ns);
	return 0;
}

static void *consumer_main(void *arg)
{
	struct gw *g = arg;
	struct follow f;
	bool assigned = false, warned = false;
	while (!atomic_load(&g->stopping)) {
		if (!assigned) {
			assigned = assign(g, &f) == 0;
			if (!assigned) {
				if (!warned)
					fs_warn("topics %s and %s not readable yet (will retry)",
						g->cfg.topic_results, g->cfg.topic_stock);
				warned = true;
				usleep(500 * 1000);
				continue;
			}
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(g->consumer, 100);
		if (!m)
			continue;
		const char *topic = m->rkt ? rd_kafka_topic_name(m->rkt) : "";
		bool stock = strcmp(topic, g->cfg.topic_stock) == 0;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			if (stock && m->partition >= 0 && m->partition < f.stock_parts &&
			    !f.eof[m->partition]) {
				f.eof[m->partition] = true;
				if (++f.eofs == f.stock_parts) {
					atomic_store(&g->stock_caught_up, true);
					fs_info("stock topic read to its end: the edge flag is on");
				}
			}
		} else if (m->err) {
			fs_warn("consumer: %s", rd_kafka_message_errstr(m));
		} else if (stock) {
			on_stock(g, m);
		} else {
			on_result(g, m);
		}
		rd_kafka_message_destroy(m);
	}
	return NULL;
}

int gw_kafka_start(struct gw *g, char *err, size_t err_len)
{
	char timeout[32];
	snprintf(timeout, sizeof timeout, "%" PRId64, g->cfg.publish_timeout_ms);
	/* clang-format off */
	const char *const pdefaults[] = {
	    /* acks=all comes with idempotence: the delivery report means the record is on
	     * the log, which is what a 202 promises. */
	    "enable.idempotence", "true",
	    "message.timeout.ms", timeout,
	    "linger.ms", "2",
	    "queue.buffering.max.messages", "1000000",
	    NULL,
	};
	const char *const cdefaults[] = {
	    "enable.auto.commit", "false",
	    "enable.partition.eof", "true",
	    "fetch.wait.max.ms", "10",
	    NULL,
	};
	/* clang-format on */
	rd_kafka_conf_t *pc = fs_kafka_conf(&g->cfg, RD_KAFKA_PRODUCER, pdefaults, err, err_len);
	if (!pc)
		return -EINVAL;
	rd_kafka_conf_set_dr_msg_cb(pc, on_delivery);
	rd_kafka_conf_set_error_cb(pc, on_error);
	rd_kafka_conf_set_opaque(pc, g);
	g->producer = fs_kafka_new(RD_KAFKA_PRODUCER, pc, err, err_len);
	if (!g->producer)
		return -EINVAL;
	atomic_fetch_add(&g->kafka_clients, 1);

	rd_kafka_conf_t *cc = fs_kafka_conf(&g->cfg, RD_KAFKA_CONSUMER, cdefaults, err, err_len);
	if (!cc)
		return -EINVAL;
	/* A group id is required by the consumer; assign() joins no group and commits
	 * nothing. */
	uuid_t u;
	char uid[37], group[64];
	uuid_generate_random(u);
	uuid_unparse_lower(u, uid);
	snprintf(group, sizeof group, "flashsale-gateway-%s", uid);
	if (rd_kafka_conf_set(cc, "group.id", group, err, err_len) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(cc);
		return -EINVAL;
	}
	g->consumer = fs_kafka_new(RD_KAFKA_CONSUMER, cc, err, err_len);
	if (!g->consumer)
		return -EINVAL;
	atomic_fetch_add(&g->kafka_clients, 1);
	rd_kafka_poll_set_consumer(g->consumer);
	if (pthread_create(&g->producer_thread, NULL, producer_main, g) != 0 ||
	    pthread_create(&g->consumer_thread, NULL, consumer_main, g) != 0) {
		snprintf(err, err_len, "cannot start threads");
		return -EIO;
	}
	return 0;
}

void gw_kafka_stop(struct gw *g)
{
	if (g->producer) {
		rd_kafka_resp_err_t e = rd_kafka_flush(g->producer, (int)g->cfg.flush_timeout_ms);
		if (e)
			fs_warn("flush: %s (%d records undelivered)", rd_kafka_err2str(e),
				rd_kafka_outq_len(g->producer));
	}
	atomic_store(&g->stopping, true);
	if (g->producer_thread)
		pthread_join(g->producer_thread, NULL);
	if (g->consumer_thread)
		pthread_join(g->consumer_thread, NULL);
	if (g->consumer) {
		rd_kafka_consumer_close(g->consumer);
		rd_kafka_destroy(g->consumer);
	}
	if (g->producer)
		rd_kafka_destroy(g->producer);
	g->producer = g->consumer = NULL;
}
