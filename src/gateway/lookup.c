/* lookup.c: decisions the gateway does not hold in memory (decided before it started, or
 * pushed out of its cache), read from Postgres on a thread of their own so that libmicrohttpd's
 * threads never block on the database (see gateway.h). */
#include "gateway/gateway.h"

#include "io/log.h"
#include "io/roomread.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct found {
	char *decision;
	int32_t part;
	int64_t off;
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer[FS_BUYER_LEN_MAX + 1]; /* a buy's (its fingerprint: issue 47, item 6) */
	int64_t qty;
	bool provisional; /* a follow-up that found no hold (unknown_intent) */
	char *event;	  /* what became of the hold, for a buy whose hold ended */
	char event_name[24];
	int64_t event_off;
};

/* The gateway only reads (issue 48): its session is read-only whatever its role, and a role
 * that may write is named once a connection, so that an operator gives it gateway.pg's own. */
static void read_only_session(PGconn *c)
{
	PGresult *r = PQexec(c, "SET default_transaction_read_only = on");
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fs_warn("lookup: postgres: read-only session: %s", PQerrorMessage(c));
	PQclear(r);
	r = PQexec(c, "SELECT current_user, (SELECT string_agg(DISTINCT privilege_type, ', ') "
		      "FROM information_schema.role_table_grants WHERE grantee = current_user AND "
		      "privilege_type <> 'SELECT' AND table_schema = current_schema()), "
		      "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)");
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
	    (!PQgetisnull(r, 0, 1) || PQgetvalue(r, 0, 2)[0] == 't'))
		fs_warn("lookup: postgres role %s may write (%s): the gateway only reads; give it "
			"a "
			"read-only role (gateway.pg, docs/reference/operations.md)",
			PQgetvalue(r, 0, 0),
			PQgetisnull(r, 0, 1) ? "superuser" : PQgetvalue(r, 0, 1));
	PQclear(r);
}

static PGconn *connect_pg(const struct gw *g)
{
	/* connect_timeout bounds a lookup while Postgres is away (the conninfo may set its own).
	 * gateway.pg is the gateway's own read-only role; fallback_application_name names its
	 * sessions for operators and tests. */
	const char *keys[] = {"dbname", "connect_timeout", "fallback_application_name", NULL};
	const char *vals[] = {g->cfg.gateway_pg[0] ? g->cfg.gateway_pg : g->cfg.pg, "3",
			      "flashsale-gateway", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(c) != CONNECTION_OK) {
		char *msg = PQerrorMessage(c), *nl = strchr(msg, '\n');
		if (nl)
			*nl = '\0';
		fs_warn("lookup: postgres: %s", msg);
		PQfinish(c);
		return NULL;
	}
	read_only_session(c);
	return c;
}

static const char *const type_names[] = {"buy", "confirm", "cancel"};

static char *dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

/* 0 found (f filled), -ENOENT, -EIO. sku: the entry's, when known ("" otherwise): only its row
 * (the same id on a buy of a SKU of another partition is another buyer's: issue 47, item 7). */
static int query(PGconn *c, const char *id, enum gw_kind kind, const char *sku, struct found *f)
{
	char k[16];
	snprintf(k, sizeof k, "%d", (int)kind + 1);
	const char *p[] = {id, k, sku};
	/* As flashsale_decision_get: the decision (a follow-up that found no hold is kept
	 * under its kind + 10, which a decision that took effect goes before), with the hold's
	 * end for a buy. */
	PGresult *r = PQexecParams(
		c,
		"SELECT d.sku, d.outcome, coalesce(d.reason, ''), d.qty, "
		"coalesce(d.expires_at_ms, 0), d.decided_at_ms, d.part, d.off, "
		"coalesce(r.status, ''), coalesce(r.ended_off, -1), coalesce(r.late, false), "
		"coalesce(d.buyer_id, ''), d.kind > 10 "
		"FROM decisions d LEFT JOIN reservations r ON r.intent_id = d.intent_id AND "
		"r.part = d.part AND d.kind = 1 WHERE d.intent_id = $1::uuid AND "
		"d.kind IN ($2::int, $2::int + 10) AND ($3 = '' OR d.sku = $3) "
		"ORDER BY d.kind, d.part LIMIT 1",
		3, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		fs_warn("lookup: %s", PQerrorMessage(c));
		PQclear(r);
		return -EIO;
	}
	if (PQntuples(r) == 0) {
		PQclear(r);
		return -ENOENT;
	}
	snprintf(f->sku, sizeof f->sku, "%s", PQgetvalue(r, 0, 0));
	const char *outcome = PQgetvalue(r, 0, 1), *reason = PQgetvalue(r, 0, 2);
	int64_t qty = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
	int64_t expires = strtoll(PQgetvalue(r, 0, 4), NULL, 10);
	int64_t decided = strtoll(PQgetvalue(r, 0, 5), NULL, 10);
	f->part = (int32_t)strtol(PQgetvalue(r, 0, 6), NULL, 10);
	f->off = strtoll(PQgetvalue(r, 0, 7), NULL, 10);
	const char *status = PQgetvalue(r, 0, 8);
	f->event_off = strtoll(PQgetvalue(r, 0, 9), NULL, 10);
	bool late = PQgetvalue(r, 0, 10)[0] == 't';
	snprintf(f->buyer, sizeof f->buyer, "%s", PQgetvalue(r, 0, 11));
	f->provisional = PQgetvalue(r, 0, 12)[0] == 't';
	f->qty = qty;
	/* The fields of the results topic's record (docs/reference/records.md). */
	json_t *o =
		json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:I, s:s}", "v", 1, "type",
			  type_names[kind], "intent_id", id, "sku", f->sku, "outcome", outcome,
			  "qty", (json_int_t)qty, "decided_at", (json_int_t)decided, "partition",
			  (int)f->part, "offset", (json_int_t)f->off, "source", "postgres");
	if (o && *reason)
		json_object_set_new(o, "reason", json_string(reason));
	if (o && expires > 0)
		json_object_set_new(o, "expires_at", json_integer(expires));
	f->decision = dump(o);
	if (kind == GW_K_BUY && f->event_off >= 0 && strcmp(status, "held") != 0 && *status) {
		const char *name =
			strcmp(status, "confirmed") == 0 && late ? "confirmed_late" : status;
		const char *type = status[0] == 'e'   ? "expire"
				   : status[1] == 'o' ? "confirm"
						      : "cancel";
		snprintf(f->event_name, sizeof f->event_name, "%s", name);
		f->event = dump(json_pack("{s:i, s:s, s:s, s:s, s:s, s:i, s:I, s:s}", "v", 1,
					  "type", type, "intent_id", id, "sku", f->sku, "outcome",
					  name, "partition", (int)f->part, "offset",
					  (json_int_t)f->event_off, "source", "postgres"));
	}
	PQclear(r);
	return f->decision ? 0 : -EIO;
}

/* A cart's (issue 31): its results as the worker stored them in its outbox (cart_out: the
 * very records of the results topic). The kind's first decision that took effect (or the last
 * unknown_intent, which a later one replaces), and for the cart, what became of it last. */
static int query_cart(PGconn *c, const char *id, enum gw_kind kind, struct found *f)
{
	static const char *const types[] = {[GW_K_CART] = "cart",
					    [GW_K_CART_CONFIRM] = "cart_confirm",
					    [GW_K_CART_CANCEL] = "cart_cancel"};
	const char *p[] = {id, types[kind]};
	PGresult *r = PQexecParams(
		c,
		"SELECT payload, part, off, payload->>'type', payload->>'outcome', "
		"coalesce((SELECT c.buyer_id FROM carts c WHERE c.cart_id::text = $1 LIMIT 1), '') "
		"FROM cart_out "
		"WHERE msg_key = $1 AND to_topic = 'results' AND (payload->>'type' = $2 OR ($2 = "
		"'cart' AND payload->>'type' IN ('cart_confirm', 'cart_cancel', 'cart_expire') AND "
		"payload->>'outcome' IN ('confirmed', 'confirmed_late', 'cancelled', 'expired', "
		"'refund_required') AND (payload->>'reason' IS NULL OR payload->>'outcome' = "
		"'refund_required'))) ORDER BY off, seq",
		2, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		fs_warn("lookup: %s", PQerrorMessage(c));
		PQclear(r);
		return -EIO;
	}
	int decision = -1, event = -1;
	for (int i = 0; i < PQntuples(r); i++) {
		bool own = strcmp(PQgetvalue(r, i, 3), types[kind]) == 0;
		if (own &&
		    (decision < 0 || strcmp(PQgetvalue(r, decision, 4), "unknown_intent") == 0))
			decision = i;
		else if (!own)
			event = i;
	}
	if (decision < 0) {
		PQclear(r);
		return -ENOENT;
	}
	f->decision = strdup(PQgetvalue(r, decision, 0));
	f->provisional = strcmp(PQgetvalue(r, decision, 4), "unknown_intent") == 0;
	/* Whose cart it is (issue 48, item 2): only that buyer reads it. */
	snprintf(f->buyer, sizeof f->buyer, "%s", PQgetvalue(r, decision, 5));
	f->part = (int32_t)strtol(PQgetvalue(r, decision, 1), NULL, 10);
	f->off = strtoll(PQgetvalue(r, decision, 2), NULL, 10);
	if (event >= 0) {
		const char *type = PQgetvalue(r, event, 3);
		snprintf(f->event_name, sizeof f->event_name, "%s",
			 strcmp(type, "cart_expire") == 0 ? "expired" : PQgetvalue(r, event, 4));
		f->event = strdup(PQgetvalue(r, event, 0));
		f->event_off = strtoll(PQgetvalue(r, event, 2), NULL, 10);
	}
	PQclear(r);
	return f->decision ? 0 : -EIO;
}

/* ---- the waiting rooms (issue 33) ------------------------------------------------------------ */

/* The rooms this thread read lately (only it touches them): read again once older than
 * GW_ROOM_REFRESH_MS, so that a crowd polling its places costs Postgres a read of each room
 * about twice a second, not one per request. keys[i] names rooms[i]. */
struct room_slot {
	struct fs_room_read rr;
	int rc; /* the read's: 0, -ENOENT */
};
static struct gw_room_key keys[GW_ROOMS_CACHED];
static struct room_slot rooms[GW_ROOMS_CACHED];
/* The read of a room the stock topic did not name (issue 48, item 5): used once, never found
 * by a later read, so that junk rooms cannot push a named one out of rooms[]. */
static struct gw_room_key scratch_key;
static struct room_slot scratch;

static struct room_slot *room_of(PGconn *c, struct gw *g, const char *sku, bool named, int *rc)
{
	int64_t now = gw_now_ms();
	int i = gw_room_slot(keys, GW_ROOMS_CACHED, sku, named);
	struct gw_room_key *k = i < 0 ? &scratch_key : &keys[i];
	struct room_slot *slot = i < 0 ? &scratch : &rooms[i];
	if (i >= 0 && k->read_ms && strcmp(k->sku, sku) == 0 &&
	    now - k->read_ms < GW_ROOM_REFRESH_MS) {
		*rc = slot->rc;
		return slot;
	}
	atomic_fetch_add(named ? &g->stats.room_reads_named : &g->stats.room_reads_other, 1);
	if (k->read_ms && slot->rc == 0)
		fs_room_read_free(&slot->rr);
	k->read_ms = 0;
	char err[256];
	*rc = fs_room_read(c, g->cfg.group, g->cfg.topic_intents, sku, &slot->rr, err, sizeof err);
	if (*rc == -EIO) {
		fs_warn("lookup: room %s: %s", sku, err);
		return NULL;
	}
	snprintf(k->sku, sizeof k->sku, "%s", sku);
	k->read_ms = now;
	slot->rc = *rc;
	return slot;
}

/* The admitted buyer's token as the worker's admission result gave it (room_joins.token):
 * the gateway never mints one of its own (issue 47 item 1: a gateway signing with a key a
 * worker does not know yet had its buyers refused). 0, or -ENOENT (none kept: the row was
 * written before the column, or by a worker without a ring; the buyer has the result's). */
static int stored_token(PGconn *c, const char *sku, const char *buyer, char *tok)
{
	const char *p[] = {sku, buyer};
	PGresult *r = PQexecParams(c,
				   "SELECT token FROM room_joins WHERE sku = $1 AND buyer_id = $2 "
				   "AND token IS NOT NULL",
				   2, NULL, p, NULL, NULL, 0);
	int rc = -ENOENT;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
	    strlen(PQgetvalue(r, 0, 0)) <= FS_TOKEN_TEXT_MAX) {
		snprintf(tok, FS_TOKEN_TEXT_MAX + 1, "%s", PQgetvalue(r, 0, 0));
		rc = 0;
	} else if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		fs_warn("lookup: room token: %s", PQerrorMessage(c));
	}
	PQclear(r);
	return rc;
}

/* Where buyer stands in sku's room, as JSON into *answer with its HTTP status; -EIO when
 * Postgres did not answer. */
static int query_queue(PGconn *c, struct gw *g, const char *sku, bool named, const char *buyer,
		       char **answer, unsigned *status)
{
	int rc;
	struct room_slot *slot = room_of(c, g, sku, named, &rc);
	if (!slot)
		return -EIO;
	json_t *o;
	if (rc == -ENOENT) {
		*status = 404;
		o = json_pack("{s:s, s:s}", "error", "no_waiting_room", "message",
			      "no sale behind a waiting room for this SKU");
	} else {
		const struct fs_room_read *rr = &slot->rr;
		struct fs_room_place pl;
		int64_t i = fs_room_find(&rr->room, buyer);
		fs_room_place(&rr->room, buyer, &pl);
		if (!pl.joined) {
			*status = 404;
			o = json_pack("{s:s, s:s}", "error", "not_joined", "message",
				      "this buyer has not joined this SKU's waiting room (or the "
				      "join is not decided yet)");
		} else if (!pl.admitted) {
			*status = 200;
			o = json_pack("{s:s, s:s, s:s, s:b, s:I}", "sku", sku, "buyer_id", buyer,
				      "status", "waiting", "drawn", pl.drawn, "as_of",
				      (json_int_t)rr->clock_ms);
			if (o && pl.drawn) {
				int64_t wait =
					pl.eta_ms > rr->clock_ms ? pl.eta_ms - rr->clock_ms : 0;
				json_object_set_new(o, "position", json_integer(pl.position));
				json_object_set_new(o, "ahead", json_integer(pl.ahead));
				json_object_set_new(o, "estimated_wait_s",
						    json_integer((wait + 999) / 1000));
			}
		} else {
			*status = 200;
			int64_t exp = rr->room.v[i].minted_ms + rr->token_ms; /* room.h */
			o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "sku", sku, "buyer_id",
				      buyer, "status", "admitted", "position",
				      (json_int_t)pl.position, "not_before",
				      (json_int_t)pl.admitted_ms, "expires_at", (json_int_t)exp);
			char tok[FS_TOKEN_TEXT_MAX + 1];
			if (o && stored_token(c, sku, buyer, tok) == 0)
				json_object_set_new(o, "token", json_string(tok));
		}
	}
	*answer = dump(o);
	return *answer ? 0 : -EIO;
}

/* What Postgres said of an entry, into it. Under the lock. */
static void take_found(struct gw_entry *e, enum gw_kind kind, const struct found *f)
{
	if (gw_entry_decide(e, f->decision, f->sku, f->part, f->off, f->provisional) &&
	    (kind == GW_K_BUY || kind == GW_K_CART))
		gw_entry_event(e, "decided", f->part, f->off, f->decision);
	if (f->event)
		gw_entry_event(e, f->event_name, f->part, f->event_off, f->event);
	/* Whose it is (issue 48, item 2): only that buyer reads it. */
	if ((kind == GW_K_BUY || kind == GW_K_CART) && !e->owner[0] && f->buyer[0] &&
	    e->state == GW_S_DECIDED)
		snprintf(e->owner, sizeof e->owner, "%s", f->buyer);
	/* A buy decided through another door: its fingerprint is its own record's (issue 47,
	 * item 6), so that a POST of another body with its id is told apart. */
	if (kind == GW_K_BUY && e->fp == 0 && f->buyer[0] && e->state == GW_S_DECIDED &&
	    e->part == f->part && e->off == f->off)
		e->fp = gw_fingerprint("buy", f->sku, f->buyer, f->qty);
}

static void *lookup_main(void *arg)
{
	struct gw *g = arg;
	PGconn *c = NULL;
	pthread_mutex_lock(&g->lock);
	for (;;) {
		while (!g->lookup_head && !atomic_load(&g->stopping))
			pthread_cond_wait(&g->lookup_cv, &g->lock);
		struct gw_req *r = g->lookup_head;
		if (!r)
			break; /* stopping, nothing queued */
		g->lookup_head = r->lnext;
		g->lookup_len--;
		if (!g->lookup_head)
			g->lookup_tail = NULL;
		char id[FS_UUID_LEN + 1], sku[FS_SKU_LEN_MAX + 1], buyer[FS_BUYER_LEN_MAX + 1];
		char esku[FS_SKU_LEN_MAX + 1] = "";
		memcpy(id, r->id, sizeof id);
		memcpy(sku, r->sku, sizeof sku);
		/* A provisional answer's SKU may be the wrong one (issue 47, item 2): any row. */
		if (r->entry && r->lookup_kind != GW_K_QUEUE && !r->entry->provisional)
			memcpy(esku, r->entry->sku, sizeof esku);
		memcpy(buyer, r->buyer, sizeof buyer);
		bool named = r->room_named;
		enum gw_kind kind = r->lookup_kind;
		pthread_mutex_unlock(&g->lock);

		struct found f = {0};
		char *answer = NULL;
		unsigned status = 0;
		int rc = -EIO;
		if (atomic_load(&g->stopping)) {
			rc = -EIO;
		} else {
			if (!c)
				c = connect_pg(g);
			if (c) {
				rc = kind == GW_K_QUEUE	 ? query_queue(c, g, sku, named, buyer,
								       &answer, &status)
				     : kind >= GW_K_CART ? query_cart(c, id, kind, &f)
							 : query(c, id, kind, esku, &f);
				if (rc == -EIO && PQstatus(c) != CONNECTION_OK) {
					PQfinish(c);
					c = NULL;
				}
			}
		}
		atomic_fetch_add(&g->stats.lookups, 1);

		struct gw_wakes w;
		gw_wakes_init(&w);
		pthread_mutex_lock(&g->lock);
		/* A queue stream's entry is its admission's, which this lookup does not decide. */
		struct gw_entry *e = kind == GW_K_QUEUE ? NULL : r->entry;
		r->lookup_rc = rc;
		r->in_lookup = false;
		if (r->orphan) { /* its connection ended meanwhile: nobody waits for it */
			pthread_mutex_unlock(&g->lock);
			free(answer);
			gw_req_free(r);
			pthread_mutex_lock(&g->lock);
			continue;
		}
		/* A stream keeps the place it had when Postgres does not answer. */
		if (answer || r->phase != GW_PH_STREAM) {
			free(r->answer);
			r->answer = answer;
			r->answer_status = status;
		}
		if (e) {
			if (rc != -EIO)
				e->looked_up = true;
			if (rc == 0)
				take_found(e, kind, &f);
			gw_wake_list(&w, &e->waiters);
		}
		gw_wake_req(&w, r);
		pthread_mutex_unlock(&g->lock);
		gw_wakes_run(&w);
		free(f.decision);
		free(f.event);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	if (c)
		PQfinish(c);
	for (int i = 0; i < GW_ROOMS_CACHED; i++)
		if (keys[i].read_ms && rooms[i].rc == 0)
			fs_room_read_free(&rooms[i].rr);
	if (scratch_key.read_ms && scratch.rc == 0)
		fs_room_read_free(&scratch.rr);
	return NULL;
}

static void enqueue(struct gw *g, struct gw_req *r, enum gw_kind kind)
{
	r->lnext = NULL;
	r->lookup_kind = kind;
	r->in_lookup = true;
	if (g->lookup_tail)
		g->lookup_tail->lnext = r;
	else
		g->lookup_head = r;
	g->lookup_tail = r;
	g->lookup_len++;
	pthread_cond_signal(&g->lookup_cv);
}

void gw_lookup(struct gw *g, struct gw_req *r, enum gw_kind kind)
{
	if (r->entry && kind != GW_K_QUEUE)
		r->entry->asked_ms = gw_now_ms(); /* one ask per GW_RECHECK_MS, however many wait */
	enqueue(g, r, kind);
	r->phase = GW_PH_LOOKUP;
	gw_park(r);
}

bool gw_lookup_refresh(struct gw *g, struct gw_req *r)
{
	/* Streams refresh in the queue's first half only: a crowd of them never makes a request
	 * that waits for Postgres a 503 busy. Not once the thread may have stopped (it drains
	 * the queue and leaves when stopping: checked under the same lock). */
	if (r->in_lookup || g->lookup_len >= GW_LOOKUP_QUEUE_MAX / 2 || atomic_load(&g->stopping))
		return false;
	enqueue(g, r, GW_K_QUEUE);
	return true;
}

int gw_lookup_start(struct gw *g)
{
	pthread_cond_init(&g->lookup_cv, NULL);
	return pthread_create(&g->lookup_thread, NULL, lookup_main, g) == 0 ? 0 : -EIO;
}

void gw_lookup_stop(struct gw *g)
{
	pthread_mutex_lock(&g->lock);
	pthread_cond_broadcast(&g->lookup_cv);
	pthread_mutex_unlock(&g->lock);
	if (g->lookup_thread)
		pthread_join(g->lookup_thread, NULL);
}
