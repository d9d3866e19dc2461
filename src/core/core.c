/* core.c: the pure decision core (see core.h). */
#include "core/core.h"

#include "core/cart.h"
#include "core/token.h"

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
	[FS_OUT_WAITING] = "waiting",
	[FS_OUT_ADMITTED] = "admitted",
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

static const char *const hold_names[] = {
	[FS_HOLD_HELD] = "held",
	[FS_HOLD_CONFIRMED] = "confirmed",
	[FS_HOLD_CANCELLED] = "cancelled",
	[FS_HOLD_EXPIRED] = "expired",
};

const char *fs_hold_status_name(int status)
{
	if (status < FS_HOLD_HELD || status > FS_HOLD_EXPIRED)
		return "invalid";
	return hold_names[status];
}

int fs_hold_status_parse(const char *name, int *out)
{
	for (int i = FS_HOLD_HELD; i <= FS_HOLD_EXPIRED; i++) {
		if (strcmp(hold_names[i], name) == 0) {
			*out = i;
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

static uint64_t hold_hash(const char *intent_id)
{
	return fs_hash_bytes(intent_id, strlen(intent_id), 0x686f6c64);
}

static bool hold_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_core *c = ctx;
	return strcmp(c->holds[value].intent_id, key) == 0;
}

int fs_core_init(struct fs_core *c, int32_t partition)
{
	memset(c, 0, sizeof *c);
	c->partition = partition;
	return 0;
}

/* The SKUs' rooms, freed with the state they belong to. */
static void free_rooms(struct fs_core *c)
{
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		struct fs_sku *s = &c->skus[c->room_skus[k]];
		fs_room_free(s->room);
		free(s->room);
		s->room = NULL;
	}
	c->room_skus_len = 0;
}

void fs_core_free(struct fs_core *c)
{
	free_rooms(c);
	free(c->room_skus);
	free(c->skus);
	free(c->buyers);
	free(c->dirty_skus);
	free(c->dirty_buyers);
	free(c->holds);
	free(c->heap);
	free(c->dirty_holds);
	free(c->expired);
	free(c->expired_at_ms);
	free(c->expired_offset);
	free(c->refused);
	free(c->refused_offset);
	fs_map_free(&c->sku_index);
	fs_map_free(&c->buyer_index);
	fs_map_free(&c->hold_index);
	memset(c, 0, sizeof *c);
}

void fs_core_reset(struct fs_core *c)
{
	if (c->carts)
		fs_carts_reset(c->carts);
	free_rooms(c);
	c->clock_ms = 0;
	c->skus_len = 0;
	c->buyers_len = 0;
	c->dirty_skus_len = 0;
	c->dirty_buyers_len = 0;
	c->holds_len = 0;
	c->heap_len = 0;
	c->dirty_holds_len = 0;
	c->expired_len = 0;
	c->refused_len = 0;
	fs_map_clear(&c->sku_index);
	fs_map_clear(&c->buyer_index);
	fs_map_clear(&c->hold_index);
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

/* A new SKU, with an empty room when its sale needs admission (s->room is ignored). */
static int add_sku(struct fs_core *c, const struct fs_sku *s, uint32_t *index)
{
	int rc = reserve((void **)&c->skus, &c->dirty_skus, &c->skus_cap, c->skus_len,
			 sizeof *c->skus);
	if (rc < 0)
		return rc;
	struct fs_room *room = NULL;
	if (s->admission.rate_per_s > 0) {
		if (c->room_skus_len == c->room_skus_cap) {
			uint32_t n = c->room_skus_cap ? c->room_skus_cap * 2 : 4;
			uint32_t *x = realloc(c->room_skus, (size_t)n * sizeof *x);
			if (!x)
				return -ENOMEM;
			c->room_skus = x;
			c->room_skus_cap = n;
		}
		room = malloc(sizeof *room);
		if (!room)
			return -ENOMEM;
		rc = fs_room_init(room, &s->admission, s->opens_at_ms);
		if (rc < 0) {
			free(room);
			return rc;
		}
	}
	uint32_t i = c->skus_len;
	rc = fs_map_put(&c->sku_index, sku_hash(s->sku), i);
	if (rc < 0) {
		free(room);
		return rc;
	}
	c->skus[i] = *s;
	c->skus[i].room = room;
	if (room)
		c->room_skus[c->room_skus_len++] = i;
	c->skus_len++;
	*index = i;
	return 0;
}

static bool sku_closed(const struct fs_core *c, const struct fs_sku *s)
{
	return s->status == FS_SKU_CLOSED || (s->closes_at_ms && c->clock_ms >= s->closes_at_ms);
}

int64_t fs_core_next_room_due(const struct fs_core *c)
{
	int64_t due = -1;
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		int64_t d = sku_closed(c, s) ? -1 : fs_room_next_due(s->room);
		if (d >= 0 && (due < 0 || d < due))
			due = d;
	}
	return due;
}

int fs_core_load_rooms_done(struct fs_core *c)
{
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		int rc = fs_room_load_done(c->skus[c->room_skus[k]].room, c->clock_ms);
		if (rc < 0)
			return rc;
	}
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
	int rc = add_buyer(c, si, buyer_id, units, &i);
	if (rc == 0)
		c->buyers[i].stored = true;
	return rc;
}

/* ---- holds and their expiry heap -------------------------------------------------------- */

/* Makes room for one more hold in every array that may list it, before any state changes. */
static int grow_holds(struct fs_core *c)
{
	if (c->holds_len < c->holds_cap)
		return 0;
	uint32_t ncap = c->holds_cap ? c->holds_cap * 2 : 16;
	if (ncap < c->holds_cap)
		return -ENOMEM;
	struct fs_hold *h = realloc(c->holds, (size_t)ncap * sizeof *h);
	if (!h)
		return -ENOMEM;
	c->holds = h;
	uint32_t **lists[] = {&c->heap, &c->dirty_holds, &c->expired, &c->refused};
	for (int i = 0; i < 4; i++) {
		uint32_t *n = realloc(*lists[i], (size_t)ncap * sizeof *n);
		if (!n)
			return -ENOMEM;
		*lists[i] = n;
	}
	int64_t **times[] = {&c->expired_at_ms, &c->expired_offset, &c->refused_offset};
	for (int i = 0; i < 3; i++) {
		int64_t *n = realloc(*times[i], (size_t)ncap * sizeof *n);
		if (!n)
			return -ENOMEM;
		*times[i] = n;
	}
	c->holds_cap = ncap;
	return 0;
}

static uint32_t find_hold(const struct fs_core *c, const char *intent_id)
{
	return fs_map_get(&c->hold_index, hold_hash(intent_id), hold_eq, c, intent_id);
}

const struct fs_hold *fs_core_hold(const struct fs_core *c, const char *intent_id)
{
	uint32_t i = find_hold(c, intent_id);
	return i == FS_MAP_NONE ? NULL : &c->holds[i];
}

/* Heap order: earlier expiry first; the earlier buy first on a tie (determinism). */
static bool heap_less(const struct fs_core *c, uint32_t a, uint32_t b)
{
	const struct fs_hold *x = &c->holds[a], *y = &c->holds[b];
	if (x->expires_at_ms != y->expires_at_ms)
		return x->expires_at_ms < y->expires_at_ms;
	return x->offset < y->offset;
}

static void heap_set(struct fs_core *c, uint32_t pos, uint32_t hold)
{
	c->heap[pos] = hold;
	c->holds[hold].heap_pos = pos;
}

static void sift_up(struct fs_core *c, uint32_t pos)
{
	uint32_t h = c->heap[pos];
	while (pos > 0) {
		uint32_t parent = (pos - 1) / 2;
		if (!heap_less(c, h, c->heap[parent]))
			break;
		heap_set(c, pos, c->heap[parent]);
		pos = parent;
	}
	heap_set(c, pos, h);
}

static void sift_down(struct fs_core *c, uint32_t pos)
{
	uint32_t h = c->heap[pos];
	for (;;) {
		uint32_t l = 2 * pos + 1, r = l + 1, m = pos;
		uint32_t best = h;
		if (l < c->heap_len && heap_less(c, c->heap[l], best))
			m = l, best = c->heap[l];
		if (r < c->heap_len && heap_less(c, c->heap[r], best))
			m = r, best = c->heap[r];
		if (m == pos)
			break;
		heap_set(c, pos, c->heap[m]);
		pos = m;
	}
	heap_set(c, pos, h);
}

static void heap_push(struct fs_core *c, uint32_t hold)
{
	uint32_t pos = c->heap_len++;
	heap_set(c, pos, hold);
	sift_up(c, pos);
}

static void heap_remove(struct fs_core *c, uint32_t hold)
{
	uint32_t pos = c->holds[hold].heap_pos;
	assert(pos < c->heap_len && c->heap[pos] == hold);
	c->holds[hold].heap_pos = FS_MAP_NONE;
	uint32_t last = c->heap[--c->heap_len];
	if (pos == c->heap_len)
		return;
	heap_set(c, pos, last);
	if (pos > 0 && heap_less(c, last, c->heap[(pos - 1) / 2]))
		sift_up(c, pos);
	else
		sift_down(c, pos);
}

int64_t fs_core_next_expiry(const struct fs_core *c)
{
	return c->heap_len ? c->holds[c->heap[0]].expires_at_ms : -1;
}

static void mark_hold(struct fs_core *c, uint32_t i)
{
	if (!c->holds[i].dirty) {
		c->holds[i].dirty = true;
		c->dirty_holds[c->dirty_holds_len++] = i;
	}
}

static int add_hold(struct fs_core *c, const struct fs_hold *h, uint32_t *index)
{
	int rc = grow_holds(c);
	if (rc < 0)
		return rc;
	uint32_t i = c->holds_len;
	rc = fs_map_put(&c->hold_index, hold_hash(h->intent_id), i);
	if (rc < 0)
		return rc;
	c->holds[i] = *h;
	c->holds[i].heap_pos = FS_MAP_NONE;
	c->holds[i].dirty = false;
	c->holds_len++;
	if (h->status == FS_HOLD_HELD && !h->expiry_refused)
		heap_push(c, i);
	*index = i;
	return 0;
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

int fs_core_load_hold(struct fs_core *c, const struct fs_hold *h, const char *sku,
		      const char *buyer_id)
{
	uint32_t si = find_sku(c, sku);
	if (si == FS_MAP_NONE || find_hold(c, h->intent_id) != FS_MAP_NONE)
		return -EINVAL;
	uint32_t bi = find_buyer(c, si, buyer_id);
	if (bi == FS_MAP_NONE) {
		/* A buyer whose units went back to 0 (cancel, expiry) has no loaded row, but
		 * has one in Postgres. */
		int rc = add_buyer(c, si, buyer_id, 0, &bi);
		if (rc < 0)
			return rc;
		c->buyers[bi].stored = true;
	}
	struct fs_hold v = *h;
	v.sku_index = si;
	v.buyer_index = bi;
	v.stored = true;
	uint32_t i;
	return add_hold(c, &v, &i);
}

/* Ends a live hold: the units go back to stock (cancel, expiry) or to sold (confirm). */
static void end_hold(struct fs_core *c, uint32_t hi, int status, int64_t offset)
{
	struct fs_hold *h = &c->holds[hi];
	struct fs_sku *s = &c->skus[h->sku_index];
	assert(h->status == FS_HOLD_HELD);
	if (h->heap_pos != FS_MAP_NONE) /* (not when its expiry was refused) */
		heap_remove(c, hi);
	s->held -= h->qty;
	if (status == FS_HOLD_CONFIRMED) {
		s->sold += h->qty;
	} else {
		s->available += h->qty;
		c->buyers[h->buyer_index].units -= h->qty;
		mark_buyer(c, h->buyer_index);
	}
	h->status = status;
	h->ended_at_ms = c->clock_ms;
	h->ended_offset = offset;
	mark_hold(c, hi);
	mark_sku(c, h->sku_index);
	assert(s->held >= 0 && s->available + s->held + s->sold == s->supply);
}

static bool listed(const char *id, const char *const *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(ids[i], id) == 0)
			return true;
	return false;
}

uint32_t fs_core_due(const struct fs_core *c, int64_t ts_ms, const char **out, uint32_t max)
{
	int64_t clock = ts_ms > c->clock_ms ? ts_ms : c->clock_ms;
	uint32_t n = 0, got = 0;
	uint32_t last = FS_MAP_NONE; /* the last one put out: the next is the least after it */
	for (;;) {
		uint32_t next = FS_MAP_NONE;
		for (uint32_t k = 0; k < c->heap_len; k++) {
			uint32_t h = c->heap[k];
			if (c->holds[h].expires_at_ms > clock ||
			    (last != FS_MAP_NONE && !heap_less(c, last, h)))
				continue;
			if (next == FS_MAP_NONE || heap_less(c, h, next))
				next = h;
		}
		if (next == FS_MAP_NONE || got == max)
			break;
		out[got++] = c->holds[next].intent_id;
		last = next;
	}
	for (uint32_t k = 0; k < c->heap_len; k++)
		n += c->holds[c->heap[k]].expires_at_ms <= clock;
	return n;
}

void fs_core_refuse_due(struct fs_core *c, int64_t ts_ms, int64_t offset, const char *const *ids,
			uint32_t n)
{
	int64_t clock = ts_ms > c->clock_ms ? ts_ms : c->clock_ms;
	/* The holds the record's clock would expire, in expiry order: each listed one's refusal
	 * is its own, so it leaves the heap for good and stays held (its units with it) until a
	 * confirm or a cancel ends it. The others expire as the clock moves, after this. */
	for (uint32_t k = 0; k < c->heap_len;) {
		uint32_t hi = c->heap[k];
		struct fs_hold *h = &c->holds[hi];
		if (h->expires_at_ms > clock || (ids && !listed(h->intent_id, ids, n))) {
			k++;
			continue;
		}
		heap_remove(c, hi);
		k = 0; /* the heap moved: look again from its top */
		h->expiry_refused = true;
		c->refused[c->refused_len] = hi;
		c->refused_offset[c->refused_len] = offset;
		c->refused_len++;
	}
}

void fs_core_advance(struct fs_core *c, int64_t ts_ms, int64_t offset)
{
	if (ts_ms > c->clock_ms)
		c->clock_ms = ts_ms;
	/* A hold expires once the clock reaches its expiry; before the record that moved it. */
	while (c->heap_len && c->holds[c->heap[0]].expires_at_ms <= c->clock_ms) {
		uint32_t hi = c->heap[0];
		end_hold(c, hi, FS_HOLD_EXPIRED, offset);
		c->expired[c->expired_len] = hi;
		c->expired_at_ms[c->expired_len] = c->clock_ms;
		c->expired_offset[c->expired_len] = offset;
		c->expired_len++;
	}
	/* The waiting rooms draw at their opening, at whatever record; they admit at ticks only
	 * (admit_at_tick). */
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		if (!sku_closed(c, s))
			fs_room_draw_at(s->room, c->clock_ms);
	}
}

/* The waiting rooms admit the slots the clock reached at the worker's own tick records only
 * (issue 47, item 4): a tick is appended by a worker that has read its partition to the end,
 * so its stamp is close to when it is decided, and a token that ends at the tick's clock plus
 * its life reaches its buyer with that life ahead. A buyer's record can be decided long after
 * its stamp (a backlog after an outage): tokens admitted there were dead on arrival. A tick a
 * stopped worker appended is decided late all the same: the next tick after the gap re-mints
 * its tokens (fs_room_remint). A closed sale admits no one. */
static void admit_at_tick(struct fs_core *c, int64_t offset)
{
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		if (sku_closed(c, s))
			continue;
		/* First the re-mint of a stale tick's tokens (room.h), then this tick's own. */
		fs_room_remint(s->room, c->clock_ms, offset);
		fs_room_advance(s->room, c->clock_ms, offset);
	}
}

void fs_core_commit(struct fs_core *c)
{
	if (c->carts)
		fs_carts_commit(c->carts);
	for (uint32_t k = 0; k < c->room_skus_len; k++)
		fs_room_commit(c->skus[c->room_skus[k]].room);
	for (uint32_t k = 0; k < c->dirty_holds_len; k++) {
		c->holds[c->dirty_holds[k]].dirty = false;
		c->holds[c->dirty_holds[k]].stored = true;
	}
	c->dirty_holds_len = 0;
	c->expired_len = 0;
	c->refused_len = 0;
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
		b->stored = true;
		b->base_units = b->units;
	}
	c->dirty_skus_len = 0;
	c->dirty_buyers_len = 0;
}

uint32_t fs_core_forget_ended(struct fs_core *c)
{
	if (c->dirty_holds_len || c->expired_len || c->refused_len || c->heap_len == c->holds_len)
		return 0;
	uint32_t kept = 0;
	for (uint32_t i = 0; i < c->holds_len; i++)
		if (c->holds[i].status == FS_HOLD_HELD)
			c->holds[kept++] = c->holds[i];
	uint32_t dropped = c->holds_len - kept;
	/* The index and the heap name holds by position: both are built again. The heap's
	 * order is a total one (expiry, then the buy's offset), so expiries come out as
	 * before. */
	c->holds_len = kept;
	c->heap_len = 0;
	fs_map_clear(&c->hold_index);
	for (uint32_t i = 0; i < kept; i++) {
		/* Cannot fail: the index held more entries than this before it was cleared. */
		(void)fs_map_put(&c->hold_index, hold_hash(c->holds[i].intent_id), i);
		if (!c->holds[i].expiry_refused)
			heap_push(c, i);
	}
	return dropped;
}

/* ---- for the cart module (src/core/cart.c) -------------------------------------------- */

uint32_t fs_core_sku_index(const struct fs_core *c, const char *sku)
{
	return find_sku(c, sku);
}

int64_t fs_core_buyer_units(const struct fs_core *c, uint32_t si, const char *buyer_id)
{
	uint32_t bi = find_buyer(c, si, buyer_id);
	return bi == FS_MAP_NONE ? 0 : c->buyers[bi].units;
}

int fs_core_take(struct fs_core *c, uint32_t si, const char *buyer_id, int64_t qty)
{
	uint32_t bi = find_buyer(c, si, buyer_id);
	if (bi == FS_MAP_NONE) {
		int rc = add_buyer(c, si, buyer_id, 0, &bi);
		if (rc < 0)
			return rc;
	}
	struct fs_sku *s = &c->skus[si];
	assert(s->available >= qty);
	s->available -= qty;
	s->held += qty;
	c->buyers[bi].units += qty;
	mark_sku(c, si);
	mark_buyer(c, bi);
	return 0;
}

void fs_core_give_back(struct fs_core *c, uint32_t si, const char *buyer_id, int64_t qty, bool sold)
{
	struct fs_sku *s = &c->skus[si];
	assert(s->held >= qty);
	s->held -= qty;
	if (sold) {
		s->sold += qty;
	} else {
		uint32_t bi = find_buyer(c, si, buyer_id);
		assert(bi != FS_MAP_NONE && c->buyers[bi].units >= qty);
		s->available += qty;
		c->buyers[bi].units -= qty;
		mark_buyer(c, bi);
	}
	mark_sku(c, si);
	assert(s->available + s->held + s->sold == s->supply);
}

/* ---- decisions ------------------------------------------------------------------------- */

static void reject(struct fs_decision *d, enum fs_outcome o, const char *reason)
{
	d->outcome = o;
	d->reason = reason;
}

/* A time on the log clock `ms` after `at`, saturating: a record stamped near the end of time
 * (possible only on a CreateTime topic, which the worker refuses) saturates there instead of
 * wrapping around into the past. */
static int64_t clock_after(int64_t at, int64_t ms)
{
	return at > INT64_MAX - ms ? INT64_MAX : at + ms;
}

/* closed, then not_open */
static bool window_refuses(const struct fs_core *c, const struct fs_sku *s, struct fs_decision *d)
{
	if (s->status == FS_SKU_CLOSED || (s->closes_at_ms && c->clock_ms >= s->closes_at_ms)) {
		reject(d, FS_OUT_CLOSED, NULL);
		return true;
	}
	if (s->opens_at_ms && c->clock_ms < s->opens_at_ms) {
		reject(d, FS_OUT_NOT_OPEN, NULL);
		return true;
	}
	return false;
}

int fs_core_token_verdict(const struct fs_core *c, const struct fs_sku *s,
			  const struct fs_record *r, int64_t clock_ms)
{
	if (r->u.token.verdict && r->u.token.verdict_clock == clock_ms)
		return r->u.token.verdict - 1;
	if (!r->u.token.present)
		return FS_TOKEN_NONE;
	if (r->u.token.too_long || !c->keys)
		return FS_TOKEN_BAD;
	return fs_token_verify(c->keys, r->u.token.text, s->sku, r->buyer_id, clock_ms);
}

/* A buy of a sale that needs admission: its token, verified on the log clock (issue 33). */
static bool token_refuses(const struct fs_core *c, const struct fs_sku *s,
			  const struct fs_record *r, struct fs_decision *d)
{
	enum fs_token_verdict v = fs_core_token_verdict(c, s, r, c->clock_ms);
	if (v == FS_TOKEN_OK)
		return false;
	reject(d, FS_OUT_REJECTED, fs_token_reason(v));
	return true;
}

/* After the window and (for a buy) the token: the quantity, the buyer's limit, the stock. */
static bool stock_refuses(const struct fs_sku *s, int64_t qty, int64_t units, struct fs_decision *d)
{
	if (qty > s->max_qty) {
		reject(d, FS_OUT_REJECTED, "qty_over_cap");
		return true;
	}
	if (units + qty > s->per_buyer_limit) {
		reject(d, FS_OUT_LIMIT_EXCEEDED, NULL);
		return true;
	}
	if (s->available < qty) {
		reject(d, FS_OUT_SOLD_OUT, NULL);
		return true;
	}
	return false;
}

/* The cart module's check: a sale that needs admission takes no cart line (a cart carries no
 * token per line; issue 33 leaves carts out of the waiting room). */
bool fs_core_refuses(const struct fs_core *c, const struct fs_sku *s, int64_t qty, int64_t units,
		     struct fs_decision *d)
{
	if (window_refuses(c, s, d))
		return true;
	if (s->room) {
		reject(d, FS_OUT_REJECTED, "admission_required");
		return true;
	}
	return stock_refuses(s, qty, units, d);
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
	uint32_t bi = find_buyer(c, si, r->buyer_id);
	if (window_refuses(c, s, d) || (s->room && token_refuses(c, s, r, d)) ||
	    stock_refuses(s, r->qty, bi == FS_MAP_NONE ? 0 : c->buyers[bi].units, d))
		return 0;
	/* Allocate first (buyer entry, hold slot): a failure leaves the state untouched. */
	int rc = grow_holds(c);
	if (rc < 0)
		return rc;
	if (find_hold(c, r->intent_id) != FS_MAP_NONE) {
		/* Only a stored hold whose decision row is missing gets here: refuse loudly. */
		reject(d, FS_OUT_REJECTED, "hold_exists");
		return 0;
	}
	if (bi == FS_MAP_NONE) {
		rc = add_buyer(c, si, r->buyer_id, 0, &bi);
		if (rc < 0)
			return rc;
		c->buyers[bi].base_units = 0;
	}
	struct fs_hold h = {
		.sku_index = si,
		.buyer_index = bi,
		.qty = r->qty,
		.expires_at_ms = clock_after(c->clock_ms, c->skus[si].hold_ms),
		.offset = r->offset,
		.status = FS_HOLD_HELD,
		.ended_offset = -1,
	};
	strcpy(h.intent_id, r->intent_id);
	uint32_t hi;
	rc = add_hold(c, &h, &hi);
	if (rc < 0)
		return rc;
	mark_hold(c, hi);
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
	d->expires_at_ms = h.expires_at_ms;
	return 0;
}

static int decide_open(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	d->qty = r->qty;
	if (find_sku(c, r->sku) != FS_MAP_NONE) {
		reject(d, FS_OUT_REJECTED, "already_open");
		return 0;
	}
	if (c->skus_len >= FS_SKUS_PER_PARTITION_MAX) {
		reject(d, FS_OUT_REJECTED, "too_many_skus");
		return 0;
	}
	if (r->u.admission.rate_per_s > 0 && !c->keys) {
		/* a sale whose tokens nothing here could verify (the worker has no key ring) */
		reject(d, FS_OUT_REJECTED, "no_key_ring");
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
	if (r->u.admission.rate_per_s > 0) {
		s.admission = (struct fs_admission){
			.rate_per_s = r->u.admission.rate_per_s,
			.token_ms = r->u.admission.token_ms,
			.draw = r->u.admission.draw,
		};
		memcpy(s.admission.seed, r->u.admission.seed, sizeof s.admission.seed);
	}
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

/* A join's answer from the room's entry i: as the first join was answered (waiting, or
 * admitted at once), with where the buyer stands now. */
static void join_answer(const struct fs_sku *s, uint32_t i, struct fs_decision *d)
{
	const struct fs_room_entry *e = &s->room->v[i];
	struct fs_room_place p;
	fs_room_place_of(s->room, i, &p);
	d->position = p.position;
	d->ahead = p.ahead;
	if (e->admitted_ms >= 0 && e->decided_off == e->offset) {
		d->outcome = FS_OUT_ADMITTED;
		d->admitted_ms = e->admitted_ms;
		d->expires_at_ms = clock_after(e->decided_ms, s->admission.token_ms);
		d->decided_at_ms = e->decided_ms;
	} else {
		d->outcome = FS_OUT_WAITING;
		d->decided_at_ms = e->joined_ms;
	}
}

/* Why a join finds no room: unknown_sku, no_waiting_room, or closed. */
static bool join_refuses(const struct fs_core *c, uint32_t si, struct fs_decision *d)
{
	if (si == FS_MAP_NONE) {
		reject(d, FS_OUT_REJECTED, "unknown_sku");
		return true;
	}
	if (!c->skus[si].room) {
		reject(d, FS_OUT_REJECTED, "no_waiting_room");
		return true;
	}
	return false;
}

/* A buyer joins the SKU's waiting room (issue 33): one entry per buyer; a repeat is answered
 * as the first join was. A closed sale still answers its buyers, and takes no new one. */
static int decide_join(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	uint32_t si = find_sku(c, r->sku);
	if (join_refuses(c, si, d))
		return 0;
	struct fs_sku *s = &c->skus[si];
	int64_t found = fs_room_find(s->room, r->buyer_id);
	if (found < 0 && sku_closed(c, s)) {
		reject(d, FS_OUT_CLOSED, NULL);
		return 0;
	}
	bool repeat;
	int i = fs_room_join(s->room, r->buyer_id, r->offset, c->clock_ms, &repeat);
	if (i < 0)
		return i;
	join_answer(s, (uint32_t)i, d);
	d->duplicate = repeat;
	return 0;
}

int fs_core_join_answer(const struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	memset(d, 0, sizeof *d);
	d->decided_at_ms = r->ts_ms;
	uint32_t si = find_sku(c, r->sku);
	if (join_refuses(c, si, d))
		return 0;
	const struct fs_sku *s = &c->skus[si];
	int64_t i = fs_room_find(s->room, r->buyer_id);
	/* No entry, or one made after this record: the join found no sale then (before its
	 * open: an open sale takes every join, and a closed one is never open again), or a
	 * closed one. Which, when it is closed now, the core cannot tell (known bug
	 * join-again-unknown-sku, tests/sim/meson.build): it says closed. */
	if ((i < 0 && !sku_closed(c, s)) || (i >= 0 && s->room->v[i].offset > r->offset)) {
		reject(d, FS_OUT_REJECTED, "unknown_sku");
	} else if (i < 0) {
		reject(d, FS_OUT_CLOSED, NULL);
	} else {
		join_answer(s, (uint32_t)i, d);
		/* a repeat is answered as it was live: as the first join, and a duplicate */
		d->duplicate = s->room->v[i].offset != r->offset;
	}
	return 0;
}

/* Finds the hold a confirm or cancel names; answers unknown_intent when there is none here. */
static uint32_t followup_hold(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	uint32_t hi = find_hold(c, r->intent_id);
	if (hi == FS_MAP_NONE) {
		reject(d, FS_OUT_UNKNOWN_INTENT, "no_hold");
		return FS_MAP_NONE;
	}
	if (strcmp(c->skus[c->holds[hi].sku_index].sku, r->sku) != 0) {
		reject(d, FS_OUT_UNKNOWN_INTENT, "sku_mismatch");
		return FS_MAP_NONE;
	}
	d->qty = c->holds[hi].qty;
	return hi;
}

/* Payment succeeded. A live hold becomes a sale; an expired one takes a fresh unit if one is
 * left (confirmed_late), else the buyer must be refunded. */
static void decide_confirm(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	uint32_t hi = followup_hold(c, r, d);
	if (hi == FS_MAP_NONE)
		return;
	struct fs_hold *h = &c->holds[hi];
	struct fs_sku *s = &c->skus[h->sku_index];
	struct fs_buyer *b = &c->buyers[h->buyer_index];
	switch (h->status) {
	case FS_HOLD_HELD:
		end_hold(c, hi, FS_HOLD_CONFIRMED, r->offset);
		d->outcome = FS_OUT_CONFIRMED;
		return;
	case FS_HOLD_CONFIRMED:
		reject(d, h->late ? FS_OUT_CONFIRMED_LATE : FS_OUT_CONFIRMED, "already_confirmed");
		return;
	case FS_HOLD_CANCELLED:
		reject(d, FS_OUT_REFUND_REQUIRED, "cancelled");
		return;
	default:
		break;
	}
	if (s->status == FS_SKU_CLOSED || (s->closes_at_ms && c->clock_ms >= s->closes_at_ms)) {
		reject(d, FS_OUT_REFUND_REQUIRED, "closed");
		return;
	}
	if (s->available < h->qty) {
		reject(d, FS_OUT_REFUND_REQUIRED, "sold_out");
		return;
	}
	if (b->units + h->qty > s->per_buyer_limit) {
		reject(d, FS_OUT_REFUND_REQUIRED, "limit_exceeded");
		return;
	}
	s->available -= h->qty;
	s->sold += h->qty;
	b->units += h->qty;
	h->status = FS_HOLD_CONFIRMED;
	h->late = true;
	h->ended_at_ms = c->clock_ms;
	h->ended_offset = r->offset;
	mark_hold(c, hi);
	mark_sku(c, h->sku_index);
	mark_buyer(c, h->buyer_index);
	assert(s->available >= 0 && s->available + s->held + s->sold == s->supply);
	d->outcome = FS_OUT_CONFIRMED_LATE;
}

/* The buyer gave up: a live hold returns its units to stock. */
static void decide_cancel(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	uint32_t hi = followup_hold(c, r, d);
	if (hi == FS_MAP_NONE)
		return;
	switch (c->holds[hi].status) {
	case FS_HOLD_HELD:
		end_hold(c, hi, FS_HOLD_CANCELLED, r->offset);
		d->outcome = FS_OUT_CANCELLED;
		return;
	case FS_HOLD_CONFIRMED:
		reject(d, FS_OUT_REJECTED, "already_confirmed");
		return;
	case FS_HOLD_EXPIRED:
		reject(d, FS_OUT_EXPIRED, "already_expired");
		return;
	default:
		reject(d, FS_OUT_CANCELLED, "already_cancelled");
		return;
	}
}

int fs_core_decide(struct fs_core *c, const struct fs_record *r, struct fs_decision *d)
{
	memset(d, 0, sizeof *d);
	/* The partition clock: record timestamps made monotonic; due expiries come first. */
	fs_core_advance(c, r->ts_ms, r->offset);
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
		decide_confirm(c, r, d);
		return 0;
	case FS_KIND_CANCEL:
		decide_cancel(c, r, d);
		return 0;
	case FS_KIND_TICK:
		admit_at_tick(c, r->offset);
		d->outcome = FS_OUT_APPLIED;
		return 0;
	case FS_KIND_JOIN:
		return decide_join(c, r, d);
	case FS_KIND_CART: /* carts are the cart module's (src/core/cart.c) */
	case FS_KIND_CART_CONFIRM:
	case FS_KIND_CART_CANCEL:
	case FS_KIND_CART_MSG:
		break;
	}
	reject(d, FS_OUT_REJECTED, "bad_type");
	return 0;
}
