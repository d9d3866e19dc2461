/* batch.c: dedupe and decide one partition's batch (see batch.h). */
#include "core/batch.h"

#include "core/cart.h"
#include "core/token.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Index values: items are stored as is, stored entries with the top bit set. */
#define STORED_FLAG 0x80000000u

struct key {
	const char *intent_id;
	int kind;
};

static uint64_t key_hash(const char *intent_id, int kind)
{
	return fs_hash_bytes(intent_id, FS_UUID_LEN, (uint64_t)kind);
}

static bool key_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_batch *b = ctx;
	const struct key *k = key;
	if (value & STORED_FLAG) {
		const struct fs_stored *s = &b->stored[value & ~STORED_FLAG];
		return s->kind == k->kind && strcmp(s->intent_id, k->intent_id) == 0;
	}
	const struct fs_item *it = &b->items[value];
	return fs_item_key_kind(it) == k->kind && strcmp(it->rec.intent_id, k->intent_id) == 0;
}

int fs_batch_init(struct fs_batch *b, uint32_t cap)
{
	memset(b, 0, sizeof *b);
	b->items = calloc(cap, sizeof *b->items);
	/* A follow-up is looked up under both its keys: two stored entries at most per item. */
	b->stored = calloc((size_t)cap * 2, sizeof *b->stored);
	if (!b->items || !b->stored) {
		fs_batch_free(b);
		return -ENOMEM;
	}
	b->cap = cap;
	b->stored_cap = cap * 2;
	return 0;
}

void fs_batch_free(struct fs_batch *b)
{
	free(b->items);
	free(b->stored);
	fs_map_free(&b->index);
	fs_buf_free(&b->fwd);
	free(b->exts);
	memset(b, 0, sizeof *b);
}

void fs_batch_reset_decisions(struct fs_batch *b)
{
	b->stored_len = 0;
	fs_map_clear(&b->index);
	memset(&b->counts, 0, sizeof b->counts);
	for (uint32_t i = 0; i < b->len; i++) {
		memset(&b->items[i].dec, 0, sizeof b->items[i].dec);
		b->items[i].cls = 0;
	}
}

void fs_batch_clear(struct fs_batch *b)
{
	b->len = 0;
	b->exts_len = 0;
	fs_buf_clear(&b->fwd);
	fs_batch_reset_decisions(b);
}

int fs_batch_keep(struct fs_batch *b, struct fs_item *it, const void *key, size_t key_len,
		  const void *payload, size_t len)
{
	it->fwd_at = b->fwd.len;
	it->fwd_key_len = (uint32_t)key_len;
	it->fwd_len = (uint32_t)len;
	if (key_len)
		fs_buf_add(&b->fwd, key, key_len);
	if (len)
		fs_buf_add(&b->fwd, payload, len);
	return fs_buf_ok(&b->fwd) ? 0 : -ENOMEM;
}

int fs_batch_keep_ext(struct fs_batch *b, struct fs_item *it, const struct fs_record_ext *x)
{
	if (b->exts_len == b->exts_cap) {
		uint32_t cap = b->exts_cap ? b->exts_cap * 2 : 8;
		struct fs_record_ext *n = realloc(b->exts, (size_t)cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		b->exts = n;
		b->exts_cap = cap;
	}
	it->ext = b->exts_len;
	b->exts[b->exts_len++] = *x;
	return 0;
}

struct fs_item *fs_batch_push(struct fs_batch *b)
{
	if (b->len == b->cap)
		return NULL;
	struct fs_item *it = &b->items[b->len++];
	memset(it, 0, sizeof *it);
	return it;
}

void fs_item_answer_conflict(struct fs_item *it)
{
	memset(&it->dec, 0, sizeof it->dec);
	it->dec.outcome = FS_OUT_CONFLICT;
	it->dec.reason = "intent_id_reused";
	it->dec.qty = it->rec.qty;
	/* The record's own time: no row keeps a conflict, and an answer given again after a
	 * restart must carry the same (the record is all it has then). */
	it->dec.decided_at_ms = it->rec.ts_ms;
	it->first_partition = it->rec.partition;
	it->first_offset = it->rec.offset;
}

void fs_item_refuse(struct fs_item *it)
{
	if (it->rec.kind != FS_KIND_INVALID)
		it->rec.refused_kind = it->rec.kind;
	it->key_h = 0; /* (no key now) */
	it->rec.kind = FS_KIND_INVALID;
	it->rec.misrouted = false;
	it->rec.reject_reason = "store_refused";
}

const char *fs_item_reject_reason(const struct fs_item *it)
{
	return it->dec.reason ? it->dec.reason : "invalid";
}

bool fs_item_extends_reject_run(const struct fs_item *prev, const struct fs_item *it)
{
	return prev && !prev->rec.has_intent && !it->rec.has_intent &&
	       prev->rec.offset + 1 == it->rec.offset &&
	       strcmp(fs_item_reject_reason(prev), fs_item_reject_reason(it)) == 0;
}

bool fs_item_has_key(const struct fs_item *it)
{
	if (it->rec.misrouted)
		return false;
	switch (it->rec.kind) {
	case FS_KIND_BUY:
	case FS_KIND_CONFIRM:
	case FS_KIND_CANCEL:
		return true;
	default:
		return false;
	}
}

/* The item's key hash under its own kind (cached: hashing a 36-byte id under a keyed hash is
 * most of what a repeat-free record costs the dedupe). */
static uint64_t item_hash(struct fs_item *it)
{
	if (!it->key_h)
		it->key_h = key_hash(it->rec.intent_id, (int)it->rec.kind);
	return it->key_h;
}

static int add_stored_hashed(struct fs_batch *b, const struct fs_stored *s, uint64_t h)
{
	if (b->stored_len == b->stored_cap)
		return -ENOBUFS;
	struct key k = {s->intent_id, s->kind};
	if (fs_map_get(&b->index, h, key_eq, b, &k) != FS_MAP_NONE)
		return 0; /* the primary key makes this impossible; ignore rather than trust it */
	uint32_t i = b->stored_len++;
	b->stored[i] = *s;
	if (s->dec.reason) {
		snprintf(b->stored[i].reason_buf, sizeof b->stored[i].reason_buf, "%s",
			 s->dec.reason);
		b->stored[i].dec.reason = b->stored[i].reason_buf;
	}
	return fs_map_put(&b->index, h, i | STORED_FLAG);
}

int fs_batch_add_stored(struct fs_batch *b, const struct fs_stored *s)
{
	return add_stored_hashed(b, s, key_hash(s->intent_id, s->kind));
}

/* Answers a record whose intent id was decided before, in the store or earlier in the batch. */
static void answer_repeat(struct fs_batch *b, struct fs_item *it, uint32_t found)
{
	int64_t hash;
	const struct fs_decision *first;
	int32_t part;
	int64_t off;
	if (found & STORED_FLAG) {
		const struct fs_stored *s = &b->stored[found & ~STORED_FLAG];
		hash = s->body_hash;
		first = &s->dec;
		part = s->partition;
		off = s->offset;
	} else {
		const struct fs_item *f = &b->items[found];
		hash = f->rec.body_hash;
		first = &f->dec;
		part = f->first_partition;
		off = f->first_offset;
	}
	if (hash != it->rec.body_hash) {
		it->cls = FS_ITEM_CONFLICT;
		fs_item_answer_conflict(it);
		b->counts.conflicts++;
		return;
	}
	it->cls = FS_ITEM_REPEAT;
	it->dec = *first;
	it->dec.duplicate = true;
	it->dec.reserve = false;
	it->first_partition = part;
	it->first_offset = off;
	b->counts.repeats++;
}

static uint32_t find_hashed(const struct fs_batch *b, const struct fs_item *it, int kind,
			    uint64_t h)
{
	struct key k = {it->rec.intent_id, kind};
	return fs_map_get(&b->index, h, key_eq, b, &k);
}

static uint32_t find_key(const struct fs_batch *b, const struct fs_item *it, int kind)
{
	return find_hashed(b, it, kind, key_hash(it->rec.intent_id, kind));
}

/* Keys a decided item i, whose own key (hash h) was not found: a follow-up that found no hold
 * goes under its unmatched key, or is the repeat of the one there (which had no effect
 * either). 1: answered as a repeat; 0: keyed; or -ENOMEM. */
static int key_decided(struct fs_batch *b, struct fs_item *it, uint32_t i, uint64_t h)
{
	int kind = fs_item_key_kind(it);
	if (kind != (int)it->rec.kind) {
		h = key_hash(it->rec.intent_id, kind);
		uint32_t found = find_hashed(b, it, kind, h);
		if (found != FS_MAP_NONE) {
			answer_repeat(b, it, found);
			return 1;
		}
	}
	return fs_map_put(&b->index, h, i);
}

static enum fs_item_class class_of(const struct fs_record *r)
{
	if (r->misrouted)
		return FS_ITEM_FORWARD;
	switch (r->kind) {
	case FS_KIND_INVALID:
		return FS_ITEM_INVALID;
	case FS_KIND_OPEN:
	case FS_KIND_RESTOCK:
	case FS_KIND_CLOSE:
		return FS_ITEM_SALE;
	case FS_KIND_TICK:
		return FS_ITEM_TICK;
	case FS_KIND_JOIN:
		return FS_ITEM_JOIN;
	case FS_KIND_CART:
	case FS_KIND_CART_CONFIRM:
	case FS_KIND_CART_CANCEL:
	case FS_KIND_CART_MSG:
		return FS_ITEM_CART;
	default:
		return FS_ITEM_NEW;
	}
}

/* A cart item, to the cart module. A cart its checks refuse (cart.lines.max, ...) becomes an
 * invalid record, rejected with their reason. */
static int decide_cart(struct fs_batch *b, struct fs_core *core, struct fs_item *it)
{
	struct fs_carts *cs = core->carts;
	const struct fs_record *r = &it->rec;
	if (!cs || it->ext >= b->exts_len) {
		it->rec.kind = FS_KIND_INVALID;
		it->rec.reject_reason = "bad_type"; /* carts are off: as before carts */
		it->cls = FS_ITEM_INVALID;
		return fs_core_decide(core, &it->rec, &it->dec);
	}
	struct fs_record_ext *x = &b->exts[it->ext];
	int rc;
	switch (r->kind) {
	case FS_KIND_CART: {
		const char *why = fs_cart_req_check(cs, &x->cart);
		if (why) {
			it->rec.kind = FS_KIND_INVALID;
			it->rec.reject_reason = why;
			it->cls = FS_ITEM_INVALID;
			return fs_core_decide(core, &it->rec, &it->dec);
		}
		rc = fs_cart_step_cart(cs, core, &x->cart, r->ts_ms, r->offset);
		break;
	}
	case FS_KIND_CART_MSG:
		rc = fs_cart_step_msg(cs, core, &x->msg, r->ts_ms, r->offset);
		break;
	default:
		rc = fs_cart_step_followup(cs, core, r->intent_id, r->kind == FS_KIND_CART_CONFIRM,
					   r->ts_ms, r->offset);
		break;
	}
	it->dec.outcome = FS_OUT_APPLIED;
	it->dec.decided_at_ms = core->clock_ms;
	return rc;
}

/* The simulator's mutation (tests/sim/meson.build): FS_REFUSE_MUTATE=2 leaves a refused
 * cart_reserve unanswered, as before issue 47: the sweep must fail on it. */
#ifndef FS_REFUSE_MUTATE
#define FS_REFUSE_MUTATE 0
#endif

/* A cart message the store refused (rejected store_refused): a reserve still answers its
 * coordinator, refused, so that the cart ends instead of waiting for it (issue 47, item 5). */
static int refused_cart_msg(struct fs_batch *b, struct fs_core *core, const struct fs_item *it)
{
	if (FS_REFUSE_MUTATE == 2 || it->rec.refused_kind != FS_KIND_CART_MSG || !core->carts ||
	    it->ext >= b->exts_len)
		return 0;
	return fs_cart_refuse_msg(core->carts, core, &b->exts[it->ext].msg, it->rec.offset);
}

/* Whether the last open of sku among the batch's first n items opens it behind a waiting room
 * (a sale without one verifies no token: its buys are never refused for one). */
static bool opened_with_room_before(const struct fs_batch *b, uint32_t n, const char *sku)
{
	bool room = false;
	for (uint32_t i = 0; i < n; i++) {
		const struct fs_record *r = &b->items[i].rec;
		if (r->kind == FS_KIND_OPEN && strcmp(r->sku, sku) == 0)
			room = r->u.admission.rate_per_s > 0;
	}
	return room;
}

/* A new buy that may be refused for its token at clock (the log clock at its record): such a
 * refusal is keyed apart (kind 11), so no insert conflict would catch a buy decided before
 * under its own key that memory does not hold (issue 47 item 1); the batch is looked up
 * first, as for a follow-up. The verdict is kept in the record for the core. */
static bool buy_may_refuse(struct fs_batch *b, const struct fs_core *core, uint32_t i,
			   int64_t clock)
{
	struct fs_item *it = &b->items[i];
	if (it->rec.kind != FS_KIND_BUY || !fs_item_has_key(it) ||
	    find_key(b, it, FS_KIND_BUY) != FS_MAP_NONE)
		return false;
	uint32_t si = fs_core_sku_index(core, it->rec.sku);
	if (si == FS_MAP_NONE)
		return opened_with_room_before(b, i, it->rec.sku);
	const struct fs_sku *s = &core->skus[si];
	if (!s->room)
		return false;
	int v = fs_core_token_verdict(core, s, &it->rec, clock);
	it->rec.u.token.verdict = (int8_t)(v + 1);
	it->rec.u.token.verdict_clock = clock;
	return v != FS_TOKEN_OK;
}

bool fs_batch_needs_lookup(struct fs_batch *b, const struct fs_core *core)
{
	int64_t clock = core->clock_ms; /* as fs_core_advance moves it, record by record */
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		if (it->rec.ts_ms > clock)
			clock = it->rec.ts_ms;
		if (buy_may_refuse(b, core, i, clock))
			return true;
		if (!fs_kind_is_followup((int)it->rec.kind) || !fs_item_has_key(it) ||
		    find_key(b, it, (int)it->rec.kind) != FS_MAP_NONE)
			continue;
		const struct fs_hold *h = fs_core_hold(core, it->rec.intent_id);
		if (!h || strcmp(core->skus[h->sku_index].sku, it->rec.sku) != 0)
			return true;
	}
	return false;
}

static int decide_items(struct fs_batch *b, struct fs_core *core);

int fs_batch_decide(struct fs_batch *b, struct fs_core *core)
{
	/* The groups the store refused are the batch's to name, for this call only. */
	if (core->carts) {
		core->carts->refuse_groups = b->refuse_groups;
		core->carts->refuse_groups_len = b->refuse_groups_len;
	}
	int rc = decide_items(b, core);
	if (core->carts) {
		core->carts->refuse_groups = NULL;
		core->carts->refuse_groups_len = 0;
	}
	return rc;
}

static int decide_items(struct fs_batch *b, struct fs_core *core)
{
	memset(&b->counts, 0, sizeof b->counts);
	for (uint32_t i = 0; i < b->len; i++) {
		struct fs_item *it = &b->items[i];
		b->counts.records++;
		it->first_partition = it->rec.partition;
		it->first_offset = it->rec.offset;
		if (it->refuse_due)
			fs_core_refuse_due(core, it->rec.ts_ms, it->rec.offset, b->refuse_ids,
					   b->refuse_ids_len);
		/* Held carts whose time is up expire before the record is decided, as holds do. */
		if (core->carts) {
			int64_t due = fs_carts_next_expiry(core->carts);
			if (due >= 0 && due <= (it->rec.ts_ms > core->clock_ms ? it->rec.ts_ms
									       : core->clock_ms)) {
				int rc = fs_cart_step_clock(core->carts, core, it->rec.ts_ms,
							    it->rec.offset);
				if (rc < 0)
					return rc;
			}
		}
		bool keyed = fs_item_has_key(it);
		uint64_t h = keyed ? item_hash(it) : 0;
		if (keyed) {
			uint32_t found = find_hashed(b, it, (int)it->rec.kind, h);
			if (found != FS_MAP_NONE) {
				/* A repeat still moves the clock (and expires what is due): time is
				 * the log's, every record counts. */
				fs_core_advance(core, it->rec.ts_ms, it->rec.offset);
				answer_repeat(b, it, found);
				continue;
			}
		}
		it->cls = class_of(&it->rec);
		if (it->cls == FS_ITEM_FORWARD) {
			/* Not decided here, but a record of this log all the same: it moves the
			 * clock like any other (a replay sees it too). */
			fs_core_advance(core, it->rec.ts_ms, it->rec.offset);
			it->dec.decided_at_ms = it->rec.ts_ms;
			b->counts.forwarded++;
			continue;
		}
		int rc = it->cls == FS_ITEM_CART ? decide_cart(b, core, it)
						 : fs_core_decide(core, &it->rec, &it->dec);
		if (rc < 0)
			return rc;
		if (keyed && (rc = key_decided(b, it, i, h)) != 0) {
			if (rc < 0)
				return rc;
			continue; /* a repeat of a follow-up that found no hold */
		}
		if (it->cls == FS_ITEM_INVALID)
			it->dec.decided_at_ms =
				it->rec.ts_ms; /* as for a conflict: no row keeps it */
		if (it->cls == FS_ITEM_INVALID && (rc = refused_cart_msg(b, core, it)) < 0)
			return rc;
		switch (it->cls) {
		case FS_ITEM_NEW:
			b->counts.fresh++;
			break;
		case FS_ITEM_INVALID:
			b->counts.invalid++;
			if (fs_record_off_route(&it->rec))
				b->counts.wrong_partition++;
			break;
		case FS_ITEM_SALE:
			b->counts.sale++;
			break;
		case FS_ITEM_CART:
			b->counts.carts++;
			break;
		case FS_ITEM_JOIN:
			b->counts.joins++;
			break;
		default:
			b->counts.ticks++;
			break;
		}
	}
	return 0;
}

/* ---- the memory of committed decisions ------------------------------------------------- */

static bool seen_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_seen *s = ctx;
	const struct key *k = key;
	return s->items[value].kind == k->kind &&
	       strcmp(s->items[value].intent_id, k->intent_id) == 0;
}

int fs_seen_init(struct fs_seen *s, uint32_t cap_max)
{
	memset(s, 0, sizeof *s);
	s->cap_max = cap_max ? cap_max : 1;
	return 0;
}

void fs_seen_free(struct fs_seen *s)
{
	free(s->items);
	fs_map_free(&s->index);
	memset(s, 0, sizeof *s);
}

void fs_seen_clear(struct fs_seen *s)
{
	s->len = 0;
	fs_map_clear(&s->index);
}

int fs_seen_add(struct fs_seen *s, const struct fs_item *it)
{
	if (s->len == s->cap_max) {
		fs_seen_clear(s);
		s->resets++;
	}
	if (s->len == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 1024;
		if (cap > s->cap_max)
			cap = s->cap_max;
		struct fs_stored *n = realloc(s->items, (size_t)cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		s->items = n;
		s->cap = cap;
	}
	struct fs_stored *st = &s->items[s->len];
	memset(st, 0, sizeof *st);
	strcpy(st->intent_id, it->rec.intent_id);
	st->kind = fs_item_key_kind(it);
	st->body_hash = it->rec.body_hash;
	st->partition = it->first_partition;
	st->offset = it->first_offset;
	st->dec = it->dec;
	st->dec.duplicate = false;
	if (it->dec.reason) {
		snprintf(st->reason_buf, sizeof st->reason_buf, "%s", it->dec.reason);
		st->dec.reason = st->reason_buf;
	}
	uint64_t h = st->kind == (int)it->rec.kind && it->key_h ? it->key_h
								: key_hash(st->intent_id, st->kind);
	int rc = fs_map_put(&s->index, h, s->len);
	if (rc == 0)
		s->len++;
	return rc;
}

static const struct fs_stored *seen_find_hashed(const struct fs_seen *s, const char *intent_id,
						int kind, uint64_t h)
{
	struct key k = {intent_id, kind};
	uint32_t v = fs_map_get(&s->index, h, seen_eq, s, &k);
	return v == FS_MAP_NONE ? NULL : &s->items[v];
}

const struct fs_stored *fs_seen_find(const struct fs_seen *s, const char *intent_id, int kind)
{
	return seen_find_hashed(s, intent_id, kind, key_hash(intent_id, kind));
}

uint32_t fs_batch_add_seen(struct fs_batch *b, const struct fs_seen *s)
{
	uint32_t found = 0;
	for (uint32_t i = 0; i < b->len; i++) {
		struct fs_item *it = &b->items[i];
		if (!fs_item_has_key(it))
			continue;
		int kind = (int)it->rec.kind;
		uint64_t h = item_hash(it);
		const struct fs_stored *st = seen_find_hashed(s, it->rec.intent_id, kind, h);
		if (st && add_stored_hashed(b, st, h) == 0)
			found++;
		st = fs_kind_has_unmatched(kind)
			     ? fs_seen_find(s, it->rec.intent_id, kind + FS_KEY_UNMATCHED)
			     : NULL;
		if (st && fs_batch_add_stored(b, st) == 0)
			found++;
	}
	return found;
}
