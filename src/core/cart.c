/* cart.c: carts across partitions, the protocol's pure state machine (see cart.h). */
#include "core/cart.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* For the tests only: tests/meson.build builds this file again with FS_CART_MUTATE set, and
 * test_cart must fail each of them (its checks can see what they break): 1 releases one held
 * group too few when a round is refused (atomicity), 2 never waits (money left on the table),
 * 3 visits the groups in the order of the cart's lines, not of the partitions (deadlock).
 * 4 lets a cart cancelled during its round go on reserving, as before issue 47 item 8 (the
 * simulator's sweep must catch it: tests/sim/meson.build). */
#ifndef FS_CART_MUTATE
#define FS_CART_MUTATE 0
#endif

static const char *const cart_state_names[] = {
	[FS_CART_RESERVING] = "reserving",
	[FS_CART_HELD] = "held",
	[FS_CART_CONFIRMED] = "confirmed",
	[FS_CART_REFUSED] = "refused",
	[FS_CART_CANCELLED] = "cancelled",
	[FS_CART_EXPIRED] = "expired",
	[FS_CART_LATE] = "late_round",
	[FS_CART_CONFIRMED_LATE] = "confirmed_late",
	[FS_CART_REFUND_REQUIRED] = "refund_required",
};

const char *fs_cart_state_name(int state)
{
	if (state < FS_CART_RESERVING || state > FS_CART_REFUND_REQUIRED)
		return "invalid";
	return cart_state_names[state];
}

int fs_cart_state_parse(const char *name)
{
	for (int i = FS_CART_RESERVING; i <= FS_CART_REFUND_REQUIRED; i++)
		if (strcmp(cart_state_names[i], name) == 0)
			return i;
	return 0;
}

static const char *const group_state_names[] = {
	[FS_GROUP_WAITING] = "waiting",	  [FS_GROUP_PENDING] = "pending",
	[FS_GROUP_HELD] = "held",	  [FS_GROUP_SOLD] = "sold",
	[FS_GROUP_RELEASED] = "released", [FS_GROUP_REFUSED] = "refused",
};

const char *fs_group_state_name(int state)
{
	if (state < FS_GROUP_WAITING || state > FS_GROUP_REFUSED)
		return "invalid";
	return group_state_names[state];
}

int fs_group_state_parse(const char *name)
{
	for (int i = FS_GROUP_WAITING; i <= FS_GROUP_REFUSED; i++)
		if (strcmp(group_state_names[i], name) == 0)
			return i;
	return 0;
}

/* ---- containers ---------------------------------------------------------------------- */

struct group_key {
	const char *cart_id;
	int32_t round;
};

static uint64_t cart_hash(const char *cart_id)
{
	return fs_hash_bytes(cart_id, strlen(cart_id), 0x63617274);
}

static uint64_t group_hash(const char *cart_id, int32_t round)
{
	return fs_hash_bytes(cart_id, strlen(cart_id), 0x67727000u + (uint64_t)(uint32_t)round);
}

static bool cart_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_carts *cs = ctx;
	return strcmp(cs->carts[value].cart_id, key) == 0;
}

static bool group_eq(const void *ctx, uint32_t value, const void *key)
{
	const struct fs_carts *cs = ctx;
	const struct group_key *k = key;
	return cs->groups[value].round == k->round &&
	       strcmp(cs->groups[value].cart_id, k->cart_id) == 0;
}

int fs_carts_init(struct fs_carts *cs, int32_t partition, int32_t partitions, uint32_t lines_max)
{
	memset(cs, 0, sizeof *cs);
	if (partitions < 1 || partition < 0 || partition >= partitions || lines_max < 1 ||
	    lines_max > FS_CART_LINES_MAX)
		return -EINVAL;
	cs->partition = partition;
	cs->partitions = partitions;
	cs->lines_max = lines_max;
	return 0;
}

void fs_carts_free(struct fs_carts *cs)
{
	free(cs->carts);
	free(cs->heap);
	free(cs->groups);
	for (uint32_t i = 0; i < cs->wq_cap; i++)
		free(cs->wq[i].v);
	free(cs->wq);
	free(cs->walk);
	free(cs->pending);
	free(cs->local);
	free(cs->out);
	free(cs->events);
	free(cs->dirty_carts);
	free(cs->dirty_groups);
	free(cs->refused);
	fs_map_free(&cs->cart_index);
	fs_map_free(&cs->group_index);
	memset(cs, 0, sizeof *cs);
}

void fs_carts_reset(struct fs_carts *cs)
{
	cs->carts_len = 0;
	cs->heap_len = 0;
	cs->groups_len = 0;
	cs->waiting_len = 0;
	for (uint32_t i = 0; i < cs->wq_cap; i++)
		cs->wq[i].head = cs->wq[i].len = 0;
	if (cs->pending)
		memset(cs->pending, 0, (size_t)cs->pending_cap * sizeof *cs->pending);
	cs->local_len = 0;
	fs_carts_commit(cs);
	fs_map_clear(&cs->cart_index);
	fs_map_clear(&cs->group_index);
}

void fs_carts_commit(struct fs_carts *cs)
{
	for (uint32_t i = 0; i < cs->dirty_carts_len; i++) {
		cs->carts[cs->dirty_carts[i]].dirty = false;
		cs->carts[cs->dirty_carts[i]].stored = true;
	}
	for (uint32_t i = 0; i < cs->dirty_groups_len; i++) {
		cs->groups[cs->dirty_groups[i]].dirty = false;
		cs->groups[cs->dirty_groups[i]].stored = true;
	}
	cs->dirty_carts_len = 0;
	cs->dirty_groups_len = 0;
	cs->out_len = 0;
	cs->events_len = 0;
	cs->refused_len = 0;
}

/* Makes room for one more element of size `size` in *items (capacity *cap). */
static int grow(void **items, uint32_t *cap, uint32_t len, size_t size)
{
	if (len < *cap)
		return 0;
	uint32_t ncap = *cap ? *cap * 2 : 16;
	if (ncap < *cap)
		return -ENOMEM;
	void *n = realloc(*items, (size_t)ncap * size);
	if (!n)
		return -ENOMEM;
	*items = n;
	*cap = ncap;
	return 0;
}

/* Makes room for one more cart in every array that may list it (the heap, the dirty list). */
static int grow_carts(struct fs_carts *cs)
{
	if (cs->carts_len < cs->carts_cap)
		return 0;
	uint32_t cap = cs->carts_cap, cap2 = cs->carts_cap;
	int rc = grow((void **)&cs->heap, &cap, cs->carts_len, sizeof *cs->heap);
	if (rc == 0)
		rc = grow((void **)&cs->dirty_carts, &cap2, cs->carts_len, sizeof *cs->dirty_carts);
	if (rc == 0)
		rc = grow((void **)&cs->carts, &cs->carts_cap, cs->carts_len, sizeof *cs->carts);
	return rc;
}

static int grow_groups(struct fs_carts *cs)
{
	if (cs->groups_len < cs->groups_cap)
		return 0;
	uint32_t cap2 = cs->groups_cap;
	int rc = grow((void **)&cs->dirty_groups, &cap2, cs->groups_len, sizeof *cs->dirty_groups);
	if (rc == 0)
		rc = grow((void **)&cs->groups, &cs->groups_cap, cs->groups_len,
			  sizeof *cs->groups);
	return rc;
}

/* The pending units by SKU cover every SKU index of the core. */
static int grow_pending(struct fs_carts *cs, uint32_t skus_len)
{
	if (skus_len <= cs->pending_cap)
		return 0;
	uint32_t ncap = cs->pending_cap ? cs->pending_cap : 16;
	while (ncap < skus_len)
		ncap *= 2;
	int64_t *n = realloc(cs->pending, (size_t)ncap * sizeof *n);
	if (!n)
		return -ENOMEM;
	memset(n + cs->pending_cap, 0, (size_t)(ncap - cs->pending_cap) * sizeof *n);
	cs->pending = n;
	cs->pending_cap = ncap;
	return 0;
}

/* The waiting queues cover every SKU index of the core. */
static int grow_wq(struct fs_carts *cs, uint32_t skus_len)
{
	if (skus_len <= cs->wq_cap)
		return 0;
	uint32_t ncap = cs->wq_cap ? cs->wq_cap : 16;
	while (ncap < skus_len)
		ncap *= 2;
	struct fs_wq *n = realloc(cs->wq, (size_t)ncap * sizeof *n);
	if (!n)
		return -ENOMEM;
	memset(n + cs->wq_cap, 0, (size_t)(ncap - cs->wq_cap) * sizeof *n);
	cs->wq = n;
	cs->wq_cap = ncap;
	return 0;
}

/* Room for one more group in SKU si's queue (before any state changes). */
static int wq_room(struct fs_carts *cs, uint32_t si)
{
	struct fs_wq *q = &cs->wq[si];
	if (q->head > 0 && q->head * 2 >= q->len) {
		memmove(q->v, q->v + q->head, (q->len - q->head) * sizeof *q->v);
		q->len -= q->head;
		q->head = 0;
	}
	return grow((void **)&q->v, &q->cap, q->len, sizeof *q->v);
}

static uint32_t find_cart(const struct fs_carts *cs, const char *cart_id)
{
	return fs_map_get(&cs->cart_index, cart_hash(cart_id), cart_eq, cs, cart_id);
}

static uint32_t find_group(const struct fs_carts *cs, const char *cart_id, int32_t round)
{
	struct group_key k = {cart_id, round};
	return fs_map_get(&cs->group_index, group_hash(cart_id, round), group_eq, cs, &k);
}

const struct fs_cart *fs_carts_find(const struct fs_carts *cs, const char *cart_id)
{
	uint32_t i = find_cart(cs, cart_id);
	return i == FS_MAP_NONE ? NULL : &cs->carts[i];
}

const struct fs_group *fs_carts_group(const struct fs_carts *cs, const char *cart_id, int32_t round)
{
	uint32_t i = find_group(cs, cart_id, round);
	return i == FS_MAP_NONE ? NULL : &cs->groups[i];
}

int64_t fs_carts_pending_units(const struct fs_carts *cs, uint32_t sku_index)
{
	return sku_index < cs->pending_cap ? cs->pending[sku_index] : 0;
}

static void mark_cart(struct fs_carts *cs, uint32_t i)
{
	if (!cs->carts[i].dirty) {
		cs->carts[i].dirty = true;
		cs->dirty_carts[cs->dirty_carts_len++] = i;
	}
}

static void mark_group(struct fs_carts *cs, uint32_t i)
{
	if (!cs->groups[i].dirty) {
		cs->groups[i].dirty = true;
		cs->dirty_groups[cs->dirty_groups_len++] = i;
	}
}

/* ---- the held carts' expiry heap -------------------------------------------------------- */

static bool heap_less(const struct fs_carts *cs, uint32_t a, uint32_t b)
{
	const struct fs_cart *x = &cs->carts[a], *y = &cs->carts[b];
	if (x->expires_at_ms != y->expires_at_ms)
		return x->expires_at_ms < y->expires_at_ms;
	return x->offset < y->offset;
}

static void heap_set(struct fs_carts *cs, uint32_t pos, uint32_t ci)
{
	cs->heap[pos] = ci;
	cs->carts[ci].heap_pos = pos;
}

static void heap_fix(struct fs_carts *cs, uint32_t pos)
{
	uint32_t ci = cs->heap[pos];
	while (pos > 0 && heap_less(cs, ci, cs->heap[(pos - 1) / 2])) {
		heap_set(cs, pos, cs->heap[(pos - 1) / 2]);
		pos = (pos - 1) / 2;
	}
	for (;;) {
		uint32_t l = 2 * pos + 1, r = l + 1, m = pos, best = ci;
		if (l < cs->heap_len && heap_less(cs, cs->heap[l], best))
			m = l, best = cs->heap[l];
		if (r < cs->heap_len && heap_less(cs, cs->heap[r], best))
			m = r, best = cs->heap[r];
		if (m == pos)
			break;
		heap_set(cs, pos, cs->heap[m]);
		pos = m;
	}
	heap_set(cs, pos, ci);
}

static void heap_push(struct fs_carts *cs, uint32_t ci)
{
	uint32_t pos = cs->heap_len++;
	heap_set(cs, pos, ci);
	heap_fix(cs, pos);
}

static void heap_remove(struct fs_carts *cs, uint32_t ci)
{
	uint32_t pos = cs->carts[ci].heap_pos;
	assert(pos < cs->heap_len && cs->heap[pos] == ci);
	cs->carts[ci].heap_pos = FS_MAP_NONE;
	uint32_t last = cs->heap[--cs->heap_len];
	if (pos == cs->heap_len)
		return;
	heap_set(cs, pos, last);
	heap_fix(cs, pos);
}

int64_t fs_carts_next_expiry(const struct fs_carts *cs)
{
	return cs->heap_len ? cs->carts[cs->heap[0]].expires_at_ms : -1;
}

/* ---- messages and events ---------------------------------------------------------------- */

/* Queues a message: in place for this partition, else to the outbox. */
static int send(struct fs_carts *cs, const struct fs_cart_msg *m)
{
	bool here = fs_cart_msg_to(m) == cs->partition;
	struct fs_cart_msg **q = here ? &cs->local : &cs->out;
	uint32_t *len = here ? &cs->local_len : &cs->out_len;
	uint32_t *cap = here ? &cs->local_cap : &cs->out_cap;
	int rc = grow((void **)q, cap, *len, sizeof **q);
	if (rc < 0)
		return rc;
	(*q)[(*len)++] = *m;
	(*q)[*len - 1].origin = cs->step_offset;
	if (!here)
		cs->counts.messages_out++;
	return 0;
}

static int event(struct fs_carts *cs, const struct fs_core *c, int kind, const char *cart_id,
		 enum fs_outcome outcome, const char *reason, int32_t line, int64_t expires_at_ms,
		 int64_t offset)
{
	int rc = grow((void **)&cs->events, &cs->events_cap, cs->events_len, sizeof *cs->events);
	if (rc < 0)
		return rc;
	struct fs_cart_event *e = &cs->events[cs->events_len++];
	memset(e, 0, sizeof *e);
	e->kind = kind;
	strcpy(e->cart_id, cart_id);
	e->outcome = outcome;
	e->reason = reason;
	e->line = line;
	e->expires_at_ms = expires_at_ms;
	e->decided_at_ms = c->clock_ms;
	e->offset = offset;
	return 0;
}

/* A message of cart k to its group at `part`, keyed by the group's first SKU. */
/* The cart record's answer: kept for its retries, and sent. */
static int answer_cart(struct fs_carts *cs, const struct fs_core *c, struct fs_cart *k,
		       enum fs_outcome outcome, const char *reason, int32_t line, int64_t offset)
{
	k->answer = outcome;
	k->answer_reason = reason;
	return event(cs, c, FS_CART_EV_CART, k->cart_id, outcome, reason, line,
		     outcome == FS_OUT_HELD ? k->expires_at_ms : 0, offset);
}

static void msg_init(struct fs_cart_msg *m, int kind, const struct fs_cart *k, int32_t part)
{
	memset(m, 0, sizeof *m);
	m->kind = kind;
	for (uint32_t i = 0; i < k->nlines; i++) {
		if (k->lines[i].part == part) {
			strcpy(m->key, k->lines[i].sku);
			break;
		}
	}
	strcpy(m->cart_id, k->cart_id);
	m->round = k->round;
	m->coord = -1;
	m->part = part;
	m->line = -1;
}

/* C: the reserve of the cart's group `at`. */
static int send_reserve(struct fs_carts *cs, const struct fs_cart *k)
{
	struct fs_cart_msg m;
	msg_init(&m, FS_CART_RESERVE, k, k->parts[k->at]);
	m.coord = cs->partition;
	strcpy(m.buyer_id, k->buyer_id);
	for (uint32_t i = 0; i < k->nlines; i++) {
		if (k->lines[i].part != m.part)
			continue;
		strcpy(m.lines[m.nlines].sku, k->lines[i].sku);
		m.lines[m.nlines].qty = k->lines[i].qty;
		m.lines[m.nlines].line = (int32_t)i;
		m.nlines++;
	}
	return send(cs, &m);
}

/* C: the same end to the cart's groups from .. n-1 of its round. */
static int send_ends_from(struct fs_carts *cs, const struct fs_cart *k, uint32_t from, uint32_t n,
			  int action)
{
	for (uint32_t g = from; g < n; g++) {
		struct fs_cart_msg m;
		msg_init(&m, FS_CART_END, k, k->parts[g]);
		m.coord = cs->partition;
		m.action = action;
		int rc = send(cs, &m);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* C: the same end to the cart's groups 0 .. n-1 of its round. */
static int send_ends(struct fs_carts *cs, const struct fs_cart *k, uint32_t n, int action)
{
	return send_ends_from(cs, k, 0, n, action);
}

/* ---- P: groups -------------------------------------------------------------------------- */

enum verdict { V_HOLD, V_REFUSE, V_WAIT };

/* Decides a group against the partition's stock now: every line held, refused (the first
 * line refused for good: *d names it), or waiting (a line short only of units other carts'
 * pending groups hold, and none refused for good). */
static enum verdict judge(const struct fs_carts *cs, const struct fs_core *c,
			  const struct fs_group *g, struct fs_decision *d, int32_t *line,
			  int64_t *hold_ms)
{
	bool wait = false;
	*hold_ms = INT64_MAX;
	for (uint32_t i = 0; i < g->nlines; i++) {
		uint32_t si = g->lines[i].sku_index;
		int64_t qty = g->lines[i].qty;
		memset(d, 0, sizeof *d);
		if (si == FS_MAP_NONE) {
			d->outcome = FS_OUT_REJECTED;
			d->reason = "unknown_sku";
			*line = g->lines[i].line;
			return V_REFUSE;
		}
		const struct fs_sku *s = &c->skus[si];
		if (s->hold_ms < *hold_ms)
			*hold_ms = s->hold_ms;
		if (!fs_core_refuses(c, s, qty, fs_core_buyer_units(c, si, g->buyer_id), d))
			continue;
		if (d->outcome == FS_OUT_SOLD_OUT && FS_CART_MUTATE != 2 &&
		    s->available + fs_carts_pending_units(cs, si) >= qty) {
			wait = true;
			continue;
		}
		*line = g->lines[i].line;
		return V_REFUSE;
	}
	memset(d, 0, sizeof *d);
	*line = -1;
	return wait ? V_WAIT : V_HOLD;
}

/* The answer of a group to its coordinator. */
static int answer(struct fs_carts *cs, const struct fs_group *g, bool held,
		  const struct fs_decision *d, int32_t line, int64_t hold_ms)
{
	struct fs_cart_msg m;
	memset(&m, 0, sizeof m);
	m.kind = FS_CART_ANSWER;
	strcpy(m.key, g->cart_id);
	strcpy(m.cart_id, g->cart_id);
	m.round = g->round;
	m.coord = g->coord;
	m.part = cs->partition;
	m.held = held;
	m.line = line;
	m.hold_ms = hold_ms;
	if (!held) {
		m.outcome = d->outcome;
		m.reason = d->reason;
	}
	return send(cs, &m);
}

/* Whether the store refused to take g's units when it was woken (fs_carts.refuse_groups). */
static bool group_refused(const struct fs_carts *cs, const struct fs_group *g)
{
	for (uint32_t i = 0; i < cs->refuse_groups_len; i++)
		if (cs->refuse_groups[i].round == g->round &&
		    strcmp(cs->refuse_groups[i].cart_id, g->cart_id) == 0)
			return true;
	return false;
}

uint32_t fs_carts_woken(const struct fs_carts *cs, int64_t offset, struct fs_group_ref *out,
			uint32_t max)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < cs->dirty_groups_len; k++) {
		const struct fs_group *g = &cs->groups[cs->dirty_groups[k]];
		/* (also those that took units and went on, held by a local answer; one that was
		 * not decided at this record is never refused by being named) */
		if (g->offset >= offset || g->state == FS_GROUP_WAITING ||
		    g->state == FS_GROUP_REFUSED)
			continue;
		if (n < max)
			out[n] = (struct fs_group_ref){g->cart_id, g->round};
		n++;
	}
	return n;
}

/* Decides a new or waiting group; a group that waits stays (or goes) on the waiting list. */
static int decide_group(struct fs_carts *cs, struct fs_core *c, uint32_t gi, bool *waits)
{
	struct fs_group *g = &cs->groups[gi];
	struct fs_decision d;
	int32_t line;
	int64_t hold_ms;
	enum verdict v = judge(cs, c, g, &d, &line, &hold_ms);
	/* Woken, it would take its units now: the store refused that (issue 47, item 5). */
	if (v == V_HOLD && g->offset < cs->step_offset && group_refused(cs, g)) {
		*waits = false;
		int rc = grow((void **)&cs->refused, &cs->refused_cap, cs->refused_len,
			      sizeof *cs->refused);
		if (rc < 0)
			return rc;
		cs->refused[cs->refused_len].group = gi;
		cs->refused[cs->refused_len++].offset = cs->step_offset;
		g->state = FS_GROUP_REFUSED;
		mark_group(cs, gi);
		d = (struct fs_decision){.outcome = FS_OUT_REJECTED, .reason = "store_refused"};
		return answer(cs, g, false, &d, g->nlines ? g->lines[0].line : -1, 0);
	}
	*waits = v == V_WAIT;
	if (v == V_WAIT)
		return 0;
	if (v == V_REFUSE) {
		g->state = FS_GROUP_REFUSED;
		mark_group(cs, gi);
		return answer(cs, g, false, &d, line, 0);
	}
	for (uint32_t i = 0; i < g->nlines; i++) {
		int rc = fs_core_take(c, g->lines[i].sku_index, g->buyer_id, g->lines[i].qty);
		if (rc < 0)
			return rc;
		g = &cs->groups[gi];
		cs->pending[g->lines[i].sku_index] += g->lines[i].qty;
	}
	g->state = FS_GROUP_PENDING;
	mark_group(cs, gi);
	return answer(cs, g, true, &d, -1, hold_ms);
}

/* Decides again the groups waiting on SKU si, in the order they came, up to the first one
 * that still waits (for si or another SKU): strict order per SKU, so each walk costs the
 * groups it decides plus one. A group decided here leaves its other SKUs' queues too, whose
 * fronts may have been waiting behind it: those SKUs are walked again (*walk). */
static int wake_sku(struct fs_carts *cs, struct fs_core *c, uint32_t si)
{
	struct fs_wq *q = &cs->wq[si];
	while (q->head < q->len) {
		uint32_t gi = q->v[q->head];
		if (cs->groups[gi].state == FS_GROUP_WAITING) {
			bool waits;
			int rc = decide_group(cs, c, gi, &waits);
			if (rc < 0)
				return rc;
			q = &cs->wq[si];
			if (waits)
				break;
			cs->waiting_len--;
			cs->counts.wakes++;
			const struct fs_group *g = &cs->groups[gi];
			for (uint32_t i = 0; i < g->nlines; i++) {
				uint32_t other = g->lines[i].sku_index;
				if (other == si || other == FS_MAP_NONE)
					continue;
				rc = grow((void **)&cs->walk, &cs->walk_cap, cs->walk_len,
					  sizeof *cs->walk);
				if (rc < 0)
					return rc;
				cs->walk[cs->walk_len++] = other;
			}
		}
		q->head++; /* decided, or had stopped waiting: off the front */
	}
	return 0;
}

/* The changes a group's end made: its SKUs' queues are walked, then those of the SKUs of the
 * groups decided meanwhile, until none is left (each walk either decides or stops). */
static int wake(struct fs_carts *cs, struct fs_core *c, uint32_t gi)
{
	const struct fs_group *g = &cs->groups[gi];
	cs->walk_len = 0;
	for (uint32_t i = 0; i < g->nlines; i++) {
		int rc = grow((void **)&cs->walk, &cs->walk_cap, cs->walk_len, sizeof *cs->walk);
		if (rc < 0)
			return rc;
		if (g->lines[i].sku_index != FS_MAP_NONE)
			cs->walk[cs->walk_len++] = g->lines[i].sku_index;
	}
	for (uint32_t k = 0; k < cs->walk_len && cs->waiting_len; k++) {
		int rc = cs->walk[k] < cs->wq_cap ? wake_sku(cs, c, cs->walk[k]) : 0;
		if (rc < 0)
			return rc;
	}
	cs->walk_len = 0;
	return 0;
}

/* A reserve's group, new (not decided yet): its index in *gi. */
static int add_group(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		     int64_t offset, uint32_t *gi_out)
{
	int rc = grow_groups(cs);
	if (rc == 0)
		rc = grow_pending(cs, c->skus_len);
	if (rc == 0)
		rc = grow_wq(cs, c->skus_len);
	for (uint32_t i = 0; rc == 0 && i < m->nlines; i++) {
		uint32_t si = fs_core_sku_index(c, m->lines[i].sku);
		if (si != FS_MAP_NONE)
			rc = wq_room(cs, si);
	}
	if (rc < 0)
		return rc;
	uint32_t gi = cs->groups_len;
	struct fs_group *g = &cs->groups[gi];
	memset(g, 0, sizeof *g);
	strcpy(g->cart_id, m->cart_id);
	strcpy(g->buyer_id, m->buyer_id);
	g->round = m->round;
	g->coord = m->coord;
	g->offset = offset;
	g->nlines = m->nlines;
	for (uint32_t i = 0; i < m->nlines; i++) {
		strcpy(g->lines[i].sku, m->lines[i].sku);
		g->lines[i].sku_index = fs_core_sku_index(c, m->lines[i].sku);
		g->lines[i].qty = m->lines[i].qty;
		g->lines[i].line = m->lines[i].line;
	}
	rc = fs_map_put(&cs->group_index, group_hash(g->cart_id, g->round), gi);
	if (rc < 0)
		return rc;
	cs->groups_len++;
	*gi_out = gi;
	return 0;
}

static int on_reserve(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		      int64_t offset)
{
	if (find_group(cs, m->cart_id, m->round) != FS_MAP_NONE) {
		cs->counts.ignored++; /* a repeat: its answer was sent */
		return 0;
	}
	uint32_t gi;
	int rc = add_group(cs, c, m, offset, &gi);
	if (rc < 0)
		return rc;
	bool waits;
	rc = decide_group(cs, c, gi, &waits);
	if (rc < 0)
		return rc;
	if (waits) {
		struct fs_group *g = &cs->groups[gi];
		g->state = FS_GROUP_WAITING;
		mark_group(cs, gi);
		for (uint32_t i = 0; i < g->nlines; i++) {
			if (g->lines[i].sku_index == FS_MAP_NONE)
				continue; /* (a group of an unknown SKU is refused: never here) */
			struct fs_wq *q = &cs->wq[g->lines[i].sku_index];
			q->v[q->len++] = gi;
		}
		cs->waiting_len++;
		cs->counts.waits++;
	}
	return 0;
}

/* Ends the units of a group: sold, or back to available. */
static void end_units(struct fs_carts *cs, struct fs_core *c, struct fs_group *g, bool pending,
		      bool sold)
{
	for (uint32_t i = 0; i < g->nlines; i++) {
		uint32_t si = g->lines[i].sku_index;
		if (pending) {
			cs->pending[si] -= g->lines[i].qty;
			assert(cs->pending[si] >= 0);
		}
		fs_core_give_back(c, si, g->buyer_id, g->lines[i].qty, sold);
	}
}

static int on_end(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m)
{
	uint32_t gi = find_group(cs, m->cart_id, m->round);
	struct fs_group *g = gi == FS_MAP_NONE ? NULL : &cs->groups[gi];
	bool pending = g && g->state == FS_GROUP_PENDING;
	bool live = pending || (g && g->state == FS_GROUP_HELD);
	if (!live || (m->action == FS_CART_COMMIT && !pending)) {
		cs->counts.ignored++; /* a repeat, or an end its group is past */
		return 0;
	}
	switch (m->action) {
	case FS_CART_COMMIT:
		for (uint32_t i = 0; i < g->nlines; i++)
			cs->pending[g->lines[i].sku_index] -= g->lines[i].qty;
		g->state = FS_GROUP_HELD;
		break;
	case FS_CART_RELEASE:
		end_units(cs, c, g, pending, false);
		g->state = FS_GROUP_RELEASED;
		break;
	case FS_CART_CONFIRM:
		end_units(cs, c, g, pending, true);
		g->state = FS_GROUP_SOLD;
		break;
	default:
		cs->counts.ignored++;
		return 0;
	}
	mark_group(cs, gi);
	return cs->waiting_len ? wake(cs, c, gi) : 0;
}

/* ---- C: carts --------------------------------------------------------------------------- */

/* C: the round ended with every group held. */
static int round_held(struct fs_carts *cs, struct fs_core *c, uint32_t ci, int64_t offset)
{
	struct fs_cart *k = &cs->carts[ci];
	int rc;
	if (k->state == FS_CART_LATE) {
		k->state = FS_CART_CONFIRMED_LATE;
		rc = send_ends(cs, k, k->ngroups, FS_CART_CONFIRM);
		if (rc == 0)
			rc = event(cs, c, FS_CART_EV_CONFIRM, k->cart_id, FS_OUT_CONFIRMED_LATE,
				   NULL, -1, 0, offset);
		return rc;
	}
	if (k->cancel_asked) {
		k->state = FS_CART_CANCELLED;
		rc = send_ends(cs, k, k->ngroups, FS_CART_RELEASE);
		if (rc == 0)
			rc = answer_cart(cs, c, k, FS_OUT_CANCELLED, "cancelled", -1, offset);
		return rc;
	}
	k->state = FS_CART_HELD;
	k->expires_at_ms =
		c->clock_ms > INT64_MAX - k->hold_ms ? INT64_MAX : c->clock_ms + k->hold_ms;
	heap_push(cs, ci);
	cs->counts.held++;
	rc = send_ends(cs, k, k->ngroups, FS_CART_COMMIT);
	if (rc == 0)
		rc = answer_cart(cs, c, k, FS_OUT_HELD, NULL, -1, offset);
	return rc;
}

/* C: a group of the round was refused; the groups before it are released. */
static int round_refused(struct fs_carts *cs, struct fs_core *c, uint32_t ci,
			 const struct fs_cart_msg *m, int64_t offset)
{
	struct fs_cart *k = &cs->carts[ci];
	k->outcome = (enum fs_outcome)m->outcome;
	k->reason = m->reason;
	k->line = m->line;
	int rc =
		send_ends(cs, k, FS_CART_MUTATE == 1 && k->at ? k->at - 1 : k->at, FS_CART_RELEASE);
	if (rc < 0)
		return rc;
	if (k->state == FS_CART_LATE) {
		k->state = FS_CART_REFUND_REQUIRED;
		/* As a buy's late confirm says why: the refusal's outcome, or its reason. */
		k->reason = m->outcome == FS_OUT_REJECTED && m->reason
				    ? m->reason
				    : fs_outcome_name(m->outcome);
		return event(cs, c, FS_CART_EV_CONFIRM, k->cart_id, FS_OUT_REFUND_REQUIRED,
			     k->reason, m->line, 0, offset);
	}
	k->state = FS_CART_REFUSED;
	cs->counts.refused++;
	return answer_cart(cs, c, k, k->outcome, m->reason, m->line, offset);
}

/* C: the group in flight of a round cancelled during it answered: released if it held (the
 * groups before it were released when the cancel came), and the cart is cancelled. */
static int round_cancelled(struct fs_carts *cs, struct fs_core *c, uint32_t ci,
			   const struct fs_cart_msg *m, int64_t offset)
{
	struct fs_cart *k = &cs->carts[ci];
	int rc = m->held ? send_ends_from(cs, k, k->at, k->at + 1, FS_CART_RELEASE) : 0;
	k->state = FS_CART_CANCELLED;
	if (rc == 0)
		rc = answer_cart(cs, c, k, FS_OUT_CANCELLED, "cancelled", -1, offset);
	return rc;
}

static int on_answer(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		     int64_t offset)
{
	uint32_t ci = find_cart(cs, m->cart_id);
	struct fs_cart *k = ci == FS_MAP_NONE ? NULL : &cs->carts[ci];
	if (!k || k->round != m->round ||
	    (k->state != FS_CART_RESERVING && k->state != FS_CART_LATE) ||
	    k->parts[k->at] != m->part) {
		cs->counts.ignored++; /* a repeat, or not this cart's (round's) group in flight */
		return 0;
	}
	mark_cart(cs, ci);
	if (k->cancel_asked && FS_CART_MUTATE != 4)
		return round_cancelled(cs, c, ci, m, offset);
	if (!m->held)
		return round_refused(cs, c, ci, m, offset);
	if (m->hold_ms < k->hold_ms)
		k->hold_ms = m->hold_ms;
	if (++k->at < k->ngroups)
		return send_reserve(cs, k);
	return round_held(cs, c, ci, offset);
}

/* Handles the messages for this partition until none is left (a local answer may send the
 * next reserve, a local end may wake waiting groups, whose answers may be local ...). */
static int drain(struct fs_carts *cs, struct fs_core *c, int64_t offset)
{
	for (uint32_t i = 0; i < cs->local_len; i++) {
		struct fs_cart_msg m = cs->local[i]; /* handlers may grow the queue */
		int rc;
		switch (m.kind) {
		case FS_CART_RESERVE:
			rc = on_reserve(cs, c, &m, offset);
			break;
		case FS_CART_ANSWER:
			rc = on_answer(cs, c, &m, offset);
			break;
		default:
			rc = on_end(cs, c, &m);
			break;
		}
		if (rc < 0)
			return rc;
	}
	cs->local_len = 0;
	return 0;
}

/* Moves the clock; the held carts it passes expire (their groups released). */
static int advance(struct fs_carts *cs, struct fs_core *c, int64_t ts_ms, int64_t offset)
{
	cs->step_offset = offset;
	fs_core_advance(c, ts_ms, offset);
	while (cs->heap_len && cs->carts[cs->heap[0]].expires_at_ms <= c->clock_ms) {
		uint32_t ci = cs->heap[0];
		struct fs_cart *k = &cs->carts[ci];
		heap_remove(cs, ci);
		k->state = FS_CART_EXPIRED;
		mark_cart(cs, ci);
		int rc = send_ends(cs, k, k->ngroups, FS_CART_RELEASE);
		if (rc == 0)
			rc = event(cs, c, FS_CART_EV_EXPIRED, k->cart_id, FS_OUT_EXPIRED, NULL, -1,
				   k->expires_at_ms, offset);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int step_end(struct fs_carts *cs, struct fs_core *c, int rc, int64_t offset)
{
	return rc < 0 ? rc : drain(cs, c, offset);
}

int fs_cart_step_clock(struct fs_carts *cs, struct fs_core *c, int64_t ts_ms, int64_t offset)
{
	return step_end(cs, c, advance(cs, c, ts_ms, offset), offset);
}

const char *fs_cart_req_check(const struct fs_carts *cs, struct fs_cart_req *req)
{
	char canon[FS_UUID_LEN + 1];
	if (!fs_uuid_canon(req->cart_id, canon))
		return "bad_cart_id";
	strcpy(req->cart_id, canon);
	if (!fs_buyer_valid(req->buyer_id))
		return "bad_buyer_id";
	if (req->nlines < 1)
		return "no_lines";
	if (req->nlines > cs->lines_max)
		return "too_many_lines";
	for (uint32_t i = 0; i < req->nlines; i++) {
		struct fs_cart_line *l = &req->lines[i];
		if (!fs_sku_valid(l->sku))
			return "bad_sku";
		if (l->qty < 1 || l->qty > FS_QTY_MAX)
			return "bad_qty";
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(req->lines[j].sku, l->sku) == 0)
				return "duplicate_sku";
		l->part = fs_partition_of(l->sku, strlen(l->sku), cs->partitions);
	}
	return NULL;
}

/* The groups' partitions, ascending: the global order that makes waiting safe. */
static void set_groups(struct fs_cart *k)
{
	k->ngroups = 0;
	for (uint32_t i = 0; i < k->nlines; i++) {
		int32_t p = k->lines[i].part;
		uint32_t at = 0;
		while (at < k->ngroups &&
		       (FS_CART_MUTATE == 3 ? k->parts[at] != p : k->parts[at] < p))
			at++;
		if (at < k->ngroups && k->parts[at] == p)
			continue;
		memmove(&k->parts[at + 1], &k->parts[at], (k->ngroups - at) * sizeof *k->parts);
		k->parts[at] = p;
		k->ngroups++;
	}
}

int fs_cart_step_cart(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_req *req,
		      int64_t ts_ms, int64_t offset)
{
	int rc = advance(cs, c, ts_ms, offset);
	if (rc < 0)
		return rc;
	cs->counts.carts++;
	uint32_t seen = find_cart(cs, req->cart_id);
	if (seen != FS_MAP_NONE) {
		const struct fs_cart *k = &cs->carts[seen];
		if (k->body_hash != req->body_hash)
			/* The conflicting record's answer, of its own type: the cart id's
			 * answer (`cart`) stays the cart's own decision (issue 47 item 3). */
			rc = event(cs, c, FS_CART_EV_CONFLICT, req->cart_id, FS_OUT_CONFLICT,
				   "intent_id_reused", -1, 0, offset);
		else if (k->answer)
			rc = event(cs, c, FS_CART_EV_CART, k->cart_id, k->answer, k->answer_reason,
				   k->answer == FS_OUT_HELD ? -1 : k->line,
				   k->answer == FS_OUT_HELD ? k->expires_at_ms : 0, offset);
		cs->counts.repeats++;
		return step_end(cs, c, rc, offset);
	}
	rc = grow_carts(cs);
	if (rc < 0)
		return rc;
	uint32_t ci = cs->carts_len;
	struct fs_cart *k = &cs->carts[ci];
	memset(k, 0, sizeof *k);
	k->body_hash = req->body_hash;
	strcpy(k->cart_id, req->cart_id);
	strcpy(k->buyer_id, req->buyer_id);
	k->nlines = req->nlines;
	memcpy(k->lines, req->lines, req->nlines * sizeof *k->lines);
	set_groups(k);
	k->state = FS_CART_RESERVING;
	k->round = 1;
	k->hold_ms = INT64_MAX;
	k->offset = offset;
	k->heap_pos = FS_MAP_NONE;
	k->line = -1;
	rc = fs_map_put(&cs->cart_index, cart_hash(k->cart_id), ci);
	if (rc < 0)
		return rc;
	cs->carts_len++;
	mark_cart(cs, ci);
	return step_end(cs, c, send_reserve(cs, k), offset);
}

/* A confirm of a cart. */
static int confirm(struct fs_carts *cs, struct fs_core *c, uint32_t ci, int64_t offset)
{
	struct fs_cart *k = &cs->carts[ci];
	int ev = FS_CART_EV_CONFIRM;
	switch (k->state) {
	case FS_CART_HELD: {
		heap_remove(cs, ci);
		k->state = FS_CART_CONFIRMED;
		mark_cart(cs, ci);
		int rc = send_ends(cs, k, k->ngroups, FS_CART_CONFIRM);
		return rc < 0 ? rc
			      : event(cs, c, ev, k->cart_id, FS_OUT_CONFIRMED, NULL, -1, 0, offset);
	}
	case FS_CART_EXPIRED:
		/* Fresh units for every line, or a refund: a new round. */
		k->state = FS_CART_LATE;
		k->round++;
		k->at = 0;
		mark_cart(cs, ci);
		return send_reserve(cs, k);
	case FS_CART_RESERVING:
		return event(cs, c, ev, k->cart_id, FS_OUT_UNKNOWN_INTENT, "cart_undecided", -1, 0,
			     offset);
	case FS_CART_LATE:
		cs->counts.ignored++; /* its answer comes with the round's end */
		return 0;
	case FS_CART_CONFIRMED:
		return event(cs, c, ev, k->cart_id, FS_OUT_CONFIRMED, "already_confirmed", -1, 0,
			     offset);
	case FS_CART_CONFIRMED_LATE:
		return event(cs, c, ev, k->cart_id, FS_OUT_CONFIRMED_LATE, "already_confirmed", -1,
			     0, offset);
	case FS_CART_CANCELLED:
		return event(cs, c, ev, k->cart_id, FS_OUT_REFUND_REQUIRED, "cancelled", -1, 0,
			     offset);
	case FS_CART_REFUND_REQUIRED:
		return event(cs, c, ev, k->cart_id, FS_OUT_REFUND_REQUIRED, k->reason, k->line, 0,
			     offset);
	default: /* refused */
		return event(cs, c, ev, k->cart_id, FS_OUT_UNKNOWN_INTENT, "not_held", -1, 0,
			     offset);
	}
}

/* A cancel of a cart. */
static int cancel(struct fs_carts *cs, struct fs_core *c, uint32_t ci, int64_t offset)
{
	struct fs_cart *k = &cs->carts[ci];
	int ev = FS_CART_EV_CANCEL;
	switch (k->state) {
	case FS_CART_HELD: {
		heap_remove(cs, ci);
		k->state = FS_CART_CANCELLED;
		mark_cart(cs, ci);
		int rc = send_ends(cs, k, k->ngroups, FS_CART_RELEASE);
		return rc < 0 ? rc
			      : event(cs, c, ev, k->cart_id, FS_OUT_CANCELLED, NULL, -1, 0, offset);
	}
	case FS_CART_RESERVING: {
		/* The round stops here (issue 47 item 8): the groups that answered held go back
		 * now, the one in flight when it answers (on_answer); nothing more is reserved. */
		int rc = 0;
		if (!k->cancel_asked && FS_CART_MUTATE != 4)
			rc = send_ends(cs, k, k->at, FS_CART_RELEASE);
		k->cancel_asked = true;
		mark_cart(cs, ci);
		return rc < 0 ? rc
			      : event(cs, c, ev, k->cart_id, FS_OUT_CANCELLED, NULL, -1, 0, offset);
	}
	case FS_CART_CONFIRMED:
	case FS_CART_CONFIRMED_LATE:
		return event(cs, c, ev, k->cart_id, FS_OUT_REJECTED, "already_confirmed", -1, 0,
			     offset);
	case FS_CART_LATE:
		return event(cs, c, ev, k->cart_id, FS_OUT_REJECTED, "confirm_in_progress", -1, 0,
			     offset);
	case FS_CART_EXPIRED:
	case FS_CART_REFUND_REQUIRED:
		return event(cs, c, ev, k->cart_id, FS_OUT_EXPIRED, "already_expired", -1, 0,
			     offset);
	case FS_CART_CANCELLED:
		return event(cs, c, ev, k->cart_id, FS_OUT_CANCELLED, "already_cancelled", -1, 0,
			     offset);
	default: /* refused */
		return event(cs, c, ev, k->cart_id, FS_OUT_UNKNOWN_INTENT, "not_held", -1, 0,
			     offset);
	}
}

int fs_cart_step_followup(struct fs_carts *cs, struct fs_core *c, const char *cart_id,
			  bool is_confirm, int64_t ts_ms, int64_t offset)
{
	int rc = advance(cs, c, ts_ms, offset);
	if (rc < 0)
		return rc;
	uint32_t ci = find_cart(cs, cart_id);
	if (ci == FS_MAP_NONE)
		rc = event(cs, c, is_confirm ? FS_CART_EV_CONFIRM : FS_CART_EV_CANCEL, cart_id,
			   FS_OUT_UNKNOWN_INTENT, "no_cart", -1, 0, offset);
	else
		rc = is_confirm ? confirm(cs, c, ci, offset) : cancel(cs, c, ci, offset);
	return step_end(cs, c, rc, offset);
}

int fs_cart_refuse_msg(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		       int64_t offset)
{
	if (m->kind != FS_CART_RESERVE || fs_cart_msg_to(m) != cs->partition ||
	    find_group(cs, m->cart_id, m->round) != FS_MAP_NONE)
		return 0;
	cs->step_offset = offset; /* (the clock moved as the record was decided rejected) */
	uint32_t gi;
	int rc = add_group(cs, c, m, offset, &gi);
	if (rc < 0)
		return rc;
	struct fs_group *g = &cs->groups[gi];
	g->state = FS_GROUP_REFUSED;
	mark_group(cs, gi);
	struct fs_decision d = {.outcome = FS_OUT_REJECTED, .reason = "store_refused"};
	rc = answer(cs, g, false, &d, g->nlines ? g->lines[0].line : -1, 0);
	return step_end(cs, c, rc, offset); /* the answer may be this partition's own */
}

int fs_cart_step_msg(struct fs_carts *cs, struct fs_core *c, const struct fs_cart_msg *m,
		     int64_t ts_ms, int64_t offset)
{
	int rc = advance(cs, c, ts_ms, offset);
	if (rc < 0)
		return rc;
	cs->counts.messages_in++;
	if (fs_cart_msg_to(m) != cs->partition) {
		cs->counts.ignored++; /* not for this partition (a forged or misrouted record) */
		return step_end(cs, c, 0, offset);
	}
	rc = grow((void **)&cs->local, &cs->local_cap, cs->local_len, sizeof *cs->local);
	if (rc < 0)
		return rc;
	cs->local[cs->local_len++] = *m;
	return step_end(cs, c, 0, offset);
}

/* ---- the messages' records ---------------------------------------------------------------- */

void fs_cart_msg_json(struct fs_buf *b, const struct fs_cart_msg *m)
{
	static const char *const types[] = {[FS_CART_RESERVE] = "cart_reserve",
					    [FS_CART_ANSWER] = "cart_answer",
					    [FS_CART_END] = "cart_end"};
	static const char *const actions[] = {[FS_CART_COMMIT] = "commit",
					      [FS_CART_RELEASE] = "release",
					      [FS_CART_CONFIRM] = "confirm"};
	fs_buf_str(b, "{\"v\":1,\"type\":\"");
	fs_buf_str(b, types[m->kind]);
	fs_buf_str(b, "\",\"cart_id\":\"");
	fs_buf_str(b, m->cart_id);
	fs_buf_str(b, "\"");
	fs_buf_json_int(b, "round", m->round);
	fs_buf_json_int(b, "coord", m->coord);
	fs_buf_json_int(b, "part", m->part);
	switch (m->kind) {
	case FS_CART_RESERVE:
		fs_buf_str(b, ",\"buyer_id\":");
		fs_buf_json_str(b, m->buyer_id);
		fs_buf_str(b, ",\"lines\":[");
		for (uint32_t i = 0; i < m->nlines; i++) {
			fs_buf_str(b, i ? ",{\"sku\":\"" : "{\"sku\":\"");
			fs_buf_str(b, m->lines[i].sku);
			fs_buf_str(b, "\"");
			fs_buf_json_int(b, "qty", m->lines[i].qty);
			fs_buf_json_int(b, "line", m->lines[i].line);
			fs_buf_str(b, "}");
		}
		fs_buf_str(b, "]");
		break;
	case FS_CART_ANSWER:
		fs_buf_str(b, ",\"outcome\":\"");
		fs_buf_str(b, m->held ? "held" : fs_outcome_name((enum fs_outcome)m->outcome));
		fs_buf_str(b, "\"");
		if (m->reason) {
			fs_buf_str(b, ",\"reason\":\"");
			fs_buf_str(b, m->reason);
			fs_buf_str(b, "\"");
		}
		fs_buf_json_int(b, "line", m->line);
		fs_buf_json_int(b, "hold_ms", m->hold_ms);
		break;
	default:
		fs_buf_str(b, ",\"action\":\"");
		fs_buf_str(b, actions[m->action]);
		fs_buf_str(b, "\"");
		break;
	}
	fs_buf_str(b, "}");
}

void fs_cart_event_json(struct fs_buf *b, const struct fs_cart_event *e, int32_t partition)
{
	static const char *const types[] = {[FS_CART_EV_CART] = "cart",
					    [FS_CART_EV_CONFIRM] = "cart_confirm",
					    [FS_CART_EV_CANCEL] = "cart_cancel",
					    [FS_CART_EV_EXPIRED] = "cart_expire",
					    [FS_CART_EV_CONFLICT] = "cart_conflict"};
	/* Every string is a canonical cart id or a static name: nothing to escape. */
	fs_buf_str(b, "{\"v\":1,\"type\":\"");
	fs_buf_str(b, types[e->kind]);
	fs_buf_str(b, "\",\"intent_id\":\"");
	fs_buf_str(b, e->cart_id);
	fs_buf_str(b, "\",\"cart_id\":\"");
	fs_buf_str(b, e->cart_id);
	fs_buf_str(b, "\",\"outcome\":\"");
	fs_buf_str(b, fs_outcome_name(e->outcome));
	fs_buf_str(b, "\"");
	if (e->reason) {
		fs_buf_str(b, ",\"reason\":\"");
		fs_buf_str(b, e->reason);
		fs_buf_str(b, "\"");
	}
	if (e->line >= 0)
		fs_buf_json_int(b, "line", e->line);
	if (e->outcome == FS_OUT_HELD || e->kind == FS_CART_EV_EXPIRED)
		fs_buf_json_int(b, "expires_at", e->expires_at_ms);
	fs_buf_json_int(b, "decided_at", e->decided_at_ms);
	fs_buf_json_int(b, "partition", partition);
	fs_buf_json_int(b, "offset", e->offset);
	fs_buf_str(b, "}");
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Every reason a cart, a group or an event may keep (a stored one maps back to it). */
static const char *const reasons[] = {
	"qty_over_cap",
	"unknown_sku",
	"cancelled",
	"cart_undecided",
	"not_held",
	"already_confirmed",
	"already_expired",
	"already_cancelled",
	"no_cart",
	"intent_id_reused",
	"confirm_in_progress",
	"sold_out",
	"limit_exceeded",
	"closed",
	"not_open",
	"rejected",
	"admission_required", /* a line of a sale behind a waiting room (issue 33) */
	"store_refused",      /* a reserve the store refused for good (issue 47, item 5) */
};

const char *fs_cart_reason_static(const char *reason)
{
	for (size_t i = 0; reason && i < sizeof reasons / sizeof *reasons; i++)
		if (strcmp(reasons[i], reason) == 0)
			return reasons[i];
	return NULL;
}

int fs_carts_load_cart(struct fs_carts *cs, const struct fs_cart *k)
{
	if (find_cart(cs, k->cart_id) != FS_MAP_NONE)
		return -EEXIST;
	int rc = grow_carts(cs);
	if (rc < 0)
		return rc;
	uint32_t ci = cs->carts_len;
	rc = fs_map_put(&cs->cart_index, cart_hash(k->cart_id), ci);
	if (rc < 0)
		return rc;
	cs->carts[ci] = *k;
	cs->carts[ci].dirty = false;
	cs->carts[ci].stored = true;
	set_groups(&cs->carts[ci]);
	cs->carts[ci].heap_pos = FS_MAP_NONE;
	cs->carts_len++;
	if (k->state == FS_CART_HELD)
		heap_push(cs, ci);
	return 0;
}

int fs_carts_load_group(struct fs_carts *cs, const struct fs_core *c, const struct fs_group *g,
			const char *const *skus)
{
	if (find_group(cs, g->cart_id, g->round) != FS_MAP_NONE)
		return -EEXIST;
	int rc = grow_groups(cs);
	if (rc < 0)
		return rc;
	uint32_t gi = cs->groups_len;
	rc = fs_map_put(&cs->group_index, group_hash(g->cart_id, g->round), gi);
	if (rc < 0)
		return rc;
	struct fs_group *v = &cs->groups[gi];
	*v = *g;
	v->dirty = false;
	v->stored = true;
	for (uint32_t i = 0; i < v->nlines; i++) {
		snprintf(v->lines[i].sku, sizeof v->lines[i].sku, "%s", skus[i]);
		v->lines[i].sku_index = fs_core_sku_index(c, skus[i]);
	}
	cs->groups_len++;
	return 0;
}

static const struct fs_carts *sort_cs; /* (qsort has no context: loading is one thread's) */

static int cmp_group_off(const void *a, const void *b)
{
	int64_t x = sort_cs->groups[*(const uint32_t *)a].offset,
		y = sort_cs->groups[*(const uint32_t *)b].offset;
	return (x > y) - (x < y);
}

int fs_carts_load_done(struct fs_carts *cs, const struct fs_core *c)
{
	int rc = grow_pending(cs, c->skus_len);
	if (rc == 0)
		rc = grow_wq(cs, c->skus_len);
	if (rc < 0)
		return rc;
	if (cs->pending)
		memset(cs->pending, 0, (size_t)cs->pending_cap * sizeof *cs->pending);
	for (uint32_t i = 0; i < cs->wq_cap; i++)
		cs->wq[i].head = cs->wq[i].len = 0;
	uint32_t *w = malloc(((size_t)cs->groups_len + 1) * sizeof *w), n = 0;
	if (!w)
		return -ENOMEM;
	for (uint32_t gi = 0; gi < cs->groups_len; gi++) {
		const struct fs_group *g = &cs->groups[gi];
		if (g->state == FS_GROUP_PENDING)
			for (uint32_t i = 0; i < g->nlines; i++)
				if (g->lines[i].sku_index != FS_MAP_NONE)
					cs->pending[g->lines[i].sku_index] += g->lines[i].qty;
		if (g->state == FS_GROUP_WAITING)
			w[n++] = gi;
	}
	/* The queues in the order the groups came: their reserves' offsets. */
	sort_cs = cs;
	qsort(w, n, sizeof *w, cmp_group_off);
	cs->waiting_len = n;
	for (uint32_t k = 0; k < n && rc == 0; k++) {
		const struct fs_group *g = &cs->groups[w[k]];
		for (uint32_t i = 0; i < g->nlines && rc == 0; i++) {
			uint32_t si = g->lines[i].sku_index;
			if (si == FS_MAP_NONE)
				continue;
			rc = wq_room(cs, si);
			if (rc == 0)
				cs->wq[si].v[cs->wq[si].len++] = w[k];
		}
	}
	free(w);
	return rc;
}

/* Reads a stored lines array: n objects, each with a string "sku" and integers `a` and `b`. */
static int parse_lines(const char *json, uint32_t *n, char (*skus)[FS_SKU_LEN_MAX + 1],
		       const char *a, int64_t *av, const char *b, int64_t *bv)
{
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, NULL);
	int rc = -EINVAL;
	if (!root || !json_is_array(root) || json_array_size(root) > FS_CART_LINES_MAX)
		goto out;
	*n = (uint32_t)json_array_size(root);
	for (uint32_t i = 0; i < *n; i++) {
		json_t *l = json_array_get(root, i);
		json_t *sku = json_object_get(l, "sku"), *x = json_object_get(l, a),
		       *y = json_object_get(l, b);
		if (!json_is_string(sku) || json_string_length(sku) > FS_SKU_LEN_MAX ||
		    !json_is_integer(x) || !json_is_integer(y))
			goto out;
		strcpy(skus[i], json_string_value(sku));
		av[i] = json_integer_value(x);
		bv[i] = json_integer_value(y);
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

int fs_cart_parse_lines(struct fs_cart *k, const char *json)
{
	char skus[FS_CART_LINES_MAX][FS_SKU_LEN_MAX + 1];
	int64_t qty[FS_CART_LINES_MAX], part[FS_CART_LINES_MAX];
	int rc = parse_lines(json, &k->nlines, skus, "qty", qty, "part", part);
	for (uint32_t i = 0; rc == 0 && i < k->nlines; i++) {
		strcpy(k->lines[i].sku, skus[i]);
		k->lines[i].qty = qty[i];
		k->lines[i].part = (int32_t)part[i];
	}
	return rc;
}

int fs_group_parse_lines(struct fs_group *g, const char *json, char (*skus)[FS_SKU_LEN_MAX + 1])
{
	int64_t qty[FS_CART_LINES_MAX], line[FS_CART_LINES_MAX];
	int rc = parse_lines(json, &g->nlines, skus, "qty", qty, "line", line);
	for (uint32_t i = 0; rc == 0 && i < g->nlines; i++) {
		g->lines[i].qty = qty[i];
		g->lines[i].line = (int32_t)line[i];
	}
	return rc;
}
