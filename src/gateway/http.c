/* http.c: the gateway's HTTP side on libmicrohttpd (see gateway.h; the API is
 * docs/reference/http.md). Every request is answered on the access handler's second or later
 * call (answering on the first makes libmicrohttpd close the connection: PITFALLS); one that
 * must wait (for its delivery report, for Postgres, for its result) is suspended and resumed
 * by whoever has what it waits for, and then answered from the state it finds. */
#include "gateway/gateway.h"

#include "io/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

enum { OVERLOAD_RESERVE = 64, STREAM_BLOCK = 4096, TIMER_MS = 100 };

int64_t gw_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t gw_now_ms(void)
{
	return gw_now_us() / 1000;
}

/* ---- suspending and resuming ---------------------------------------------------------------- */

void gw_wakes_init(struct gw_wakes *w)
{
	w->v = w->small;
	w->n = 0;
	w->cap = sizeof w->small / sizeof w->small[0];
}

void gw_wake_req(struct gw_wakes *w, struct gw_req *r)
{
	if (!r->suspended)
		return;
	if (w->n == w->cap) {
		size_t cap = w->cap * 2;
		struct MHD_Connection **v = malloc(cap * sizeof *v);
		if (!v) /* no memory: resume it now (rare; holding the lock is then allowed) */
		{
			r->suspended = false;
			MHD_resume_connection(r->conn);
			return;
		}
		memcpy(v, w->v, w->n * sizeof *v);
		if (w->v != w->small)
			free(w->v);
		w->v = v;
		w->cap = cap;
	}
	r->suspended = false;
	w->v[w->n++] = r->conn;
}

void gw_wake_list(struct gw_wakes *w, struct gw_waiter *head)
{
	for (struct gw_waiter *x = head->next; x != head; x = x->next)
		gw_wake_req(w, x->owner);
}

void gw_wakes_run(struct gw_wakes *w)
{
	for (size_t i = 0; i < w->n; i++)
		MHD_resume_connection(w->v[i]);
	if (w->v != w->small)
		free(w->v);
	gw_wakes_init(w);
}

void gw_park(struct gw_req *r)
{
	r->suspended = true;
	MHD_suspend_connection(r->conn);
}

/* ---- answers ----------------------------------------------------------------------------------
 */

static enum MHD_Result send_text(struct gw_req *r, unsigned status, const char *type,
				 const char *body, const char *h1, const char *v1, const char *h2,
				 const char *v2)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (h1)
		MHD_add_response_header(resp, h1, v1);
	if (h2)
		MHD_add_response_header(resp, h2, v2);
	enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	r->phase = GW_PH_DONE;
	gw_metrics_answered(r->g, r->route, status, r->start_us);
	return rc;
}

static enum MHD_Result send_json(struct gw_req *r, unsigned status, json_t *o, const char *h1,
				 const char *v1, const char *h2, const char *v2)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s)
		return MHD_NO;
	enum MHD_Result rc = send_text(r, status, "application/json", s, h1, v1, h2, v2);
	free(s);
	return rc;
}

/* {"error": code, "message": text}: code is stable (docs/reference/http.md). */
static enum MHD_Result send_error(struct gw_req *r, unsigned status, const char *code,
				  const char *message, const char *h1, const char *v1)
{
	return send_json(
		r, status,
		json_pack("{s:s, s:s}", "error", code, "message", message ? message : code), h1, v1,
		NULL, NULL);
}

static enum MHD_Result send_unavailable(struct gw_req *r, const char *code, const char *message)
{
	return send_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, code, message, "Retry-After", "1");
}

/* An intent id, cart or waiting room this gateway has never seen costs Postgres a read: at
 * most lookups.unknown.rate a second (issue 48, item 5), so that random ids cannot drive the
 * worker's database. True: r may ask; false: r was answered 503 busy with Retry-After (an id
 * published or decided here, or a room the stock topic named, never comes here). Under the
 * lock. */
static bool unknown_lookup(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	if (gw_bucket_take(&g->unknown, gw_now_ms())) {
		atomic_fetch_add(&g->stats.unknown_lookups, 1);
		return true;
	}
	atomic_fetch_add(&g->stats.unknown_refused, 1);
	char retry[24];
	snprintf(retry, sizeof retry, "%lld", (long long)gw_bucket_retry_s(&g->unknown));
	*rc = send_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "busy",
			 "too many lookups of ids this gateway has not seen: retry later",
			 "Retry-After", retry);
	return false;
}

/* Where an entry of the request's kind is read: /v1/intents/{id}... or /v1/carts/{id}... */
static void location_of(const struct gw_req *r, char *out, size_t n)
{
	static const char *const tails[] = {"", "/confirm", "/cancel", "", "/confirm", "/cancel"};
	snprintf(out, n, "%s%s%s", r->kind >= GW_K_CART ? "/v1/carts/" : "/v1/intents/", r->id,
		 tails[r->kind]);
}

/* The answer for an entry: its decision (200), or queued (202) while it is on the log and
 * undecided, or unknown (404). */
static enum MHD_Result send_entry(struct gw_req *r, struct gw_entry *e)
{
	char location[128];
	location_of(r, location, sizeof location);
	if (e && e->state == GW_S_DECIDED) {
		json_error_t err;
		json_t *o = json_loads(e->decision, 0, &err);
		if (!json_is_object(o)) {
			json_decref(o);
			return send_error(r, 500, "internal", "stored result unreadable", NULL,
					  NULL);
		}
		json_object_del(o, "duplicate");
		json_object_set_new(o, "status", json_string("decided"));
		if ((e->kind == GW_K_BUY || e->kind == GW_K_CART) && e->n_ev > 1)
			json_object_set_new(o, "hold", json_string(e->ev[e->n_ev - 1].name));
		return send_json(r, MHD_HTTP_OK, o, "Content-Location", location, NULL, NULL);
	}
	/* queued: on the log (its delivery report came); publishing: its POST is still waiting
	 * for that report, and the buy may yet not be on the log (a 503 to that POST). */
	if (e && (e->state == GW_S_QUEUED || e->state == GW_S_PUBLISHING))
		return send_json(r, MHD_HTTP_ACCEPTED,
				 json_pack("{s:s, s:s}", "intent_id", r->id, "status",
					   e->state == GW_S_QUEUED ? "queued" : "publishing"),
				 "Location", location, "Retry-After", "1");
	return send_error(r, MHD_HTTP_NOT_FOUND, "unknown_intent",
			  "no record of this intent here or in Postgres (not decided, and not "
			  "published through this gateway since it started)",
			  NULL, NULL);
}

/* ---- pinning ----------------------------------------------------------------------------------
 */

static void pin(struct gw_req *r, struct gw_entry *e)
{
	if (r->entry == e)
		return;
	if (r->entry)
		r->entry->pins--;
	r->entry = e;
	if (e)
		e->pins++;
}

/* ---- the requests ---------------------------------------------------------------------------- */

static const char *header(struct gw_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static bool overloaded(struct gw *g)
{
	return atomic_load(&g->connections) > g->cfg.http_connections_max;
}

/* r waits (a long-poll) on e's changes until its deadline (the timer's). Under the lock. */
static enum MHD_Result park_on(struct gw *g, struct gw_req *r, struct gw_entry *e)
{
	pin(r, e);
	if (r->deadline_ms == 0)
		r->deadline_ms = gw_now_ms() + r->wait_ms;
	/* An intent's long-poll asks Postgres when its entry stays queued (a result the consumer
	 * missed: issue 47, item 10). */
	bool intent = r->route != GW_QUEUE;
	r->recheck_ms = intent && (e->state == GW_S_QUEUED || e->provisional)
				? e->asked_ms + GW_RECHECK_MS
				: 0;
	gw_waiter_add(&e->waiters, &r->w, r);
	gw_waiter_add(&g->polls, &r->tw, r);
	r->phase = GW_PH_WAITING;
	gw_park(r);
	return MHD_YES;
}

/* Waits (long-poll) or answers: with time left, r waits on e. Under the lock. */
static enum MHD_Result wait_or_answer(struct gw *g, struct gw_req *r, struct gw_entry *e)
{
	gw_waiter_remove(&r->w);
	gw_waiter_remove(&r->tw);
	bool decided = e && e->state == GW_S_DECIDED;
	if (decided || r->wait_ms <= 0 || r->timed_out || atomic_load(&g->stopping))
		return send_entry(r, e);
	if (!e) {
		e = gw_cache_put(&g->cache, r->id, r->kind);
		if (!e)
			return send_unavailable(r, "busy", "too many intents in memory");
		e->looked_up = true;
	}
	return park_on(g, r, e);
}

/* A confirm's or cancel's entry about to be looked up takes its buy's SKU when the buy is
 * decided here: Postgres is asked for that SKU's (issue 47, item 7: the same id on a buy of a
 * SKU of another partition is another buyer's). */
static void followup_sku(struct gw *g, struct gw_entry *e)
{
	if ((e->kind != GW_K_CONFIRM && e->kind != GW_K_CANCEL) || e->sku[0])
		return;
	const struct gw_entry *b = gw_cache_get(&g->cache, e->id, GW_K_BUY);
	if (b && b->state == GW_S_DECIDED)
		snprintf(e->sku, sizeof e->sku, "%s", b->sku);
}

/* GET /v1/intents/{id}[/confirm|/cancel]: memory, then Postgres, then a wait if asked. */
static enum MHD_Result get_intent(struct gw *g, struct gw_req *r)
{
	struct gw_entry *e = r->entry ? r->entry : gw_cache_get(&g->cache, r->id, r->kind);
	bool recheck = r->recheck;
	r->recheck = false;
	if ((r->phase == GW_PH_NEW || recheck) && e && gw_entry_stale(e, gw_now_ms()) &&
	    g->lookup_len < GW_LOOKUP_QUEUE_MAX / 2) {
		/* Queued (or answered unknown_intent) for a while: Postgres may have what the
		 * results topic did not bring here (issue 47, items 2 and 10). */
		gw_waiter_remove(&r->w);
		gw_waiter_remove(&r->tw);
		pin(r, e);
		gw_lookup(g, r, r->kind);
		return MHD_YES;
	}
	if (r->phase == GW_PH_NEW) {
		if (!e || (e->state == GW_S_STUB && !e->looked_up)) {
			if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX)
				return send_unavailable(r, "busy", "too many lookups waiting");
			enum MHD_Result rc;
			if (!e && !unknown_lookup(g, r, &rc))
				return rc;
			e = gw_cache_put(&g->cache, r->id, r->kind);
			if (!e)
				return send_unavailable(r, "busy", "too many intents in memory");
			followup_sku(g, e);
			pin(r, e);
			gw_lookup(g, r, r->kind);
			return MHD_YES;
		}
	} else if (r->phase == GW_PH_LOOKUP && r->lookup_rc == -EIO && e->state != GW_S_DECIDED &&
		   e->state != GW_S_QUEUED) {
		return send_unavailable(r, "store_unavailable",
					"the result is not in memory and Postgres did not answer");
	}
	return wait_or_answer(g, r, e);
}

static enum MHD_Result start_stream(struct gw *g, struct gw_req *r);

/* GET /v1/intents/{id}/events and /v1/carts/{id}/events: the stream starts once memory or
 * Postgres was asked. */
static enum MHD_Result intent_events(struct gw *g, struct gw_req *r)
{
	enum gw_kind kind = r->route == GW_CART_EVENTS ? GW_K_CART : GW_K_BUY;
	struct gw_entry *e = r->entry ? r->entry : gw_cache_get(&g->cache, r->id, kind);
	if (r->phase == GW_PH_NEW && (!e || (e->state == GW_S_STUB && !e->looked_up))) {
		if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX)
			return send_unavailable(r, "busy", "too many lookups waiting");
		enum MHD_Result rc;
		if (!e && !unknown_lookup(g, r, &rc))
			return rc;
		e = gw_cache_put(&g->cache, r->id, kind);
		if (!e)
			return send_unavailable(r, "busy", "too many intents in memory");
		pin(r, e);
		gw_lookup(g, r, kind);
		return MHD_YES;
	}
	if (!e) {
		e = gw_cache_put(&g->cache, r->id, kind);
		if (!e)
			return send_unavailable(r, "busy", "too many intents in memory");
	}
	pin(r, e);
	gw_waiter_add(&e->waiters, &r->w, r);
	return start_stream(g, r);
}

/* (buyers are proven: see below) */
static bool buyer_is_sub(const struct gw_req *r, const char *buyer);
static enum MHD_Result send_other_buyer(struct gw_req *r);
static void body_buyer(const struct gw_req *r, char out[FS_BUYER_LEN_MAX + 1]);
static enum MHD_Result foreign_queue(struct gw *g, struct gw_req *r);
static enum MHD_Result queue_lookup(struct gw *g, struct gw_req *r);

/* A follow-up (confirm or cancel, of a buy or a cart) is published again when retried while
 * its answer is unknown_intent, which does not use up its id at the worker, or with another
 * SKU than the one queued (the buy's partition is the SKU's: the first may have gone to the
 * wrong one). Issue 47, item 2. So is a buy refused for its token (item 1). */
static bool publish_again(const struct gw_req *r, const struct gw_entry *e)
{
	/* A buy refused for its token did not use up its id either (issue 47 item 1): its retry
	 * (with a valid token, say) is published again and waits for its own decision. */
	if (r->kind == GW_K_BUY)
		return e->state == GW_S_DECIDED && e->provisional;
	bool followup = r->kind == GW_K_CONFIRM || r->kind == GW_K_CANCEL ||
			r->kind == GW_K_CART_CONFIRM || r->kind == GW_K_CART_CANCEL;
	if (!followup)
		return false;
	if (e->state == GW_S_DECIDED)
		return e->provisional;
	return e->state == GW_S_QUEUED && r->kind <= GW_K_CANCEL && strcmp(e->sku, r->sku) != 0;
}

/* ---- buyers are proven (issue 48, item 2) ---------------------------------------------------- */

/* Whether a buyer id a request names is its proven buyer's (always, with auth.mode = off). */
static bool buyer_is_sub(const struct gw_req *r, const char *buyer)
{
	return r->g->auth_off || strcmp(buyer, r->sub) == 0;
}

static enum MHD_Result send_other_buyer(struct gw_req *r)
{
	atomic_fetch_add(&r->g->stats.auth_refused[GW_JWT_OK], 1);
	return send_error(r, MHD_HTTP_FORBIDDEN, "other_buyer",
			  "buyer_id is not the buyer the bearer token proves (its sub)", NULL,
			  NULL);
}

/* A cart body's buyer_id (already parsed once by gw_parse_cart) into out; "" if none. */
static void body_buyer(const struct gw_req *r, char out[FS_BUYER_LEN_MAX + 1])
{
	json_t *o = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
	const char *b = json_string_value(json_object_get(o, "buyer_id"));
	snprintf(out, FS_BUYER_LEN_MAX + 1, "%s", b ? b : "");
	json_decref(o);
}

/* The routes that act for a buyer, or read what is a buyer's: a proven buyer only. The
 * payment provider's confirms, the admin routes, the SKU's reads and the page are not. */
static bool buyer_route(enum gw_route rt)
{
	switch (rt) {
	case GW_BUY:
	case GW_CART_POST:
	case GW_QUEUE_POST:
	case GW_QUEUE:
	case GW_QUEUE_EVENTS:
	case GW_INTENT:
	case GW_INTENT_EVENTS:
	case GW_CONFIRM_GET:
	case GW_CANCEL_GET:
	case GW_CANCEL:
	case GW_CART:
	case GW_CART_EVENTS:
	case GW_CART_CONFIRM_GET:
	case GW_CART_CANCEL_GET:
	case GW_CART_CANCEL:
		return true;
	default:
		return false;
	}
}

/* The intent's or cart's routes whose entry must be the buyer's own. */
static bool owned_route(enum gw_route rt, enum gw_kind *kind)
{
	bool cart = rt == GW_CART || rt == GW_CART_EVENTS || rt == GW_CART_CONFIRM_GET ||
		    rt == GW_CART_CANCEL_GET || rt == GW_CART_CANCEL;
	*kind = cart ? GW_K_CART : GW_K_BUY;
	return cart || rt == GW_INTENT || rt == GW_INTENT_EVENTS || rt == GW_CONFIRM_GET ||
	       rt == GW_CANCEL_GET || rt == GW_CANCEL;
}

/* 401 unless the request carries a verified token (RFC 6750, 3: no credential, a bare
 * challenge; a bad one, error="invalid_token"). True to go on, with r->sub set. */
static bool proven(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	if (g->auth_off || !buyer_route(r->route) || r->authed)
		return true;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	enum gw_jwt_verdict v =
		gw_jwt_verify(&g->jwt, header(r, "Authorization"), (int64_t)ts.tv_sec, r->sub);
	if (v == GW_JWT_OK) {
		r->authed = true;
		/* A queue read of another buyer: answered as a buyer who never joined. */
		r->foreign = (r->route == GW_QUEUE || r->route == GW_QUEUE_EVENTS) &&
			     strcmp(r->buyer, r->sub) != 0;
		return true;
	}
	atomic_fetch_add(&g->stats.auth_refused[v], 1);
	char challenge[160];
	if (v == GW_JWT_MISSING)
		snprintf(challenge, sizeof challenge, "Bearer");
	else
		snprintf(challenge, sizeof challenge,
			 "Bearer error=\"invalid_token\", error_description=\"%s\"",
			 gw_jwt_reason(v));
	*rc = send_error(r, MHD_HTTP_UNAUTHORIZED,
			 v == GW_JWT_MISSING ? "unauthorized" : gw_jwt_reason(v),
			 "a buyer's bearer token (a JWT whose sub is the buyer id) is required",
			 "WWW-Authenticate", challenge);
	return false;
}

/* Whether the intent or cart r names is the proven buyer's: its entry's owner, else asked of
 * Postgres once (a decision learned through another door). Another buyer's, or one whose
 * buyer is not known, is answered as a missing one (the same 404: nothing leaks). True to go
 * on; false when r was answered or parked (*rc). */
static bool own(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	enum gw_kind kind;
	*rc = MHD_YES;
	if (g->auth_off || r->owner_ok || !owned_route(r->route, &kind))
		return true;
	struct gw_entry *e = gw_cache_get(&g->cache, r->id, kind);
	if ((!e || !e->owner[0]) && !r->owner_asked) {
		if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX) {
			*rc = send_unavailable(r, "busy", "too many lookups waiting");
			return false;
		}
		/* An id never seen here costs Postgres a read: at the bounded rate (item 5). */
		if (!e && !unknown_lookup(g, r, rc))
			return false;
		e = gw_cache_put(&g->cache, r->id, kind);
		if (!e) {
			*rc = send_unavailable(r, "busy", "too many intents in memory");
			return false;
		}
		r->owner_asked = true;
		pin(r, e);
		gw_lookup(g, r, kind);
		return false;
	}
	/* The handler starts afresh, as if the request had just come. */
	bool eio = r->owner_asked && r->lookup_rc == -EIO;
	pin(r, NULL);
	r->phase = GW_PH_NEW;
	r->lookup_rc = 0;
	if ((!e || !e->owner[0]) && eio) {
		*rc = send_unavailable(
			r, "store_unavailable",
			"whose this is is not known here and Postgres did not answer");
		return false;
	}
	if (!e || strcmp(e->owner, r->sub) != 0) {
		*rc = send_entry(r, NULL);
		return false;
	}
	r->owner_ok = true;
	return true;
}

/* A queue read of another buyer's place: what a buyer who never joined gets (the room's
 * existence is public; the lookup is made all the same, so the time tells nothing). */
static enum MHD_Result foreign_queue(struct gw *g, struct gw_req *r)
{
	if (r->phase == GW_PH_NEW) {
		return queue_lookup(g, r);
	}
	if (!r->answer)
		return send_unavailable(r, "store_unavailable", "Postgres did not answer");
	if (r->answer_status == MHD_HTTP_NOT_FOUND)
		return send_text(r, r->answer_status, "application/json", r->answer, NULL, NULL,
				 NULL, NULL);
	return send_json(r, MHD_HTTP_NOT_FOUND,
			 json_pack("{s:s, s:s}", "error", "not_joined", "message",
				   "this buyer has not joined this SKU's waiting room (or the "
				   "join is not decided yet)"),
			 NULL, NULL, NULL, NULL);
}

/* POST /v1/skus/{sku}/buys and /v1/intents/{id}/confirm|cancel: the record is published
 * once; a retry with the same key and body gets what the first got. */
static enum MHD_Result publish_intent(struct gw *g, struct gw_req *r, const char *key,
				      const struct fs_buf *rec, uint64_t fp)
{
	struct gw_entry *e = gw_cache_get(&g->cache, r->id, r->kind);
	if (e && e->fp != 0 && e->fp != fp)
		return send_error(r, 422, "idempotency_key_reused",
				  "this Idempotency-Key was used with another request body", NULL,
				  NULL);
	if (e && e->state == GW_S_PUBLISHING)
		return send_error(r, MHD_HTTP_CONFLICT, "in_flight",
				  "a request with this Idempotency-Key is being published", NULL,
				  NULL);
	/* Decided through another door, with no fingerprint known: a buy's POST was checked
	 * against what the decision's record says (post_buy), and gets it without stamping the
	 * entry with its own body (issue 47, item 6), unless that decision was a token refusal,
	 * which did not use up the id (item 1); a follow-up's body is its type alone. */
	if (e && e->state == GW_S_DECIDED && e->fp == 0) {
		if (r->kind == GW_K_BUY && !e->provisional)
			return send_entry(r, e);
		e->fp = fp;
	}
	bool again = e && publish_again(r, e);
	if (e && (e->state == GW_S_DECIDED || e->state == GW_S_QUEUED) && e->fp == fp && !again)
		return send_entry(r, e);
	if (!atomic_load(&g->producer_up))
		return send_unavailable(r, "log_unavailable",
					"no Kafka broker answers: nothing was published");
	e = gw_cache_put(&g->cache, r->id, r->kind);
	if (!e)
		return send_unavailable(r, "busy", "too many intents in memory");
	/* A decision may already be here (decided through another door): it stays; this
	 * publication is then a repeat the worker answers with it. */
	if (e->state != GW_S_DECIDED || again)
		e->state = GW_S_PUBLISHING;
	e->fp = fp;
	snprintf(e->sku, sizeof e->sku, "%s", r->sku);
	if (r->owner[0] && !e->owner[0])
		snprintf(e->owner, sizeof e->owner, "%s", r->owner);
	pin(r, e);
	if (gw_publish(g, r, key, rec) < 0) {
		if (e->state == GW_S_PUBLISHING) {
			e->state = GW_S_STUB;
			e->fp = 0;
		}
		return send_unavailable(r, "log_unavailable", "the record could not be queued");
	}
	return MHD_YES;
}

/* /v1/skus/{sku}/queue/{buyer}, the buyer percent-encoded (any byte but the unreserved ones
 * of RFC 3986: a buyer id may hold '/', '?', '%' or a quote). */
static void queue_location(const struct gw_req *r, char *out, size_t n)
{
	int len = snprintf(out, n, "/v1/skus/%s/queue/", r->sku);
	for (const char *c = r->buyer; *c && len > 0 && (size_t)len + 4 < n; c++) {
		if (isalnum((unsigned char)*c) || strchr("-._~", *c))
			out[len++] = *c;
		else
			len += snprintf(out + len, n - (size_t)len, "%%%02X", (unsigned char)*c);
	}
	out[len > 0 && (size_t)len < n ? len : 0] = '\0';
}

/* After the delivery report. */
static enum MHD_Result published(struct gw_req *r)
{
	if (r->pub_err)
		return send_unavailable(r, "not_published", rd_kafka_err2str(r->pub_err));
	if (r->route == GW_QUEUE_POST) {
		char location[512];
		queue_location(r, location, sizeof location);
		return send_json(r, MHD_HTTP_ACCEPTED,
				 json_pack("{s:s, s:s, s:s, s:i, s:I}", "sku", r->sku, "buyer_id",
					   r->buyer, "status", "joined", "partition",
					   (int)r->pub_part, "offset", (json_int_t)r->pub_off),
				 "Location", location, NULL, NULL);
	}
	if (!r->entry) { /* a sale record */
		return send_json(r, MHD_HTTP_ACCEPTED,
				 json_pack("{s:s, s:s, s:i, s:I}", "sku", r->sku, "status",
					   "queued", "partition", (int)r->pub_part, "offset",
					   (json_int_t)r->pub_off),
				 NULL, NULL, NULL, NULL);
	}
	return send_entry(r, r->entry);
}

static void mint_id(char out[FS_UUID_LEN + 1])
{
	uuid_t u;
	uuid_generate_random(u);
	uint64_t r1, r2;
	memcpy(&r1, u, 8);
	memcpy(&r2, u + 8, 8);
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	fs_uuid_v7((int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000, r1, r2, out);
}

/* The Idempotency-Key (the intent id), or a fresh one when there is none: false if bad. */
static bool intent_key(struct gw_req *r)
{
	const char *key = header(r, "Idempotency-Key");
	if (!key) {
		mint_id(r->id);
		return true;
	}
	/* The draft's keys are quoted strings: "uuid" and uuid are both taken. */
	char bare[64];
	size_t n = strlen(key);
	if (n >= 2 && n < sizeof bare && key[0] == '"' && key[n - 1] == '"') {
		memcpy(bare, key + 1, n - 2);
		bare[n - 2] = '\0';
		key = bare;
	}
	return fs_uuid_canon(key, r->id);
}

/* A buy's token checked at the edge on the wall clock (issue 33): the reason it is refused for
 * (no_token, bad_token, token_other_buyer, token_expired, token_not_yet_valid), or NULL. The
 * log clock the worker judges by is the broker's: a token within EDGE_SKEW_MS of its life's
 * ends goes on to the worker rather than be refused here. */
enum { EDGE_SKEW_MS = 1000 };
static const char *edge_token(const struct gw *g, const struct gw_req *r, const struct gw_buy *b)
{
	const char *t = b->has_token ? b->token : NULL;
	struct timespec ts; /* the wall clock, as the broker's stamps (not gw_now_ms's) */
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	enum fs_token_verdict v = fs_token_verify(&g->keys, t, r->sku, b->buyer_id, now);
	if ((v == FS_TOKEN_NOT_YET && fs_token_verify(&g->keys, t, r->sku, b->buyer_id,
						      now + EDGE_SKEW_MS) == FS_TOKEN_OK) ||
	    (v == FS_TOKEN_EXPIRED &&
	     fs_token_verify(&g->keys, t, r->sku, b->buyer_id, now - EDGE_SKEW_MS) == FS_TOKEN_OK))
		v = FS_TOKEN_OK;
	return fs_token_reason(v);
}

/* A buy decided through another door (the results topic, Postgres): its fingerprint is its own
 * record's (issue 47, item 6). The result names the SKU and qty; the buyer is in Postgres,
 * asked once (the lookup sets e->fp when its row is this decision). True to go on (publish_intent
 * compares the fingerprints); false when r was answered or parked (*rc). */
static bool foreign_decision(struct gw *g, struct gw_req *r, struct gw_entry *e,
			     const struct gw_buy *b, enum MHD_Result *rc)
{
	*rc = MHD_YES;
	if (gw_decision_matches(e->decision, r->sku, b->qty) == 0) {
		*rc = send_error(r, 422, "idempotency_key_reused",
				 "this Idempotency-Key was used with another request body", NULL,
				 NULL);
		return false;
	}
	if (!r->fp_asked) {
		if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX) {
			*rc = send_unavailable(r, "busy", "too many lookups waiting");
			return false;
		}
		r->fp_asked = true;
		pin(r, e);
		gw_lookup(g, r, GW_K_BUY);
		return false;
	}
	if (r->lookup_rc == -EIO) {
		*rc = send_unavailable(r, "store_unavailable",
				       "this intent was decided elsewhere and Postgres did not "
				       "answer: its body cannot be checked");
		return false;
	}
	return true; /* e->fp set from Postgres; or no row: the SKU and qty agree */
}

static enum MHD_Result post_buy(struct gw *g, struct gw_req *r)
{
	struct gw_buy b;
	const char *why = NULL;
	if (!intent_key(r))
		return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_idempotency_key",
				  "Idempotency-Key must be a UUID (the intent id)", NULL, NULL);
	if (gw_parse_buy(r->body, r->body_len, &b, &why) < 0)
		return send_error(r, MHD_HTTP_BAD_REQUEST, why, NULL, NULL, NULL);
	if (!buyer_is_sub(r, b.buyer_id))
		return send_other_buyer(r);
	snprintf(r->owner, sizeof r->owner, "%s", b.buyer_id);
	r->kind = GW_K_BUY;
	uint64_t fp = gw_fingerprint("buy", r->sku, b.buyer_id, b.qty);
	struct gw_entry *e = gw_cache_get(&g->cache, r->id, GW_K_BUY);
	if (e && e->state == GW_S_DECIDED && e->fp == 0) {
		enum MHD_Result rc;
		if (!foreign_decision(g, r, e, &b, &rc))
			return rc;
	}
	if (!e || e->state == GW_S_STUB) {
		/* The sold-out flag at the edge: the worker's latest word on the SKU. */
		struct gw_stock *s = gw_stock_get(&g->cache, r->sku);
		if (s && s->json &&
		    (strcmp(s->status, "sold_out") == 0 || strcmp(s->status, "closed") == 0)) {
			atomic_fetch_add(&g->stats.edge_answers, 1);
			atomic_fetch_add(s->status[0] == 'c' ? &g->stats.edge_closed
							     : &g->stats.edge_sold_out,
					 1);
			/* The crowd after the sell-out lands here: no JSON library for an
			 * answer of checked ids (a UUID, a SKU of [A-Za-z0-9._:-], a status). */
			char text[256];
			snprintf(text, sizeof text,
				 "{\"intent_id\":\"%s\",\"sku\":\"%s\",\"outcome\":\"%s\","
				 "\"status\":\"decided\",\"source\":\"edge\"}",
				 r->id, r->sku, s->status);
			return send_text(r, MHD_HTTP_OK, "application/json", text, NULL, NULL, NULL,
					 NULL);
		}
		/* A sale behind a waiting room: the token, at the edge (the worker stays the
		 * judge, on the log clock). */
		const char *refused = s && s->room && g->has_keys ? edge_token(g, r, &b) : NULL;
		if (refused) {
			atomic_fetch_add(&g->stats.edge_token, 1);
			return send_error(
				r, MHD_HTTP_FORBIDDEN, refused,
				"this sale is behind a waiting room: the buy needs the "
				"buyer's admission token (GET /v1/skus/{sku}/queue/{buyer})",
				NULL, NULL);
		}
	}
	struct fs_buf rec = {0};
	if (gw_record_buy(&rec, r->id, r->sku, &b) < 0) {
		fs_buf_free(&rec);
		return MHD_NO;
	}
	enum MHD_Result rc = publish_intent(g, r, r->sku, &rec, fp);
	fs_buf_free(&rec);
	return rc;
}

/* POST /v1/carts: the cart record, keyed by the cart id (its coordinator's partition). No
 * answer at the edge: a cart's refusal names the first line the worker refuses, which the
 * stock flags cannot tell. */
static enum MHD_Result post_cart(struct gw *g, struct gw_req *r)
{
	const char *why = NULL;
	if (!intent_key(r))
		return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_idempotency_key",
				  "Idempotency-Key must be a UUID (the cart id)", NULL, NULL);
	r->kind = GW_K_CART;
	struct fs_buf rec = {0};
	uint64_t fp = 0;
	int rc = gw_parse_cart(r->body, r->body_len, r->id, &rec, &fp, &why);
	if (rc < 0) {
		fs_buf_free(&rec);
		return rc == -EINVAL ? send_error(r, MHD_HTTP_BAD_REQUEST, why, NULL, NULL, NULL)
				     : MHD_NO;
	}
	body_buyer(r, r->owner);
	if (!buyer_is_sub(r, r->owner)) {
		fs_buf_free(&rec);
		return send_other_buyer(r);
	}
	enum MHD_Result out = publish_intent(g, r, r->id, &rec, fp);
	fs_buf_free(&rec);
	return out;
}

/* POST /v1/carts/{id}/confirm|cancel: keyed by the cart id. */
static enum MHD_Result post_cart_followup(struct gw *g, struct gw_req *r)
{
	bool confirm = r->route == GW_CART_CONFIRM;
	r->kind = confirm ? GW_K_CART_CONFIRM : GW_K_CART_CANCEL;
	struct fs_buf rec = {0};
	if (gw_record_cart_followup(&rec, confirm ? "confirm" : "cancel", r->id) < 0) {
		fs_buf_free(&rec);
		return MHD_NO;
	}
	enum MHD_Result rc = publish_intent(
		g, r, r->id, &rec,
		gw_fingerprint(confirm ? "cart_confirm" : "cart_cancel", "", NULL, 0));
	fs_buf_free(&rec);
	return rc;
}

static enum MHD_Result post_followup(struct gw *g, struct gw_req *r)
{
	struct gw_sale s;
	const char *why = NULL;
	if (gw_parse_sale(r->route, r->body, r->body_len, &s, &why) < 0)
		return send_error(r, MHD_HTTP_BAD_REQUEST, why, NULL, NULL, NULL);
	r->kind = r->route == GW_CONFIRM ? GW_K_CONFIRM : GW_K_CANCEL;
	/* The key is the buy's SKU (the buy's partition): given, or known here, or from
	 * Postgres (the lookup fills the buy's entry). */
	struct gw_entry *b = gw_cache_get(&g->cache, r->id, GW_K_BUY);
	if (s.sku[0]) {
		snprintf(r->sku, sizeof r->sku, "%s", s.sku);
	} else if (b && b->sku[0]) {
		snprintf(r->sku, sizeof r->sku, "%s", b->sku);
	} else if (r->phase == GW_PH_NEW) {
		if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX)
			return send_unavailable(r, "busy", "too many lookups waiting");
		enum MHD_Result rc;
		if (!b && !unknown_lookup(g, r, &rc))
			return rc;
		b = gw_cache_put(&g->cache, r->id, GW_K_BUY);
		if (!b)
			return send_unavailable(r, "busy", "too many intents in memory");
		pin(r, b);
		gw_lookup(g, r, GW_K_BUY);
		return MHD_YES;
	} else if (r->lookup_rc == -EIO) {
		return send_unavailable(
			r, "store_unavailable",
			"the buy's SKU is not known here and Postgres did not answer");
	} else {
		return send_error(r, MHD_HTTP_NOT_FOUND, "unknown_intent",
				  "no decided buy with this id: give its \"sku\" in the body", NULL,
				  NULL);
	}
	pin(r, NULL);
	/* The SKU only routes the record (issue 47, item 2): the same follow-up sent again
	 * with the buy's right SKU is the same request, published again. */
	uint64_t fp = gw_fingerprint(r->route == GW_CONFIRM ? "confirm" : "cancel", "", NULL, 0);
	struct fs_buf rec = {0};
	if (gw_record_followup(&rec, r->route == GW_CONFIRM ? "confirm" : "cancel", r->id, r->sku) <
	    0) {
		fs_buf_free(&rec);
		return MHD_NO;
	}
	enum MHD_Result rc = publish_intent(g, r, r->sku, &rec, fp);
	fs_buf_free(&rec);
	return rc;
}

static enum MHD_Result publish_keyed(struct gw *g, struct gw_req *r, struct fs_buf *rec, int made);

static enum MHD_Result post_admin(struct gw *g, struct gw_req *r)
{
	if (!g->cfg.admin_token[0])
		return send_error(r, MHD_HTTP_FORBIDDEN, "admin_disabled",
				  "sale administration is off (set admin.token.file)", NULL, NULL);
	if (!gw_bearer_ok(header(r, "Authorization"), g->cfg.admin_token))
		return send_error(r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
				  "a valid admin bearer token is required", "WWW-Authenticate",
				  "Bearer");
	struct gw_sale s;
	const char *why = NULL;
	if (gw_parse_sale(r->route, r->body, r->body_len, &s, &why) < 0)
		return send_error(r, MHD_HTTP_BAD_REQUEST, why, NULL, NULL, NULL);
	if (!atomic_load(&g->producer_up))
		return send_unavailable(r, "log_unavailable",
					"no Kafka broker answers: nothing was published");
	struct fs_buf rec = {0};
	return publish_keyed(g, r, &rec, gw_record_sale(&rec, r->route, r->sku, &s));
}

/* Publishes rec (made with result made) under the SKU; frees it. r waits for the delivery
 * report (published()). */
static enum MHD_Result publish_keyed(struct gw *g, struct gw_req *r, struct fs_buf *rec, int made)
{
	int rc = made == 0 ? gw_publish(g, r, r->sku, rec) : made;
	fs_buf_free(rec);
	if (rc < 0)
		return send_unavailable(r, "log_unavailable", "the record could not be queued");
	return MHD_YES;
}

/* POST /v1/skus/{sku}/queue {"buyer_id"}: the join record, keyed by the SKU; 202 once it is on
 * the log, with where to ask (Location). Joining again changes nothing (one entry a buyer). */
static enum MHD_Result post_queue(struct gw *g, struct gw_req *r)
{
	const char *why = NULL;
	if (gw_parse_join(r->body, r->body_len, r->buyer, &why) < 0)
		return send_error(r, MHD_HTTP_BAD_REQUEST, why, NULL, NULL, NULL);
	if (!buyer_is_sub(r, r->buyer))
		return send_other_buyer(r);
	if (!atomic_load(&g->producer_up))
		return send_unavailable(r, "log_unavailable",
					"no Kafka broker answers: nothing was published");
	struct fs_buf rec = {0};
	return publish_keyed(g, r, &rec, gw_record_join(&rec, r->sku, r->buyer));
}

/* An admission the results topic brought (the worker's `admission` result, or a join admitted
 * at once): the queue's admitted answer, with the worker's token. */
static enum MHD_Result send_admission(struct gw_req *r, const struct gw_entry *e)
{
	char *s = gw_admission_answer(e->decision);
	if (!s)
		return send_error(r, 500, "internal", "stored result unreadable", NULL, NULL);
	enum MHD_Result rc =
		send_text(r, MHD_HTTP_OK, "application/json", s, NULL, NULL, NULL, NULL);
	free(s);
	return rc;
}

/* A waiting room's place is read from Postgres: a room the stock topic named (its SKU's
 * record has "room") from the lookup thread's cache of rooms, free; any other SKU's at the
 * rate of ids never seen, and never into that cache, so that junk rooms cannot push a real one
 * out (issue 48, item 5). Under the lock. */
static bool room_lookup_ok(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	const struct gw_stock *s = gw_stock_get(&g->cache, r->sku);
	r->room_named = s && s->room;
	return r->room_named || unknown_lookup(g, r, rc);
}

/* A queue read's first look: its room read queued for the lookup thread, within the queue's
 * bound and the rule above. */
static enum MHD_Result queue_lookup(struct gw *g, struct gw_req *r)
{
	if (g->lookup_len >= GW_LOOKUP_QUEUE_MAX)
		return send_unavailable(r, "busy", "too many lookups waiting");
	enum MHD_Result rc;
	if (!room_lookup_ok(g, r, &rc))
		return rc;
	gw_lookup(g, r, GW_K_QUEUE);
	return MHD_YES;
}

/* GET /v1/skus/{sku}/queue/{buyer}[?wait=S]: an admission in memory, else the lookup thread
 * reads the room (lookup.c); a waiting buyer's long-poll then waits for the admission's result
 * (the timer ends it with the place the lookup read). */
static enum MHD_Result get_queue(struct gw *g, struct gw_req *r)
{
	if (r->foreign)
		return foreign_queue(g, r);
	char qid[FS_UUID_LEN + 1];
	gw_queue_id(r->sku, r->buyer, qid);
	struct gw_entry *e = r->entry ? r->entry : gw_cache_get(&g->cache, qid, GW_K_QUEUE);
	if (e && e->state == GW_S_DECIDED) {
		gw_waiter_remove(&r->w);
		gw_waiter_remove(&r->tw);
		return send_admission(r, e);
	}
	if (r->phase == GW_PH_NEW) {
		return queue_lookup(g, r);
	}
	if (!r->answer)
		return send_unavailable(r, "store_unavailable", "Postgres did not answer");
	bool waiting = r->answer_status == MHD_HTTP_OK &&
		       strstr(r->answer, "\"status\":\"waiting\"") != NULL;
	if (r->phase == GW_PH_LOOKUP && waiting && r->wait_ms > 0 && !atomic_load(&g->stopping)) {
		e = gw_cache_put(&g->cache, qid, GW_K_QUEUE);
		if (e)
			return park_on(g, r, e);
	}
	gw_waiter_remove(&r->w);
	gw_waiter_remove(&r->tw);
	return send_text(r, r->answer_status, "application/json", r->answer, NULL, NULL, NULL,
			 NULL);
}

/* GET /v1/skus/{sku}/queue/{buyer}/events: answered as the GET until the stream starts (an
 * admission in memory, else the room the lookup thread reads; its refusals are the GET's),
 * then the stream: `waiting` whenever the place read changes (the timer asks the lookup thread
 * again every GW_ROOM_REFRESH_MS), `admitted` when the admission is known (its result wakes
 * the entry's waiters), then heartbeats until the client closes it, as the other streams. */
static enum MHD_Result queue_events(struct gw *g, struct gw_req *r)
{
	if (r->foreign)
		return foreign_queue(g, r);
	char qid[FS_UUID_LEN + 1];
	gw_queue_id(r->sku, r->buyer, qid);
	struct gw_entry *e = gw_cache_get(&g->cache, qid, GW_K_QUEUE);
	bool admitted = e && e->state == GW_S_DECIDED;
	if (r->phase == GW_PH_NEW && !admitted) {
		return queue_lookup(g, r);
	}
	if (!admitted && !r->answer)
		return send_unavailable(r, "store_unavailable", "Postgres did not answer");
	if (!admitted && r->answer_status != MHD_HTTP_OK)
		return send_text(r, r->answer_status, "application/json", r->answer, NULL, NULL,
				 NULL, NULL);
	e = gw_cache_put(&g->cache, qid, GW_K_QUEUE);
	if (!e)
		return send_unavailable(r, "busy", "too many intents in memory");
	pin(r, e);
	gw_waiter_add(&e->waiters, &r->w, r);
	r->refresh_ms = gw_now_ms();
	return start_stream(g, r);
}

static enum MHD_Result get_sku(struct gw *g, struct gw_req *r)
{
	struct gw_stock *s = gw_stock_get(&g->cache, r->sku);
	if (!s || !s->json)
		return send_error(r, MHD_HTTP_NOT_FOUND, "unknown_sku",
				  "no stock record for this SKU on the stock topic", NULL, NULL);
	return send_text(r, MHD_HTTP_OK, "application/json", s->json, NULL, NULL, NULL, NULL);
}

static enum MHD_Result sku_events(struct gw *g, struct gw_req *r)
{
	/* A SKU the stock topic has not named (yet: a page waiting for its sale) waits on the
	 * list of such streams, not in the SKU table, which only the stock topic fills (issue
	 * 48, item 5); its first stock record moves it to the SKU (topics.c). */
	struct gw_stock *s = gw_stock_get(&g->cache, r->sku);
	r->stock = s;
	gw_waiter_add(s ? &s->waiters : &g->sku_pending, &r->w, r);
	return start_stream(g, r);
}

/* Which of the gateway's tables or queues is full, or NULL (issue 48, item 5; thresholds in
 * docs/reference/operations.md): the SKU table at its size (skus.max: a new sale's stock is
 * not kept), the intent cache when a request was refused for it in the last 10 s (every entry
 * in use), the lookup queue at 90% of GW_LOOKUP_QUEUE_MAX, connections at 90% of
 * http.connections.max. Under the lock. */
const char *gw_full(struct gw *g)
{
	int64_t now = gw_now_ms();
	if (g->cache.refused != g->refused_seen) {
		g->refused_seen = g->cache.refused;
		g->refused_ms = now;
	}
	if (g->cache.slen >= g->cache.smax)
		return "sku_table_full";
	if (g->refused_ms && now - g->refused_ms < GW_FULL_HOLD_MS)
		return "intent_cache_full";
	if (g->lookup_len * 10 >= (size_t)GW_LOOKUP_QUEUE_MAX * 9)
		return "lookup_queue_full";
	if (atomic_load(&g->connections) * 10 >= g->cfg.http_connections_max * 9)
		return "connections_near_cap";
	return NULL;
}

bool gw_ready(struct gw *g)
{
	return atomic_load(&g->producer_up) && atomic_load(&g->results_assigned) &&
	       atomic_load(&g->stock_caught_up) && !atomic_load(&g->stopping) && !gw_full(g);
}

static enum MHD_Result readyz(struct gw *g, struct gw_req *r)
{
	bool up = atomic_load(&g->producer_up), assigned = atomic_load(&g->results_assigned),
	     stock = atomic_load(&g->stock_caught_up);
	bool ready = gw_ready(g);
	const char *full = gw_full(g);
	return send_json(r, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
			 json_pack("{s:b, s:b, s:b, s:b, s:s?, s:i, s:I, s:I, s:I, s:I, s:I}",
				   "ready", ready, "producer_connected", up, "results_followed",
				   assigned, "stock_caught_up", stock, "full", full,
				   "kafka_clients", atomic_load(&g->kafka_clients), "connections",
				   (json_int_t)atomic_load(&g->connections), "cached",
				   (json_int_t)g->cache.len, "skus", (json_int_t)g->cache.slen,
				   "long_polls", (json_int_t)gw_waiter_count(&g->polls), "streams",
				   (json_int_t)gw_waiter_count(&g->streams)),
			 NULL, NULL, NULL, NULL);
}

/* GET /sale/{sku} (the page for any valid SKU: its script reads the SKU from the address)
 * and GET /assets/{name}: files compiled in (gw_assets), served from their static bytes.
 * Only the gateway's own origin may run, style or connect (the CSP), and the browser may not
 * guess another type than the one sent (nosniff). */
static enum MHD_Result get_page(struct gw_req *r)
{
	const struct gw_asset *a = gw_asset_find(r->route == GW_PAGE ? "sale.html" : r->path.param);
	if (!a)
		return send_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file", NULL, NULL);
	bool page = r->route == GW_PAGE && r->g->page; /* with payment.checkout.url in it */
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		page ? r->g->page_len : a->len, page ? (void *)r->g->page : (void *)a->data,
		MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", a->type);
	/* Asked again on every load (no validator is sent): a new gateway's page is used at
	 * once. */
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Content-Security-Policy",
				"default-src 'self'; base-uri 'none'; form-action 'none'; "
				"frame-ancestors 'none'");
	MHD_add_response_header(resp, "Referrer-Policy", "same-origin");
	enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	r->phase = GW_PH_DONE;
	gw_metrics_answered(r->g, r->route, MHD_HTTP_OK, r->start_us);
	return rc;
}

int gw_page_checkout(struct gw *g, const char *url)
{
	static const char attr[] = "data-checkout=\"\"";
	const struct gw_asset *a = gw_asset_find("sale.html");
	const char *at = a ? memmem(a->data, a->len, attr, sizeof attr - 1) : NULL;
	if (!at)
		return -EINVAL;
	/* The URL was checked (config.c): nothing in it needs escaping in an attribute. */
	size_t head = (size_t)(at - (const char *)a->data) + sizeof attr - 2, n = strlen(url);
	g->page_len = a->len + n;
	g->page = malloc(g->page_len);
	if (!g->page)
		return -ENOMEM;
	memcpy(g->page, a->data, head);
	memcpy(g->page + head, url, n);
	memcpy(g->page + head + n, a->data + head, a->len - head);
	return 0;
}

/* The path's parameter, checked: the SKU, or the intent id into r->id. */
static enum MHD_Result bad_param(struct gw_req *r)
{
	bool sku = r->route == GW_BUY || r->route == GW_SKU || r->route == GW_SKU_EVENTS ||
		   r->route == GW_ADMIN_OPEN || r->route == GW_ADMIN_RESTOCK ||
		   r->route == GW_ADMIN_CLOSE || r->route == GW_PAGE || r->route == GW_QUEUE_POST ||
		   r->route == GW_QUEUE || r->route == GW_QUEUE_EVENTS;
	/* The queue's routes: a good SKU (a SKU is shorter than the parameter's room, so a cut
	 * one is never good) with a bad, or too long, buyer id. */
	if ((r->route == GW_QUEUE || r->route == GW_QUEUE_EVENTS) && fs_sku_valid(r->path.param))
		return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_buyer_id",
				  "a buyer id is 1-64 printable ASCII characters, no space", NULL,
				  NULL);
	if (r->route == GW_ASSET) /* a name longer than any file's */
		return send_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such file", NULL, NULL);
	if (sku)
		return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_sku",
				  "a SKU is 1-64 of A-Z a-z 0-9 . _ : -", NULL, NULL);
	return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_intent_id", "an intent id is a UUID", NULL,
			  NULL);
}

static bool param_ok(struct gw_req *r)
{
	if (r->path.too_long)
		return false;
	switch (r->route) {
	case GW_BUY:
	case GW_SKU:
	case GW_SKU_EVENTS:
	case GW_ADMIN_OPEN:
	case GW_ADMIN_RESTOCK:
	case GW_ADMIN_CLOSE:
	case GW_PAGE:
	case GW_QUEUE_POST:
		if (strlen(r->path.param) >= sizeof r->sku)
			return false;
		memcpy(r->sku, r->path.param, strlen(r->path.param) + 1);
		return fs_sku_valid(r->sku);
	case GW_QUEUE:
	case GW_QUEUE_EVENTS:
		if (strlen(r->path.param) >= sizeof r->sku ||
		    strlen(r->path.param2) >= sizeof r->buyer)
			return false;
		memcpy(r->sku, r->path.param, strlen(r->path.param) + 1);
		memcpy(r->buyer, r->path.param2, strlen(r->path.param2) + 1);
		return fs_sku_valid(r->sku) && fs_buyer_valid(r->buyer);
	case GW_INTENT:
	case GW_INTENT_EVENTS:
	case GW_CONFIRM:
	case GW_CANCEL:
	case GW_CONFIRM_GET:
	case GW_CANCEL_GET:
	case GW_CART:
	case GW_CART_EVENTS:
	case GW_CART_CONFIRM:
	case GW_CART_CANCEL:
	case GW_CART_CONFIRM_GET:
	case GW_CART_CANCEL_GET:
		return fs_uuid_canon(r->path.param, r->id);
	default:
		return true;
	}
}

/* Issue 48, item 5: a path that is not one as sent (400 bad_path), and the client's rate (429
 * rate_limited with Retry-After, nothing done). True to go on; false when answered (*rc). */
static bool edge_checked(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	if (r->route == GW_BAD_PATH) {
		atomic_fetch_add(&g->stats.refused_path, 1);
		*rc = send_error(r, MHD_HTTP_BAD_REQUEST, "bad_path",
				 "the path has a byte outside printable ASCII, a bad escape or %00",
				 NULL, NULL);
		return false;
	}
	int64_t retry = gw_edge_rate(g, r);
	if (retry > 0) {
		char s[24];
		snprintf(s, sizeof s, "%lld", (long long)retry);
		*rc = send_error(r, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limited",
				 "too many requests from this address (http.client.rate)",
				 "Retry-After", s);
		return false;
	}
	return true;
}

/* A request that may wait (an event stream, a long-poll with a wait) takes one of its client's
 * wait slots for its life (429 too_many_waits past http.client.waits.max). */
static bool wait_checked(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	bool stream = r->route == GW_INTENT_EVENTS || r->route == GW_CART_EVENTS ||
		      r->route == GW_SKU_EVENTS || r->route == GW_QUEUE_EVENTS;
	if (!stream && r->wait_ms <= 0)
		return true;
	if (gw_edge_wait(g, r))
		return true;
	*rc = send_error(r, MHD_HTTP_TOO_MANY_REQUESTS, "too_many_waits",
			 "too many long-polls and event streams open from this address "
			 "(http.client.waits.max)",
			 "Retry-After", "5");
	return false;
}

/* A confirm is the payment provider's call (issue 48, item 3): signed with a key of the
 * payment key ring over the raw body as received, recently, for this intent or cart. True to
 * go on; false when it was refused (*rc), nothing published. Checked once, at the first look:
 * a confirm that waits for a lookup was checked before it. */
static bool payment_ok(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	enum gw_pay_verdict v = GW_PAY_DISABLED;
	if (g->has_pay_keys) {
		struct timespec ts; /* the wall clock: t is the provider's UNIX time */
		clock_gettime(CLOCK_REALTIME, &ts);
		v = gw_pay_verify(&g->pay_keys, header(r, "Flashsale-Signature"), r->body,
				  r->body_len, (int64_t)ts.tv_sec);
		if (v == GW_PAY_OK)
			v = gw_pay_names(r->body, r->body_len,
					 r->route == GW_CONFIRM ? "intent_id" : "cart_id", r->id);
	}
	if (v == GW_PAY_OK)
		return true;
	atomic_fetch_add(&g->stats.pay_refused[v], 1);
	if (v == GW_PAY_DISABLED)
		*rc = send_error(r, MHD_HTTP_FORBIDDEN, gw_pay_reason(v), gw_pay_message(v), NULL,
				 NULL);
	else
		*rc = send_error(r, MHD_HTTP_UNAUTHORIZED, gw_pay_reason(v), gw_pay_message(v),
				 "WWW-Authenticate", "Flashsale-Signature");
	return false;
}

/* The first look at a request whose body is in: the checks every route shares. True to go
 * on; false when it was answered (*rc). */
static bool checked(struct gw *g, struct gw_req *r, enum MHD_Result *rc)
{
	*rc = MHD_YES;
	if (overloaded(g)) {
		atomic_fetch_add(&g->stats.overloaded, 1);
		*rc = send_json(r, MHD_HTTP_SERVICE_UNAVAILABLE,
				json_pack("{s:s, s:s}", "error", "overloaded", "message",
					  "too many connections"),
				"Retry-After", "1", "Connection", "close");
		return false;
	}
	if (atomic_load(&g->stopping) && gw_route_has_body(r->route)) {
		*rc = send_unavailable(r, "shutting_down", "the gateway is stopping");
		return false;
	}
	if (!edge_checked(g, r, rc))
		return false;
	if (r->route == GW_NOT_FOUND) {
		*rc = send_error(r, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint", NULL,
				 NULL);
		return false;
	}
	if (r->route == GW_BAD_METHOD) {
		*rc = send_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
				 "Allow", r->allow);
		return false;
	}
	if (r->too_large) {
		*rc = send_error(r, 413, "too_large", "the request body is over http.body.max",
				 "Connection", "close");
		return false;
	}
	if (gw_route_has_body(r->route) &&
	    (r->body_len > 0 || r->route == GW_BUY || r->route == GW_ADMIN_OPEN ||
	     r->route == GW_ADMIN_RESTOCK || r->route == GW_CART_POST ||
	     r->route == GW_QUEUE_POST) &&
	    !gw_content_type_json(header(r, "Content-Type"))) {
		*rc = send_error(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "not_json",
				 "Content-Type must be application/json", NULL, NULL);
		return false;
	}
	if (!param_ok(r)) {
		*rc = bad_param(r);
		return false;
	}
	if ((r->route == GW_CONFIRM || r->route == GW_CART_CONFIRM) && !payment_ok(g, r, rc))
		return false;
	if (!proven(g, r, rc))
		return false;
	if (r->route == GW_QUEUE &&
	    gw_wait_ms(MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "wait"),
		       header(r, "Prefer"), g->cfg.http_wait_max_ms, &r->wait_ms) < 0) {
		*rc = send_error(r, MHD_HTTP_BAD_REQUEST, "bad_wait",
				 "wait is a number of seconds >= 0", NULL, NULL);
		return false;
	}
	if (r->route == GW_INTENT || r->route == GW_CONFIRM_GET || r->route == GW_CANCEL_GET ||
	    r->route == GW_CART || r->route == GW_CART_CONFIRM_GET ||
	    r->route == GW_CART_CANCEL_GET) {
		if (gw_wait_ms(MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "wait"),
			       header(r, "Prefer"), g->cfg.http_wait_max_ms, &r->wait_ms) < 0) {
			*rc = send_error(r, MHD_HTTP_BAD_REQUEST, "bad_wait",
					 "wait is a number of seconds >= 0", NULL, NULL);
			return false;
		}
		r->kind = r->route == GW_INTENT		    ? GW_K_BUY
			  : r->route == GW_CONFIRM_GET	    ? GW_K_CONFIRM
			  : r->route == GW_CANCEL_GET	    ? GW_K_CANCEL
			  : r->route == GW_CART		    ? GW_K_CART
			  : r->route == GW_CART_CONFIRM_GET ? GW_K_CART_CONFIRM
							    : GW_K_CART_CANCEL;
	}
	return wait_checked(g, r, rc);
}

static enum MHD_Result step(struct gw *g, struct gw_req *r)
{
	enum MHD_Result rc;
	if (r->phase == GW_PH_NEW && !checked(g, r, &rc))
		return rc;
	if (!own(g, r, &rc))
		return rc;
	if (r->phase == GW_PH_PUBLISHING) {
		if (!r->pub_done)
			return MHD_YES; /* not ours to answer yet (resumed by a list) */
		return published(r);
	}
	switch (r->route) {
	case GW_HEALTHZ:
		return send_text(r, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}", NULL,
				 NULL, NULL, NULL);
	case GW_READYZ:
		return readyz(g, r);
	case GW_BUY:
		return post_buy(g, r);
	case GW_CONFIRM:
	case GW_CANCEL:
		return post_followup(g, r);
	case GW_ADMIN_OPEN:
	case GW_ADMIN_RESTOCK:
	case GW_ADMIN_CLOSE:
		return post_admin(g, r);
	case GW_INTENT:
	case GW_CONFIRM_GET:
	case GW_CANCEL_GET:
		return get_intent(g, r);
	case GW_INTENT_EVENTS:
	case GW_CART_EVENTS:
		return intent_events(g, r);
	case GW_CART_POST:
		return post_cart(g, r);
	case GW_CART_CONFIRM:
	case GW_CART_CANCEL:
		return post_cart_followup(g, r);
	case GW_CART:
	case GW_CART_CONFIRM_GET:
	case GW_CART_CANCEL_GET:
		return get_intent(g, r);
	case GW_SKU:
		return get_sku(g, r);
	case GW_SKU_EVENTS:
		return sku_events(g, r);
	case GW_PAGE:
	case GW_ASSET:
		return get_page(r);
	case GW_QUEUE_POST:
		return post_queue(g, r);
	case GW_QUEUE:
		return get_queue(g, r);
	case GW_QUEUE_EVENTS:
		return queue_events(g, r);
	default:
		return MHD_NO;
	}
}

/* The access handler's first call (the headers are in): routed on the target as sent, and
 * refused at once, before its body is read, when its framing headers disagree (answered on
 * this first call, libmicrohttpd closes the connection after the answer: nothing after the
 * headers is read as a request). */
static enum MHD_Result request_begins(struct gw *g, struct gw_req *r, const char *method)
{
	r->started = true;
	r->route = gw_route(method, r->raw, &r->path, &r->allow);
	free(r->raw);
	r->raw = NULL;
	r->start_us = gw_now_us();
	atomic_fetch_add(&g->stats.requests, 1);
	const char *why = gw_edge_framing(r);
	if (!why)
		return MHD_YES;
	atomic_fetch_add(&g->stats.refused_framing, 1);
	return send_error(r, MHD_HTTP_BAD_REQUEST, "bad_framing", why, "Connection", "close");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	(void)conn;
	(void)url; /* percent-decoded: routes match the target as sent (r->raw) */
	struct gw *g = cls;
	struct gw_req *r = *con_cls;
	if (!r) /* gw_edge_uri had no memory */
		return MHD_NO;
	if (!r->started)
		return request_begins(g, r, method);
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (r->too_large || !gw_route_has_body(r->route) || r->phase == GW_PH_DONE)
			return MHD_YES;
		if (r->body_len + n > (size_t)g->cfg.http_body_max) {
			r->too_large = true;
			free(r->body);
			r->body = NULL;
			r->body_len = 0;
			return MHD_YES;
		}
		char *b = realloc(r->body, r->body_len + n + 1);
		if (!b)
			return MHD_NO;
		memcpy(b + r->body_len, upload, n);
		r->body = b;
		r->body_len += n;
		r->body[r->body_len] = '\0';
		return MHD_YES;
	}
	if (r->phase == GW_PH_DONE || r->phase == GW_PH_STREAM)
		return MHD_YES;
	gw_edge_request_in(r);
	pthread_mutex_lock(&g->lock);
	/* A waiting request whose client left (gw_edge_gone): its connection closes now. */
	enum MHD_Result rc = r->peer_gone ? MHD_NO : step(g, r);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	(void)toe;
	struct gw *g = cls;
	struct gw_req *r = *con_cls;
	if (!r)
		return;
	pthread_mutex_lock(&g->lock);
	gw_waiter_remove(&r->w);
	gw_waiter_remove(&r->tw);
	pin(r, NULL);
	gw_edge_request_done(g, r);
	/* A queue stream whose place is being read: the lookup thread frees it when done. */
	bool orphan = r->in_lookup;
	r->orphan = orphan;
	pthread_mutex_unlock(&g->lock);
	*con_cls = NULL;
	if (!orphan)
		gw_req_free(r);
}

void gw_req_free(struct gw_req *r)
{
	fs_buf_free(&r->out);
	free(r->raw);
	free(r->body);
	free(r->answer);
	free(r->sent_place);
	free(r);
}

/* ---- event streams -----------------------------------------------------------------------------
 */

/* The queue's stream: `admitted` once (then heartbeats only), else `waiting` when the place
 * the lookup thread read last differs from the one sent (its as_of aside: the clock moves on
 * every read). Events of the waiting room have no id: a reconnect gets where the buyer stands
 * then. Under the lock. */
static void queue_fill(struct gw_req *r)
{
	if (r->sent_ev)
		return;
	char *admitted = r->entry && r->entry->state == GW_S_DECIDED
				 ? gw_admission_answer(r->entry->decision)
				 : NULL;
	if (admitted || (r->answer && r->answer_status == MHD_HTTP_OK &&
			 strstr(r->answer, "\"status\":\"admitted\""))) {
		gw_sse_event(&r->out, "admitted", -1, 0, admitted ? admitted : r->answer);
		free(admitted);
		r->sent_ev = 1;
		return;
	}
	char *place = r->answer_status == MHD_HTTP_OK ? gw_queue_place(r->answer) : NULL;
	if (place && (!r->sent_place || strcmp(place, r->sent_place) != 0)) {
		gw_sse_event(&r->out, "waiting", -1, 0, r->answer);
		free(r->sent_place);
		r->sent_place = place;
		place = NULL;
	}
	free(place);
}

/* Fills r->out with what the client has not had yet. Under the lock. */
static void stream_fill(struct gw *g, struct gw_req *r)
{
	if (r->route == GW_QUEUE_EVENTS) {
		queue_fill(r);
	} else if (r->entry) {
		struct gw_entry *e = r->entry;
		for (; r->sent_ev < e->n_ev; r->sent_ev++) {
			struct gw_event *v = &e->ev[r->sent_ev];
			if (v->part == r->last_part && v->off <= r->last_off)
				continue; /* had before it reconnected */
			gw_sse_event(&r->out, v->name, v->part, v->off, v->data);
		}
	} else if (r->stock && r->stock->json && r->stock->version != r->sent_version) {
		struct gw_stock *s = r->stock;
		r->sent_version = s->version;
		gw_sse_event(&r->out, "stock", s->part, s->off, s->json);
	}
	if (r->out.len == r->out_pos && r->hb_due)
		fs_buf_str(&r->out, ": heartbeat\n\n");
	r->hb_due = false;
	(void)g;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct gw_req *r = cls;
	struct gw *g = r->g;
	pthread_mutex_lock(&g->lock);
	if (r->peer_gone) { /* its client left (gw_edge_gone): the connection closes now */
		pthread_mutex_unlock(&g->lock);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	if (r->out_pos == r->out.len) {
		fs_buf_clear(&r->out);
		r->out_pos = 0;
		stream_fill(g, r);
	}
	size_t n = r->out.len - r->out_pos;
	if (n == 0) {
		if (atomic_load(&g->stopping)) {
			pthread_mutex_unlock(&g->lock);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		gw_park(r); /* nothing to say: resumed by a change or the heartbeat */
		pthread_mutex_unlock(&g->lock);
		return 0;
	}
	if (n > max)
		n = max;
	memcpy(buf, r->out.data + r->out_pos, n);
	r->out_pos += n;
	r->last_write_ms = gw_now_ms();
	pthread_mutex_unlock(&g->lock);
	return (ssize_t)n;
}

static enum MHD_Result start_stream(struct gw *g, struct gw_req *r)
{
	int32_t part;
	int64_t off;
	if (gw_parse_event_id(header(r, "Last-Event-ID"), &part, &off)) {
		r->last_part = part;
		r->last_off = off;
	}
	gw_waiter_add(&g->streams, &r->tw, r);
	r->last_write_ms = gw_now_ms();
	/* The first bytes go out at once (a proxy, a browser: the stream is open). */
	fs_buf_str(&r->out, "retry: 2000\n: open\n\n");
	struct MHD_Response *resp = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, r, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	r->phase = GW_PH_STREAM;
	gw_metrics_answered(g, r->route, MHD_HTTP_OK, r->start_us);
	return rc;
}

/* ---- the timer: long-polls' deadlines and the streams' heartbeats ---------------------------- */

void *gw_timer_main(void *arg)
{
	struct gw *g = arg;
	int64_t swept_ms = 0;
	while (!atomic_load(&g->stopping)) {
		usleep(TIMER_MS * 1000);
		int64_t now = gw_now_ms();
		struct gw_wakes w;
		gw_wakes_init(&w);
		bool sweep = now - swept_ms >= GW_EDGE_SWEEP_MS;
		if (sweep) {
			swept_ms = now;
			gw_edge_deadlines(g, now);
		}
		pthread_mutex_lock(&g->lock);
		if (sweep)
			gw_edge_gone(g, &w, now);
		for (struct gw_waiter *x = g->polls.next; x != &g->polls; x = x->next) {
			struct gw_req *r = x->owner;
			if (r->deadline_ms <= now) {
				r->timed_out = true;
				gw_wake_req(&w, r);
			} else if (r->recheck_ms && r->recheck_ms <= now) {
				r->recheck_ms = 0;
				r->recheck = true; /* get_intent asks Postgres */
				gw_wake_req(&w, r);
			}
		}
		for (struct gw_waiter *x = g->streams.next; x != &g->streams; x = x->next) {
			struct gw_req *r = x->owner;
			if (now - r->last_write_ms >= g->cfg.http_heartbeat_ms) {
				r->hb_due = true;
				r->last_write_ms = now;
				gw_wake_req(&w, r);
			}
			/* A queue stream's place, read again (the lookup thread wakes it). */
			if (r->route == GW_QUEUE_EVENTS && !r->sent_ev &&
			    now - r->refresh_ms >= GW_ROOM_REFRESH_MS && gw_lookup_refresh(g, r))
				r->refresh_ms = now;
		}
		pthread_mutex_unlock(&g->lock);
		gw_wakes_run(&w);
	}
	return NULL;
}

/* ---- the daemon --------------------------------------------------------------------------------
 */

int gw_http_start(struct gw *g, char *err, size_t err_len)
{
	struct sockaddr_storage sa;
	bool v6;
	char why[128];
	if (fs_listen_parse(g->cfg.listen, &sa, &v6, why, sizeof why) < 0) {
		snprintf(err, err_len, "listen: %s", why);
		return -EINVAL;
	}
	uint16_t port = ntohs(v6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
				 : ((struct sockaddr_in *)&sa)->sin_port);
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
			 MHD_USE_ERROR_LOG | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
	g->daemon = MHD_start_daemon(
		flags, port, NULL, NULL, on_request, g, MHD_OPTION_EXTERNAL_LOGGER, fs_mhd_log,
		"http", MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)(g->cfg.http_connections_max + OVERLOAD_RESERVE),
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)g->cfg.http_timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)g->cfg.http_connection_memory,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, g, MHD_OPTION_NOTIFY_CONNECTION,
		gw_edge_connection, g, MHD_OPTION_URI_LOG_CALLBACK, gw_edge_uri, g,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096U,
		/* One thread: no pool (libmicrohttpd warns about a pool of one). */
		g->cfg.http_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
		(unsigned)g->cfg.http_threads, MHD_OPTION_END);
	if (!g->daemon) {
		snprintf(err, err_len, "cannot listen on %s: %s", g->cfg.listen, strerror(errno));
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *info =
		MHD_get_daemon_info(g->daemon, MHD_DAEMON_INFO_BIND_PORT);
	g->port = info ? info->port : port;
	return 0;
}

void gw_http_stop(struct gw *g)
{
	if (!g->daemon)
		return;
	/* Every suspended request is resumed: it answers what it has (stopping). */
	struct gw_wakes w;
	gw_wakes_init(&w);
	pthread_mutex_lock(&g->lock);
	gw_wake_list(&w, &g->polls);
	gw_wake_list(&w, &g->streams);
	pthread_mutex_unlock(&g->lock);
	gw_wakes_run(&w);
	MHD_stop_daemon(g->daemon);
	g->daemon = NULL;
}
