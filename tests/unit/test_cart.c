/* test_cart.c: carts across partitions (src/core/cart.c), the protocol alone: several
 * partitions, each a core and its carts, joined by a network that delivers the messages of a
 * step once it "committed", in any interleaving of partitions, some of them twice and late (a
 * sender's outbox sends again after a crash; a crash and replay decide the same, so the
 * repeats are what a crash leaves). Checked: a cart whose lines all live on its coordinator
 * is decided in one step without messages; a two-partition cart's messages step by step;
 * identical carts racing for N units of each SKU get exactly N winners in every interleaving
 * (the order of partitions makes waiting safe, and no cart is refused for units a refused cart
 * held); and a seeded sweep of carts, confirms, cancels, late confirms and expiries ends with
 * no group pending or waiting, every cart answered once, no cart half held, and every SKU's
 * held and sold units those of its carts' groups. */
#include "check.h"
#include "core/cart.h"
#include "core/batch.h"
#include "core/commit.h"

#include <errno.h>

enum { PARTS_MAX = 6, SKUS_MAX = 12 };

/* ---- the network -------------------------------------------------------------------------- */

enum item_type { IT_MSG = 1, IT_CART, IT_CONFIRM, IT_CANCEL, IT_TICK };

struct item {
	int type;
	struct fs_cart_msg m;
	struct fs_cart_req req;
	char cart_id[FS_UUID_LEN + 1];
};

struct part {
	struct fs_core core;
	struct fs_carts cs;
	struct item *log;
	uint32_t head, len, cap;
	int64_t offset;
};

struct ev_rec {
	struct fs_cart_event e;
};

struct net {
	int32_t nparts;
	struct part parts[PARTS_MAX];
	int64_t now;
	uint64_t rng;
	int dup_pct;	   /* a delivered message is sent again later with this chance */
	int reload_pct;	   /* after a step, a partition's carts are loaded again (a restart) */
	struct item *late; /* copies to deliver later */
	uint32_t late_len, late_cap;
	struct ev_rec *events;
	uint32_t events_len, events_cap;
	int64_t steps;
};

static uint64_t rnd(struct net *n)
{
	n->rng ^= n->rng << 13;
	n->rng ^= n->rng >> 7;
	n->rng ^= n->rng << 17;
	return n->rng;
}

static uint32_t rnd_below(struct net *n, uint32_t k)
{
	return k ? (uint32_t)(rnd(n) % k) : 0;
}

static void *grow_array(void *a, uint32_t *cap, uint32_t len, size_t size)
{
	if (len < *cap)
		return a;
	*cap = *cap ? *cap * 2 : 64;
	a = realloc(a, (size_t)*cap * size);
	if (!a)
		abort();
	return a;
}

static void append(struct net *n, int32_t p, const struct item *it)
{
	struct part *pt = &n->parts[p];
	pt->log = grow_array(pt->log, &pt->cap, pt->len, sizeof *pt->log);
	pt->log[pt->len++] = *it;
}

static void net_init(struct net *n, int32_t nparts, uint64_t seed)
{
	memset(n, 0, sizeof *n);
	n->nparts = nparts;
	n->rng = seed * 2654435761u + 88172645463325252ull;
	n->now = 1000000;
	for (int32_t p = 0; p < nparts; p++) {
		fs_core_init(&n->parts[p].core, p);
		if (fs_carts_init(&n->parts[p].cs, p, nparts, FS_CART_LINES_MAX) != 0)
			abort();
	}
}

static void net_free(struct net *n)
{
	for (int32_t p = 0; p < n->nparts; p++) {
		fs_carts_free(&n->parts[p].cs);
		fs_core_free(&n->parts[p].core);
		free(n->parts[p].log);
	}
	free(n->late);
	free(n->events);
}

/* The SKU named `name` opens on its partition (by the partitioning rule). */
static int32_t open_sku(struct net *n, const char *name, int64_t stock, int64_t limit,
			int64_t hold_ms)
{
	int32_t p = fs_partition_of(name, strlen(name), n->nparts);
	struct part *pt = &n->parts[p];
	struct fs_record r = {0};
	r.kind = FS_KIND_OPEN;
	r.partition = p;
	r.offset = pt->offset++;
	r.ts_ms = n->now;
	snprintf(r.sku, sizeof r.sku, "%s", name);
	r.qty = stock;
	r.per_buyer_limit = limit;
	r.max_qty = limit;
	r.hold_ms = hold_ms;
	struct fs_decision d;
	if (fs_core_decide(&pt->core, &r, &d) != 0 || d.outcome != FS_OUT_APPLIED)
		abort();
	fs_core_commit(&pt->core);
	return p;
}

static bool same_reason(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* The message as its record says it (fs_cart_msg_json, then fs_record_parse_ext): equal to
 * what was sent, and keyed to the partition it is for. */
static bool wire(const struct net *n, const struct fs_cart_msg *m, struct fs_cart_msg *out)
{
	struct fs_buf b = {0};
	fs_cart_msg_json(&b, m);
	struct fs_record_limits lim = {.partitions = n->nparts, .carts = true};
	struct fs_record r;
	static struct fs_record_ext x;
	int32_t to = fs_cart_msg_to(m);
	int rc = fs_record_parse_ext(&lim, m->key, strlen(m->key), b.data, b.len, to, 0, 0, &r, &x);
	CHECK_CTX("%.*s", (int)b.len, b.data);
	bool ok = CHECK_INT(rc, 0) && CHECK_INT(r.kind, FS_KIND_CART_MSG) && CHECK(!r.misrouted) &&
		  CHECK_INT(r.route, to);
	const struct fs_cart_msg *y = &x.msg;
	ok = ok && CHECK_INT(y->kind, m->kind) && CHECK_STR(y->cart_id, m->cart_id) &&
	     CHECK_STR(y->key, m->key) && CHECK_INT(y->round, m->round) &&
	     CHECK_INT(y->coord, m->coord) && CHECK_INT(y->part, m->part);
	if (ok && m->kind == FS_CART_RESERVE) {
		ok = CHECK_STR(y->buyer_id, m->buyer_id) && CHECK_INT(y->nlines, m->nlines);
		for (uint32_t i = 0; ok && i < m->nlines; i++)
			ok = CHECK_STR(y->lines[i].sku, m->lines[i].sku) &&
			     CHECK_INT(y->lines[i].qty, m->lines[i].qty) &&
			     CHECK_INT(y->lines[i].line, m->lines[i].line);
	} else if (ok && m->kind == FS_CART_ANSWER) {
		ok = CHECK_INT(y->held, m->held) && CHECK_INT(y->outcome, m->outcome) &&
		     CHECK(same_reason(y->reason, m->reason)) && CHECK_INT(y->line, m->line) &&
		     CHECK_INT(y->hold_ms, m->hold_ms);
	} else if (ok) {
		ok = CHECK_INT(y->action, m->action);
	}
	CHECK_CTX("%s", "");
	fs_buf_free(&b);
	*out = *y;
	return ok;
}

/* A restart: partition p's carts and groups as the store would hold them (what the step
 * committed), loaded into a fresh state through fs_carts_load_*. */
static void reload(struct net *n, int32_t p)
{
	struct part *pt = &n->parts[p];
	struct fs_carts old = pt->cs, fresh;
	if (fs_carts_init(&fresh, p, n->nparts, FS_CART_LINES_MAX) != 0)
		abort();
	for (uint32_t i = 0; i < old.carts_len; i++)
		CHECK_INT(fs_carts_load_cart(&fresh, &old.carts[i]), 0);
	for (uint32_t i = 0; i < old.groups_len; i++) {
		const char *skus[FS_CART_LINES_MAX];
		const struct fs_group *g = &old.groups[i];
		for (uint32_t l = 0; l < g->nlines; l++)
			skus[l] = g->lines[l].sku_index == FS_MAP_NONE
					  ? "NOT-HERE"
					  : pt->core.skus[g->lines[l].sku_index].sku;
		CHECK_INT(fs_carts_load_group(&fresh, &pt->core, g, skus), 0);
	}
	CHECK_INT(fs_carts_load_done(&fresh, &pt->core), 0);
	/* The same waiting groups, queued in the same order (the live queues may still hold
	 * groups that stopped waiting: they are passed), pending units and next expiry. */
	CHECK_INT(fresh.waiting_len, old.waiting_len);
	for (uint32_t si = 0; si < pt->core.skus_len && si < old.wq_cap; si++) {
		const struct fs_wq *a = &old.wq[si], *b = si < fresh.wq_cap ? &fresh.wq[si] : NULL;
		uint32_t j = b ? b->head : 0;
		for (uint32_t k = a->head; k < a->len; k++) {
			if (old.groups[a->v[k]].state != FS_GROUP_WAITING)
				continue;
			CHECK(b && j < b->len && b->v[j] == a->v[k]);
			j++;
		}
		CHECK_INT(j, b ? b->len : 0);
	}
	for (uint32_t si = 0; si < pt->core.skus_len; si++)
		CHECK_INT(fs_carts_pending_units(&fresh, si), fs_carts_pending_units(&old, si));
	CHECK_INT(fs_carts_next_expiry(&fresh), fs_carts_next_expiry(&old));
	fresh.counts = old.counts;
	fs_carts_free(&pt->cs);
	pt->cs = fresh;
}

/* Partition p's step as rows (commit.c, as the store gets them): the carts and groups never
 * stored before go first, as COPY rows, the others as upserts; careful (a batch redone), every
 * one as an upsert. The COPY data holds a row per new cart, group and outbox entry. */
static void check_rows(struct net *n, int32_t p)
{
	struct part *pt = &n->parts[p];
	struct fs_batch b;
	struct fs_tx t;
	struct fs_buf bufs[3] = {{0}};
	fs_tx_init(&t);
	if (fs_batch_init(&b, 1) != 0)
		abort();
	pt->core.carts = &pt->cs;
	for (int careful = 0; careful < 2; careful++) {
		CHECK_INT(fs_tx_build(&t, p, -1, pt->offset, -1, &b, &pt->core, careful), 0);
		CHECK_INT(t.carts.len, pt->cs.dirty_carts_len);
		CHECK_INT(t.groups.len, pt->cs.dirty_groups_len);
		CHECK_INT(t.outs.len, pt->cs.out_len + pt->cs.events_len);
		uint32_t new_carts = 0, new_groups = 0;
		for (uint32_t i = 0; i < t.carts.len; i++) {
			new_carts += !t.carts.v[i]->stored;
			if (!careful)
				CHECK(t.carts.v[i]->stored == (i >= t.n_cart_copies));
		}
		for (uint32_t i = 0; i < t.groups.len; i++) {
			new_groups += !t.groups.v[i]->stored;
			if (!careful)
				CHECK(t.groups.v[i]->stored == (i >= t.n_group_copies));
		}
		CHECK_INT(t.n_cart_copies, careful ? 0 : new_carts);
		CHECK_INT(t.n_group_copies, careful ? 0 : new_groups);
		fs_tx_carts_copy(&t, p, &bufs[0], &bufs[1], &bufs[2]);
		const uint32_t rows[3] = {t.n_cart_copies, t.n_group_copies, t.outs.len};
		for (int i = 0; i < 3; i++) {
			CHECK(fs_buf_ok(&bufs[i]));
			CHECK_INT(bufs[i].len > 21, rows[i] > 0); /* more than header and trailer */
		}
	}
	pt->core.carts = NULL;
	for (int i = 0; i < 3; i++)
		fs_buf_free(&bufs[i]);
	fs_batch_free(&b);
	fs_tx_free(&t);
}

/* "Commits" partition p's step: its events are kept, its messages sent (some twice). */
static void commit(struct net *n, int32_t p)
{
	struct fs_carts *cs = &n->parts[p].cs;
	check_rows(n, p);
	for (uint32_t i = 0; i < cs->events_len; i++) {
		n->events = grow_array(n->events, &n->events_cap, n->events_len, sizeof *n->events);
		n->events[n->events_len++].e = cs->events[i];
	}
	for (uint32_t i = 0; i < cs->out_len; i++) {
		struct item it = {.type = IT_MSG};
		/* Sent as its record: written, read back, and on the partition its key routes to.
		 */
		if (!CHECK(wire(n, &cs->out[i], &it.m)))
			continue;
		CHECK(fs_cart_msg_to(&it.m) != p);
		append(n, fs_cart_msg_to(&it.m), &it);
		if (rnd_below(n, 100) < (uint32_t)n->dup_pct) {
			n->late = grow_array(n->late, &n->late_cap, n->late_len, sizeof *n->late);
			n->late[n->late_len++] = it;
		}
	}
	fs_carts_commit(cs);
	fs_core_commit(&n->parts[p].core);
	if (n->reload_pct && rnd_below(n, 100) < (uint32_t)n->reload_pct)
		reload(n, p);
}

static int process(struct net *n, int32_t p, const struct item *it)
{
	struct part *pt = &n->parts[p];
	int64_t off = pt->offset++;
	int rc;
	switch (it->type) {
	case IT_MSG:
		rc = fs_cart_step_msg(&pt->cs, &pt->core, &it->m, n->now, off);
		break;
	case IT_CART:
		rc = fs_cart_step_cart(&pt->cs, &pt->core, &it->req, n->now, off);
		break;
	case IT_CONFIRM:
	case IT_CANCEL:
		rc = fs_cart_step_followup(&pt->cs, &pt->core, it->cart_id, it->type == IT_CONFIRM,
					   n->now, off);
		break;
	default:
		rc = fs_cart_step_clock(&pt->cs, &pt->core, n->now, off);
		break;
	}
	commit(n, p);
	n->steps++;
	return rc;
}

/* One step: a partition with records takes its next one (or a late copy is sent). Returns
 * false when nothing is left to deliver. */
static bool net_step(struct net *n)
{
	n->now += rnd_below(n, 4);
	if (n->late_len && rnd_below(n, 4) == 0) {
		uint32_t k = rnd_below(n, n->late_len);
		struct item it = n->late[k];
		n->late[k] = n->late[--n->late_len];
		append(n, fs_cart_msg_to(&it.m), &it);
		return true;
	}
	int32_t ready[PARTS_MAX], nready = 0;
	for (int32_t p = 0; p < n->nparts; p++)
		if (n->parts[p].head < n->parts[p].len)
			ready[nready++] = p;
	if (!nready) {
		if (!n->late_len)
			return false;
		struct item it = n->late[--n->late_len];
		append(n, fs_cart_msg_to(&it.m), &it);
		return true;
	}
	int32_t p = ready[rnd_below(n, (uint32_t)nready)];
	struct part *pt = &n->parts[p];
	struct item it = pt->log[pt->head++];
	CHECK_INT(process(n, p, &it), 0);
	return true;
}

/* Partition p takes its next record. */
static void step_part(struct net *n, int32_t p)
{
	struct part *pt = &n->parts[p];
	if (!CHECK(pt->head < pt->len))
		return;
	struct item it = pt->log[pt->head++];
	CHECK_INT(process(n, p, &it), 0);
}

static void net_run(struct net *n)
{
	int64_t guard = 0;
	while (net_step(n))
		if (++guard > 5000000) {
			CHECK(!"the network did not settle");
			return;
		}
}

/* Every partition's clock to `now` (a tick each), then whatever that sends. */
static void net_tick_all(struct net *n)
{
	for (int32_t p = 0; p < n->nparts; p++) {
		struct item it = {.type = IT_TICK};
		append(n, p, &it);
	}
	net_run(n);
}

static void make_id(char out[FS_UUID_LEN + 1], uint32_t k)
{
	snprintf(out, FS_UUID_LEN + 1, "00000000-0000-4000-8000-%012u", k);
}

static int32_t coord_of(const struct net *n, const char *cart_id)
{
	return fs_partition_of(cart_id, strlen(cart_id), n->nparts);
}

/* Sends a cart to its coordinator's log; returns the coordinator. */
static int32_t send_cart(struct net *n, uint32_t k, const char *buyer, const char *const *skus,
			 const int64_t *qty, uint32_t nlines)
{
	struct item it = {.type = IT_CART};
	make_id(it.req.cart_id, k);
	snprintf(it.req.buyer_id, sizeof it.req.buyer_id, "%s", buyer);
	it.req.nlines = nlines;
	for (uint32_t i = 0; i < nlines; i++) {
		snprintf(it.req.lines[i].sku, sizeof it.req.lines[i].sku, "%s", skus[i]);
		it.req.lines[i].qty = qty[i];
	}
	int32_t c = coord_of(n, it.req.cart_id);
	const char *why = fs_cart_req_check(&n->parts[c].cs, &it.req);
	CHECK(why == NULL);
	append(n, c, &it);
	return c;
}

static void send_followup(struct net *n, uint32_t k, bool confirm)
{
	struct item it = {.type = confirm ? IT_CONFIRM : IT_CANCEL};
	make_id(it.cart_id, k);
	append(n, coord_of(n, it.cart_id), &it);
}

/* The events of a cart of kind `kind`, the last one in *last. */
static int count_events(const struct net *n, uint32_t k, int kind, struct fs_cart_event *last)
{
	char id[FS_UUID_LEN + 1];
	make_id(id, k);
	int c = 0;
	for (uint32_t i = 0; i < n->events_len; i++) {
		if (n->events[i].e.kind == kind && strcmp(n->events[i].e.cart_id, id) == 0) {
			c++;
			if (last)
				*last = n->events[i].e;
		}
	}
	return c;
}

/* ---- the invariants ------------------------------------------------------------------------ */

/* After the network settled: no group pending or waiting; a cart held (confirmed) has every
 * group of its round held (sold) and one is not held anywhere else; every SKU's held and sold
 * units are those of its groups. Returns the carts held now. */
static int check_settled(struct net *n, uint32_t ncarts)
{
	for (int32_t p = 0; p < n->nparts; p++) {
		const struct fs_carts *cs = &n->parts[p].cs;
		CHECK_INT(cs->waiting_len, 0);
		for (uint32_t g = 0; g < cs->groups_len; g++) {
			CHECK(cs->groups[g].state != FS_GROUP_PENDING);
			CHECK(cs->groups[g].state != FS_GROUP_WAITING);
		}
		const struct fs_core *c = &n->parts[p].core;
		for (uint32_t si = 0; si < c->skus_len; si++) {
			int64_t held = 0, sold = 0;
			for (uint32_t g = 0; g < cs->groups_len; g++) {
				const struct fs_group *gr = &cs->groups[g];
				for (uint32_t l = 0; l < gr->nlines; l++) {
					if (gr->lines[l].sku_index != si)
						continue;
					if (gr->state == FS_GROUP_HELD)
						held += gr->lines[l].qty;
					if (gr->state == FS_GROUP_SOLD)
						sold += gr->lines[l].qty;
				}
			}
			CHECK_CTX("partition %d sku %s", p, c->skus[si].sku);
			CHECK_INT(c->skus[si].held, held);
			CHECK_INT(c->skus[si].sold, sold);
			CHECK_INT(fs_carts_pending_units(cs, si), 0);
			CHECK_INT(c->skus[si].available + c->skus[si].held + c->skus[si].sold,
				  c->skus[si].supply);
		}
	}
	int held_now = 0;
	for (uint32_t k = 0; k < ncarts; k++) {
		char id[FS_UUID_LEN + 1];
		make_id(id, k);
		int32_t cp = coord_of(n, id);
		const struct fs_cart *cart = fs_carts_find(&n->parts[cp].cs, id);
		CHECK_CTX("cart %u", k);
		if (!CHECK(cart != NULL))
			continue;
		CHECK_INT(count_events(n, k, FS_CART_EV_CART, NULL), 1);
		bool live = cart->state == FS_CART_HELD;
		bool sold =
			cart->state == FS_CART_CONFIRMED || cart->state == FS_CART_CONFIRMED_LATE;
		held_now += live;
		/* Every round's group at every partition of the cart: live only in the last
		 * round, and then held (sold) at all of them or none. */
		for (int32_t r = 1; r <= cart->round; r++) {
			for (uint32_t g = 0; g < cart->ngroups; g++) {
				const struct fs_group *gr =
					fs_carts_group(&n->parts[cart->parts[g]].cs, id, r);
				int st = gr ? gr->state : 0;
				CHECK_CTX("cart %u (%s) round %d group at %d: %s", k,
					  fs_cart_state_name(cart->state), r, cart->parts[g],
					  gr ? fs_group_state_name(st) : "none");
				if (live && r == cart->round)
					CHECK_INT(st, FS_GROUP_HELD);
				else if (sold && r == cart->round)
					CHECK_INT(st, FS_GROUP_SOLD);
				else
					CHECK(st != FS_GROUP_HELD && st != FS_GROUP_SOLD);
			}
		}
	}
	CHECK_CTX("%s", "");
	return held_now;
}

/* ---- the tests ------------------------------------------------------------------------------ */

/* Finds SKU names that live on the given partitions: names[i] on parts[i]. */
static void skus_on(int32_t nparts, const int32_t *parts, int n, char names[][16])
{
	for (int i = 0; i < n; i++) {
		for (int k = 0;; k++) {
			snprintf(names[i], 16, "S%d-%d", i, k);
			if (fs_partition_of(names[i], strlen(names[i]), nparts) == parts[i])
				break;
		}
	}
}

/* A cart id whose coordinator is partition p, from k on. */
static uint32_t cart_on(const struct net *n, int32_t p, uint32_t k)
{
	char id[FS_UUID_LEN + 1];
	for (;; k++) {
		make_id(id, k);
		if (coord_of(n, id) == p)
			return k;
	}
}

static void test_local(void)
{
	struct net n;
	net_init(&n, 2, 1);
	char names[2][16];
	int32_t on[2] = {0, 0};
	skus_on(2, on, 2, names);
	open_sku(&n, names[0], 5, 3, 60000);
	open_sku(&n, names[1], 1, 3, 30000);
	uint32_t k = cart_on(&n, 0, 0);
	const char *skus[2] = {names[0], names[1]};
	int64_t qty[2] = {2, 1};
	send_cart(&n, k, "b1", skus, qty, 2);
	CHECK(net_step(&n));
	/* Decided in its one step, with no message. */
	struct fs_cart_event e;
	CHECK_INT(count_events(&n, k, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	CHECK_INT(e.expires_at_ms, e.decided_at_ms + 30000); /* the shortest hold */
	CHECK_INT(n.parts[1].len, 0);
	CHECK_INT(n.parts[0].cs.counts.messages_out, 0);
	const struct fs_sku *s0 = fs_core_sku(&n.parts[0].core, names[0]);
	CHECK_INT(s0->available, 3);
	CHECK_INT(s0->held, 2);
	/* A second cart wants the last unit of names[1]: refused sold_out on its line 1, and
	 * names[0] is untouched. */
	uint32_t k2 = cart_on(&n, 0, k + 1);
	send_cart(&n, k2, "b2", skus, qty, 2);
	net_run(&n);
	CHECK_INT(count_events(&n, k2, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "sold_out");
	CHECK_INT(e.line, 1);
	CHECK_INT(s0->available, 3);
	/* A retry of the cart record gets its answer again; the same id with other lines is a
	 * conflict, with no effect. */
	struct item again = n.parts[0].log[0];
	append(&n, 0, &again);
	net_run(&n);
	CHECK_INT(count_events(&n, k, FS_CART_EV_CART, &e), 2);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	CHECK_INT(e.expires_at_ms, n.events[0].e.expires_at_ms);
	again.req.lines[0].qty = 1;
	again.req.body_hash++;
	append(&n, 0, &again);
	net_run(&n);
	/* The conflict is that record's answer, of its own type: the cart's stays held (issue 47
	 * item 3). */
	CHECK_INT(count_events(&n, k, FS_CART_EV_CART, &e), 2);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	CHECK_INT(count_events(&n, k, FS_CART_EV_CONFLICT, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "conflict");
	CHECK_INT(s0->held, 2);
	/* Confirm: sold. */
	send_followup(&n, k, true);
	net_run(&n);
	CHECK_INT(count_events(&n, k, FS_CART_EV_CONFIRM, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "confirmed");
	CHECK_INT(s0->sold, 2);
	CHECK_INT(s0->held, 0);
	CHECK_INT(check_settled(&n, 0), 0);
	net_free(&n);
}

static void test_two_partitions(void)
{
	struct net n;
	net_init(&n, 3, 2);
	char names[2][16];
	int32_t on[2] = {2, 1};
	skus_on(3, on, 2, names);
	open_sku(&n, names[0], 4, 4, 10000);
	open_sku(&n, names[1], 4, 4, 10000);
	uint32_t k = cart_on(&n, 0, 0);
	const char *skus[2] = {names[0], names[1]};
	int64_t qty[2] = {1, 2};
	send_cart(&n, k, "b1", skus, qty, 2);
	/* C = 0 reserves at 1 first (ascending), then at 2. */
	CHECK(net_step(&n));
	if (!CHECK_INT(n.parts[1].len, 1)) {
		net_free(&n);
		return;
	}
	CHECK_INT(n.parts[1].log[0].m.kind, FS_CART_RESERVE);
	CHECK_INT(n.parts[1].log[0].m.nlines, 1);
	CHECK_INT(n.parts[1].log[0].m.lines[0].line, 1);
	CHECK_INT(n.parts[2].len, 0);
	CHECK(net_step(&n)); /* P1 holds: pending */
	const struct fs_group *g1 = fs_carts_group(&n.parts[1].cs, n.parts[1].log[0].m.cart_id, 1);
	CHECK(g1 && g1->state == FS_GROUP_PENDING);
	CHECK_INT(fs_core_sku(&n.parts[1].core, names[1])->available, 2);
	CHECK(net_step(&n)); /* C takes the answer, reserves at 2 */
	CHECK_INT(n.parts[2].len, 1);
	CHECK(net_step(&n)); /* P2 holds */
	CHECK(net_step(&n)); /* C: held, commits both */
	struct fs_cart_event e;
	CHECK_INT(count_events(&n, k, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	net_run(&n);
	CHECK_INT(check_settled(&n, 0), 0);
	g1 = fs_carts_group(&n.parts[1].cs, n.parts[1].log[0].m.cart_id, 1);
	CHECK(g1 && g1->state == FS_GROUP_HELD);
	/* Expiry on C's clock releases both; the late confirm holds again: confirmed_late. */
	n.now += 10000;
	net_tick_all(&n);
	CHECK_INT(count_events(&n, k, FS_CART_EV_EXPIRED, NULL), 1);
	CHECK_INT(fs_core_sku(&n.parts[1].core, names[1])->available, 4);
	send_followup(&n, k, true);
	net_run(&n);
	CHECK_INT(count_events(&n, k, FS_CART_EV_CONFIRM, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "confirmed_late");
	CHECK_INT(fs_core_sku(&n.parts[1].core, names[1])->sold, 2);
	CHECK_INT(fs_core_sku(&n.parts[2].core, names[0])->sold, 1);
	CHECK_INT(check_settled(&n, 0), 0);
	net_free(&n);
}

/* A cancel during the round stops it at the next step (issue 47 item 8): C = 0, groups at 1
 * then 2. Cancelled while the group at 1 is in flight: that group is released when it answers
 * and nothing is ever reserved at 2. Cancelled while the group at 2 is in flight: the group at
 * 1 goes back at once, the one at 2 when it answers. Either way the cart's answer is
 * cancelled and every unit is back. */
static void test_cancel_in_round(void)
{
	for (int when = 0; when < 2; when++) {
		struct net n;
		net_init(&n, 3, 5);
		char names[2][16];
		int32_t on[2] = {2, 1};
		skus_on(3, on, 2, names);
		open_sku(&n, names[0], 4, 4, 10000);
		open_sku(&n, names[1], 4, 4, 10000);
		uint32_t k = cart_on(&n, 0, 0);
		const char *skus[2] = {names[0], names[1]};
		int64_t qty[2] = {1, 2};
		send_cart(&n, k, "b1", skus, qty, 2);
		step_part(&n, 0); /* C reserves at 1 */
		if (when == 1) {
			step_part(&n, 1); /* P1 holds (pending) */
			step_part(&n, 0); /* C reserves at 2 */
			CHECK_INT(n.parts[2].len, 1);
		}
		send_followup(&n, k, false);
		step_part(&n, 0); /* the cancel */
		struct fs_cart_event e;
		CHECK_INT(count_events(&n, k, FS_CART_EV_CANCEL, &e), 1);
		CHECK_STR(fs_outcome_name(e.outcome), "cancelled");
		if (when == 1) {
			step_part(&n, 1); /* the release: P1's units back before P2 answers */
			CHECK_INT(fs_core_sku(&n.parts[1].core, names[1])->available, 4);
		}
		net_run(&n);
		CHECK_INT(n.parts[2].len, when == 1 ? 2u : 0u); /* when 0: never reserved at 2 */
		CHECK_INT(count_events(&n, k, FS_CART_EV_CART, &e), 1);
		CHECK_STR(fs_outcome_name(e.outcome), "cancelled");
		CHECK_INT(fs_core_sku(&n.parts[1].core, names[1])->available, 4);
		CHECK_INT(fs_core_sku(&n.parts[2].core, names[0])->available, 4);
		CHECK_INT(check_settled(&n, 0), 0);
		net_free(&n);
	}
}

/* No money left on the table: cart Y, short of A's last unit only because cart X holds it
 * pending, waits; X is refused at B (Z holds B's last unit), releases A, and Y gets it. */
static void test_wait(void)
{
	struct net n;
	net_init(&n, 2, 3);
	char names[2][16];
	int32_t on[2] = {0, 1};
	skus_on(2, on, 2, names);
	open_sku(&n, names[0], 1, 1, 60000);
	open_sku(&n, names[1], 1, 1, 60000);
	const char *a[1] = {names[0]}, *b[1] = {names[1]}, *ab[2] = {names[0], names[1]};
	int64_t one[2] = {1, 1};
	uint32_t z = cart_on(&n, 1, 0), x = cart_on(&n, 0, z + 1), y = cart_on(&n, 0, x + 1);
	send_cart(&n, z, "bz", b, one, 1);
	net_run(&n);
	send_cart(&n, x, "bx", ab, one, 2);
	step_part(&n, 0); /* X holds A (pending), its reserve goes to B's partition */
	send_cart(&n, y, "by", a, one, 1);
	step_part(&n, 0); /* Y waits for A */
	CHECK_INT(n.parts[0].cs.waiting_len, 1);
	CHECK_INT(count_events(&n, y, FS_CART_EV_CART, NULL), 0);
	net_run(&n);
	struct fs_cart_event e;
	CHECK_INT(count_events(&n, x, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "sold_out");
	CHECK_INT(e.line, 1);
	CHECK_INT(count_events(&n, y, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	CHECK_INT(n.parts[0].cs.counts.wakes, 1);
	check_settled(&n, 0);
	/* And when X is held in the end, Y is refused then: sold_out, nothing waiting. */
	net_free(&n);
	net_init(&n, 2, 4);
	open_sku(&n, names[0], 1, 1, 60000);
	open_sku(&n, names[1], 1, 1, 60000);
	send_cart(&n, x, "bx", ab, one, 2);
	step_part(&n, 0);
	send_cart(&n, y, "by", a, one, 1);
	step_part(&n, 0);
	net_run(&n);
	CHECK_INT(count_events(&n, x, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "held");
	CHECK_INT(count_events(&n, y, FS_CART_EV_CART, &e), 1);
	CHECK_STR(fs_outcome_name(e.outcome), "sold_out");
	check_settled(&n, 0);
	net_free(&n);
}

/* Identical carts of one unit of each of three SKUs (three partitions), N units of each:
 * exactly N held in every interleaving, the rest sold_out, nothing left pending. */
static void test_race(void)
{
	for (uint64_t seed = 1; seed <= 200; seed++) {
		struct net n;
		int32_t nparts = 3 + (int32_t)(seed % 3);
		net_init(&n, nparts, seed);
		n.dup_pct = (int)(seed % 4) * 10;
		n.reload_pct = (int)(seed % 2) * 10;
		char names[3][16];
		int32_t on[3] = {0, 1, 2};
		if (seed % 2) {
			on[0] = nparts - 1;
			on[2] = 0;
		}
		skus_on(nparts, on, 3, names);
		int64_t units = 1 + (int64_t)(seed % 5);
		for (int i = 0; i < 3; i++)
			open_sku(&n, names[i], units, 1, 60000);
		uint32_t ncarts = 4 + (uint32_t)(seed % 13);
		for (uint32_t k = 0; k < ncarts; k++) {
			char buyer[16];
			snprintf(buyer, sizeof buyer, "b%u", k);
			const char *skus[3] = {names[k % 3], names[(k + 1) % 3],
					       names[(k + 2) % 3]};
			int64_t qty[3] = {1, 1, 1};
			send_cart(&n, k, buyer, skus, qty, 3);
		}
		net_run(&n);
		CHECK_CTX("seed %" PRIu64, seed);
		int held = check_settled(&n, ncarts);
		CHECK_CTX("seed %" PRIu64 ": %u carts, %" PRId64 " units", seed, ncarts, units);
		CHECK_INT(held, ncarts < units ? (int64_t)ncarts : units);
		int waits = 0;
		for (int32_t p = 0; p < nparts; p++)
			waits += (int)n.parts[p].cs.counts.waits;
		for (uint32_t k = 0; k < ncarts; k++) {
			struct fs_cart_event e;
			count_events(&n, k, FS_CART_EV_CART, &e);
			CHECK(e.outcome == FS_OUT_HELD || e.outcome == FS_OUT_SOLD_OUT);
		}
		net_free(&n);
	}
}

/* The sweep: carts of 1-4 lines over SKUs on every partition, buyers with limits, confirms,
 * cancels (some while the round is under way), expiries and late confirms, repeats. */
static void sweep_one(uint64_t seed)
{
	struct net n;
	int32_t nparts = 1 + (int32_t)(seed % PARTS_MAX);
	net_init(&n, nparts, seed);
	n.dup_pct = (int)(seed % 5) * 8;
	n.reload_pct = (int)(seed % 3) * 5;
	int nskus = 2 + (int)(rnd(&n) % (SKUS_MAX - 1));
	char names[SKUS_MAX][16];
	for (int i = 0; i < nskus; i++) {
		snprintf(names[i], 16, "K%d", i);
		open_sku(&n, names[i], 1 + (int64_t)rnd_below(&n, 6), 1 + (int64_t)rnd_below(&n, 3),
			 1000 + 1000 * (int64_t)rnd_below(&n, 3));
	}
	uint32_t ncarts = 5 + rnd_below(&n, 40);
	uint32_t sent = 0;
	while (sent < ncarts || rnd_below(&n, 8)) {
		uint32_t what = rnd_below(&n, 10);
		if (what < 4 && sent < ncarts) {
			const char *skus[4];
			int64_t qty[4];
			uint32_t nl = 1 + rnd_below(&n, 4), got = 0;
			while (got < nl) {
				const char *s = names[rnd_below(&n, (uint32_t)nskus)];
				bool dup = false;
				for (uint32_t j = 0; j < got; j++)
					dup |= skus[j] == s;
				if (dup)
					break;
				skus[got] = s;
				qty[got++] = 1 + (int64_t)rnd_below(&n, 2);
			}
			char buyer[16];
			snprintf(buyer, sizeof buyer, "b\"\\%u", rnd_below(&n, 4));
			send_cart(&n, sent++, buyer, skus, qty, got);
		} else if (what < 6 && sent) {
			send_followup(&n, rnd_below(&n, sent), rnd_below(&n, 3) != 0);
		} else if (what == 6) {
			n.now += rnd_below(&n, 1500);
			for (int32_t p = 0; p < nparts; p++) {
				struct item it = {.type = IT_TICK};
				append(&n, p, &it);
			}
		}
		for (uint32_t s = rnd_below(&n, 6); s > 0; s--)
			net_step(&n);
	}
	net_run(&n);
	CHECK_CTX("seed %" PRIu64, seed);
	check_settled(&n, ncarts);
	/* Past every expiry: nothing held is left but what was confirmed. */
	n.now += 100000;
	net_tick_all(&n);
	CHECK_CTX("seed %" PRIu64 " after the expiries", seed);
	CHECK_INT(check_settled(&n, ncarts), 0);
	for (uint32_t k = 0; k < ncarts; k++) {
		char id[FS_UUID_LEN + 1];
		make_id(id, k);
		const struct fs_cart *cart = fs_carts_find(&n.parts[coord_of(&n, id)].cs, id);
		CHECK(cart && cart->state != FS_CART_RESERVING && cart->state != FS_CART_LATE);
	}
	net_free(&n);
}

int main(int argc, char **argv)
{
	uint64_t seeds = argc > 1 ? strtoull(argv[1], NULL, 10) : 400;
	test_local();
	test_two_partitions();
	test_cancel_in_round();
	test_wait();
	test_race();
	for (uint64_t s = 1; s <= seeds; s++)
		sweep_one(s);
	return check_done("test_cart");
}
