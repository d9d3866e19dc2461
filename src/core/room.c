/* room.c: the waiting room of one SKU (see room.h). */
#include "core/room.h"

#include "core/token.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* For the tests only: tests/meson.build builds this file again with FS_ROOM_MUTATE set, and
 * test_room must fail: 1 draws in join order whatever the sale asked (a draw that rewards the
 * fastest connection); 2 has no catch-up bound (every slot a gap passed admitted at once, as
 * before issue 47), which the simulator's check_room must catch too; 3 never re-mints a stale
 * tick's tokens (fs_room_remint), which test_room and check_room must catch. */
#ifndef FS_ROOM_MUTATE
#define FS_ROOM_MUTATE 0
#endif

static int64_t step_us(const struct fs_room *r)
{
	return (1000000 + r->adm.rate_per_s - 1) / r->adm.rate_per_s;
}

int fs_room_init(struct fs_room *r, const struct fs_admission *adm, int64_t opens_at_ms)
{
	memset(r, 0, sizeof *r);
	if (adm->rate_per_s < 1 || adm->rate_per_s > FS_ADMIT_RATE_MAX || adm->token_ms < 1 ||
	    (adm->draw != FS_DRAW_RANDOM && adm->draw != FS_DRAW_FIFO) ||
	    (adm->draw == FS_DRAW_RANDOM && adm->seed[0] == '\0'))
		return -EINVAL;
	r->adm = *adm;
	r->opens_at_ms = opens_at_ms;
	r->credit_us = opens_at_ms * 1000;
	r->last_mint_ms = -1;
	return 0;
}

void fs_room_free(struct fs_room *r)
{
	free(r->v);
	free(r->order);
	free(r->dirty);
	free(r->admitted);
	free(r->scratch);
	free(r->pos);
	fs_map_free(&r->index);
	memset(r, 0, sizeof *r);
}

/* Room for one more uint32 in (*a, *cap) holding len. */
static int grow_u32(uint32_t **a, uint32_t *cap, uint32_t len)
{
	if (len < *cap)
		return 0;
	uint32_t n = *cap ? *cap * 2 : 64;
	if (n <= *cap)
		return -ENOMEM;
	uint32_t *x = realloc(*a, (size_t)n * sizeof *x);
	if (!x)
		return -ENOMEM;
	*a = x;
	*cap = n;
	return 0;
}

static uint64_t buyer_hash(const char *buyer_id)
{
	return fs_hash_bytes(buyer_id, strlen(buyer_id), 0x726f6f6d); /* "room" */
}

static bool buyer_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_room *r = ctx;
	return strcmp(r->v[value].buyer_id, key) == 0;
}

int64_t fs_room_find(const struct fs_room *r, const char *buyer_id)
{
	uint32_t i = fs_map_get(&r->index, buyer_hash(buyer_id), buyer_eq, r, buyer_id);
	return i == FS_MAP_NONE ? -1 : (int64_t)i;
}

struct drawn {
	uint64_t rank;
	int64_t offset;
	uint32_t i;
};

/* A new entry at the end (every list it may join has room first). */
static int add_entry(struct fs_room *r, const char *buyer_id, int64_t offset, int64_t joined_ms,
		     bool early)
{
	if (strlen(buyer_id) > FS_BUYER_LEN_MAX)
		return -EINVAL;
	if (r->len == r->cap) {
		uint32_t n = r->cap ? r->cap * 2 : 64;
		struct fs_room_entry *x = realloc(r->v, (size_t)n * sizeof *x);
		if (!x)
			return -ENOMEM;
		r->v = x;
		r->cap = n;
	}
	uint32_t order_cap = r->order_cap;
	uint32_t pos_cap = order_cap;
	if (grow_u32(&r->pos, &pos_cap, r->len) < 0 ||
	    grow_u32(&r->order, &r->order_cap, r->len) < 0 ||
	    grow_u32(&r->dirty, &r->dirty_cap, r->len) < 0 ||
	    grow_u32(&r->admitted, &r->admitted_cap, r->len) < 0)
		return -ENOMEM;
	if (r->order_cap != order_cap || !r->scratch) {
		void *x = realloc(r->scratch, (size_t)r->order_cap * sizeof(struct drawn));
		if (!x)
			return -ENOMEM;
		r->scratch = x;
	}
	uint32_t i = r->len;
	struct fs_room_entry *e = &r->v[i];
	memset(e, 0, sizeof *e);
	memcpy(e->buyer_id, buyer_id, strlen(buyer_id) + 1);
	e->offset = offset;
	e->joined_ms = joined_ms;
	e->early = early;
	e->admitted_ms = e->decided_ms = e->decided_off = e->minted_ms = e->minted_off = -1;
	if (early && r->adm.draw == FS_DRAW_RANDOM)
		e->rank = fs_draw_rank(r->adm.seed, buyer_id);
	if (fs_map_put(&r->index, buyer_hash(buyer_id), i) < 0)
		return -ENOMEM;
	r->len++;
	return (int)i;
}

int fs_room_join(struct fs_room *r, const char *buyer_id, int64_t offset, int64_t now_ms,
		 bool *repeat)
{
	int64_t found = fs_room_find(r, buyer_id);
	*repeat = found >= 0;
	if (found >= 0)
		return (int)found;
	int i = add_entry(r, buyer_id, offset, now_ms, !r->drawn);
	if (i < 0)
		return i;
	r->v[i].dirty = true;
	r->dirty[r->dirty_len++] = (uint32_t)i;
	if (r->drawn) { /* behind everyone, in join order */
		r->pos[i] = r->order_len;
		r->order[r->order_len++] = (uint32_t)i;
	}
	return i;
}

static int cmp_drawn(const void *a, const void *b)
{
	const struct drawn *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return (x->offset > y->offset) - (x->offset < y->offset);
}

/* The queue: the early entries in the draw's order, then the late ones in join order. */
static void draw(struct fs_room *r)
{
	uint32_t n = 0;
	struct drawn *d = r->scratch;
	for (uint32_t i = 0; i < r->len; i++)
		if (r->v[i].early)
			d[n++] = (struct drawn){r->v[i].rank, r->v[i].offset, i};
	/* n > 1: an empty room has no scratch yet, and qsort's base must not be NULL. */
	if (r->adm.draw == FS_DRAW_RANDOM && FS_ROOM_MUTATE != 1 && n > 1)
		qsort(d, n, sizeof *d, cmp_drawn);
	r->order_len = 0;
	for (uint32_t k = 0; k < n; k++)
		r->order[r->order_len++] = d[k].i;
	for (uint32_t i = 0; i < r->len; i++)
		if (!r->v[i].early)
			r->order[r->order_len++] = i;
	for (uint32_t k = 0; k < r->order_len; k++)
		r->pos[r->order[k]] = k;
	r->drawn = true;
}

/* The slot of the queue's front: the next one, or when it joined if later. */
static int64_t front_slot(const struct fs_room *r)
{
	int64_t joined = r->v[r->order[r->next]].joined_ms * 1000;
	return r->credit_us > joined ? r->credit_us : joined;
}

/* The front's slot for an admission decided at the clock now_ms: never more than
 * FS_ROOM_CATCHUP_MS behind it. After a gap in the clock (an outage, an idle room that filled
 * again) the schedule moves forward instead of admitting every slot the gap passed at once:
 * admissions resume at the rate. Slots still never come closer than step (INV-9). */
static int64_t slot_at(const struct fs_room *r, int64_t now_ms)
{
	int64_t slot = front_slot(r), floor = (now_ms - FS_ROOM_CATCHUP_MS) * 1000;
	return slot > floor || FS_ROOM_MUTATE == 2 ? slot : floor;
}

static void mark_dirty(struct fs_room *r, uint32_t i)
{
	if (!r->v[i].dirty) {
		r->v[i].dirty = true;
		r->dirty[r->dirty_len++] = i;
	}
}

void fs_room_draw_at(struct fs_room *r, int64_t now_ms)
{
	if (!r->drawn && now_ms >= r->opens_at_ms)
		draw(r);
}

int fs_room_advance(struct fs_room *r, int64_t now_ms, int64_t offset)
{
	if (now_ms < r->opens_at_ms)
		return 0;
	fs_room_draw_at(r, now_ms);
	int n = 0;
	while (r->next < r->order_len) {
		int64_t slot = slot_at(r, now_ms);
		if (slot > now_ms * 1000 + 999)
			break;
		uint32_t i = r->order[r->next++];
		struct fs_room_entry *e = &r->v[i];
		e->admitted_ms = slot / 1000;
		e->decided_ms = now_ms;
		e->decided_off = offset;
		e->minted_ms = now_ms;
		e->minted_off = offset;
		r->last_mint_ms = now_ms;
		r->credit_us = slot + step_us(r);
		mark_dirty(r, i);
		r->admitted[r->admitted_len++] = i;
		n++;
	}
	return n;
}

int64_t fs_room_remint_gap_ms(const struct fs_room *r)
{
	int64_t gap = (step_us(r) + 999) / 1000 + FS_ROOM_CATCHUP_MS;
	return r->adm.token_ms < gap ? r->adm.token_ms : gap;
}

/* Whether entry i is in r->admitted already (admitted or re-minted since the last commit):
 * one admission result then tells its latest token. */
static bool in_admitted(const struct fs_room *r, uint32_t i)
{
	for (uint32_t k = 0; k < r->admitted_len; k++)
		if (r->admitted[k] == i)
			return true;
	return false;
}

int fs_room_remint(struct fs_room *r, int64_t now_ms, int64_t offset)
{
	int64_t last = r->last_mint_ms;
	if (FS_ROOM_MUTATE == 3 || last < 0 || now_ms - last < fs_room_remint_gap_ms(r))
		return 0;
	/* Only when someone was waiting at the last token, so that ticks were due all along: a
	 * room that ran empty (a trickle of joiners, each admitted alone) has gaps of its own. */
	if (r->next >= r->order_len || r->v[r->order[r->next]].joined_ms > last)
		return 0;
	int n = 0;
	/* The admissions are order[0 .. next) in the order they were decided: the window's are
	 * its end. */
	for (uint32_t k = r->next; k-- > 0;) {
		uint32_t i = r->order[k];
		struct fs_room_entry *e = &r->v[i];
		if (e->decided_ms < last - FS_ROOM_REMINT_WINDOW_MS)
			break;
		if (e->minted_off != e->decided_off)
			continue; /* re-minted once already */
		e->minted_ms = now_ms;
		e->minted_off = offset;
		mark_dirty(r, i);
		if (!in_admitted(r, i))
			r->admitted[r->admitted_len++] = i;
		n++;
	}
	if (n)
		r->last_mint_ms = now_ms;
	return n;
}

void fs_room_place_of(const struct fs_room *r, uint32_t entry, struct fs_room_place *p)
{
	memset(p, 0, sizeof *p);
	if (entry >= r->len)
		return;
	const struct fs_room_entry *e = &r->v[entry];
	p->joined = true;
	p->drawn = r->drawn;
	if (e->admitted_ms >= 0) {
		p->admitted = true;
		p->admitted_ms = e->admitted_ms;
	}
	if (!r->drawn)
		return;
	uint32_t k = r->pos[entry];
	p->position = (int64_t)k + 1;
	if (!p->admitted) {
		p->ahead = (int64_t)k - (int64_t)r->next;
		p->eta_ms = (front_slot(r) + p->ahead * step_us(r)) / 1000;
	}
}

void fs_room_place(const struct fs_room *r, const char *buyer_id, struct fs_room_place *p)
{
	int64_t i = fs_room_find(r, buyer_id);
	if (i < 0)
		memset(p, 0, sizeof *p);
	else
		fs_room_place_of(r, (uint32_t)i, p);
}

int64_t fs_room_next_due(const struct fs_room *r)
{
	if (!r->drawn)
		return r->len ? r->opens_at_ms : -1;
	return r->next < r->order_len ? front_slot(r) / 1000 : -1;
}

void fs_room_commit(struct fs_room *r)
{
	for (uint32_t k = 0; k < r->dirty_len; k++) {
		r->v[r->dirty[k]].dirty = false;
		r->v[r->dirty[k]].stored = true;
	}
	r->dirty_len = 0;
	r->admitted_len = 0;
}

int fs_room_load(struct fs_room *r, const struct fs_room_entry *e)
{
	if ((r->len && e->offset <= r->v[r->len - 1].offset) || fs_room_find(r, e->buyer_id) >= 0 ||
	    (e->admitted_ms >= 0) != (e->decided_ms >= 0) ||
	    (e->admitted_ms >= 0) != (e->decided_off >= 0) ||
	    (e->admitted_ms >= 0 &&
	     (e->minted_ms < e->decided_ms || e->minted_off < e->decided_off)))
		return -EINVAL;
	int i = add_entry(r, e->buyer_id, e->offset, e->joined_ms, e->early);
	if (i < 0)
		return i;
	r->v[i].admitted_ms = e->admitted_ms < 0 ? -1 : e->admitted_ms;
	r->v[i].decided_ms = e->decided_ms < 0 ? -1 : e->decided_ms;
	r->v[i].decided_off = e->decided_off < 0 ? -1 : e->decided_off;
	r->v[i].minted_ms = e->admitted_ms < 0 ? -1 : e->minted_ms;
	r->v[i].minted_off = e->admitted_ms < 0 ? -1 : e->minted_off;
	if (r->v[i].minted_ms > r->last_mint_ms)
		r->last_mint_ms = r->v[i].minted_ms;
	r->v[i].stored = true;
	return 0;
}

int fs_room_load_done(struct fs_room *r, int64_t clock_ms)
{
	bool drawn = clock_ms >= r->opens_at_ms;
	for (uint32_t i = 0; i < r->len; i++)
		if (!drawn && (!r->v[i].early || r->v[i].admitted_ms >= 0))
			return -EINVAL;
	if (!drawn)
		return 0;
	draw(r);
	/* The admitted are the queue's front, each at the slot the schedule gives it. */
	r->next = 0;
	r->credit_us = r->opens_at_ms * 1000;
	while (r->next < r->order_len && r->v[r->order[r->next]].admitted_ms >= 0) {
		const struct fs_room_entry *e = &r->v[r->order[r->next]];
		int64_t slot = slot_at(r, e->decided_ms);
		if (e->admitted_ms != slot / 1000 || slot > e->decided_ms * 1000 + 999)
			return -EINVAL;
		r->credit_us = slot + step_us(r);
		r->next++;
	}
	for (uint32_t k = r->next; k < r->order_len; k++)
		if (r->v[r->order[k]].admitted_ms >= 0)
			return -EINVAL;
	return 0;
}
