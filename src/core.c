/* core.c: the pure decision core (see fs_core.h). */
#include "fs_core.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[] = {
    [FS_OUT_HELD] = "held",
    [FS_OUT_SOLD_OUT] = "sold_out",
    [FS_OUT_LIMIT_EXCEEDED] = "limit_exceeded",
    [FS_OUT_NOT_OPEN] = "not_open",
    [FS_OUT_CLOSED] = "closed",
    [FS_OUT_REJECTED] = "rejected",
    [FS_OUT_CONFLICT] = "conflict",
    [FS_OUT_CONFIRMED] = "confirmed",
    [FS_OUT_CONFIRMED_LATE] = "confirmed_late",
    [FS_OUT_REFUND_REQUIRED] = "refund_required",
    [FS_OUT_CANCELLED] = "cancelled",
    [FS_OUT_EXPIRED] = "expired",
    [FS_OUT_UNKNOWN_INTENT] = "unknown_intent",
    [FS_OUT_APPLIED] = "applied",
};

enum { OUTCOMES_LEN = sizeof outcome_names / sizeof outcome_names[0] };

const char *fs_outcome_name(enum fs_outcome o)
{
	if ((int)o <= 0 || (int)o >= OUTCOMES_LEN || !outcome_names[o])
		return "invalid";
	return outcome_names[o];
}

int fs_outcome_parse(const char *name, enum fs_outcome *out)
{
	for (int i = 1; i < OUTCOMES_LEN; i++) {
		if (outcome_names[i] && strcmp(outcome_names[i], name) == 0) {
			*out = (enum fs_outcome)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* ---- state containers ------------------------------------------------------------------ */

struct buyer_key {
	uint32_t sku_index;
	const char *buyer_id;
};

static uint64_t sku_hash(const char *sku)
{
	return fs_hash_bytes(sku, strlen(sku), 0);
}

static uint64_t buyer_hash(uint32_t sku_index, const char *buyer_id)
{
	return fs_hash_bytes(buyer_id, strlen(buyer_id), sku_index);
}

static bool sku_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_core *c = ctx;
	return strcmp(c->skus[value].sku, key) == 0;
}

static bool buyer_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_core *c = ctx;
	const struct buyer_key *k = key;
	return c->buyers[value].sku_index == k->sku_index &&
	       strcmp(c->buyers[value].buyer_id, k->buyer_id) == 0;
}

int fs_core_init(struct fs_core *c, int32_t partition)
{
	memset(c, 0, sizeof *c);
	c->partition = partition;
	return 0;
}

void fs_core_free(struct fs_core *c)
{
	free(c->skus);
	free(c->buyers);
	free(c->dirty_skus);
	free(c->dirty_buyers);
	fs_map_free(&c->sku_index);
	fs_map_free(&c->buyer_index);
	memset(c, 0, sizeof *c);
}

void fs_core_reset(struct fs_core *c)
{
	c->clock_ms = 0;
	c->skus_len = 0;
	c->buyers_len = 0;
	c->dirty_skus_len = 0;
	c->dirty_buyers_len = 0;
	fs_map_clear(&c->sku_index);
	fs_map_clear(&c->buyer_index);
}

/* Grows an array and its dirty list together, so that marking dirty never allocates. */
static int reserve(void **items, uint32_t **dirty, uint32_t *cap, uint32_t len, size_t size)
{
	if (len < *cap)
		return 0;
	uint32_t ncap = *cap ? *cap * 2 : 16;
	void *ni = realloc(*items, (size_t)ncap * size);
	if (!ni)
		return -ENOMEM;
	*items = ni;
	uint32_t *nd = realloc(*dirty, (size_t)ncap * sizeof *nd);
	if (!nd)
		return -ENOMEM;
	*dirty = nd;
	*cap = ncap;
	return 0;
}

static uint32_t find_sku(const struct fs_core *c, const char *sku)
{
	return fs_map_get(&c->sku_index, sku_hash(sku), sku_eq, c, sku);
}

const struct fs_sku *fs_core_sku(const struct fs_core *c, const char *sku)
{
	uint32_t i = find_sku(c, sku);
	return i == FS_MAP_NONE ? NULL : &c->skus[i];
}

static int add_sku(struct fs_core *c, const struct fs_sku *s, uint32_t *index)
{
	int rc =
	    reserve((void **)&c->skus, &c->dirty_skus, &c->skus_cap, c->skus_len, sizeof *c->skus);
	if (rc < 0)
		return rc;
	uint32_t i = c->skus_len;
	rc = fs_map_put(&c->sku_index, sku_hash(s->sku), i);
	if (rc < 0)
		return rc;
	c->skus[i] = *s;
	c->skus_len++;
	*index = i;
	return 0;
}

int fs_core_load_sku(struct fs_core *c, const struct fs_sku *s)
{
	if (find_sku(c, s->sku) != FS_MAP_NONE)
		return -EEXIST;
	struct fs_sku v = *s;
	v.stored = true;
	v.dirty = false;
	v.base_available = v.available;
	v.base_held = v.held;
	v.base_sold = v.sold;
	v.base_supply = v.supply;
	uint32_t i;
	return add_sku(c, &v, &i);
}

static uint32_t find_buyer(const struct fs_core *c, uint32_t sku_index, const char *buyer_id)
{
	struct buyer_key k = {sku_index, buyer_id};
	return fs_map_get(&c->buyer_index, buyer_hash(sku_index, buyer_id), buyer_eq, c, &k);
}

static int add_buyer(struct fs_core *c, uint32_t sku_index, const char *buyer_id, int64_t units,
		     uint32_t *index)
{
	int rc = reserve((void **)&c->buyers, &c->dirty_buyers, &c->buyers_cap, c->buyers_len,
			 sizeof *c->buyers);
	if (rc < 0)
		return rc;
	uint32_t i = c->buyers_len;
	rc = fs_map_put(&c->buyer_index, buyer_hash(sku_index, buyer_id), i);
	if (rc < 0)
		return rc;
	struct fs_buyer *b = &c->buyers[i];
	memset(b, 0, sizeof *b);
	b->sku_index = sku_index;
	strcpy(b->buyer_id, buyer_id);
	b->units = units;
	b->base_units = units;
	c->buyers_len++;
	*index = i;
	return 0;
}

int fs_core_load_buyer(struct fs_core *c, const char *sku, const char *buyer_id, int64_t units)
{
	uint32_t si = find_sku(c, sku);
	if (si == FS_MAP_NONE || find_buyer(c, si, buyer_id) != FS_MAP_NONE)
		return -EINVAL;
	uint32_t i;
	return add_buyer(c, si, buyer_id, units, &i);
}

static void mark_sku(struct fs_core *c, uint32_t i)
{
	if (!c->skus[i].dirty) {
		c->skus[i].dirty = true;
		c->dirty_skus[c->dirty_skus_len++] = i;
	}
}

static void mark_buyer(struct fs_core *c, uint32_t i)
{
	if (!c->buyers[i].dirty) {
		c->buyers[i].dirty = true;
		c->dirty_buyers[c->dirty_buyers_len++] = i;
	}
}

void fs_core_commit(struct fs_core *c)
{
	for (uint32_t k = 0; k < c->dirty_skus_len; k++) {
		struct fs_sku *s = &c->skus[c->dirty_skus[k]];
		s->dirty = false;
		s->stored = true;
		s->base_available = s->available;
		s->base_held = s->held;
		s->base_sold = s->sold;
		s->base_supply = s->supply;
	}
	for (uint32_t k = 0; k < c->dirty_buyers_len; k++) {
		struct fs_buyer *b = &c->buyers[c->dirty_buyers[k]];
		b->dirty = false;
		b->base_units = b->units;
	}
	c->dirty_skus_len = 0;
	c->dirty_buyers_len = 0;
}

/* ---- decisions ------------------------------------------------------------------------- */

static void reject(struct fs_decision *d, enum fs_outcome o, const char *reason)
{
	d->outcome = o;
	d->reason = reason;
}

static int decide_buy(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	d->qty = r->qty;
	uint32_t si = find_sku(c, r->sku);
	if (si == FS_MAP_NONE) {
		reject(d, FS_OUT_REJECTED, "unknown_sku");
		return 0;
	}
	struct fs_sku *s = &c->skus[si];
	if (s->status == FS_SKU_CLOSED || (s->closes_at_ms && c->clock_ms >= s->closes_at_ms)) {
		reject(d, FS_OUT_CLOSED, NULL);
		return 0;
	}
	if (s->opens_at_ms && c->clock_ms < s->opens_at_ms) {
		reject(d, FS_OUT_NOT_OPEN, NULL);
		return 0;
	}
	if (r->qty > s->max_qty) {
		reject(d, FS_OUT_REJECTED, "qty_over_cap");
		return 0;
	}
	uint32_t bi = find_buyer(c, si, r->buyer_id);
	int64_t units = bi == FS_MAP_NONE ? 0 : c->buyers[bi].units;
	if (units + r->qty > s->per_buyer_limit) {
		reject(d, FS_OUT_LIMIT_EXCEEDED, NULL);
		return 0;
	}
	if (s->available < r->qty) {
		reject(d, FS_OUT_SOLD_OUT, NULL);
		return 0;
	}
	if (bi == FS_MAP_NONE) {
		int rc = add_buyer(c, si, r->buyer_id, 0, &bi);
		if (rc < 0)
			return rc;
		c->buyers[bi].base_units = 0;
	}
	s = &c->skus[si];
	s->available -= r->qty;
	s->held += r->qty;
	c->buyers[bi].units += r->qty;
	mark_sku(c, si);
	mark_buyer(c, bi);
	assert(s->available >= 0 && s->available + s->held + s->sold == s->supply);
	assert(c->buyers[bi].units <= s->per_buyer_limit);
	d->outcome = FS_OUT_HELD;
	d->reserve = true;
	d->expires_at_ms = c->clock_ms + s->hold_ms;
	return 0;
}

static int decide_open(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	d->qty = r->qty;
	if (find_sku(c, r->sku) != FS_MAP_NONE) {
		reject(d, FS_OUT_REJECTED, "already_open");
		return 0;
	}
	struct fs_sku s = {
	    .partition = c->partition,
	    .status = FS_SKU_OPEN,
	    .supply = r->qty,
	    .available = r->qty,
	    .per_buyer_limit = r->per_buyer_limit,
	    .max_qty = r->max_qty,
	    .hold_ms = r->hold_ms,
	    .opens_at_ms = r->opens_at_ms,
	    .closes_at_ms = r->closes_at_ms,
	};
	strcpy(s.sku, r->sku);
	uint32_t i;
	int rc = add_sku(c, &s, &i);
	if (rc < 0)
		return rc;
	mark_sku(c, i);
	d->outcome = FS_OUT_APPLIED;
	return 0;
}

static int decide_restock_close(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	d->qty = r->qty;
	uint32_t si = find_sku(c, r->sku);
	if (si == FS_MAP_NONE) {
		reject(d, FS_OUT_REJECTED, "unknown_sku");
		return 0;
	}
	struct fs_sku *s = &c->skus[si];
	if (r->kind == FS_KIND_RESTOCK) {
		s->supply += r->qty;
		s->available += r->qty;
	} else {
		s->status = FS_SKU_CLOSED;
	}
	mark_sku(c, si);
	d->outcome = FS_OUT_APPLIED;
	return 0;
}

int fs_core_decide(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	memset(d, 0, sizeof *d);
	/* The partition clock: record timestamps made monotonic. */
	if (r->ts_ms > c->clock_ms)
		c->clock_ms = r->ts_ms;
	d->decided_at_ms = c->clock_ms;

	switch (r->kind) {
	case FS_KIND_INVALID:
		reject(d, FS_OUT_REJECTED, r->reject_reason);
		return 0;
	case FS_KIND_BUY:
		return decide_buy(c, r, d);
	case FS_KIND_OPEN:
		return decide_open(c, r, d);
	case FS_KIND_RESTOCK:
	case FS_KIND_CLOSE:
		return decide_restock_close(c, r, d);
	case FS_KIND_CONFIRM:
	case FS_KIND_CANCEL:
		/* The hold lifecycle (confirm, cancel, expiry) is issue 3; until it lands these
		 * records are answered, recorded and have no effect. */
		reject(d, FS_OUT_REJECTED, "unsupported_type");
		return 0;
	case FS_KIND_TICK:
		d->outcome = FS_OUT_APPLIED;
		return 0;
	}
	reject(d, FS_OUT_REJECTED, "bad_type");
	return 0;
}
