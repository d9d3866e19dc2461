/* gateway.h: the gateway's shared state, between its HTTP side (http.c: libmicrohttpd's
 * threads), its Kafka side (kafka.c: the producer's delivery reports, the one consumer of the
 * results and stock topics) and its Postgres side (lookup.c: the decisions asked for that are
 * no longer, or not yet, in memory). One lock guards the cache and the lists of waiting
 * requests; a request waits suspended (libmicrohttpd's suspend/resume), costing no thread.
 * Whoever changes what a request waits for collects it under the lock and resumes it after
 * (gw_wake_*), so that no thread calls into libmicrohttpd holding the lock while another
 * may be calling out of it. */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include "core/buf.h"
#include "gateway/api.h"
#include "gateway/auth.h"
#include "gateway/cache.h"
#include "gateway/clients.h"
#include "gateway/payment.h"
#include "core/token.h"
#include "io/config.h"
#include "io/metrics.h"
#include "io/prom.h"

#include <librdkafka/rdkafka.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum { GW_LOOKUP_QUEUE_MAX = 10000 };
/* How long /readyz says intent_cache_full after a request was refused for it (issue 48). */
enum { GW_FULL_HOLD_MS = 10000 };

enum gw_phase {
	GW_PH_NEW = 0,
	GW_PH_PUBLISHING, /* suspended until its delivery report */
	GW_PH_LOOKUP,	  /* suspended until Postgres answered */
	GW_PH_WAITING,	  /* a long-poll, suspended until its entry changes or its time is up */
	GW_PH_STREAM,	  /* an event stream */
	GW_PH_DONE,
};

/* One connection (libmicrohttpd's socket context), on the gateway's list of them while open:
 * the timer closes it when its request is not in by due_ms (issue 48, item 5). */
struct gw_conn {
	struct gw_conn *prev, *next; /* under g->conns_mu */
	int fd;
	atomic_llong due_ms; /* 0: a request of it is in (being answered), no deadline */
};

/* One HTTP request (libmicrohttpd's per-request pointer, made when its request line is in). */
struct gw_req {
	struct gw *g;
	struct MHD_Connection *conn;
	/* The request target as sent (before libmicrohttpd's percent-decoding), until routed. */
	char *raw;
	bool started;	/* the access handler has seen it */
	bool complete;	/* its headers and body are in */
	bool peer_gone; /* waiting, suspended, and its client closed the connection */
	int fd;
	struct gw_conn *gconn;
	uint8_t ckey[GW_CLIENT_KEY];
	struct gw_client *client; /* holding one of its client's wait slots */
	enum gw_route route;
	struct gw_path path;
	const char *allow;
	char *body;
	size_t body_len;
	bool too_large;
	enum gw_phase phase;
	bool suspended;

	/* What it is about. */
	char id[FS_UUID_LEN + 1];
	enum gw_kind kind;
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer[FS_BUYER_LEN_MAX + 1]; /* the waiting room's routes */
	bool room_named; /* its SKU's stock record has a room: the lookup thread caches it */
	/* GW_QUEUE: the lookup thread's answer (malloc'd JSON) and its status */
	char *answer;
	unsigned answer_status;
	struct gw_entry *entry; /* pinned while set */
	struct gw_stock *stock;

	/* Publishing: the delivery report's outcome. */
	bool pub_done;
	int pub_err; /* rd_kafka_resp_err_t */
	int32_t pub_part;
	int64_t pub_off;

	/* Long-poll and streams. */
	int64_t wait_ms;
	int64_t deadline_ms;
	bool timed_out;
	/* A long-poll on a queued or provisional entry: when it asks Postgres again (issue 47,
	 * item 10; 0: never), and that the timer woke it for that. */
	int64_t recheck_ms;
	bool recheck;
	struct gw_waiter w;  /* on the entry's or SKU's list */
	struct gw_waiter tw; /* on the gateway's list of polls or streams */

	/* The proven buyer (issue 48, item 2): the token's sub, when authed; the buyer a buy or
	 * cart POST names (its entry's owner); the owner of the intent or cart it reads asked of
	 * Postgres once, and found to be sub; a queue read of another buyer (answered as one
	 * who never joined). */
	char sub[FS_BUYER_LEN_MAX + 1];
	bool authed;
	char owner[FS_BUYER_LEN_MAX + 1];
	bool owner_asked, owner_ok;
	bool foreign;

	/* Postgres lookup. */
	struct gw_req *lnext;
	enum gw_kind lookup_kind;
	int lookup_rc;	/* 0 found, -ENOENT none, -EIO unavailable */
	bool in_lookup; /* queued for, or at, the lookup thread */
	/* The connection ended while in_lookup (a queue stream's refresh): the lookup thread frees
	 * the request when done with it. */
	bool orphan;
	/* A buy's POST asked Postgres for the fingerprint of a decision learned through another
	 * door (issue 47, item 6). */
	bool fp_asked;

	/* The metrics: when the request arrived (gw_now_us). */
	int64_t start_us;

	/* Streams: where the client is. */
	int sent_ev;
	int32_t last_part; /* Last-Event-ID, -1: none */
	int64_t last_off;
	uint64_t sent_version;
	bool hb_due;
	int64_t last_write_ms;
	struct fs_buf out;
	size_t out_pos;
	/* The queue's stream (GW_QUEUE_EVENTS): when its place was last asked for, and what the
	 * last `waiting` event said (malloc'd; its JSON without as_of). */
	int64_t refresh_ms;
	char *sent_place;
};

struct gw_stats {
	atomic_llong requests, published, publish_failed, edge_answers, results, stock_records,
		lookups, overloaded;
	/* edge_answers by outcome, each its own counter (a difference of two could go down). */
	atomic_llong edge_sold_out, edge_closed;
	atomic_llong edge_token; /* buys of a sale behind a waiting room refused at the edge */
	/* Issue 48, item 5: requests refused for their framing or path, connections cut at the
	 * request deadline, requests over a client's rate or wait cap, and waiting requests
	 * ended because their client closed. */
	atomic_llong refused_framing, refused_path, refused_deadline, refused_rate, refused_waits,
		peers_gone;
	/* confirms refused, by enum gw_pay_verdict (issue 48, item 3; [GW_PAY_OK] unused) */
	atomic_llong pay_refused[GW_PAY_VERDICTS];
	/* Issue 48, item 5: lookups of ids never seen here, taken and refused by the bucket;
	 * reads of waiting rooms from Postgres, of rooms the stock topic named and of others. */
	atomic_llong unknown_lookups, unknown_refused, room_reads_named, room_reads_other;
	/* Buyer routes refused (issue 48, item 2): 401 by verdict; [GW_JWT_OK]: 403 other_buyer. */
	atomic_llong auth_refused[GW_JWT_VERDICTS];
};

/* The status codes the requests counter names; any other is counted as "other". */
enum { GW_CODES = 16 };

/* What the metrics endpoint serves besides gw_stats (metrics.c): requests by route and status,
 * and their durations. Guarded by its own mutex (taken after g->lock, never before). */
struct gw_requests {
	pthread_mutex_t mu;
	int64_t count[GW_L_COUNT][GW_CODES];
	struct fs_prom_hist seconds[GW_L_COUNT];
};

struct gw {
	struct fs_config cfg;
	pthread_mutex_t lock;
	struct gw_cache cache;
	struct gw_waiter polls;	  /* long-polls waiting (their tw) */
	struct gw_waiter streams; /* event streams (their tw) */
	/* SKU streams of SKUs the stock topic has not named (their w): not in the SKU table
	 * (issue 48, item 5); a SKU's first stock record moves its own to it. */
	struct gw_waiter sku_pending;
	/* Lookups of ids never seen here (lookups.unknown.rate). */
	struct gw_bucket unknown;
	/* cache.refused when table_full() last saw it change, and when (intent_cache_full). */
	int64_t refused_seen, refused_ms;

	struct MHD_Daemon *daemon;
	int port; /* the bound port */
	atomic_long connections;
	atomic_bool stopping;

	/* Kafka (kafka.c). */
	rd_kafka_t *producer, *consumer;
	pthread_t producer_thread, consumer_thread;
	atomic_bool producer_up;      /* the last metadata probe reached a broker */
	atomic_bool results_assigned; /* the consumer follows every results partition */
	atomic_bool stock_caught_up;  /* it has read the stock topic to its end once */
	atomic_int kafka_clients;     /* librdkafka handles made: one producer, one consumer */

	/* Postgres (lookup.c). */
	pthread_t lookup_thread;
	pthread_cond_t lookup_cv;
	struct gw_req *lookup_head, *lookup_tail;
	size_t lookup_len; /* bounded: a request past GW_LOOKUP_QUEUE_MAX is answered 503 */

	pthread_t timer_thread;
	struct gw_stats stats;

	/* Open connections (their deadlines), and the per-address bounds (under g->lock; on
	 * when per_client). */
	pthread_mutex_t conns_mu;
	struct gw_conn conns;
	struct gw_clients clients;
	bool per_client;

	/* The metrics endpoint (metrics.listen; metrics.c). */
	struct gw_requests reqs;
	struct fs_metrics *metrics;
	int64_t start_ms; /* the wall clock at start */

	/* The waiting rooms' key ring (admission.keys, issue 33), when has_keys: a buy's token is
	 * checked at the edge, and an admitted buyer's GET .../queue/{buyer} carries it. */
	struct fs_keyring keys;
	bool has_keys;

	/* The payment provider's key ring (payment.secret.file, issue 48 item 3), when
	 * has_pay_keys: a confirm is accepted only when signed with one of its keys; without
	 * it, none is. */
	struct fs_keyring pay_keys;
	bool has_pay_keys;
	/* The sale page with payment.checkout.url written into it (malloc'd; NULL: the
	 * embedded page as it is). */
	char *page;
	size_t page_len;
	/* The buyers' token keys (auth.jwt.*, issue 48 item 2); auth_off: auth.mode = off. */
	struct gw_jwt_keys jwt;
	bool auth_off;
};

/* Requests to resume, collected under the lock and resumed after it. */
struct gw_wakes {
	struct MHD_Connection *small[32];
	struct MHD_Connection **v;
	size_t n, cap;
};
void gw_wakes_init(struct gw_wakes *w);
/* Collects r if it is suspended (and marks it not suspended). Under the lock. */
void gw_wake_req(struct gw_wakes *w, struct gw_req *r);
/* Collects every request on a waiter list. Under the lock. */
void gw_wake_list(struct gw_wakes *w, struct gw_waiter *head);
/* Resumes what was collected. Without the lock. */
void gw_wakes_run(struct gw_wakes *w);
/* Suspends r (under the lock, on libmicrohttpd's thread). */
void gw_park(struct gw_req *r);

int64_t gw_now_ms(void);
int64_t gw_now_us(void);

/* kafka.c */
int gw_kafka_start(struct gw *g, char *err, size_t err_len);
void gw_kafka_stop(struct gw *g);
/* True once the broker refused the gateway's credentials (it then stops, exit 1). */
bool gw_kafka_auth_failed(void);
/* Publishes a record for r (delivery report resumes r): 0, or -EIO (r is not suspended).
 * Under the lock, on libmicrohttpd's thread; r is parked on success. */
int gw_publish(struct gw *g, struct gw_req *r, const char *key, const struct fs_buf *payload);

/* lookup.c */
int gw_lookup_start(struct gw *g);
void gw_lookup_stop(struct gw *g);
/* Queues r for a Postgres lookup of (r->id, kind) into r->entry and parks it. Under the
 * lock. GW_K_QUEUE: where r->buyer stands in r->sku's waiting room, into r->answer. */
void gw_lookup(struct gw *g, struct gw_req *r, enum gw_kind kind);
/* Queues a queue stream (GW_QUEUE_EVENTS, streaming) for its place again, without parking it:
 * the lookup thread wakes it with the answer in r->answer. Under the lock; false when the
 * lookup queue is too long for a refresh (it is left to the requests that wait). */
bool gw_lookup_refresh(struct gw *g, struct gw_req *r);
/* How stale a waiting room the lookup thread reads may be: rooms are read again at most this
 * often (each read is every row of the room). */
enum { GW_ROOM_REFRESH_MS = 500, GW_ROOMS_CACHED = 16 };

/* metrics.c: the endpoint on metrics.listen (off when empty). */
int gw_metrics_start(struct gw *g, char *err, size_t err_len);
void gw_metrics_stop(struct gw *g);
/* A request of route was answered with status (its headers queued now). */
void gw_metrics_answered(struct gw *g, enum gw_route route, unsigned status, int64_t start_us);

/* edge.c: the bounds at the door (issue 48, item 5). */
/* Sets up the open connections' list and the per-address bounds (from the configuration):
 * 0 or -ENOMEM. */
int gw_edge_init(struct gw *g);
void gw_edge_free(struct gw *g);
/* libmicrohttpd's URI log callback: the request, made with its target as sent. */
void *gw_edge_uri(void *cls, const char *uri, struct MHD_Connection *conn);
/* libmicrohttpd's connection notifier: counts the connections, keeps the list of them. */
void gw_edge_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
			enum MHD_ConnectionNotificationCode code);
/* Why r's framing headers are refused (static text), or NULL (gw_framing_check). */
const char *gw_edge_framing(struct gw_req *r);
/* r's headers and body are in: its connection has no deadline until it is answered. */
void gw_edge_request_in(struct gw_req *r);
/* r ended (its answer sent, or its connection closed): its wait slot back, and its
 * connection's next request due within the deadline. Under the lock. */
void gw_edge_request_done(struct gw *g, struct gw_req *r);
/* The client's rate: 0 to go on, else the seconds for Retry-After. Under the lock. */
int64_t gw_edge_rate(struct gw *g, struct gw_req *r);
/* A long-poll or stream of r's client begins: false when its client is at the cap. Under the
 * lock. */
bool gw_edge_wait(struct gw *g, struct gw_req *r);
/* The timer's part, every GW_EDGE_SWEEP_MS: connections past their deadline are shut down
 * (not under the lock), suspended waiting requests whose client left are collected in w to
 * end (under the lock), and clients that hold nothing forgotten (under the lock). */
enum { GW_EDGE_SWEEP_MS = 500 };
void gw_edge_deadlines(struct gw *g, int64_t now_ms);
void gw_edge_gone(struct gw *g, struct gw_wakes *w, int64_t now_ms);
/* authfile.c: reads the buyers' token keys, or checks that auth.mode = off listens on loopback
 * only (and warns). 0, or -EINVAL with err. */
int gw_auth_start(struct gw *g, char *err, size_t err_len);
bool gw_listen_loopback(const char *listen);

/* http.c */
/* Frees a request (its body, buffers, answers). Not under the lock. */
void gw_req_free(struct gw_req *r);
/* What /readyz says: the producer reaches a broker, the results are followed, the stock topic
 * was read to its end, no table or queue is full (gw_full), and the gateway is not stopping.
 * Under the lock. */
bool gw_ready(struct gw *g);
/* The sale page with url (payment.checkout.url) in its data-checkout attribute, into g->page.
 * 0, or -ENOMEM / -EINVAL (the page has no such attribute). */
int gw_page_checkout(struct gw *g, const char *url);
/* Which table or queue is full ("sku_table_full", "intent_cache_full", "lookup_queue_full",
 * "connections_near_cap"), or NULL: /readyz answers 503 then. Under the lock. */
const char *gw_full(struct gw *g);
int gw_http_start(struct gw *g, char *err, size_t err_len);
void gw_http_stop(struct gw *g);
void *gw_timer_main(void *arg);

#endif
