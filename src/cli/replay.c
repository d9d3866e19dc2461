/* replay.c: `flashsale replay`, rebuild the database from the intents topic, or (--dry-run)
 * replay the log through the pure core and name every difference with what Postgres recorded.
 *
 * The check is the strongest one the audit has (TESTING.md): decisions are a pure function of
 * each partition's log (DESIGN.md, INV-4), so one fault-free pass of the same code over the
 * same records must reproduce every stored decision, reject, sale record, reservation and
 * counter exactly. A skipped, doubled or reordered record shows up as a named difference.
 * The rebuild itself is the worker's own batch path (flashsale-worker --replay). */
#include "cli/cli.h"

#include "io/keyring.h"
#include "io/roomread.h"

#include "core/batch.h"
#include "core/cart.h"
#include "core/core.h"
#include "io/kafka.h"
#include "core/record.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
	REPLAY_BATCH_MAX = 1000,
	REPLAY_PARTS_MAX = 1024,
	DIFFS_SHOWN_MAX = 50,
	POLL_MS = 200,
	IDLE_POLLS_MAX = 300, /* 60 s without a record while some are still expected */
};

/* Rows of one table for one partition, ordered by offset, walked with a cursor. */
struct rows {
	PGresult *r;
	int next;
	int64_t covered; /* rejects: the next offset expected inside the current row's range */
};

struct rp_part {
	struct fs_core core;
	struct fs_carts carts; /* core.carts when the topic's partition count is recorded */
	struct fs_batch batch;
	int64_t target; /* the stored next offset: Postgres decided everything below it */
	int64_t last;	/* last offset fed, -1 before the first */
	int64_t gaps;	/* offsets after the first record that no consumer is given (n_gaps) */
	bool done;
	/* every intent id decided so far on this partition, for the repeats of later batches */
	struct fs_seen seen;
	struct rows dec, rej, sale, fwd, out;
	struct rows xr;	     /* store_refusals: records whose clock's expiries were refused */
	const char **xr_ids; /* their holds' intent ids (borrowed from xr.r) */
	struct rows xg;	     /* store_refusals: cart groups whose units were refused */
	struct fs_group_ref *xg_groups; /* (cart ids borrowed from xg.r) */
	int refused_next;		/* a second cursor on rej: the records the store refused */
	struct fs_batch_counts counts;
};

struct rp {
	flashsale_t *fs;
	PGconn *pg;
	struct fs_record_limits limits;
	struct fs_record_ext ext; /* the parse's scratch */
	struct rp_part *parts;
	int nparts;
	int64_t diffs;
	int64_t records;
	bool quiet; /* count differences, print nothing (the audit reports them itself) */
	/* The waiting rooms' key ring (admission.keys, issue 33): buys' tokens verify as live. */
	struct fs_keyring keys;
	bool has_keys;
	/* A decision the replay cannot reproduce for want of a key (issue 47 item 1): the first
	 * buy whose token names a key this ring lacks while Postgres says the worker decided it
	 * on its merits, or a sale behind a room opened without a ring here ("" for none). */
	char missing_key[FS_KEY_ID_LEN_MAX + 1];
	int missing_part;
	int64_t missing_off;
	bool missing_ring;
	/* The reverse: the first buy the worker refused bad_token for a key it lacked, which
	 * this ring holds (a rotation step that signed before every verifier knew the key). */
	char extra_key[FS_KEY_ID_LEN_MAX + 1];
	int extra_part;
	int64_t extra_off;
};

static void diff(struct rp *rp, int part, int64_t off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void diff(struct rp *rp, int part, int64_t off, const char *fmt, ...)
{
	rp->diffs++;
	if (rp->diffs > DIFFS_SHOWN_MAX || rp->quiet)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (off >= 0)
		printf("DIFF partition %d offset %" PRId64 ": %s\n", part, off, msg);
	else
		printf("DIFF partition %d: %s\n", part, msg);
}

/* ---- comparing with Postgres ------------------------------------------------------------- */

static const char *col(const struct rows *t, int c)
{
	return PQgetisnull(t->r, t->next, c) ? "" : PQgetvalue(t->r, t->next, c);
}

static int64_t icol(const struct rows *t, int c)
{
	return PQgetisnull(t->r, t->next, c) ? -1 : strtoll(PQgetvalue(t->r, t->next, c), NULL, 10);
}

/* Moves the cursor to the row at `off`, reporting rows Postgres has that the replay has not. */
static bool seek_row(struct rp *rp, int part, struct rows *t, const char *table, int64_t off)
{
	while (t->next < PQntuples(t->r) && icol(t, 0) < off) {
		diff(rp, part, icol(t, 0),
		     "%s: a row in Postgres for a record the replay did not "
		     "decide there",
		     table);
		t->next++;
	}
	if (t->next < PQntuples(t->r) && icol(t, 0) == off)
		return true;
	diff(rp, part, off, "%s: the replay decided this record, Postgres has no row", table);
	return false;
}

static void check_text(struct rp *rp, int part, int64_t off, const char *what, const char *pg,
		       const char *replay)
{
	if (strcmp(pg, replay ? replay : "") != 0)
		diff(rp, part, off, "%s: Postgres says '%s', the replay says '%s'", what, pg,
		     replay ? replay : "");
}

static void check_int(struct rp *rp, int part, int64_t off, const char *what, int64_t pg,
		      int64_t replay)
{
	if (pg != replay)
		diff(rp, part, off, "%s: Postgres says %" PRId64 ", the replay says %" PRId64, what,
		     pg, replay);
}

/* A row of rejects covers the offsets off..off_end (a run of alike bad records). */
static void finish_reject_row(struct rp *rp, int part, struct rows *t)
{
	int64_t end = icol(t, 2);
	if (t->covered <= end)
		diff(rp, part, t->covered < icol(t, 0) ? icol(t, 0) : t->covered,
		     "rejects: a row in Postgres covers records the replay did not reject there");
	t->next++;
}

static void compare_reject(struct rp *rp, int part, struct rows *t, int64_t off, const char *reason)
{
	while (t->next < PQntuples(t->r) && icol(t, 2) < off)
		finish_reject_row(rp, part, t);
	if (t->next >= PQntuples(t->r) || icol(t, 0) > off) {
		diff(rp, part, off,
		     "rejects: the replay rejected this record, Postgres has no row");
		return;
	}
	if (t->covered < icol(t, 0))
		t->covered = icol(t, 0);
	if (t->covered < off)
		diff(rp, part, t->covered,
		     "rejects: a row in Postgres covers a record the replay did not reject");
	check_text(rp, part, off, "reject reason", col(t, 1), reason);
	t->covered = off + 1;
	if (off == icol(t, 2))
		t->next++;
}

/* True when the decision differs from Postgres's only because this replay lacks a key the
 * worker held: a buy refused here for a token whose key id the ring lacks (bad_token) that
 * Postgres says was decided otherwise, or an open refused no_key_ring that Postgres says was
 * applied. The replay then names the key (or the missing ring) and refuses, rather than
 * listing the differences that follow from it. */
static bool lacks_key(struct rp *rp, const struct rp_part *p, const struct fs_item *it)
{
	const struct fs_decision *d = &it->dec;
	const char *pg_outcome = col(&p->dec, 4), *pg_reason = col(&p->dec, 5);
	char kid[FS_KEY_ID_LEN_MAX + 1];
	if (it->rec.kind != FS_KIND_BUY || !fs_token_key_id(it->rec.u.token.text, kid))
		return false;
	bool pg_bad = strcmp(pg_outcome, "rejected") == 0 && strcmp(pg_reason, "bad_token") == 0;
	bool bad = d->reason && strcmp(d->reason, "bad_token") == 0;
	bool held_here = fs_keyring_has(rp->has_keys ? &rp->keys : NULL, kid);
	if (pg_bad && !bad && held_here) {
		rp->diffs++;
		if (!rp->extra_key[0]) {
			snprintf(rp->extra_key, sizeof rp->extra_key, "%s", kid);
			rp->extra_part = it->rec.partition;
			rp->extra_off = it->rec.offset;
		}
		return true;
	}
	if (!bad || held_here || pg_bad)
		return false;
	rp->diffs++;
	if (!rp->missing_key[0]) {
		snprintf(rp->missing_key, sizeof rp->missing_key, "%s", kid);
		rp->missing_part = it->rec.partition;
		rp->missing_off = it->rec.offset;
	}
	return true;
}

/* The sale record: an open refused here for want of a ring, applied by the worker. */
static bool lacks_ring(struct rp *rp, const struct fs_item *it, const char *pg_outcome)
{
	if (rp->has_keys || !it->dec.reason || strcmp(it->dec.reason, "no_key_ring") != 0 ||
	    strcmp(pg_outcome, "applied") != 0)
		return false;
	rp->diffs++;
	if (!rp->missing_ring) {
		rp->missing_ring = true;
		rp->missing_part = it->rec.partition;
		rp->missing_off = it->rec.offset;
	}
	return true;
}

/* decisions columns: off, intent_id, kind, body_hash, outcome, reason, qty, expires_at_ms,
 * decided_at_ms */
static void compare_item(struct rp *rp, struct rp_part *p, const struct fs_item *it)
{
	int part = it->rec.partition;
	int64_t off = it->rec.offset;
	const struct fs_decision *d = &it->dec;
	if (it->cls == FS_ITEM_NEW && seek_row(rp, part, &p->dec, "decisions", off)) {
		if (lacks_key(rp, p, it)) {
			p->dec.next++;
			return;
		}
		check_text(rp, part, off, "intent id", col(&p->dec, 1), it->rec.intent_id);
		check_int(rp, part, off, "kind", icol(&p->dec, 2), fs_item_key_kind(it));
		check_int(rp, part, off, "body hash", icol(&p->dec, 3), it->rec.body_hash);
		check_text(rp, part, off, "outcome", col(&p->dec, 4), fs_outcome_name(d->outcome));
		check_text(rp, part, off, "reason", col(&p->dec, 5), d->reason);
		check_int(rp, part, off, "qty", icol(&p->dec, 6), d->qty);
		check_int(rp, part, off, "expires_at", icol(&p->dec, 7),
			  d->reserve ? d->expires_at_ms : -1);
		check_int(rp, part, off, "decided_at", icol(&p->dec, 8), d->decided_at_ms);
		p->dec.next++;
	} else if (it->cls == FS_ITEM_INVALID) {
		compare_reject(rp, part, &p->rej, off, d->reason);
	} else if (it->cls == FS_ITEM_FORWARD && seek_row(rp, part, &p->fwd, "forwards", off)) {
		check_int(rp, part, off, "forwarded to partition", icol(&p->fwd, 1), it->rec.route);
		p->fwd.next++;
	} else if (it->cls == FS_ITEM_SALE && seek_row(rp, part, &p->sale, "sale_log", off)) {
		if (lacks_ring(rp, it, col(&p->sale, 1))) {
			p->sale.next++;
			return;
		}
		check_text(rp, part, off, "sale outcome", col(&p->sale, 1),
			   fs_outcome_name(d->outcome));
		check_text(rp, part, off, "sale reason", col(&p->sale, 2), d->reason);
		p->sale.next++;
	}
}

/* A record the live worker's store refused for good (a reject row store_refused: issue 28,
 * item 1) is taken as refused: the replay cannot know the constraint that refused it. */
static void mark_refused(struct rp_part *p, struct fs_item *it)
{
	const PGresult *r = p->rej.r;
	int n = PQntuples(r);
	while (p->refused_next < n &&
	       strtoll(PQgetvalue(r, p->refused_next, 0), NULL, 10) < it->rec.offset)
		p->refused_next++;
	if (p->refused_next < n &&
	    strtoll(PQgetvalue(r, p->refused_next, 0), NULL, 10) == it->rec.offset &&
	    strcmp(PQgetvalue(r, p->refused_next, 1), "store_refused") == 0)
		fs_item_refuse(it);
}

/* A record whose clock brought expiries the live worker's store refused (store_refusals
 * rows at its offset: issue 47, item 5): the replay refuses them too, as it cannot know the
 * rule that refused them. */
static void mark_refused_expiries(struct rp_part *p, struct fs_item *it)
{
	struct rows *t = &p->xr;
	while (t->next < PQntuples(t->r) && icol(t, 0) < it->rec.offset)
		t->next++;
	it->refuse_due = t->next < PQntuples(t->r) && icol(t, 0) == it->rec.offset;
}

/* The holds whose expiry the live store refused, for fs_core_refuse_due: a hold named there is
 * due at its row's record and at no refuse_due record before it (it would have expired or been
 * refused there), so the partition's whole list can go with every such record. */
static int refused_ids(struct rp_part *p)
{
	int n = PQntuples(p->xr.r);
	p->xr_ids = calloc((size_t)n + 1, sizeof *p->xr_ids);
	if (!p->xr_ids)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		p->xr_ids[i] = PQgetvalue(p->xr.r, i, 1);
	p->batch.refuse_ids = p->xr_ids;
	p->batch.refuse_ids_len = (uint32_t)n;
	/* The waiting groups whose units it refused to take when woken: refused here too. */
	n = PQntuples(p->xg.r);
	p->xg_groups = calloc((size_t)n + 1, sizeof *p->xg_groups);
	if (!p->xg_groups)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		p->xg_groups[i] =
			(struct fs_group_ref){PQgetvalue(p->xg.r, i, 0),
					      (int32_t)strtol(PQgetvalue(p->xg.r, i, 1), NULL, 10)};
	p->batch.refuse_groups = p->xg_groups;
	p->batch.refuse_groups_len = (uint32_t)n;
	return 0;
}

/* The next outbox row (cart_out) against what the replay's step sent: a message or a result,
 * the same bytes to the same place. */
static void compare_out(struct rp *rp, int part, struct rp_part *p, int64_t off, bool intents,
			int32_t to, const char *key, struct fs_buf *b)
{
	struct rows *t = &p->out;
	if (!seek_row(rp, part, t, "cart_out", off))
		return;
	check_text(rp, part, off, "cart_out topic", col(t, 1), intents ? "intents" : "results");
	check_int(rp, part, off, "cart_out partition", icol(t, 2), intents ? to : -1);
	check_text(rp, part, off, "cart_out key", col(t, 3), key);
	check_text(rp, part, off, "cart_out payload", col(t, 4), fs_buf_cstr(b));
	t->next++;
}

/* The carts' messages and results of the replayed batch, in the order the worker stored them:
 * by record, its messages first. */
static void compare_cart_out(struct rp *rp, struct rp_part *p, int part)
{
	const struct fs_carts *cs = &p->carts;
	struct fs_buf b = {0};
	uint32_t m = 0, e = 0;
	while (m < cs->out_len || e < cs->events_len) {
		int64_t off = m < cs->out_len ? cs->out[m].origin : INT64_MAX;
		if (e < cs->events_len && cs->events[e].offset < off)
			off = cs->events[e].offset;
		for (; m < cs->out_len && cs->out[m].origin == off; m++) {
			fs_buf_clear(&b);
			fs_cart_msg_json(&b, &cs->out[m]);
			compare_out(rp, part, p, off, true, fs_cart_msg_to(&cs->out[m]),
				    cs->out[m].key, &b);
		}
		for (; e < cs->events_len && cs->events[e].offset == off; e++) {
			fs_buf_clear(&b);
			fs_cart_event_json(&b, &cs->events[e], part);
			compare_out(rp, part, p, off, false, -1, cs->events[e].cart_id, &b);
		}
	}
	fs_buf_free(&b);
}

static void decide_batch(struct rp *rp, struct rp_part *p)
{
	struct fs_batch *b = &p->batch;
	if (b->len == 0)
		return;
	for (uint32_t i = 0; i < b->len; i++) {
		mark_refused(p, &b->items[i]);
		mark_refused_expiries(p, &b->items[i]);
	}
	fs_batch_reset_decisions(b);
	fs_batch_add_seen(b, &p->seen);
	if (fs_batch_decide(b, &p->core) < 0) {
		diff(rp, b->items[0].rec.partition, -1, "out of memory while replaying");
		return;
	}
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		compare_item(rp, p, it);
		if (it->cls == FS_ITEM_NEW && fs_seen_add(&p->seen, it) < 0)
			diff(rp, it->rec.partition, -1, "out of memory while replaying");
	}
	p->counts.records += b->counts.records;
	p->counts.fresh += b->counts.fresh;
	p->counts.repeats += b->counts.repeats;
	p->counts.conflicts += b->counts.conflicts;
	p->counts.invalid += b->counts.invalid;
	p->counts.sale += b->counts.sale;
	p->counts.ticks += b->counts.ticks;
	p->counts.forwarded += b->counts.forwarded;
	p->counts.carts += b->counts.carts;
	p->counts.joins += b->counts.joins;
	rp->records += b->len;
	if (p->core.carts)
		compare_cart_out(rp, p, b->items[0].rec.partition);
	fs_core_commit(&p->core);
	fs_batch_clear(b);
}

/* The SKUs of the partition against the replay's. */
static void compare_skus(struct rp *rp, int part, struct rp_part *p, const char *const prm[1])
{
	PGresult *r = PQexecParams(rp->pg,
				   "SELECT sku, status, supply, available, held, sold FROM skus "
				   "WHERE part = $1::int ORDER BY sku",
				   1, NULL, prm, NULL, NULL, 0);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
	if (n != (int)p->core.skus_len)
		diff(rp, part, -1, "skus: Postgres has %d, the replay %u", n, p->core.skus_len);
	for (int i = 0; i < n; i++) {
		const struct fs_sku *s = fs_core_sku(&p->core, PQgetvalue(r, i, 0));
		if (!s) {
			diff(rp, part, -1, "sku %s: in Postgres only", PQgetvalue(r, i, 0));
			continue;
		}
		char what[128];
		int64_t vals[] = {s->supply, s->available, s->held, s->sold};
		const char *names[] = {"supply", "available", "held", "sold"};
		for (int k = 0; k < 4; k++) {
			snprintf(what, sizeof what, "sku %s %s", s->sku, names[k]);
			check_int(rp, part, -1, what, strtoll(PQgetvalue(r, i, k + 2), NULL, 10),
				  vals[k]);
		}
		snprintf(what, sizeof what, "sku %s status", s->sku);
		check_text(rp, part, -1, what, PQgetvalue(r, i, 1),
			   s->status == FS_SKU_OPEN ? "open" : "closed");
	}
	PQclear(r);
}

/* The reservations of the partition against the replay's holds. */
static void compare_holds(struct rp *rp, int part, struct rp_part *p, const char *const prm[1])
{
	PGresult *r = PQexecParams(
		rp->pg,
		"SELECT intent_id, status, late, coalesce(ended_off, -1) FROM reservations "
		"WHERE part = $1::int",
		1, NULL, prm, NULL, NULL, 0);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
	if (n != (int)p->core.holds_len)
		diff(rp, part, -1, "reservations: Postgres has %d, the replay %u", n,
		     p->core.holds_len);
	for (int i = 0; i < n; i++) {
		const struct fs_hold *h = fs_core_hold(&p->core, PQgetvalue(r, i, 0));
		char what[96];
		snprintf(what, sizeof what, "reservation %s", PQgetvalue(r, i, 0));
		if (!h) {
			diff(rp, part, -1, "%s: in Postgres only", what);
			continue;
		}
		const char *st = fs_hold_status_name(h->status);
		check_text(rp, part, -1, what, PQgetvalue(r, i, 1), st);
		check_text(rp, part, -1, what, PQgetvalue(r, i, 2), h->late ? "t" : "f");
		check_int(rp, part, -1, what, strtoll(PQgetvalue(r, i, 3), NULL, 10),
			  h->status == FS_HOLD_HELD ? -1 : h->ended_offset);
	}
	PQclear(r);
}

/* The partition row's counters against the replay's. */
static void compare_counters(struct rp *rp, int part, struct rp_part *p, const char *pp)
{
	const struct fs_config *cfg = flashsale_config(rp->fs);
	const char *q[] = {cfg->group, cfg->topic_intents, pp};
	PGresult *r = PQexecParams(rp->pg,
				   "SELECT n_records, n_fresh, n_repeats, n_conflicts, n_invalid, "
				   "n_sale, n_ticks, n_forwarded, n_gaps, n_carts, n_joins FROM "
				   "partitions WHERE grp = $1 "
				   "AND topic = $2 AND part = $3::int",
				   3, NULL, q, NULL, NULL, 0);
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		int64_t v[] = {p->counts.records,   p->counts.fresh,	 p->counts.repeats,
			       p->counts.conflicts, p->counts.invalid,	 p->counts.sale,
			       p->counts.ticks,	    p->counts.forwarded, p->gaps,
			       p->counts.carts,	    p->counts.joins};
		const char *names[] = {"records", "fresh", "repeats", "conflicts",
				       "invalid", "sale",  "ticks",   "forwarded",
				       "gaps",	  "carts", "joins"};
		for (int k = 0; k < 11; k++) {
			char what[64];
			snprintf(what, sizeof what, "counter n_%s", names[k]);
			check_int(rp, part, -1, what, strtoll(PQgetvalue(r, 0, k), NULL, 10), v[k]);
		}
	}
	PQclear(r);
}

/* The waiting rooms' rows (issue 33) against the replay's rooms: every entry, its join and
 * its admission (slot, clock, record) and its token's mint (clock, record). */
static void compare_rooms(struct rp *rp, int part, struct rp_part *p, const char *const prm[1])
{
	PGresult *r = PQexecParams(rp->pg,
				   "SELECT sku, " FS_ROOM_ENTRY_COLUMNS
				   " FROM room_joins WHERE part = $1::int",
				   1, NULL, prm, NULL, NULL, 0);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
	int64_t mine = 0;
	for (uint32_t k = 0; k < p->core.room_skus_len; k++)
		mine += p->core.skus[p->core.room_skus[k]].room->len;
	if (n != mine)
		diff(rp, part, -1, "room_joins: Postgres has %d, the replay %" PRId64, n, mine);
	for (int i = 0; i < n; i++) {
		struct fs_room_entry pg;
		fs_room_entry_of_row(r, i, 1, &pg);
		const struct fs_sku *k = fs_core_sku(&p->core, PQgetvalue(r, i, 0));
		int64_t at = k && k->room ? fs_room_find(k->room, pg.buyer_id) : -1;
		char what[160];
		snprintf(what, sizeof what, "room_joins %s/%s", PQgetvalue(r, i, 0), pg.buyer_id);
		if (at < 0) {
			diff(rp, part, -1, "%s: in Postgres only", what);
			continue;
		}
		const struct fs_room_entry *e = &k->room->v[at];
		const int64_t have[] = {pg.offset,     pg.joined_ms,   pg.early,     pg.admitted_ms,
					pg.decided_ms, pg.decided_off, pg.minted_ms, pg.minted_off};
		const int64_t want[] = {e->offset,     e->joined_ms,   e->early,     e->admitted_ms,
					e->decided_ms, e->decided_off, e->minted_ms, e->minted_off};
		for (int c = 0; c < 8; c++)
			check_int(rp, part, -1, what, have[c], want[c]);
	}
	PQclear(r);
}

/* After the log: rows left over, and the final state (SKUs, holds, counters). */
static void compare_state(struct rp *rp, int part, struct rp_part *p)
{
	if (p->rej.next < PQntuples(p->rej.r) && p->rej.covered > icol(&p->rej, 0))
		finish_reject_row(rp, part, &p->rej); /* a partly matched last row */
	struct rows *tables[] = {&p->dec, &p->rej, &p->sale, &p->fwd, &p->out};
	const char *names[] = {"decisions", "rejects", "sale_log", "forwards", "cart_out"};
	for (int t = 0; t < 5; t++) {
		for (; tables[t]->next < PQntuples(tables[t]->r); tables[t]->next++)
			diff(rp, part, icol(tables[t], 0),
			     "%s: a row in Postgres for a record the replay did not decide there",
			     names[t]);
	}
	char pp[16];
	snprintf(pp, sizeof pp, "%d", part);
	const char *prm[] = {pp};
	compare_skus(rp, part, p, prm);
	compare_holds(rp, part, p, prm);
	compare_rooms(rp, part, p, prm);
	compare_counters(rp, part, p, pp);
}

/* ---- reading the log --------------------------------------------------------------------- */

static int load_rows(struct rp *rp, int part, struct rp_part *p)
{
	char pp[16];
	snprintf(pp, sizeof pp, "%d", part);
	const char *prm[] = {pp};
	static const char *const sql[] = {
		"SELECT off, intent_id, kind, body_hash, outcome, reason, qty, expires_at_ms, "
		"decided_at_ms FROM decisions WHERE part = $1::int ORDER BY off",
		"SELECT off, reason, off_end FROM rejects WHERE part = $1::int ORDER BY off",
		"SELECT off, outcome, reason FROM sale_log WHERE part = $1::int ORDER BY off",
		"SELECT off, to_part FROM forwards WHERE part = $1::int ORDER BY off",
		"SELECT off, to_topic, coalesce(to_part, -1), msg_key, payload FROM cart_out WHERE "
		"part = $1::int ORDER BY off, seq",
		"SELECT off, intent_id FROM store_refusals WHERE part = $1::int AND round = 0 "
		"ORDER BY off",
		"SELECT intent_id, round FROM store_refusals WHERE part = $1::int AND round > 0",
	};
	struct rows *t[] = {&p->dec, &p->rej, &p->sale, &p->fwd, &p->out, &p->xr, &p->xg};
	for (int i = 0; i < 7; i++) {
		t[i]->r = PQexecParams(rp->pg, sql[i], 1, NULL, prm, NULL, NULL, 0);
		if (PQresultStatus(t[i]->r) != PGRES_TUPLES_OK) {
			cli_err("replay: postgres: %s", PQerrorMessage(rp->pg));
			return -EIO;
		}
	}
	return refused_ids(p);
}

static int setup_parts(struct rp *rp, const int64_t *ends)
{
	const struct fs_config *cfg = flashsale_config(rp->fs);
	rp->parts = calloc((size_t)rp->nparts, sizeof *rp->parts);
	if (!rp->parts)
		return -ENOMEM;
	const char *q[] = {cfg->group, cfg->topic_intents};
	PGresult *r = PQexecParams(rp->pg,
				   "SELECT part, next_offset FROM partitions WHERE grp = $1 AND "
				   "topic = $2",
				   2, NULL, q, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		cli_err("replay: postgres: %s", PQerrorMessage(rp->pg));
		PQclear(r);
		return -EIO;
	}
	for (int i = 0; i < rp->nparts; i++) {
		struct rp_part *p = &rp->parts[i];
		fs_core_init(&p->core, i);
		p->core.keys = rp->has_keys ? &rp->keys : NULL;
		if (rp->limits.carts &&
		    fs_carts_init(&p->carts, i, rp->limits.partitions, FS_CART_LINES_MAX) == 0)
			p->core.carts = &p->carts;
		/* Never forget here: a forgotten id would be decided again and differ. */
		fs_seen_init(&p->seen, UINT32_MAX);
		if (fs_batch_init(&p->batch, REPLAY_BATCH_MAX) < 0)
			return -ENOMEM;
		p->target = 0;
		p->last = -1;
		for (int k = 0; k < PQntuples(r); k++)
			if (atoi(PQgetvalue(r, k, 0)) == i)
				p->target = strtoll(PQgetvalue(r, k, 1), NULL, 10);
		if (p->target < 0)
			p->target = 0;
		if (p->target > ends[i]) {
			diff(rp, i, -1,
			     "the stored next offset %" PRId64 " is past the log end %" PRId64,
			     p->target, ends[i]);
			p->target = ends[i];
		}
		if (load_rows(rp, i, p) < 0) {
			PQclear(r);
			return -EIO;
		}
	}
	PQclear(r);
	return 0;
}

static void feed(struct rp *rp, rd_kafka_message_t *m)
{
	if (m->partition < 0 || m->partition >= rp->nparts)
		return;
	struct rp_part *p = &rp->parts[m->partition];
	if (p->done || m->offset < p->last + 1 || m->offset >= p->target)
		return;
	/* A transaction's marker, an aborted transaction's records (issue 28, item 9). */
	if (p->last >= 0 && m->offset != p->last + 1)
		p->gaps += m->offset - p->last - 1;
	p->last = m->offset;
	struct fs_item *it = fs_batch_push(&p->batch);
	rd_kafka_timestamp_type_t tstype;
	int64_t ts = rd_kafka_message_timestamp(m, &tstype);
	fs_record_parse_ext(&rp->limits, m->key, m->key_len, m->payload, m->len, m->partition,
			    m->offset, ts < 0 ? 0 : ts, &it->rec, &rp->ext);
	if (fs_kind_is_cart((int)it->rec.kind) && !it->rec.misrouted &&
	    fs_batch_keep_ext(&p->batch, it, &rp->ext) < 0)
		it->ext = UINT32_MAX; /* decided rejected, as the worker would have */
	if (p->batch.len == p->batch.cap || m->offset + 1 >= p->target)
		decide_batch(rp, p);
	if (m->offset + 1 >= p->target)
		p->done = true;
}

int cli_topic_rule(PGconn *pg, const char *topic, struct fs_record_limits *limits)
{
	const char *q[] = {topic};
	PGresult *r = PQexecParams(
		pg, "SELECT partitions, misrouted, record_max_bytes FROM topics WHERE topic = $1",
		1, NULL, q, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		cli_err("postgres: %s", PQerrorMessage(pg));
		PQclear(r);
		return -EIO;
	}
	/* No row: no worker has started on this topic, nothing was decided by the rule. */
	if (PQntuples(r) == 1) {
		limits->partitions = atoi(PQgetvalue(r, 0, 0));
		limits->misrouted_reject = strcmp(PQgetvalue(r, 0, 1), "reject") == 0;
		limits->carts = true;	   /* as the worker, once it knows the partition count */
		if (!PQgetisnull(r, 0, 2)) /* the cap the worker decided with, not ours */
			limits->bytes_max = (size_t)atoll(PQgetvalue(r, 0, 2));
	}
	PQclear(r);
	return 0;
}

/* Feeds the log to the replay until every partition reached its end (or the log went idle). */
static void read_log(struct rp *rp, rd_kafka_t *rk)
{
	int idle = 0;
	for (;;) {
		bool all = true;
		for (int i = 0; i < rp->nparts; i++)
			all = all && rp->parts[i].done;
		if (all || idle > IDLE_POLLS_MAX)
			break;
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, POLL_MS);
		if (!m) {
			idle++;
			continue;
		}
		idle = 0;
		if (!m->err)
			feed(rp, m);
		rd_kafka_message_destroy(m);
	}
}

/* Partition i's last batch, its final state compared, and its memory freed. */
static void finish_part(struct rp *rp, int i)
{
	struct rp_part *p = &rp->parts[i];
	if (!p->done)
		diff(rp, i, -1, "the log could not be read up to offset %" PRId64, p->target);
	decide_batch(rp, p);
	compare_state(rp, i, p);
	PQclear(p->dec.r);
	PQclear(p->rej.r);
	PQclear(p->sale.r);
	PQclear(p->fwd.r);
	PQclear(p->out.r);
	PQclear(p->xr.r);
	free(p->xr_ids);
	PQclear(p->xg.r);
	free(p->xg_groups);
	fs_core_free(&p->core);
	fs_carts_free(&p->carts);
	fs_batch_free(&p->batch);
	fs_seen_free(&p->seen);
}

/* The replay's refusal when it lacked a key the worker held (issue 47 item 1): named, with
 * what to do, whether quiet or not (the audit's check says it too). The differences after
 * that record follow from it. */
static void refuse_missing(const struct rp *rp, const char *path)
{
	if (rp->missing_ring)
		cli_err("replay: refused: partition %d offset %" PRId64 " opens a sale behind a "
			"waiting room, which the worker applied with its key ring; this replay has "
			"none (admission.keys): configure the ring the workers had and replay "
			"again",
			rp->missing_part, rp->missing_off);
	if (rp->missing_key[0])
		cli_err("replay: refused: partition %d offset %" PRId64 " is a buy whose token "
			"was signed with key %s, which the worker held and this replay's key ring "
			"(admission.keys = %s) lacks: add key %s to it and replay again (a retired "
			"key "
			"stays in the ring while the log may be replayed)",
			rp->missing_part, rp->missing_off, rp->missing_key, path[0] ? path : "none",
			rp->missing_key);
	if (rp->extra_key[0])
		cli_err("replay: refused: partition %d offset %" PRId64 " is a buy whose token "
			"was signed with key %s, which the worker that decided it lacked "
			"(bad_token) "
			"and this replay's key ring holds: a token was signed before every "
			"verifier "
			"knew its key (docs/reference/operations.md, \"The waiting room's keys\"); "
			"replay with the ring that worker had to reproduce it",
			rp->extra_part, rp->extra_off, rp->extra_key);
}

int cli_replay_check(flashsale_t *fs, bool quiet, int64_t *records, int64_t *diffs)
{
	struct rp rp = {.fs = fs, .quiet = quiet};
	rp.pg = flashsale_pg(fs);
	if (!rp.pg) {
		cli_err("replay: %s", flashsale_error(fs));
		return 1;
	}
	const struct fs_config *cfg = flashsale_config(fs);
	rp.limits.bytes_max = (size_t)cfg->record_max_bytes;
	if (cli_topic_rule(rp.pg, cfg->topic_intents, &rp.limits) < 0)
		return 1;
	if (cfg->admission_keys[0]) {
		char err[512];
		if (fs_keyring_load(cfg->admission_keys, &rp.keys, err, sizeof err) < 0) {
			cli_err("replay: %s", err);
			return 1;
		}
		rp.has_keys = true;
	}
	int64_t *ends = NULL, *lo = NULL;
	rp.nparts = cli_topic_ends(fs, cfg->topic_intents, &ends);
	if (rp.nparts < 0)
		return 1;
	if (rp.nparts > REPLAY_PARTS_MAX || setup_parts(&rp, ends) < 0) {
		free(ends);
		return 1;
	}
	lo = calloc((size_t)rp.nparts, sizeof *lo);
	rd_kafka_t *rk = lo ? cli_topic_reader(fs, cfg->topic_intents, rp.nparts,
					       "flashsale-replay-check", lo)
			    : NULL;
	int transient = 0;
	const char *clock_why =
		rk ? fs_kafka_check_log_clock(rk, cfg->topic_intents, 10000, &transient) : NULL;
	if (clock_why)
		cli_err("replay: %s",
			clock_why); /* the log's clock is not one a replay can trust */
	if (!rk || clock_why) {
		if (rk) {
			rd_kafka_consumer_close(rk);
			rd_kafka_destroy(rk);
		}
		free(lo);
		free(ends);
		return 1;
	}
	for (int i = 0; i < rp.nparts; i++) {
		if (lo[i] > 0 && rp.parts[i].target > 0)
			diff(&rp, i, -1,
			     "the log starts at %" PRId64 ": records below it are gone, "
			     "the replay cannot check them",
			     lo[i]);
		rp.parts[i].done = rp.parts[i].target <= lo[i];
		rp.parts[i].last = lo[i] - 1;
	}
	read_log(&rp, rk);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	for (int i = 0; i < rp.nparts; i++)
		finish_part(&rp, i);
	free(rp.parts);
	free(ends);
	free(lo);
	if (rp.diffs > DIFFS_SHOWN_MAX && !quiet)
		printf("... %" PRId64 " differences in all\n", rp.diffs);
	refuse_missing(&rp, cfg->admission_keys);
	*records = rp.records;
	*diffs = rp.diffs;
	fs_keyring_wipe(&rp.keys);
	return rp.diffs ? 1 : 0;
}

/* ---- the command ------------------------------------------------------------------------- */

static const char usage_replay[] =
	"usage: flashsale replay [--dry-run]\n"
	"\n"
	"Rebuilds the database from the intents topic: every partition is decided from its\n"
	"stored offset (the beginning, for an empty database) to the log's end, by the worker's\n"
	"own batch path (flashsale-worker --replay), publishing nothing, with a progress bar and\n"
	"the rate. Resuming an older dump converges to the same state. A stored offset below the\n"
	"log's start stops with an error, never a silent skip.\n"
	"--dry-run changes nothing: it replays the log through the pure core in memory and names\n"
	"every difference with what Postgres recorded (decisions, rejects, sale records,\n"
	"forwarded records, reservations, stock counters, record counters). Exit 1 if there\n"
	"is any. Both apply the partitioning rule recorded for the topic (partition count,\n"
	"misrouted = forward | reject) as the live worker did.\n";

int cli_replay(flashsale_t *fs, int argc, char **argv)
{
	bool dry_run = false;
	const struct cli_opt spec[] = {
		{"dry-run", CLI_FLAG, &dry_run, 0, 0},
		{NULL, 0, NULL, 0, 0},
	};
	int rc = cli_parse(argc, argv, usage_replay, spec, 0, 0);
	if (rc >= 0)
		return rc;
	if (dry_run) {
		int64_t records = 0, diffs = 0;
		rc = cli_replay_check(fs, false, &records, &diffs);
		printf("replay check: %" PRId64 " records replayed, %" PRId64 " differences\n",
		       records, diffs);
		return rc;
	}

	/* The rebuild is the worker itself, next to this binary, with the same configuration. */
	char self[PATH_MAX], worker[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		cli_err("replay: cannot find my own path");
		return 1;
	}
	self[n] = '\0';
	snprintf(worker, sizeof worker, "%s/flashsale-worker", dirname(self));
	const char *args[2 * 64 + 8];
	int k = 0;
	args[k++] = worker;
	args[k++] = "--replay";
	if (cli_config_file) {
		args[k++] = "-c";
		args[k++] = cli_config_file;
	}
	for (int i = 0; i < cli_nsets && k < (int)(sizeof args / sizeof args[0]) - 3; i++) {
		args[k++] = "--set";
		args[k++] = cli_sets[i];
	}
	args[k] = NULL;
	fflush(stdout);
	execv(worker, (char *const *)args);
	cli_err("replay: %s: %s", worker, strerror(errno));
	return 1;
}
