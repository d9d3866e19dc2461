/* sim_store.c: the simulated Postgres (see sim_store.h). Each function names the statement of
 * src/io/store.c it stands for; keep them in step when store.c changes. */
#include "sim_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_PART = 1, T_RESV, T_SKU, T_BUYER, T_CART, T_GROUP, T_JOIN };

static uint64_t id_hash(const char *id)
{
	return fs_hash_bytes(id, strlen(id), 0x5353);
}

void ss_init(struct sim_store *s, enum sim_mutation m)
{
	memset(s, 0, sizeof *s);
	s->mutation = m;
}

void ss_free(struct sim_store *s)
{
	free(s->decisions.v);
	free(s->rejects.v);
	free(s->sales.v);
	free(s->forwards.v);
	free(s->resv.v);
	free(s->skus.v);
	free(s->buyers.v);
	free(s->carts.v);
	free(s->groups.v);
	free(s->outs.v);
	free(s->joins.v);
	free(s->refusals.v);
	free(s->undo.v);
	memset(s, 0, sizeof *s);
}

static void copy_text(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

/* A CHECK constraint refused a row: the statement fails (and the checker fails the seed). */
static bool check(struct sim_store *s, bool ok, const char *what)
{
	if (!ok && !s->check_failed[0])
		copy_text(s->check_failed, sizeof s->check_failed, what);
	return ok;
}

static struct ss_sku *find_sku(struct sim_store *s, const char *sku)
{
	for (size_t i = 0; i < s->skus.len; i++)
		if (strcmp(s->skus.v[i].sku, sku) == 0)
			return &s->skus.v[i];
	return NULL;
}

/* The reservations' key: (intent_id, part). */
static struct ss_resv *find_resv(struct sim_store *s, int32_t part, const char *id)
{
	uint64_t h = id_hash(id);
	for (size_t i = 0; i < s->resv.len; i++)
		if (s->resv.v[i].idh == h && s->resv.v[i].part == part &&
		    strcmp(s->resv.v[i].intent_id, id) == 0)
			return &s->resv.v[i];
	return NULL;
}

static struct ss_buyer *find_buyer(struct sim_store *s, const char *sku, const char *buyer)
{
	for (size_t i = 0; i < s->buyers.len; i++)
		if (strcmp(s->buyers.v[i].sku, sku) == 0 &&
		    strcmp(s->buyers.v[i].buyer, buyer) == 0)
			return &s->buyers.v[i];
	return NULL;
}

/* The decisions' key: (intent_id, kind, part). */
static bool decision_exists(const struct sim_store *s, int32_t part, uint64_t h, const char *id,
			    int kind)
{
	for (size_t i = 0; i < s->decisions.len; i++) {
		const struct ss_decision *d = &s->decisions.v[i];
		if (d->idh == h && d->kind == kind && d->part == part &&
		    strcmp(d->intent_id, id) == 0)
			return true;
	}
	return false;
}

/* ---- load (fs_store_load: the row's insert, then one snapshot) ------------------------- */

static const struct sim_store *sort_ctx;

static int cmp_sku(const void *a, const void *b)
{
	const struct ss_sku *x = &sort_ctx->skus.v[*(const size_t *)a];
	const struct ss_sku *y = &sort_ctx->skus.v[*(const size_t *)b];
	return strcmp(x->sku, y->sku);
}

static int cmp_buyer(const void *a, const void *b)
{
	const struct ss_buyer *x = &sort_ctx->buyers.v[*(const size_t *)a];
	const struct ss_buyer *y = &sort_ctx->buyers.v[*(const size_t *)b];
	int c = strcmp(x->sku, y->sku);
	return c ? c : strcmp(x->buyer, y->buyer);
}

static int cmp_resv_off(const void *a, const void *b)
{
	const struct ss_resv *x = &sort_ctx->resv.v[*(const size_t *)a];
	const struct ss_resv *y = &sort_ctx->resv.v[*(const size_t *)b];
	return x->off < y->off ? -1 : x->off > y->off;
}

static size_t *sorted(const struct sim_store *s, size_t n, int (*cmp)(const void *, const void *),
		      bool (*keep)(const struct sim_store *, size_t, int32_t), int32_t part,
		      size_t *out_n)
{
	size_t *idx = malloc((n ? n : 1) * sizeof *idx);
	if (!idx)
		abort();
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (keep(s, i, part))
			idx[k++] = i;
	sort_ctx = s;
	qsort(idx, k, sizeof *idx, cmp);
	*out_n = k;
	return idx;
}

static bool keep_sku(const struct sim_store *s, size_t i, int32_t part)
{
	return s->skus.v[i].part == part;
}

static bool keep_buyer(const struct sim_store *s, size_t i, int32_t part)
{
	const struct ss_buyer *b = &s->buyers.v[i];
	if (b->units <= 0)
		return false;
	for (size_t k = 0; k < s->skus.len; k++)
		if (strcmp(s->skus.v[k].sku, b->sku) == 0)
			return s->skus.v[k].part == part;
	return false;
}

static bool keep_resv(const struct sim_store *s, size_t i, int32_t part)
{
	return s->resv.v[i].part == part && strcmp(s->resv.v[i].status, "held") == 0;
}

static int load_skus(const struct sim_store *s, int32_t part, struct fs_core *core)
{
	/* SELECT ... FROM skus WHERE part = $1 ORDER BY sku */
	int rc = 0;
	size_t n, *idx = sorted(s, s->skus.len, cmp_sku, keep_sku, part, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct ss_sku *r = &s->skus.v[idx[i]];
		struct fs_sku k = {0};
		copy_text(k.sku, sizeof k.sku, r->sku);
		k.partition = core->partition;
		k.status = strcmp(r->status, "open") == 0 ? FS_SKU_OPEN : FS_SKU_CLOSED;
		k.supply = r->supply;
		k.available = r->available;
		k.held = r->held;
		k.sold = r->sold;
		k.per_buyer_limit = r->per_buyer_limit;
		k.max_qty = r->max_qty;
		k.hold_ms = r->hold_ms;
		k.opens_at_ms = r->opens_at_ms;
		k.closes_at_ms = r->closes_at_ms;
		k.admission.rate_per_s = r->admit_rate;
		k.admission.token_ms = r->token_ms;
		k.admission.draw = strcmp(r->draw, "fifo") == 0 ? FS_DRAW_FIFO : FS_DRAW_RANDOM;
		copy_text(k.admission.seed, sizeof k.admission.seed, r->draw_seed);
		rc = fs_core_load_sku(core, &k);
	}
	free(idx);
	return rc;
}

static int load_buyers(const struct sim_store *s, int32_t part, struct fs_core *core)
{
	/* SELECT b.sku, b.buyer_id, b.units FROM buyers b JOIN skus ... units > 0 */
	int rc = 0;
	size_t n, *idx = sorted(s, s->buyers.len, cmp_buyer, keep_buyer, part, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct ss_buyer *r = &s->buyers.v[idx[i]];
		rc = fs_core_load_buyer(core, r->sku, r->buyer, r->units);
	}
	free(idx);
	return rc;
}

/* EXISTS (SELECT 1 FROM store_refusals ...): the row (part, id, round) exists. */
static bool refusal_exists(const struct sim_store *s, int32_t part, const char *id, int32_t round)
{
	for (size_t i = 0; i < s->refusals.len; i++)
		if (s->refusals.v[i].part == part && s->refusals.v[i].round == round &&
		    strcmp(s->refusals.v[i].intent_id, id) == 0)
			return true;
	return false;
}

/* The holds of rows idx[0..n-1] into the core (fs_core_load_hold). */
static int load_hold_rows(const struct sim_store *s, const size_t *idx, size_t n,
			  struct fs_core *core)
{
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct ss_resv *r = &s->resv.v[idx[i]];
		struct fs_hold h = {0};
		copy_text(h.intent_id, sizeof h.intent_id, r->intent_id);
		h.qty = r->qty;
		h.expires_at_ms = r->expires_at_ms;
		h.offset = r->off;
		if (fs_hold_status_parse(r->status, &h.status) < 0)
			rc = -EINVAL;
		h.late = r->late;
		h.ended_at_ms = r->has_ended ? r->ended_at_ms : 0;
		h.ended_offset = r->has_ended ? r->ended_off : -1;
		h.expiry_refused = refusal_exists(s, r->part, r->intent_id, 0);
		if (rc == 0)
			rc = fs_core_load_hold(core, &h, r->sku, r->buyer);
	}
	return rc;
}

static int load_holds(const struct sim_store *s, int32_t part, struct fs_core *core)
{
	/* SELECT ... FROM reservations WHERE part = $1 AND status = 'held' ORDER BY off */
	size_t n, *idx = sorted(s, s->resv.len, cmp_resv_off, keep_resv, part, &n);
	int rc = load_hold_rows(s, idx, n, core);
	free(idx);
	return rc;
}

/* The rows fs_store_lookup_holds wants: of the partition, named by a follow-up of the batch
 * that the core has no hold for. */
static const struct fs_batch *wanted_batch;
static const struct fs_core *wanted_core;

static bool keep_wanted(const struct sim_store *s, size_t i, int32_t part)
{
	const struct ss_resv *r = &s->resv.v[i];
	if (r->part != part || strcmp(r->status, "held") == 0)
		return false;
	for (uint32_t k = 0; k < wanted_batch->len; k++) {
		const struct fs_item *it = &wanted_batch->items[k];
		if (fs_item_has_key(it) && fs_kind_is_followup((int)it->rec.kind) &&
		    !fs_core_hold(wanted_core, it->rec.intent_id) &&
		    strcmp(it->rec.intent_id, r->intent_id) == 0)
			return true;
	}
	return false;
}

int ss_lookup_holds(struct sim_store *s, const struct fs_batch *b, struct fs_core *core)
{
	/* SELECT ... FROM reservations WHERE part = $1 AND intent_id = ANY ($2) AND status <>
	 * 'held' ORDER BY off */
	wanted_batch = b;
	wanted_core = core;
	size_t n, *idx = sorted(s, s->resv.len, cmp_resv_off, keep_wanted, core->partition, &n);
	int rc = load_hold_rows(s, idx, n, core);
	s->holds_looked_up += (int64_t)n;
	free(idx);
	return rc;
}

static int cmp_join(const void *a, const void *b)
{
	const struct ss_join *x = &sort_ctx->joins.v[*(const size_t *)a];
	const struct ss_join *y = &sort_ctx->joins.v[*(const size_t *)b];
	int c = strcmp(x->sku, y->sku);
	return c ? c : (x->off > y->off) - (x->off < y->off);
}

static bool keep_join(const struct sim_store *s, size_t i, int32_t part)
{
	return s->joins.v[i].part == part;
}

/* As store.c's load_rooms: the partition's room_joins rows by (sku, off) into their SKUs'
 * rooms, then each room draws again and finds its front (fs_core_load_rooms_done). */
static int load_rooms(struct sim_store *s, int32_t part, struct fs_core *core)
{
	if (core->room_skus_len == 0)
		return 0;
	int rc = 0;
	size_t n, *idx = sorted(s, s->joins.len, cmp_join, keep_join, part, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct ss_join *j = &s->joins.v[idx[i]];
		/* fs_room_entry_of_row: coalesce(admitted_ms, -1) and the others */
		bool adm = j->has_adm && s->mutation != MUT_ROOM_FORGET_ADMISSIONS;
		struct fs_room_entry e = {
			.offset = j->off,
			.joined_ms = j->joined_ms,
			.early = j->early,
			.admitted_ms = adm ? j->admitted_ms : -1,
			.decided_ms = adm ? j->decided_ms : -1,
			.decided_off = adm ? j->decided_off : -1,
			.minted_ms = adm ? j->minted_ms : -1,
			.minted_off = adm ? j->minted_off : -1,
		};
		copy_text(e.buyer_id, sizeof e.buyer_id, j->buyer);
		const struct fs_sku *k = fs_core_sku(core, j->sku);
		rc = k && k->room ? fs_room_load(k->room, &e) : -EINVAL;
	}
	s->room_loads += n > 0;
	free(idx);
	return rc == 0 ? fs_core_load_rooms_done(core) : rc;
}

/* As store.c's load_carts: every cart and group of the partition, then the waiting order. */
static int load_carts(const struct sim_store *s, int32_t part, struct fs_core *core)
{
	int rc = 0;
	for (size_t i = 0; i < s->carts.len && rc == 0; i++)
		if (s->carts.v[i].part == part)
			rc = fs_carts_load_cart(core->carts, &s->carts.v[i].k);
	for (size_t i = 0; i < s->groups.len && rc == 0; i++) {
		const struct fs_group *g = &s->groups.v[i].g;
		if (s->groups.v[i].part != part)
			continue;
		const char *skus[FS_CART_LINES_MAX];
		for (uint32_t l = 0; l < g->nlines; l++)
			skus[l] = g->lines[l].sku;
		rc = fs_carts_load_group(core->carts, core, g, skus);
	}
	return rc == 0 ? fs_carts_load_done(core->carts, core) : rc;
}

static int cmp_out(const void *a, const void *b)
{
	const struct ss_out *x = a, *y = b;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

int ss_cart_out(struct sim_store *s, int32_t part, int64_t from, int64_t to, ss_out_fn fn,
		void *ctx)
{
	VEC(struct ss_out) rows = {0};
	for (size_t i = 0; i < s->outs.len; i++)
		if (s->outs.v[i].part == part && s->outs.v[i].off >= from && s->outs.v[i].off < to)
			*VEC_PUSH(rows) = s->outs.v[i];
	if (rows.len)
		qsort(rows.v, rows.len, sizeof *rows.v, cmp_out);
	for (size_t i = 0; i < rows.len; i++)
		fn(ctx, &rows.v[i]);
	free(rows.v);
	return 0;
}

int ss_load_step(struct sim_store *s, int step, int32_t part, struct fs_core *core,
		 struct fs_part_meta *meta)
{
	struct ss_part *p = &s->parts[part];
	switch (step) {
	case 0:
		/* INSERT INTO partitions (grp, topic, part) ... ON CONFLICT DO NOTHING */
		fs_core_reset(core);
		core->partition = part;
		if (!p->exists) {
			memset(p, 0, sizeof *p);
			p->exists = true;
			p->next_offset = p->first_offset = p->replied_offset = -1;
		}
		return 0;
	case 1: {
		/* BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT next_offset, ... FROM
		 * partitions; the SKUs, the buyers, the reservations; COMMIT. One call: every read
		 * sees the same snapshot. */
		if (!p->exists)
			return -EIO; /* "row missing": nothing deletes it */
		meta->partition = part;
		meta->next_offset = p->next_offset;
		meta->first_offset = p->first_offset;
		meta->replied_offset = p->replied_offset;
		meta->clock_ms = p->clock_ms;
		core->clock_ms = meta->clock_ms;
		int rc = load_skus(s, part, core);
		if (rc == 0)
			rc = load_buyers(s, part, core);
		if (rc == 0)
			rc = load_holds(s, part, core);
		if (rc == 0)
			rc = load_rooms(s, part, core);
		if (rc == 0 && core->carts)
			rc = load_carts(s, part, core);
		return rc;
	}
	}
	return -EINVAL;
}

int ss_read_next(struct sim_store *s, int32_t part, int64_t *next, uint64_t *token)
{
	/* SELECT next_offset, coalesce(commit_token, '') FROM partitions ... FOR UPDATE */
	if (!s->parts[part].exists)
		return -ENOENT;
	*next = s->parts[part].next_offset;
	*token = s->parts[part].commit_token;
	return 0;
}

int ss_save_replied(struct sim_store *s, int32_t part, int64_t next, int64_t replied)
{
	/* UPDATE partitions SET replied_offset = GREATEST(replied_offset, $5) WHERE ... AND
	 * next_offset = $4 AND $5 <= next_offset */
	struct ss_part *p = &s->parts[part];
	if (p->exists && p->next_offset == next && replied <= p->next_offset &&
	    replied > p->replied_offset)
		p->replied_offset = replied;
	return 0;
}

int ss_expired(struct sim_store *s, int32_t part, int64_t from, int64_t to, ss_expired_fn fn,
	       void *ctx)
{
	/* ... WHERE part = $1 AND status = 'expired' AND ended_off >= $2 AND ended_off < $3
	 * ORDER BY ended_off, expires_at_ms, off */
	size_t n = 0;
	size_t *idx = malloc((s->resv.len ? s->resv.len : 1) * sizeof *idx);
	if (!idx)
		abort();
	for (size_t i = 0; i < s->resv.len; i++) {
		const struct ss_resv *r = &s->resv.v[i];
		if (r->part == part && strcmp(r->status, "expired") == 0 && r->has_ended &&
		    r->ended_off >= from && r->ended_off < to)
			idx[n++] = i;
	}
	/* Insertion sort: a handful of rows. */
	for (size_t i = 1; i < n; i++) {
		size_t v = idx[i], j = i;
		while (j > 0) {
			const struct ss_resv *a = &s->resv.v[idx[j - 1]], *b = &s->resv.v[v];
			bool gt = a->ended_off != b->ended_off ? a->ended_off > b->ended_off
				  : a->expires_at_ms != b->expires_at_ms
					  ? a->expires_at_ms > b->expires_at_ms
					  : a->off > b->off;
			if (!gt)
				break;
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
	for (size_t i = 0; i < n; i++)
		fn(ctx, &s->resv.v[idx[i]]);
	free(idx);
	return 0;
}

/* ---- lookup (fs_store_lookup) ------------------------------------------------------------ */

int ss_lookup(struct sim_store *s, struct fs_batch *b)
{
	/* SELECT ... FROM decisions d JOIN (SELECT DISTINCT * FROM unnest($1::uuid[],
	 * $2::int2[])) AS k(id, kind) ON d.intent_id = k.id AND d.kind = k.kind AND d.part =
	 * $3::int (the batch's partition) */
	uint32_t n = 0;
	for (uint32_t i = 0; i < b->len; i++)
		n += fs_item_has_key(&b->items[i]);
	if (n == 0 || s->mutation == MUT_NO_DEDUPE)
		return 0;
	int rc = 0;
	for (size_t r = 0; r < s->decisions.len && rc == 0; r++) {
		const struct ss_decision *d = &s->decisions.v[r];
		if (d->part != b->items[0].rec.partition)
			continue;
		bool wanted = false, same_id = false;
		for (uint32_t i = 0; i < b->len && !wanted; i++) {
			const struct fs_item *it = &b->items[i];
			if (!fs_item_has_key(it) || strcmp(it->rec.intent_id, d->intent_id) != 0)
				continue;
			same_id = true;
			wanted = (int)it->rec.kind == d->kind ||
				 (fs_kind_has_unmatched((int)it->rec.kind) &&
				  (int)it->rec.kind + FS_KEY_UNMATCHED == d->kind);
		}
		if (!wanted) {
			s->kinds_left += same_id;
			continue;
		}
		struct fs_stored st = {0};
		copy_text(st.intent_id, sizeof st.intent_id, d->intent_id);
		st.kind = d->kind;
		st.body_hash = d->body_hash;
		st.partition = d->part;
		st.offset = d->off;
		if (fs_outcome_parse(d->outcome, &st.dec.outcome) < 0)
			st.dec.outcome = FS_OUT_REJECTED;
		st.dec.reason = d->has_reason ? d->reason : NULL;
		st.dec.qty = d->qty;
		st.dec.expires_at_ms = d->has_exp ? d->exp : 0;
		st.dec.decided_at_ms = d->decided_at;
		rc = fs_batch_add_stored(b, &st);
	}
	return rc;
}

/* ---- commit (fs_store_commit: one pipelined transaction) --------------------------------- */

/* A transaction as rows: ss_tx_build reads the batch and the core once (what
 * fs_store_commit_prepare renders into statements), ss_tx_apply runs the statements on those
 * rows later (fs_store_commit_send); between the two the batch and the core may move on. */

void ss_tx_free(struct ss_tx *t)
{
	free(t->offsets.v);
	free(t->decisions.v);
	free(t->rejects.v);
	free(t->sales.v);
	free(t->forwards.v);
	free(t->resv.v);
	free(t->skus.v);
	free(t->buyers.v);
	free(t->carts.v);
	free(t->groups.v);
	free(t->outs.v);
	free(t->joins.v);
	free(t->refusals.v);
	fs_tx_free(&t->built);
	memset(t, 0, sizeof *t);
}

static void tx_clear(struct ss_tx *t)
{
	t->offsets.len = t->decisions.len = t->rejects.len = t->sales.len = 0;
	t->forwards.len = t->resv.len = t->skus.len = t->buyers.len = 0;
	t->carts.len = t->groups.len = t->outs.len = t->joins.len = t->refusals.len = 0;
}

/* The carts' rows, copied; an outbox row's payload rendered as store.c renders it
 * (fs_tx_carts_json writes the same text). */
static void copy_cart_rows(struct ss_tx *t, const struct fs_tx *x)
{
	int32_t part = x->cas.partition;
	for (uint32_t i = 0; i < x->carts.len; i++)
		*VEC_PUSH(t->carts) = (struct ss_cart){.part = part, .k = *x->carts.v[i]};
	for (uint32_t i = 0; i < x->groups.len; i++)
		*VEC_PUSH(t->groups) = (struct ss_group){.part = part, .g = *x->groups.v[i]};
	struct fs_buf b = {0};
	for (uint32_t i = 0; i < x->outs.len; i++) {
		const struct fs_tx_cart_out *o = &x->outs.v[i];
		struct ss_out *r = VEC_PUSH(t->outs);
		memset(r, 0, sizeof *r);
		r->part = part;
		r->off = o->offset;
		r->seq = o->seq;
		r->intents = o->msg != NULL;
		fs_buf_clear(&b);
		if (o->msg) {
			r->to = fs_cart_msg_to(o->msg);
			copy_text(r->key, sizeof r->key, o->msg->key);
			fs_cart_msg_json(&b, o->msg);
		} else {
			r->to = -1;
			copy_text(r->key, sizeof r->key, o->ev->cart_id);
			fs_cart_event_json(&b, o->ev, part);
		}
		if (b.len >= sizeof r->payload)
			abort(); /* SS_PAYLOAD_MAX too small: the test's, not the worker's */
		copy_text(r->payload, sizeof r->payload, fs_buf_cstr(&b));
	}
	fs_buf_free(&b);
}

/* The rows of fs_tx_build, copied: the batch and the core they point into move on. */
static void copy_items(struct ss_tx *t, const struct fs_tx *x)
{
	int32_t part = x->cas.partition;
	for (uint32_t i = 0; i < x->decisions.len; i++) {
		const struct fs_tx_decision *r = &x->decisions.v[i];
		struct ss_decision *d = VEC_PUSH(t->decisions);
		memset(d, 0, sizeof *d);
		d->idh = id_hash(r->intent_id);
		copy_text(d->intent_id, sizeof d->intent_id, r->intent_id);
		d->kind = r->kind;
		d->body_hash = r->body_hash;
		d->part = part;
		d->off = r->offset;
		copy_text(d->sku, sizeof d->sku, r->sku);
		d->has_buyer = r->buyer_id != NULL;
		copy_text(d->buyer, sizeof d->buyer, r->buyer_id);
		d->qty = r->qty;
		copy_text(d->outcome, sizeof d->outcome, r->outcome);
		d->has_reason = r->reason != NULL;
		copy_text(d->reason, sizeof d->reason, r->reason);
		d->has_exp = r->has_expiry;
		d->exp = r->expires_at_ms;
		d->decided_at = r->decided_at_ms;
	}
	for (uint32_t i = 0; i < x->rejects.len; i++) {
		const struct fs_tx_reject *r = &x->rejects.v[i];
		struct ss_reject *j = VEC_PUSH(t->rejects);
		memset(j, 0, sizeof *j);
		j->part = part;
		j->off = r->offset;
		j->off_end = r->offset_end;
		j->has_id = r->intent_id != NULL;
		copy_text(j->intent_id, sizeof j->intent_id, r->intent_id);
		copy_text(j->reason, sizeof j->reason, r->reason);
	}
	for (uint32_t i = 0; i < x->sales.len; i++) {
		const struct fs_tx_sale *r = &x->sales.v[i];
		struct ss_sale *j = VEC_PUSH(t->sales);
		memset(j, 0, sizeof *j);
		j->part = part;
		j->off = r->offset;
		j->kind = r->kind;
		copy_text(j->sku, sizeof j->sku, r->sku);
		j->amount = r->amount;
		copy_text(j->outcome, sizeof j->outcome, r->outcome);
		j->has_reason = r->reason != NULL;
		copy_text(j->reason, sizeof j->reason, r->reason);
	}
	for (uint32_t i = 0; i < x->forwards.len; i++) {
		const struct fs_tx_forward *r = &x->forwards.v[i];
		struct ss_forward *f = VEC_PUSH(t->forwards);
		memset(f, 0, sizeof *f);
		f->part = part;
		f->off = r->offset;
		f->to_part = r->to_partition;
		f->has_id = r->intent_id != NULL;
		copy_text(f->intent_id, sizeof f->intent_id, r->intent_id);
		f->kind = r->kind;
	}
}

static void copy_core_rows(struct ss_tx *t, const struct fs_tx *x)
{
	for (uint32_t i = 0; i < x->holds.len; i++) {
		const struct fs_tx_hold *h = &x->holds.v[i];
		struct ss_resv *r = VEC_PUSH(t->resv);
		memset(r, 0, sizeof *r);
		r->idh = id_hash(h->intent_id);
		copy_text(r->intent_id, sizeof r->intent_id, h->intent_id);
		copy_text(r->sku, sizeof r->sku, h->sku);
		copy_text(r->buyer, sizeof r->buyer, h->buyer_id);
		r->qty = h->qty;
		r->expires_at_ms = h->expires_at_ms;
		r->part = x->cas.partition;
		r->off = h->offset;
		copy_text(r->status, sizeof r->status, h->status);
		r->late = h->late;
		r->has_ended = h->ended;
		r->ended_at_ms = h->ended_at_ms;
		r->ended_off = h->ended_offset;
	}
	for (uint32_t i = 0; i < x->skus.len; i++) {
		const struct fs_tx_sku *v = &x->skus.v[i];
		struct ss_tx_sku *k = VEC_PUSH(t->skus);
		memset(k, 0, sizeof *k);
		copy_text(k->row.sku, sizeof k->row.sku, v->sku);
		k->row.part = x->cas.partition;
		copy_text(k->row.status, sizeof k->row.status, v->status);
		k->row.supply = v->supply;
		k->row.available = v->available;
		k->row.held = v->held;
		k->row.sold = v->sold;
		k->row.per_buyer_limit = v->per_buyer_limit;
		k->row.max_qty = v->max_qty;
		k->row.hold_ms = v->hold_ms;
		k->row.opens_at_ms = v->opens_at_ms;
		k->row.closes_at_ms = v->closes_at_ms;
		const struct fs_admission *a = v->insert ? v->admission : NULL;
		if (a &&
		    a->rate_per_s > 0) { /* the insert's coalesce(admit_rate, 0) and the rest */
			k->row.admit_rate = a->rate_per_s;
			k->row.token_ms = a->token_ms;
			copy_text(k->row.draw, sizeof k->row.draw,
				  a->draw == FS_DRAW_FIFO ? "fifo" : "random");
			copy_text(k->row.draw_seed, sizeof k->row.draw_seed, a->seed);
		}
		k->stored = !v->insert;
		k->base_supply = v->base_supply;
		k->base_available = v->base_available;
		k->base_held = v->base_held;
		k->base_sold = v->base_sold;
	}
	for (uint32_t i = 0; i < x->refusals.len; i++) {
		struct ss_refusal *f = VEC_PUSH(t->refusals);
		f->part = x->cas.partition;
		f->off = x->refusals.v[i].offset;
		copy_text(f->intent_id, sizeof f->intent_id, x->refusals.v[i].intent_id);
		f->round = x->refusals.v[i].round;
	}
	for (uint32_t i = 0; i < x->buyers.len; i++) {
		const struct fs_tx_buyer *v = &x->buyers.v[i];
		struct ss_buyer *r = VEC_PUSH(t->buyers);
		memset(r, 0, sizeof *r);
		copy_text(r->sku, sizeof r->sku, v->sku);
		copy_text(r->buyer, sizeof r->buyer, v->buyer_id);
		r->units = v->units;
	}
	for (uint32_t i = 0; i < x->joins.len; i++) {
		const struct fs_tx_join *v = &x->joins.v[i];
		const struct fs_room_entry *e = v->e;
		struct ss_tx_join *j = VEC_PUSH(t->joins);
		memset(j, 0, sizeof *j);
		j->copy = v->copy;
		copy_text(j->row.sku, sizeof j->row.sku, v->sku);
		copy_text(j->row.buyer, sizeof j->row.buyer, e->buyer_id);
		j->row.part = x->cas.partition;
		j->row.off = e->offset;
		j->row.joined_ms = e->joined_ms;
		j->row.early = e->early;
		/* the COPY writes NULL unless admitted; the upsert nullif(v, -1) */
		j->row.has_adm = e->admitted_ms >= 0;
		j->row.admitted_ms = e->admitted_ms;
		j->row.decided_ms = e->decided_ms;
		j->row.decided_off = e->decided_off;
		j->row.minted_ms = e->minted_ms;
		j->row.minted_off = e->minted_off;
	}
}

void ss_tx_build(struct ss_tx *t, const struct fs_part_meta *meta, int64_t next_offset,
		 int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
		 bool careful)
{
	tx_clear(t);
	if (fs_tx_build(&t->built, meta->partition, meta->next_offset, next_offset, replied_offset,
			b, core, careful) < 0)
		abort(); /* out of memory: this is a test */
	t->stacked = false;
	t->pred_token = 0;
	for (uint32_t i = 0; i < b->len; i++)
		*VEC_PUSH(t->offsets) = b->items[i].rec.offset;
	copy_items(t, &t->built);
	copy_core_rows(t, &t->built);
	copy_cart_rows(t, &t->built);
}

static void save_undo(struct sim_store *s, int table, size_t index)
{
	struct ss_undo *u = VEC_PUSH(s->undo);
	u->table = table;
	u->index = index;
	switch (table) {
	case T_PART:
		u->old.part = s->parts[index];
		break;
	case T_RESV:
		u->old.resv = s->resv.v[index];
		break;
	case T_SKU:
		u->old.sku = s->skus.v[index];
		break;
	case T_CART:
		u->old.cart = s->carts.v[index];
		break;
	case T_GROUP:
		u->old.group = s->groups.v[index];
		break;
	case T_JOIN:
		u->old.join = s->joins.v[index];
		break;
	default:
		u->old.buyer = s->buyers.v[index];
		break;
	}
}

struct lens {
	size_t decisions, rejects, sales, resv, skus, buyers, forwards, carts, groups, outs, joins;
	size_t refusals;
};

static void rollback(struct sim_store *s, const struct lens *l)
{
	while (s->undo.len) {
		const struct ss_undo *u = &s->undo.v[--s->undo.len];
		switch (u->table) {
		case T_PART:
			s->parts[u->index] = u->old.part;
			break;
		case T_RESV:
			s->resv.v[u->index] = u->old.resv;
			break;
		case T_SKU:
			s->skus.v[u->index] = u->old.sku;
			break;
		case T_CART:
			s->carts.v[u->index] = u->old.cart;
			break;
		case T_GROUP:
			s->groups.v[u->index] = u->old.group;
			break;
		case T_JOIN:
			s->joins.v[u->index] = u->old.join;
			break;
		default:
			s->buyers.v[u->index] = u->old.buyer;
			break;
		}
	}
	s->carts.len = l->carts;
	s->groups.len = l->groups;
	s->outs.len = l->outs;
	s->joins.len = l->joins;
	s->refusals.len = l->refusals;
	s->decisions.len = l->decisions;
	s->rejects.len = l->rejects;
	s->sales.len = l->sales;
	s->forwards.len = l->forwards;
	s->resv.len = l->resv;
	s->skus.len = l->skus;
	s->buyers.len = l->buyers;
}

static bool sku_row_ok(struct sim_store *s, const struct ss_sku *k)
{
	return check(s, k->available >= 0, "skus: CHECK (available >= 0)") &&
	       check(s, k->held >= 0, "skus: CHECK (held >= 0)") &&
	       check(s, k->sold >= 0, "skus: CHECK (sold >= 0)") &&
	       check(s, k->available + k->held + k->sold == k->supply,
		     "skus: CHECK (available + held + sold = supply)") &&
	       check(s, k->per_buyer_limit >= 1 && k->max_qty >= 1 && k->hold_ms >= 1000,
		     "skus: CHECK (limits)");
}

/* The offset compare-and-set with the partition's clock and counters. 1: FSCAS. */
static int stmt_cas(struct sim_store *s, const struct ss_tx *t, uint64_t token)
{
	const struct fs_tx_cas *c = &t->built.cas;
	struct ss_part *p = &s->parts[c->partition];
	/* ... AND ($18 IS NULL OR commit_token = $18): a stacked one matches only the commit of
	 * the one it was decided on top of. */
	bool token_ok = !t->stacked || p->commit_token == t->pred_token ||
			s->mutation == MUT_STACKED_OFFSET_ONLY;
	bool match = p->exists &&
		     ((p->next_offset == c->expected && token_ok) || s->mutation == MUT_NO_CAS);
	if (p->exists && t->stacked && p->next_offset == c->expected &&
	    p->commit_token != t->pred_token)
		s->stacked_same_range++; /* another's commit of the range below: fenced */
	if (!match)
		return 1;
	save_undo(s, T_PART, (size_t)c->partition);
	p->next_offset = c->next;
	if (c->replied > p->replied_offset)
		p->replied_offset = c->replied;
	p->clock_ms = c->clock_ms;
	if (p->first_offset < 0)
		p->first_offset = c->first_off;
	p->n_records += c->counts.records;
	p->n_fresh += c->counts.fresh;
	p->n_repeats += c->counts.repeats;
	p->n_conflicts += c->counts.conflicts;
	p->n_invalid += c->counts.invalid;
	p->n_sale += c->counts.sale;
	p->n_ticks += c->counts.ticks;
	p->n_forwarded += c->counts.forwarded;
	p->n_carts += c->counts.carts;
	p->n_joins += c->counts.joins;
	p->n_gaps += c->gaps;
	p->n_batches++;
	p->commit_token = token;
	if (!check(s, p->next_offset >= -1 && p->replied_offset <= p->next_offset,
		   "partitions: CHECK (replied_offset <= next_offset)"))
		return 2;
	return 0;
}

/* INSERT INTO decisions ... ON CONFLICT DO NOTHING, asserting that every row was new. */
static int stmt_decisions(struct sim_store *s, const struct ss_tx *t)
{
	size_t inserted = 0;
	for (size_t i = 0; i < t->decisions.len; i++) {
		const struct ss_decision *d = &t->decisions.v[i];
		if (d->has_buyer && strcmp(d->buyer, SIM_REFUSED_BUYER) == 0) {
			s->refused = true; /* a trigger's check_violation: SQLSTATE 23514 */
			return 2;
		}
		if (s->mutation != MUT_NO_DEDUPE &&
		    decision_exists(s, d->part, d->idh, d->intent_id, d->kind))
			continue; /* ON CONFLICT DO NOTHING */
		*VEC_PUSH(s->decisions) = *d;
		inserted++;
	}
	return inserted == t->decisions.len ? 0 : 2; /* FSMIS */
}

/* The tables keyed by (part, off). */
enum keyed_table { KT_REJECTS, KT_SALES, KT_FORWARDS };

static bool row_at(const struct sim_store *s, enum keyed_table t, int32_t part, int64_t off)
{
	size_t n = t == KT_SALES     ? s->sales.len
		   : t == KT_REJECTS ? s->rejects.len
				     : s->forwards.len;
	for (size_t i = 0; i < n; i++) {
		int32_t p = t == KT_SALES     ? s->sales.v[i].part
			    : t == KT_REJECTS ? s->rejects.v[i].part
					      : s->forwards.v[i].part;
		int64_t o = t == KT_SALES     ? s->sales.v[i].off
			    : t == KT_REJECTS ? s->rejects.v[i].off
					      : s->forwards.v[i].off;
		if (p == part && o == off)
			return true;
	}
	return false;
}

/* INSERT INTO rejects / sale_log: primary key (part, off); a duplicate fails the statement. */
static int stmt_rejects_sales(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->rejects.len; i++) {
		const struct ss_reject *r = &t->rejects.v[i];
		if (row_at(s, KT_REJECTS, r->part, r->off) ||
		    !check(s, r->off_end >= r->off && (!r->has_id || r->off_end == r->off),
			   "rejects: CHECK rejects_range"))
			return 2;
		*VEC_PUSH(s->rejects) = *r;
	}
	for (size_t i = 0; i < t->sales.len; i++) {
		const struct ss_sale *r = &t->sales.v[i];
		if (row_at(s, KT_SALES, r->part, r->off))
			return 2;
		*VEC_PUSH(s->sales) = *r;
	}
	return 0;
}

/* reservations: COPY of the holds new by the core's account (a row that exists is a unique
 * violation), INSERT ... ON CONFLICT (intent_id, part) DO UPDATE SET status, late, ended_* of the
 * others (the flag is the built row's: a plain value, valid after the batch moved on). */
static int stmt_reservations(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->resv.len; i++) {
		const struct ss_resv *h = &t->resv.v[i];
		if (!check(s, h->qty >= 1, "reservations: CHECK (qty >= 1)"))
			return 2;
		if (!s->no_rules && strcmp(h->buyer, SIM_STUCK_BUYER) == 0 &&
		    strcmp(h->status, "expired") == 0) {
			s->refused = true; /* a trigger's invalid_parameter_value: 22023 */
			return 2;
		}
		struct ss_resv *r = find_resv(s, h->part, h->intent_id);
		if (r && t->built.holds.v[i].copy)
			return 2; /* COPY of a row taken for new: unique violation */
		if (!r) {
			*VEC_PUSH(s->resv) = *h;
			continue;
		}
		save_undo(s, T_RESV, (size_t)(r - s->resv.v));
		copy_text(r->status, sizeof r->status, h->status);
		r->late = h->late;
		r->has_ended = h->has_ended;
		r->ended_at_ms = h->ended_at_ms;
		r->ended_off = h->ended_off;
	}
	return 0;
}

/* INSERT INTO skus (new ones); UPDATE skus ... WHERE the four counters equal the base values,
 * asserting the count (FSMIS). */
static int stmt_skus(struct sim_store *s, const struct ss_tx *t)
{
	int32_t part = t->built.cas.partition;
	for (size_t i = 0; i < t->skus.len; i++) {
		const struct ss_tx_sku *v = &t->skus.v[i];
		if (v->stored)
			continue;
		if (find_sku(s, v->row.sku))
			return 2; /* unique violation */
		*VEC_PUSH(s->skus) = v->row;
		if (!sku_row_ok(s, &v->row))
			return 2;
	}
	for (size_t i = 0; i < t->skus.len; i++) {
		const struct ss_tx_sku *v = &t->skus.v[i];
		if (!v->stored)
			continue;
		struct ss_sku *k = find_sku(s, v->row.sku);
		if (!k || k->part != part || k->supply != v->base_supply ||
		    k->available != v->base_available || k->held != v->base_held ||
		    k->sold != v->base_sold)
			return 2;
		save_undo(s, T_SKU, (size_t)(k - s->skus.v));
		copy_text(k->status, sizeof k->status, v->row.status);
		k->supply = v->row.supply;
		k->available = v->row.available;
		k->held = v->row.held;
		k->sold = v->row.sold;
		if (!sku_row_ok(s, k))
			return 2;
	}
	return 0;
}

/* INSERT INTO buyers ... JOIN skus k ON k.sku = u.sku AND k.part = $1 ON CONFLICT DO UPDATE. */
static int stmt_buyers(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->buyers.len; i++) {
		const struct ss_buyer *v = &t->buyers.v[i];
		const struct ss_sku *k = find_sku(s, v->sku);
		if (!k || k->part != t->built.cas.partition)
			continue;
		if (!check(s, v->units >= 0, "buyers: CHECK (units >= 0)"))
			return 2;
		struct ss_buyer *r = find_buyer(s, v->sku, v->buyer);
		if (!s->no_rules && strcmp(v->buyer, SIM_REFUSED_BUYER) == 0 &&
		    v->units > (r ? r->units : 0)) {
			s->refused = true; /* a trigger's check_violation: SQLSTATE 23514 */
			return 2;
		}
		if (r && t->built.buyers.v[i].copy)
			return 2; /* COPY of a row taken for new: unique violation */
		if (r) {
			save_undo(s, T_BUYER, (size_t)(r - s->buyers.v));
			r->units = v->units;
		} else {
			*VEC_PUSH(s->buyers) = *v;
		}
	}
	return 0;
}

/* INSERT INTO store_refusals: primary key (part, intent_id). */
static int stmt_refusals(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->refusals.len; i++) {
		const struct ss_refusal *f = &t->refusals.v[i];
		if (!check(s, !refusal_exists(s, f->part, f->intent_id, f->round),
			   "store_refusals: primary key (part, intent_id, round)"))
			return 2;
		*VEC_PUSH(s->refusals) = *f;
	}
	return 0;
}

/* INSERT INTO forwards: primary key (part, off); a duplicate fails the statement. */
static int stmt_forwards(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->forwards.len; i++) {
		const struct ss_forward *f = &t->forwards.v[i];
		if (row_at(s, KT_FORWARDS, f->part, f->off) ||
		    !check(s, f->to_part >= 0 && f->to_part != f->part,
			   "forwards: CHECK (to_part <> part)"))
			return 2;
		*VEC_PUSH(s->forwards) = *f;
	}
	return 0;
}

/* carts, cart_groups: upserts (their rows name the partition: the WHERE part = $1 holds by
 * construction); cart_out: an insert whose primary key (part, off, seq) fails the statement
 * on a duplicate. */
static int stmt_carts(struct sim_store *s, const struct ss_tx *t)
{
	for (size_t i = 0; i < t->carts.len; i++) {
		const struct ss_cart *c = &t->carts.v[i];
		size_t k = 0;
		while (k < s->carts.len && !(s->carts.v[k].part == c->part &&
					     strcmp(s->carts.v[k].k.cart_id, c->k.cart_id) == 0))
			k++;
		if (k < s->carts.len) {
			save_undo(s, T_CART, k);
			s->carts.v[k] = *c;
		} else {
			*VEC_PUSH(s->carts) = *c;
		}
	}
	for (size_t i = 0; i < t->groups.len; i++) {
		const struct ss_group *g = &t->groups.v[i];
		size_t k = 0;
		while (k < s->groups.len &&
		       !(s->groups.v[k].part == g->part && s->groups.v[k].g.round == g->g.round &&
			 strcmp(s->groups.v[k].g.cart_id, g->g.cart_id) == 0))
			k++;
		if (k < s->groups.len) {
			save_undo(s, T_GROUP, k);
			s->groups.v[k] = *g;
		} else {
			*VEC_PUSH(s->groups) = *g;
		}
	}
	for (size_t i = 0; i < t->outs.len; i++) {
		const struct ss_out *o = &t->outs.v[i];
		for (size_t k = 0; k < s->outs.len; k++)
			if (s->outs.v[k].part == o->part && s->outs.v[k].off == o->off &&
			    s->outs.v[k].seq == o->seq)
				return 2;
		*VEC_PUSH(s->outs) = *o;
	}
	return 0;
}

/* room_joins (issue 33): the COPY of the new entries (a row that exists is a unique violation
 * of (sku, buyer_id)), then the upsert of the others joined to the partition's SKUs, ON
 * CONFLICT (sku, buyer_id) DO UPDATE SET the admission; CHECK: the admission's three columns
 * NULL together. */
static int stmt_room_joins(struct sim_store *s, const struct ss_tx *t)
{
	int32_t part = t->built.cas.partition;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < t->joins.len; i++) {
			const struct ss_tx_join *v = &t->joins.v[i];
			if (v->copy != (pass == 0))
				continue;
			const struct ss_sku *k = find_sku(s, v->row.sku);
			if (!v->copy && (!k || k->part != part))
				continue;
			size_t r = 0;
			while (r < s->joins.len &&
			       !(strcmp(s->joins.v[r].sku, v->row.sku) == 0 &&
				 strcmp(s->joins.v[r].buyer, v->row.buyer) == 0))
				r++;
			if (r < s->joins.len && v->copy)
				return 2;
			if (r == s->joins.len) {
				*VEC_PUSH(s->joins) = v->row;
				continue;
			}
			save_undo(s, T_JOIN, r);
			s->joins.v[r].has_adm = v->row.has_adm;
			s->joins.v[r].admitted_ms = v->row.admitted_ms;
			s->joins.v[r].decided_ms = v->row.decided_ms;
			s->joins.v[r].decided_off = v->row.decided_off;
			s->joins.v[r].minted_ms = v->row.minted_ms;
			s->joins.v[r].minted_off = v->row.minted_off;
		}
	}
	return 0;
}

int ss_tx_apply(struct sim_store *s, const struct ss_tx *t, uint64_t token, enum ss_fault fault,
		int64_t *before, bool *applied)
{
	int32_t part = t->built.cas.partition;
	struct lens l = {s->decisions.len, s->rejects.len, s->sales.len,    s->resv.len,
			 s->skus.len,	   s->buyers.len,  s->forwards.len, s->carts.len,
			 s->groups.len,	   s->outs.len,	   s->joins.len,    s->refusals.len};
	s->undo.len = 0;
	s->refused = false;
	*before = s->parts[part].exists ? s->parts[part].next_offset : -2;
	/* BEGIN; the statements in the pipeline's order; the first failure aborts the rest. */
	s->failed_stmt = "offset compare-and-set";
	int rc = stmt_cas(s, t, token);
	if (rc == 0 && (s->failed_stmt = "decisions"))
		rc = stmt_decisions(s, t);
	if (rc == 0 && (s->failed_stmt = "rejects, sale_log"))
		rc = stmt_rejects_sales(s, t);
	if (rc == 0 && (s->failed_stmt = "store_refusals"))
		rc = stmt_refusals(s, t);
	if (rc == 0 && (s->failed_stmt = "forwards"))
		rc = stmt_forwards(s, t);
	if (rc == 0 && (s->failed_stmt = "reservations"))
		rc = stmt_reservations(s, t);
	if (rc == 0 && (s->failed_stmt = "skus"))
		rc = stmt_skus(s, t);
	if (rc == 0 && (s->failed_stmt = "buyers"))
		rc = stmt_buyers(s, t);
	if (rc == 0 && (s->failed_stmt = "carts"))
		rc = stmt_carts(s, t);
	if (rc == 0 && (s->failed_stmt = "room_joins"))
		rc = stmt_room_joins(s, t);
	if (rc == 0)
		s->failed_stmt = NULL;
	/* COMMIT, unless the transaction failed or the connection died before COMMIT arrived. */
	*applied = rc == 0 && fault != SS_FAULT_CUT_LOST;
	if (!*applied)
		rollback(s, &l);
	s->undo.len = 0;
	if (fault != SS_FAULT_NONE)
		return FS_COMMIT_UNKNOWN;
	if (rc == 1)
		return FS_COMMIT_FENCED;
	return rc == 0 ? FS_COMMIT_OK : FS_COMMIT_REDO;
}

int ss_commit(struct sim_store *s, const struct fs_part_meta *meta, int64_t next_offset,
	      int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
	      uint64_t token, enum ss_fault fault, int64_t *before, bool *applied)
{
	struct ss_tx t;
	memset(&t, 0, sizeof t);
	ss_tx_build(&t, meta, next_offset, replied_offset, b, core, false);
	int rc = ss_tx_apply(s, &t, token, fault, before, applied);
	ss_tx_free(&t);
	return rc;
}
