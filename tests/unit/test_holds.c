/* test_holds.c: the hold lifecycle of the decision core (src/core/core.c, DESIGN.md sections 1, 2
 * and 5): every transition of a hold (held -> confirmed / cancelled / expired, expired ->
 * confirmed_late or refund_required) as a synthetic timeline with explicit offsets and
 * timestamps; expiry on the partition's log clock (exactly at expires_at, before the record
 * that moved the clock, never on an older timestamp, in (expires_at, offset) order); ticks;
 * the expiry heap under removals (seeded random, 2,000 holds); commit of the dirty and
 * expired lists; reload from the store's rows and determinism across it.
 *
 * After every step the whole core is checked against its own holds: SKU counters
 * (available + held + sold == supply, held and sold are the sums of the held and confirmed
 * holds), buyer units (the sum of their held and confirmed holds), the heap (exactly the held
 * holds, heap order, positions), fs_core_next_expiry and the dirty and expired lists. */
#include "check.h"
#include "core/core.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

/* ---- records ---------------------------------------------------------------------------- */

/* Intent ids are numbered: id n is 00000000-0000-4000-8000-<n on 12 digits>; 0 is none. */
static void intent_of(int id, char out[FS_UUID_LEN + 1])
{
	snprintf(out, FS_UUID_LEN + 1, "00000000-0000-4000-8000-%012d", id);
}

static const char *intent_str(int id)
{
	static char bufs[8][FS_UUID_LEN + 1];
	static int next;
	char *b = bufs[next++ % 8];
	intent_of(id, b);
	return b;
}

static struct fs_record rec_base(enum fs_kind kind, const char *sku, int64_t off, int64_t ts)
{
	struct fs_record r = {0};
	r.kind = kind;
	r.partition = 0;
	r.offset = off;
	r.ts_ms = ts;
	if (sku)
		snprintf(r.sku, sizeof r.sku, "%s", sku);
	return r;
}

static struct fs_record rec_buy(const char *sku, const char *buyer, int64_t qty, int id,
				int64_t off, int64_t ts)
{
	struct fs_record r = rec_base(FS_KIND_BUY, sku, off, ts);
	r.has_intent = true;
	intent_of(id, r.intent_id);
	snprintf(r.buyer_id, sizeof r.buyer_id, "%s", buyer);
	r.qty = qty;
	r.body_hash = id + 1;
	return r;
}

static struct fs_record rec_followup(enum fs_kind kind, const char *sku, int id, int64_t off,
				     int64_t ts)
{
	struct fs_record r = rec_base(kind, sku, off, ts);
	r.has_intent = true;
	intent_of(id, r.intent_id);
	r.body_hash = 1000000 + id;
	return r;
}

struct open_params {
	int64_t limit, max_qty, hold_ms, opens, closes;
};

static struct fs_record rec_open(const char *sku, int64_t stock, struct open_params p, int64_t off,
				 int64_t ts)
{
	struct fs_record r = rec_base(FS_KIND_OPEN, sku, off, ts);
	r.qty = stock;
	r.per_buyer_limit = p.limit ? p.limit : 1;
	r.max_qty = p.max_qty ? p.max_qty : r.per_buyer_limit;
	r.hold_ms = p.hold_ms ? p.hold_ms : 1000;
	r.opens_at_ms = p.opens;
	r.closes_at_ms = p.closes;
	return r;
}

/* ---- state checks ----------------------------------------------------------------------- */

static int64_t buyer_units(const struct fs_core *c, const char *sku, const char *buyer)
{
	for (uint32_t i = 0; i < c->buyers_len; i++) {
		const struct fs_buyer *b = &c->buyers[i];
		if (strcmp(b->buyer_id, buyer) == 0 && strcmp(c->skus[b->sku_index].sku, sku) == 0)
			return b->units;
	}
	return 0; /* never seen: no units */
}

static bool heap_ordered(const struct fs_core *c, uint32_t a, uint32_t b)
{
	const struct fs_hold *x = &c->holds[a], *y = &c->holds[b];
	return x->expires_at_ms < y->expires_at_ms ||
	       (x->expires_at_ms == y->expires_at_ms && x->offset < y->offset);
}

/* The core against its own holds. Returns false on the first kind of failure. */
static bool check_invariants(const struct fs_core *c)
{
	bool ok = true;
	int64_t *held = calloc(c->skus_len + 1, sizeof *held);
	int64_t *sold = calloc(c->skus_len + 1, sizeof *sold);
	int64_t *units = calloc(c->buyers_len + 1, sizeof *units);
	if (!CHECK(held && sold && units)) {
		free(held);
		free(sold);
		free(units);
		return false;
	}
	uint32_t live = 0, dirty = 0;
	int64_t min_expiry = -1;
	for (uint32_t i = 0; i < c->holds_len; i++) {
		const struct fs_hold *h = &c->holds[i];
		ok = CHECK(h->sku_index < c->skus_len && h->buyer_index < c->buyers_len) && ok;
		if (!ok)
			break;
		ok = CHECK_INT(c->buyers[h->buyer_index].sku_index, h->sku_index) && ok;
		dirty += h->dirty;
		switch (h->status) {
		case FS_HOLD_HELD:
			live++;
			held[h->sku_index] += h->qty;
			units[h->buyer_index] += h->qty;
			ok = CHECK(h->heap_pos < c->heap_len && c->heap[h->heap_pos] == i) && ok;
			ok = CHECK(!h->late) && ok;
			ok = CHECK_INT(h->ended_at_ms, 0) && ok;
			ok = CHECK_INT(h->ended_offset, -1) && ok;
			if (min_expiry < 0 || h->expires_at_ms < min_expiry)
				min_expiry = h->expires_at_ms;
			break;
		case FS_HOLD_CONFIRMED:
			sold[h->sku_index] += h->qty;
			units[h->buyer_index] += h->qty;
			/* fallthrough */
		case FS_HOLD_CANCELLED:
		case FS_HOLD_EXPIRED:
			ok = CHECK_INT(h->heap_pos, FS_MAP_NONE) && ok;
			ok = CHECK(h->ended_offset >= 0) && ok;
			ok = CHECK(h->late == false || h->status == FS_HOLD_CONFIRMED) && ok;
			if (h->status == FS_HOLD_EXPIRED)
				ok = CHECK(h->ended_at_ms >= h->expires_at_ms) && ok;
			break;
		default:
			ok = CHECK(!"hold status out of range") && ok;
		}
	}
	for (uint32_t i = 0; ok && i < c->skus_len; i++) {
		const struct fs_sku *s = &c->skus[i];
		ok = CHECK_INT(s->available + s->held + s->sold, s->supply) && ok;
		ok = CHECK(s->available >= 0) && ok;
		ok = CHECK_INT(s->held, held[i]) && ok;
		ok = CHECK_INT(s->sold, sold[i]) && ok;
	}
	for (uint32_t i = 0; ok && i < c->buyers_len; i++) {
		const struct fs_buyer *b = &c->buyers[i];
		ok = CHECK_INT(b->units, units[i]) && ok;
		ok = CHECK(b->units <= c->skus[b->sku_index].per_buyer_limit) && ok;
	}
	/* The heap holds exactly the live holds, in heap order. */
	ok = CHECK_INT(c->heap_len, live) && ok;
	for (uint32_t p = 1; ok && p < c->heap_len; p++)
		ok = CHECK(!heap_ordered(c, c->heap[p], c->heap[(p - 1) / 2])) && ok;
	ok = CHECK_INT(fs_core_next_expiry(c), min_expiry) && ok;
	/* Dirty list: every dirty hold once; expired list: distinct holds that left `held` by
	 * expiry (a late confirm in the same batch may have confirmed one since). */
	ok = CHECK_INT(c->dirty_holds_len, dirty) && ok;
	for (uint32_t k = 0; ok && k < c->dirty_holds_len; k++)
		ok = CHECK(c->dirty_holds[k] < c->holds_len && c->holds[c->dirty_holds[k]].dirty) &&
		     ok;
	for (uint32_t k = 0; ok && k < c->expired_len; k++) {
		const struct fs_hold *h = &c->holds[c->expired[k]];
		ok = CHECK(h->status == FS_HOLD_EXPIRED ||
			   (h->status == FS_HOLD_CONFIRMED && h->late)) &&
		     ok;
		ok = CHECK(h->dirty) && ok;
		for (uint32_t j = 0; j < k; j++)
			ok = CHECK(c->expired[j] != c->expired[k]) && ok;
	}
	free(held);
	free(sold);
	free(units);
	return ok;
}

static void check_committed(const struct fs_core *c)
{
	CHECK_INT(c->dirty_holds_len, 0);
	CHECK_INT(c->expired_len, 0);
	CHECK_INT(c->dirty_skus_len, 0);
	CHECK_INT(c->dirty_buyers_len, 0);
	uint32_t dirty = 0;
	for (uint32_t i = 0; i < c->holds_len; i++)
		dirty += c->holds[i].dirty;
	CHECK_INT(dirty, 0);
}

/* ---- table-driven timelines ------------------------------------------------------------- */

enum op { OPEN = 1, BUY, CONFIRM, CANCEL, TICK, RESTOCK, CLOSE, INVALID, ADVANCE, COMMIT };

struct hold_want {
	int id; /* 0: unused slot */
	int status;
	bool late;
	int64_t ended_at, ended_off;
};

struct units_want {
	const char *buyer; /* NULL: unused slot */
	int64_t units;
};

struct step {
	enum op op;
	const char *sku; /* the record's SKU; for TICK, ADVANCE and COMMIT only the checked one */
	const char *buyer;
	int64_t qty; /* buy: units; open: stock; restock: add */
	int64_t off, ts;
	int id; /* buy, confirm, cancel: the intent */
	struct open_params open;
	enum fs_outcome out;
	const char *reason;
	int64_t expires; /* held: the hold's expiry */
	/* checked when set */
	bool state;
	int64_t avail, held, sold, supply;
	struct units_want units[3];
	struct hold_want holds[4];
	bool has_nx;
	int64_t nx;
	int64_t clock;
	/* always checked: the expired list since the last commit, by intent, 0-terminated */
	int expired[8];
};

#define S(a, h, s, n) .state = true, .avail = (a), .held = (h), .sold = (s), .supply = (n)
#define UNITS(...) .units = {__VA_ARGS__}
#define HOLDS(...) .holds = {__VA_ARGS__}
#define HH(id)                                                                                     \
	{                                                                                          \
		(id), FS_HOLD_HELD, false, 0, -1                                                   \
	}
#define HC(id, at, off)                                                                            \
	{                                                                                          \
		(id), FS_HOLD_CONFIRMED, false, (at), (off)                                        \
	}
#define HL(id, at, off)                                                                            \
	{                                                                                          \
		(id), FS_HOLD_CONFIRMED, true, (at), (off)                                         \
	}
#define HX(id, at, off)                                                                            \
	{                                                                                          \
		(id), FS_HOLD_CANCELLED, false, (at), (off)                                        \
	}
#define HE(id, at, off)                                                                            \
	{                                                                                          \
		(id), FS_HOLD_EXPIRED, false, (at), (off)                                          \
	}
#define NX(v) .has_nx = true, .nx = (v)
#define EXPD(...) .expired = {__VA_ARGS__}

struct timeline {
	const char *name;
	struct step steps[24];
};

#define L1                                                                                         \
	{                                                                                          \
		.limit = 1, .hold_ms = 1000                                                        \
	}

static const struct timeline timelines[] = {
	{"confirm of a live hold: held -> sold, it leaves the heap",
	 {
		 {OPEN, "A", NULL, 2, 0, 1000, .open = {.limit = 2, .hold_ms = 1000},
		  .out = FS_OUT_APPLIED, S(2, 0, 0, 2), NX(-1)},
		 {BUY, "A", "b1", 1, 1, 1100, 1, .out = FS_OUT_HELD, .expires = 2100, S(1, 1, 0, 2),
		  UNITS({"b1", 1}), HOLDS(HH(1)), NX(2100)},
		 {BUY, "A", "b2", 1, 2, 1200, 2, .out = FS_OUT_HELD, .expires = 2200, S(0, 2, 0, 2),
		  UNITS({"b2", 1}), HOLDS(HH(2)), NX(2100)},
		 {CONFIRM, "A", NULL, 0, 3, 1500, 1, .out = FS_OUT_CONFIRMED, S(0, 1, 1, 2),
		  UNITS({"b1", 1}), HOLDS(HC(1, 1500, 3), HH(2)), NX(2200)},
		 /* id 1's old expiry passes: nothing happens to it */
		 {TICK, "A", NULL, 0, 4, 2100, .out = FS_OUT_APPLIED, S(0, 1, 1, 2),
		  HOLDS(HC(1, 1500, 3), HH(2)), NX(2200), .clock = 2100},
		 {TICK, "A", NULL, 0, 5, 2200, .out = FS_OUT_APPLIED, S(1, 0, 1, 2),
		  UNITS({"b1", 1}, {"b2", 0}), HOLDS(HC(1, 1500, 3), HE(2, 2200, 5)), NX(-1),
		  EXPD(2)},
	 }},
	{"cancel of a live hold: units back to stock and to the buyer; never expires",
	 {
		 {OPEN, "A", NULL, 1, 0, 1000, .open = L1, .out = FS_OUT_APPLIED, S(1, 0, 0, 1)},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000, S(0, 1, 0, 1),
		  UNITS({"b1", 1}), NX(2000)},
		 {BUY, "A", "b2", 1, 2, 1001, 2, .out = FS_OUT_SOLD_OUT, S(0, 1, 0, 1),
		  UNITS({"b2", 0})},
		 {CANCEL, "A", NULL, 0, 3, 1200, 1, .out = FS_OUT_CANCELLED, S(1, 0, 0, 1),
		  UNITS({"b1", 0}), HOLDS(HX(1, 1200, 3)), NX(-1)},
		 {BUY, "A", "b2", 1, 4, 1300, 3, .out = FS_OUT_HELD, .expires = 2300, S(0, 1, 0, 1),
		  UNITS({"b2", 1}), NX(2300)},
		 {TICK, "A", NULL, 0, 5, 2000, .out = FS_OUT_APPLIED, S(0, 1, 0, 1),
		  HOLDS(HX(1, 1200, 3), HH(3)), NX(2300)},
		 {BUY, "A", "b1", 1, 6, 2100, 4, .out = FS_OUT_SOLD_OUT, UNITS({"b1", 0})},
		 {TICK, "A", NULL, 0, 7, 2300, .out = FS_OUT_APPLIED, S(1, 0, 0, 1),
		  UNITS({"b2", 0}), HOLDS(HX(1, 1200, 3), HE(3, 2300, 7)), NX(-1), EXPD(3)},
		 {BUY, "A", "b1", 1, 8, 2400, 5, .out = FS_OUT_HELD, .expires = 3400, S(0, 1, 0, 1),
		  UNITS({"b1", 1}), NX(3400), EXPD(3)},
	 }},
	{"expiry exactly at expires_at, then a late confirm takes a free unit",
	 {
		 {OPEN, "A", NULL, 2, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000, S(1, 1, 0, 2),
		  NX(2000)},
		 /* one ms before: still held */
		 {TICK, "A", NULL, 0, 2, 1999, .out = FS_OUT_APPLIED, S(1, 1, 0, 2), HOLDS(HH(1)),
		  NX(2000), .clock = 1999},
		 /* a repeat (batch.c) advances the clock without a decision */
		 {ADVANCE, "A", NULL, 0, 3, 1999, S(1, 1, 0, 2), HOLDS(HH(1)), .clock = 1999},
		 {TICK, "A", NULL, 0, 4, 2000, .out = FS_OUT_APPLIED, S(2, 0, 0, 2),
		  UNITS({"b1", 0}), HOLDS(HE(1, 2000, 4)), NX(-1), .clock = 2000, EXPD(1)},
		 {COMMIT, "A", S(2, 0, 0, 2), HOLDS(HE(1, 2000, 4))},
		 {CONFIRM, "A", NULL, 0, 5, 2500, 1, .out = FS_OUT_CONFIRMED_LATE, S(1, 0, 1, 2),
		  UNITS({"b1", 1}), HOLDS(HL(1, 2500, 5)), NX(-1)},
		 {CONFIRM, "A", NULL, 0, 6, 2600, 1, .out = FS_OUT_CONFIRMED_LATE,
		  .reason = "already_confirmed", S(1, 0, 1, 2), UNITS({"b1", 1}),
		  HOLDS(HL(1, 2500, 5))},
		 {CANCEL, "A", NULL, 0, 7, 2700, 1, .out = FS_OUT_REJECTED,
		  .reason = "already_confirmed", S(1, 0, 1, 2), UNITS({"b1", 1}),
		  HOLDS(HL(1, 2500, 5))},
		 {BUY, "A", "b1", 1, 8, 2800, 2, .out = FS_OUT_LIMIT_EXCEEDED, S(1, 0, 1, 2)},
		 {TICK, "A", NULL, 0, 9, 99999, .out = FS_OUT_APPLIED, S(1, 0, 1, 2),
		  HOLDS(HL(1, 2500, 5)), NX(-1)},
	 }},
	{"expired hold whose unit was taken: refund_required(sold_out); cancel: already_expired",
	 {
		 {OPEN, "A", NULL, 1, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b2", 1, 2, 2000, 2, .out = FS_OUT_HELD, .expires = 3000, S(0, 1, 0, 1),
		  UNITS({"b1", 0}, {"b2", 1}), HOLDS(HE(1, 2000, 2), HH(2)), NX(3000), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 3, 2100, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "sold_out", S(0, 1, 0, 1), UNITS({"b1", 0}), HOLDS(HE(1, 2000, 2)),
		  EXPD(1)},
		 {CANCEL, "A", NULL, 0, 4, 2200, 1, .out = FS_OUT_EXPIRED,
		  .reason = "already_expired", S(0, 1, 0, 1), UNITS({"b1", 0}),
		  HOLDS(HE(1, 2000, 2)), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 5, 2300, 2, .out = FS_OUT_CONFIRMED, S(0, 0, 1, 1),
		  UNITS({"b2", 1}), HOLDS(HE(1, 2000, 2), HC(2, 2300, 5)), NX(-1), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 6, 2400, 2, .out = FS_OUT_CONFIRMED,
		  .reason = "already_confirmed", S(0, 0, 1, 1), HOLDS(HC(2, 2300, 5)), EXPD(1)},
		 {CANCEL, "A", NULL, 0, 7, 2500, 2, .out = FS_OUT_REJECTED,
		  .reason = "already_confirmed", S(0, 0, 1, 1), HOLDS(HC(2, 2300, 5)), EXPD(1)},
		 {TICK, "A", NULL, 0, 8, 3000, .out = FS_OUT_APPLIED, S(0, 0, 1, 1), EXPD(1)},
		 {RESTOCK, "A", NULL, 1, 9, 3100, .out = FS_OUT_APPLIED, S(1, 0, 1, 2), EXPD(1)},
		 /* now there is a unit: the same late confirm succeeds; the hold that expired in
		  * this (uncommitted) batch stays on the expired list, confirmed late since */
		 {CONFIRM, "A", NULL, 0, 10, 3200, 1, .out = FS_OUT_CONFIRMED_LATE, S(0, 0, 2, 2),
		  UNITS({"b1", 1}, {"b2", 1}), HOLDS(HL(1, 3200, 10), HC(2, 2300, 5)), EXPD(1)},
	 }},
	{"late confirm respects the per-buyer limit (the buyer bought another unit meanwhile)",
	 {
		 {OPEN, "A", NULL, 5, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000,
		  S(4, 1, 0, 5)},
		 {BUY, "A", "b1", 1, 2, 1500, 2, .out = FS_OUT_LIMIT_EXCEEDED, UNITS({"b1", 1})},
		 {BUY, "A", "b1", 1, 3, 2000, 3, .out = FS_OUT_HELD, .expires = 3000, S(4, 1, 0, 5),
		  UNITS({"b1", 1}), HOLDS(HE(1, 2000, 3), HH(3)), NX(3000), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 4, 2100, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "limit_exceeded", S(4, 1, 0, 5), UNITS({"b1", 1}),
		  HOLDS(HE(1, 2000, 3), HH(3)), EXPD(1)},
		 {CANCEL, "A", NULL, 0, 5, 2200, 3, .out = FS_OUT_CANCELLED, S(5, 0, 0, 5),
		  UNITS({"b1", 0}), HOLDS(HX(3, 2200, 5)), NX(-1), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 6, 2300, 1, .out = FS_OUT_CONFIRMED_LATE, S(4, 0, 1, 5),
		  UNITS({"b1", 1}), HOLDS(HL(1, 2300, 6), HX(3, 2200, 5)), EXPD(1)},
		 {BUY, "A", "b1", 1, 7, 2400, 4, .out = FS_OUT_LIMIT_EXCEEDED, S(4, 0, 1, 5),
		  EXPD(1)},
	 }},
	{"late confirm: the limit is inclusive and counts the hold's qty",
	 {
		 {OPEN, "A", NULL, 10, 0, 1000, .open = {.limit = 3, .hold_ms = 1000},
		  .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 2, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000,
		  S(8, 2, 0, 10), UNITS({"b1", 2})},
		 {TICK, "A", NULL, 0, 2, 2000, .out = FS_OUT_APPLIED, S(10, 0, 0, 10),
		  UNITS({"b1", 0}), HOLDS(HE(1, 2000, 2)), EXPD(1)},
		 {BUY, "A", "b1", 1, 3, 2100, 2, .out = FS_OUT_HELD, .expires = 3100,
		  S(9, 1, 0, 10), UNITS({"b1", 1}), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 4, 2200, 1, .out = FS_OUT_CONFIRMED_LATE, S(7, 1, 2, 10),
		  UNITS({"b1", 3}), HOLDS(HL(1, 2200, 4), HH(2)), EXPD(1)},
		 {BUY, "A", "b2", 2, 5, 2300, 3, .out = FS_OUT_HELD, .expires = 3300,
		  S(5, 3, 2, 10), EXPD(1)},
		 {TICK, "A", NULL, 0, 6, 3300, .out = FS_OUT_APPLIED, S(8, 0, 2, 10),
		  UNITS({"b1", 2}, {"b2", 0}), HOLDS(HE(2, 3300, 6), HE(3, 3300, 6)),
		  EXPD(1, 2, 3)},
		 {BUY, "A", "b1", 2, 7, 3400, 4, .out = FS_OUT_LIMIT_EXCEEDED, EXPD(1, 2, 3)},
		 {BUY, "A", "b1", 1, 8, 3500, 5, .out = FS_OUT_HELD, .expires = 4500,
		  UNITS({"b1", 3}), EXPD(1, 2, 3)},
		 {BUY, "A", "b2", 2, 9, 3600, 6, .out = FS_OUT_HELD, .expires = 4600,
		  S(5, 3, 2, 10), UNITS({"b2", 2}), EXPD(1, 2, 3)},
		 {TICK, "A", NULL, 0, 10, 4600, .out = FS_OUT_APPLIED, S(8, 0, 2, 10),
		  UNITS({"b1", 2}, {"b2", 0}), HOLDS(HE(5, 4600, 10), HE(6, 4600, 10)),
		  EXPD(1, 2, 3, 5, 6)},
		 {CONFIRM, "A", NULL, 0, 11, 4700, 3, .out = FS_OUT_CONFIRMED_LATE, S(6, 0, 4, 10),
		  UNITS({"b2", 2}), HOLDS(HL(3, 4700, 11)), EXPD(1, 2, 3, 5, 6)},
		 {CONFIRM, "A", NULL, 0, 12, 4800, 6, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "limit_exceeded", S(6, 0, 4, 10), UNITS({"b2", 2}),
		  HOLDS(HE(6, 4600, 10)), EXPD(1, 2, 3, 5, 6)},
	 }},
	{"late confirm after close: refund_required(closed); a live hold still confirms",
	 {
		 {OPEN, "A", NULL, 2, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b2", 1, 2, 1001, 2, .out = FS_OUT_HELD, .expires = 2001,
		  S(0, 2, 0, 2)},
		 {CLOSE, "A", NULL, 0, 3, 1500, .out = FS_OUT_APPLIED, S(0, 2, 0, 2), NX(2000)},
		 {CONFIRM, "A", NULL, 0, 4, 1600, 1, .out = FS_OUT_CONFIRMED, S(0, 1, 1, 2),
		  HOLDS(HC(1, 1600, 4)), NX(2001)},
		 {TICK, "A", NULL, 0, 5, 2001, .out = FS_OUT_APPLIED, S(1, 0, 1, 2),
		  UNITS({"b2", 0}), HOLDS(HE(2, 2001, 5)), NX(-1), EXPD(2)},
		 {CONFIRM, "A", NULL, 0, 6, 2100, 2, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "closed", S(1, 0, 1, 2), UNITS({"b2", 0}), HOLDS(HE(2, 2001, 5)),
		  EXPD(2)},
		 {BUY, "A", "b3", 1, 7, 2200, 3, .out = FS_OUT_CLOSED, S(1, 0, 1, 2), EXPD(2)},
	 }},
	{"late confirm after the window closed on the log clock",
	 {
		 {OPEN, "A", NULL, 3, 0, 1000,
		  .open = {.limit = 1, .hold_ms = 1000, .closes = 2500}, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b2", 1, 2, 1001, 2, .out = FS_OUT_HELD, .expires = 2001,
		  S(1, 2, 0, 3)},
		 {TICK, "A", NULL, 0, 3, 2000, .out = FS_OUT_APPLIED, S(2, 1, 0, 3),
		  HOLDS(HE(1, 2000, 3), HH(2)), NX(2001), EXPD(1)},
		 /* the confirm's own record expires id 2 first; id 1 is confirmed late in time */
		 {CONFIRM, "A", NULL, 0, 4, 2499, 1, .out = FS_OUT_CONFIRMED_LATE, S(2, 0, 1, 3),
		  UNITS({"b1", 1}, {"b2", 0}), HOLDS(HL(1, 2499, 4), HE(2, 2499, 4)), NX(-1),
		  EXPD(1, 2)},
		 {CONFIRM, "A", NULL, 0, 5, 2500, 2, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "closed", S(2, 0, 1, 3), UNITS({"b2", 0}), HOLDS(HE(2, 2499, 4)),
		  EXPD(1, 2)},
	 }},
	/* When several conditions fail, the current order is: closed, then sold_out, then
	 * limit_exceeded (a buy checks the limit before stock; a late confirm does not). */
	{"late confirm: reason precedence",
	 {
		 {OPEN, "A", NULL, 1, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b1", 1, 2, 2000, 2, .out = FS_OUT_HELD, .expires = 3000, S(0, 1, 0, 1),
		  UNITS({"b1", 1}), HOLDS(HE(1, 2000, 2), HH(2)), EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 3, 2100, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "sold_out", S(0, 1, 0, 1), EXPD(1)},
		 {CLOSE, "A", NULL, 0, 4, 2200, .out = FS_OUT_APPLIED, EXPD(1)},
		 {CONFIRM, "A", NULL, 0, 5, 2300, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "closed", S(0, 1, 0, 1), HOLDS(HE(1, 2000, 2), HH(2)), EXPD(1)},
	 }},
	{"confirm and cancel without a hold, or naming another SKU",
	 {
		 {OPEN, "A", NULL, 1, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {OPEN, "B", NULL, 1, 1, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 2, 1000, 1, .out = FS_OUT_HELD, .expires = 2000,
		  S(0, 1, 0, 1)},
		 {BUY, "A", "b2", 1, 3, 1001, 2, .out = FS_OUT_SOLD_OUT},
		 /* a buy that did not win has no hold */
		 {CONFIRM, "A", NULL, 0, 4, 1100, 2, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "no_hold", S(0, 1, 0, 1), UNITS({"b2", 0})},
		 {CANCEL, "A", NULL, 0, 5, 1101, 2, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "no_hold", S(0, 1, 0, 1)},
		 {CONFIRM, "A", NULL, 0, 6, 1102, 99, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "no_hold", S(0, 1, 0, 1)},
		 {CONFIRM, "Z", NULL, 0, 7, 1103, 98, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "no_hold"},
		 {CONFIRM, "B", NULL, 0, 8, 1200, 1, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "sku_mismatch", S(1, 0, 0, 1), HOLDS(HH(1)), NX(2000)},
		 {CANCEL, "B", NULL, 0, 9, 1201, 1, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "sku_mismatch", S(1, 0, 0, 1), HOLDS(HH(1)), NX(2000)},
		 {CANCEL, "Z", NULL, 0, 10, 1202, 1, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "sku_mismatch", HOLDS(HH(1))},
		 /* the hold was untouched */
		 {CONFIRM, "A", NULL, 0, 11, 1300, 1, .out = FS_OUT_CONFIRMED, S(0, 0, 1, 1),
		  UNITS({"b1", 1}), HOLDS(HC(1, 1300, 11)), NX(-1)},
		 {CONFIRM, "B", NULL, 0, 12, 1400, 1, .out = FS_OUT_UNKNOWN_INTENT,
		  .reason = "sku_mismatch", S(1, 0, 0, 1), HOLDS(HC(1, 1300, 11))},
	 }},
	{"cancelled hold: cancel again, confirm -> refund_required(cancelled)",
	 {
		 {OPEN, "A", NULL, 2, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000,
		  S(1, 1, 0, 2)},
		 {CANCEL, "A", NULL, 0, 2, 1100, 1, .out = FS_OUT_CANCELLED, S(2, 0, 0, 2),
		  UNITS({"b1", 0}), HOLDS(HX(1, 1100, 2)), NX(-1)},
		 {CANCEL, "A", NULL, 0, 3, 1200, 1, .out = FS_OUT_CANCELLED,
		  .reason = "already_cancelled", S(2, 0, 0, 2), UNITS({"b1", 0}),
		  HOLDS(HX(1, 1100, 2))},
		 {CONFIRM, "A", NULL, 0, 4, 1300, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "cancelled", S(2, 0, 0, 2), UNITS({"b1", 0}), HOLDS(HX(1, 1100, 2))},
		 {TICK, "A", NULL, 0, 5, 5000, .out = FS_OUT_APPLIED, S(2, 0, 0, 2),
		  HOLDS(HX(1, 1100, 2))},
		 {CONFIRM, "A", NULL, 0, 6, 5100, 1, .out = FS_OUT_REFUND_REQUIRED,
		  .reason = "cancelled", S(2, 0, 0, 2), HOLDS(HX(1, 1100, 2))},
	 }},
	{"expiry comes before the record that moved the clock; ended_at is the clock",
	 {
		 {OPEN, "A", NULL, 1, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b2", 1, 2, 1999, 2, .out = FS_OUT_SOLD_OUT, S(0, 1, 0, 1),
		  .clock = 1999},
		 {BUY, "A", "b2", 1, 3, 2000, 3, .out = FS_OUT_HELD, .expires = 3000, S(0, 1, 0, 1),
		  UNITS({"b1", 0}, {"b2", 1}), HOLDS(HE(1, 2000, 3), HH(3)), NX(3000), EXPD(1)},
		 /* the clock jumps past id 3's expiry: it ends at the clock (3500), not at 3000,
		  * and b1 (whose units the expiry of id 1 freed) takes the unit */
		 {BUY, "A", "b1", 1, 4, 3500, 4, .out = FS_OUT_HELD, .expires = 4500, S(0, 1, 0, 1),
		  UNITS({"b1", 1}, {"b2", 0}), HOLDS(HE(3, 3500, 4), HH(4)), NX(4500), EXPD(1, 3)},
		 {BUY, "A", "b3", 1, 5, 100, 5, .out = FS_OUT_SOLD_OUT, .clock = 3500, EXPD(1, 3)},
		 {CONFIRM, "A", NULL, 0, 6, 4499, 4, .out = FS_OUT_CONFIRMED, S(0, 0, 1, 1),
		  HOLDS(HC(4, 4499, 6)), NX(-1), EXPD(1, 3)},
	 }},
	{"an older timestamp never moves the clock back and never expires anything",
	 {
		 {OPEN, "A", NULL, 3, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1, 5000, 1, .out = FS_OUT_HELD, .expires = 6000,
		  .clock = 5000},
		 {TICK, "A", NULL, 0, 2, 5999, .out = FS_OUT_APPLIED, NX(6000), .clock = 5999},
		 /* expires_at is clock + hold, whatever the record's own timestamp */
		 {BUY, "A", "b2", 1, 3, 100, 2, .out = FS_OUT_HELD, .expires = 6999, S(1, 2, 0, 3),
		  NX(6000), .clock = 5999},
		 {TICK, "A", NULL, 0, 4, 0, .out = FS_OUT_APPLIED, S(1, 2, 0, 3), NX(6000),
		  .clock = 5999},
		 {ADVANCE, "A", NULL, 0, 5, 4000, S(1, 2, 0, 3), NX(6000), .clock = 5999},
		 {INVALID, "A", NULL, 0, 6, 10, .out = FS_OUT_REJECTED, .reason = "bad_json",
		  S(1, 2, 0, 3), HOLDS(HH(1), HH(2)), NX(6000), .clock = 5999},
		 {TICK, "A", NULL, 0, 7, 6000, .out = FS_OUT_APPLIED, S(2, 1, 0, 3),
		  HOLDS(HE(1, 6000, 7), HH(2)), NX(6999), .clock = 6000, EXPD(1)},
		 {BUY, "A", "b3", 1, 8, 1, 3, .out = FS_OUT_HELD, .expires = 7000, S(1, 2, 0, 3),
		  NX(6999), .clock = 6000, EXPD(1)},
		 {TICK, "A", NULL, 0, 9, 6998, .out = FS_OUT_APPLIED, S(1, 2, 0, 3), NX(6999),
		  EXPD(1)},
		 {TICK, "A", NULL, 0, 10, 7000, .out = FS_OUT_APPLIED, S(3, 0, 0, 3),
		  HOLDS(HE(1, 6000, 7), HE(2, 7000, 10), HE(3, 7000, 10)), NX(-1), EXPD(1, 2, 3)},
		 {TICK, "A", NULL, 0, 11, 6500, .out = FS_OUT_APPLIED, S(3, 0, 0, 3), .clock = 7000,
		  EXPD(1, 2, 3)},
	 }},
	{"equal expires_at expire in offset order",
	 {
		 {OPEN, "A", NULL, 5, 0, 1000, .open = L1, .out = FS_OUT_APPLIED},
		 {OPEN, "B", NULL, 5, 1, 1000, .open = {.limit = 1, .hold_ms = 500},
		  .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 2, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b2", 1, 3, 1000, 2, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "B", "b3", 1, 4, 1500, 3, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "B", "b4", 1, 5, 1500, 4, .out = FS_OUT_HELD, .expires = 2000},
		 {BUY, "A", "b5", 1, 6, 1500, 5, .out = FS_OUT_HELD, .expires = 2500, NX(2000)},
		 {CANCEL, "A", NULL, 0, 7, 1600, 2, .out = FS_OUT_CANCELLED, S(3, 2, 0, 5),
		  NX(2000)},
		 {BUY, "B", "b6", 1, 8, 1600, 6, .out = FS_OUT_HELD, .expires = 2100,
		  S(2, 3, 0, 5)},
		 {TICK, "A", NULL, 0, 9, 1999, .out = FS_OUT_APPLIED, NX(2000)},
		 {TICK, "B", NULL, 0, 10, 2000, .out = FS_OUT_APPLIED, S(4, 1, 0, 5),
		  HOLDS(HE(1, 2000, 10), HX(2, 1600, 7), HE(3, 2000, 10), HE(4, 2000, 10)),
		  NX(2100), EXPD(1, 3, 4)},
		 {TICK, "A", NULL, 0, 11, 3000, .out = FS_OUT_APPLIED, S(5, 0, 0, 5),
		  HOLDS(HE(5, 3000, 11), HE(6, 3000, 11)), NX(-1), EXPD(1, 3, 4, 6, 5)},
	 }},
	{"different hold_ms per SKU: expiry order, not creation order",
	 {
		 {OPEN, "A", NULL, 5, 0, 1000, .open = {.limit = 1, .hold_ms = 5000},
		  .out = FS_OUT_APPLIED},
		 {OPEN, "B", NULL, 5, 1, 1000, .open = {.limit = 1, .hold_ms = 1000},
		  .out = FS_OUT_APPLIED},
		 {OPEN, "C", NULL, 5, 2, 1000, .open = {.limit = 1, .hold_ms = 3000},
		  .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 3, 1000, 1, .out = FS_OUT_HELD, .expires = 6000, NX(6000)},
		 {BUY, "B", "b1", 1, 4, 1000, 2, .out = FS_OUT_HELD, .expires = 2000, NX(2000)},
		 {BUY, "C", "b1", 1, 5, 1001, 3, .out = FS_OUT_HELD, .expires = 4001, NX(2000)},
		 {BUY, "B", "b2", 1, 6, 1002, 4, .out = FS_OUT_HELD, .expires = 2002, NX(2000)},
		 {BUY, "A", "b2", 1, 7, 1003, 5, .out = FS_OUT_HELD, .expires = 6003, NX(2000)},
		 {BUY, "C", "b2", 1, 8, 1004, 6, .out = FS_OUT_HELD, .expires = 4004, NX(2000)},
		 {TICK, "B", NULL, 0, 9, 2001, .out = FS_OUT_APPLIED, S(4, 1, 0, 5),
		  UNITS({"b1", 0}, {"b2", 1}), HOLDS(HE(2, 2001, 9), HH(4)), NX(2002), EXPD(2)},
		 {TICK, "C", NULL, 0, 10, 5000, .out = FS_OUT_APPLIED, S(5, 0, 0, 5),
		  HOLDS(HE(3, 5000, 10), HE(4, 5000, 10), HE(6, 5000, 10), HH(1)), NX(6000),
		  EXPD(2, 4, 3, 6)},
		 {TICK, "A", NULL, 0, 11, 100000, .out = FS_OUT_APPLIED, S(5, 0, 0, 5),
		  HOLDS(HE(1, 100000, 11), HE(5, 100000, 11)), NX(-1), EXPD(2, 4, 3, 6, 1, 5)},
	 }},
};

static struct fs_record step_record(const struct step *s)
{
	switch (s->op) {
	case OPEN:
		return rec_open(s->sku, s->qty, s->open, s->off, s->ts);
	case BUY:
		return rec_buy(s->sku, s->buyer, s->qty, s->id, s->off, s->ts);
	case CONFIRM:
		return rec_followup(FS_KIND_CONFIRM, s->sku, s->id, s->off, s->ts);
	case CANCEL:
		return rec_followup(FS_KIND_CANCEL, s->sku, s->id, s->off, s->ts);
	case RESTOCK: {
		struct fs_record r = rec_base(FS_KIND_RESTOCK, s->sku, s->off, s->ts);
		r.qty = s->qty;
		return r;
	}
	case CLOSE:
		return rec_base(FS_KIND_CLOSE, s->sku, s->off, s->ts);
	case INVALID: {
		struct fs_record r = rec_base(FS_KIND_INVALID, s->sku, s->off, s->ts);
		r.reject_reason = s->reason;
		return r;
	}
	case TICK:
	default:
		return rec_base(FS_KIND_TICK, NULL, s->off, s->ts);
	}
}

/* Runs one step on a core and checks everything the step names, and the invariants. The
 * decision is returned for comparisons between cores. */
static void run_step(struct fs_core *c, const struct step *s, struct fs_decision *d)
{
	memset(d, 0, sizeof *d);
	int64_t clock_before = c->clock_ms;
	if (s->op == COMMIT) {
		fs_core_commit(c);
		check_committed(c);
	} else if (s->op == ADVANCE) {
		fs_core_advance(c, s->ts, s->off);
	} else {
		struct fs_record r = step_record(s);
		CHECK_INT(fs_core_decide(c, &r, d), 0);
		CHECK_STR(fs_outcome_name(d->outcome), fs_outcome_name(s->out));
		CHECK_STR(d->reason, s->reason);
		CHECK(!d->duplicate);
		CHECK(d->reserve == (d->outcome == FS_OUT_HELD));
		CHECK_INT(d->decided_at_ms, c->clock_ms);
		if (d->outcome == FS_OUT_HELD) {
			const struct fs_sku *k = fs_core_sku(c, s->sku);
			if (CHECK(k != NULL))
				CHECK_INT(d->expires_at_ms, c->clock_ms + k->hold_ms);
			const struct fs_hold *h = fs_core_hold(c, r.intent_id);
			if (CHECK(h != NULL)) {
				CHECK_INT(h->expires_at_ms, d->expires_at_ms);
				CHECK_INT(h->offset, s->off);
				CHECK_INT(h->qty, s->qty);
				CHECK(h->dirty);
			}
		} else {
			CHECK_INT(d->expires_at_ms, 0);
		}
		if (s->expires)
			CHECK_INT(d->expires_at_ms, s->expires);
		if (s->op == CONFIRM || s->op == CANCEL) {
			/* The answer carries the hold's qty; with no hold here, the record's (0).
			 */
			const struct fs_hold *h = fs_core_hold(c, r.intent_id);
			CHECK_INT(d->qty, h && d->outcome != FS_OUT_UNKNOWN_INTENT ? h->qty : 0);
		} else if (s->op == BUY) {
			CHECK_INT(d->qty, s->qty);
		}
	}
	/* The clock: max(clock, ts), never back. */
	int64_t want_clock =
		s->op == COMMIT ? clock_before : (s->ts > clock_before ? s->ts : clock_before);
	CHECK_INT(c->clock_ms, want_clock);
	if (s->clock)
		CHECK_INT(c->clock_ms, s->clock);
	if (s->state) {
		const struct fs_sku *k = fs_core_sku(c, s->sku);
		if (CHECK(k != NULL)) {
			CHECK_INT(k->available, s->avail);
			CHECK_INT(k->held, s->held);
			CHECK_INT(k->sold, s->sold);
			CHECK_INT(k->supply, s->supply);
		}
	}
	for (int i = 0; i < 3 && s->units[i].buyer; i++)
		CHECK_INT(buyer_units(c, s->sku, s->units[i].buyer), s->units[i].units);
	for (int i = 0; i < 4 && s->holds[i].id; i++) {
		const struct hold_want *w = &s->holds[i];
		const struct fs_hold *h = fs_core_hold(c, intent_str(w->id));
		if (!CHECK(h != NULL))
			continue;
		CHECK_STR(fs_hold_status_name(h->status), fs_hold_status_name(w->status));
		CHECK_INT(h->late, w->late);
		CHECK_INT(h->ended_at_ms, w->ended_at);
		CHECK_INT(h->ended_offset, w->ended_off);
	}
	if (s->has_nx)
		CHECK_INT(fs_core_next_expiry(c), s->nx);
	uint32_t n = 0;
	while (n < 8 && s->expired[n])
		n++;
	if (CHECK_INT(c->expired_len, n)) {
		for (uint32_t k = 0; k < n; k++)
			CHECK_STR(c->holds[c->expired[k]].intent_id, intent_str(s->expired[k]));
	}
	check_invariants(c);
}

static void test_timelines(void)
{
	for (size_t t = 0; t < sizeof timelines / sizeof timelines[0]; t++) {
		const struct timeline *tl = &timelines[t];
		struct fs_core c;
		fs_core_init(&c, 0);
		for (int i = 0; i < 24 && tl->steps[i].op; i++) {
			CHECK_CTX("timeline '%s' step %d", tl->name, i + 1);
			struct fs_decision d;
			run_step(&c, &tl->steps[i], &d);
		}
		/* And a commit at the end clears the lists. */
		CHECK_CTX("timeline '%s' final commit", tl->name);
		fs_core_commit(&c);
		check_committed(&c);
		check_invariants(&c);
		fs_core_free(&c);
	}
	CHECK_CTX("%s", "");
}

/* ---- ticks ------------------------------------------------------------------------------ */

static struct fs_decision decide(struct fs_core *c, struct fs_record r)
{
	struct fs_decision d;
	CHECK_INT(fs_core_decide(c, &r, &d), 0);
	return d;
}

/* A tick moves the clock and expires what is due; nothing else changes, byte for byte. */
static void test_ticks(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	CHECK_CTX("ticks");
	/* A tick on an empty partition. */
	struct fs_decision d = decide(&c, rec_base(FS_KIND_TICK, NULL, 0, 500));
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	CHECK(d.reason == NULL);
	CHECK_INT(d.qty, 0);
	CHECK_INT(d.expires_at_ms, 0);
	CHECK(!d.reserve);
	CHECK_INT(d.decided_at_ms, 500);
	CHECK_INT(c.clock_ms, 500);
	CHECK_INT(c.skus_len, 0);
	CHECK_INT(c.holds_len, 0);

	decide(&c, rec_open("A", 5, (struct open_params){.limit = 2, .hold_ms = 1000}, 1, 1000));
	decide(&c, rec_open("B", 5, (struct open_params){.limit = 2, .hold_ms = 2000}, 2, 1000));
	decide(&c, rec_buy("A", "b1", 1, 1, 3, 1000));
	decide(&c, rec_buy("A", "b2", 2, 2, 4, 1000));
	decide(&c, rec_buy("B", "b1", 1, 3, 5, 1000));
	decide(&c, rec_followup(FS_KIND_CONFIRM, "A", 2, 6, 1100));
	fs_core_commit(&c);

	struct fs_sku skus[2];
	struct fs_buyer buyers[3];
	struct fs_hold holds[3];
	if (!CHECK_INT(c.skus_len, 2) || !CHECK_INT(c.buyers_len, 3) || !CHECK_INT(c.holds_len, 3))
		return;
	memcpy(skus, c.skus, sizeof skus);
	memcpy(buyers, c.buyers, sizeof buyers);
	memcpy(holds, c.holds, sizeof holds);

	/* Ticks that expire nothing (one with a SKU set, one with an older timestamp). */
	struct fs_record r = rec_base(FS_KIND_TICK, "A", 7, 1999);
	d = decide(&c, r);
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	CHECK_INT(d.qty, 0);
	CHECK_INT(d.decided_at_ms, 1999);
	d = decide(&c, rec_base(FS_KIND_TICK, NULL, 8, 10));
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	CHECK_INT(d.decided_at_ms, 1999);
	CHECK_INT(c.clock_ms, 1999);
	CHECK(memcmp(skus, c.skus, sizeof skus) == 0);
	CHECK(memcmp(buyers, c.buyers, sizeof buyers) == 0);
	CHECK(memcmp(holds, c.holds, sizeof holds) == 0);
	check_committed(&c);
	CHECK_INT(fs_core_next_expiry(&c), 2000);

	/* A tick that expires id 1 (A, b1): exactly that hold, its SKU and its buyer change. */
	d = decide(&c, rec_base(FS_KIND_TICK, NULL, 9, 2500));
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	CHECK_INT(d.qty, 0);
	CHECK_INT(d.decided_at_ms, 2500);
	CHECK_INT(c.expired_len, 1);
	CHECK_INT(c.dirty_holds_len, 1);
	CHECK_INT(c.dirty_skus_len, 1);
	CHECK_INT(c.dirty_buyers_len, 1);
	const struct fs_hold *h = fs_core_hold(&c, intent_str(1));
	if (CHECK(h != NULL)) {
		uint32_t hi = (uint32_t)(h - c.holds);
		CHECK_INT(c.expired[0], hi);
		CHECK_INT(c.dirty_holds[0], hi);
		CHECK_INT(h->status, FS_HOLD_EXPIRED);
		CHECK_INT(h->ended_at_ms, 2500);
		CHECK_INT(h->ended_offset, 9);
		CHECK_STR(c.skus[c.dirty_skus[0]].sku, "A");
		CHECK_STR(c.buyers[c.dirty_buyers[0]].buyer_id, "b1");
		CHECK_INT(c.buyers[c.dirty_buyers[0]].sku_index, h->sku_index);
	}
	CHECK(memcmp(&skus[1], &c.skus[1], sizeof skus[1]) == 0);    /* B untouched */
	CHECK(memcmp(&holds[1], &c.holds[1], sizeof holds[1]) == 0); /* confirmed one */
	/* B's live one: only its place in the heap may move */
	struct fs_hold live;
	memcpy(&live, &c.holds[2], sizeof live);
	live.heap_pos = holds[2].heap_pos;
	CHECK(memcmp(&holds[2], &live, sizeof live) == 0);
	CHECK(memcmp(&buyers[1], &c.buyers[1], sizeof buyers[1]) == 0);
	CHECK(memcmp(&buyers[2], &c.buyers[2], sizeof buyers[2]) == 0);
	CHECK_INT(fs_core_sku(&c, "A")->available, 3);
	CHECK_INT(fs_core_sku(&c, "A")->held, 0);
	CHECK_INT(fs_core_sku(&c, "A")->sold, 2);
	CHECK_INT(fs_core_next_expiry(&c), 3000);
	check_invariants(&c);
	CHECK_CTX("%s", "");
	fs_core_free(&c);
}

/* ---- dirty and expired lists, commit ---------------------------------------------------- */

static void test_commit(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	CHECK_CTX("commit");
	decide(&c, rec_open("A", 3, (struct open_params){.limit = 2, .hold_ms = 1000}, 0, 1000));
	decide(&c, rec_buy("A", "b1", 1, 1, 1, 1000));
	decide(&c, rec_buy("A", "b2", 1, 2, 2, 1500));
	CHECK_INT(c.dirty_holds_len, 2);
	CHECK_INT(c.expired_len, 0);
	fs_core_commit(&c);
	check_committed(&c);

	uint32_t h1 = (uint32_t)(fs_core_hold(&c, intent_str(1)) - c.holds);
	uint32_t h2 = (uint32_t)(fs_core_hold(&c, intent_str(2)) - c.holds);
	decide(&c, rec_base(FS_KIND_TICK, NULL, 3, 2000)); /* expires id 1 */
	CHECK_INT(c.expired_len, 1);
	CHECK_INT(c.expired[0], h1);
	CHECK_INT(c.dirty_holds_len, 1);
	CHECK_INT(c.dirty_holds[0], h1);
	decide(&c, rec_followup(FS_KIND_CONFIRM, "A", 2, 4, 2100));
	CHECK_INT(c.dirty_holds_len, 2);
	CHECK_INT(c.dirty_holds[1], h2);
	CHECK_INT(c.expired_len, 1);
	/* A late confirm of id 1 in the same batch: no second entry on either list. */
	struct fs_decision d = decide(&c, rec_followup(FS_KIND_CONFIRM, "A", 1, 5, 2200));
	CHECK_INT(d.outcome, FS_OUT_CONFIRMED_LATE);
	CHECK_INT(c.dirty_holds_len, 2);
	CHECK_INT(c.expired_len, 1);
	/* The expiry keeps its own time and record, though the hold now names the confirm. */
	CHECK_INT(c.expired_at_ms[0], 2000);
	CHECK_INT(c.expired_offset[0], 3);
	CHECK_INT(c.holds[h1].ended_offset, 5);
	/* Rejections do not mark anything. */
	decide(&c, rec_followup(FS_KIND_CANCEL, "A", 2, 6, 2300));
	decide(&c, rec_followup(FS_KIND_CONFIRM, "A", 2, 7, 2300));
	decide(&c, rec_followup(FS_KIND_CONFIRM, "A", 9, 8, 2300));
	CHECK_INT(c.dirty_holds_len, 2);
	check_invariants(&c);
	fs_core_commit(&c);
	check_committed(&c);
	/* Holds stay (their rows exist); only the lists are cleared. */
	CHECK_INT(c.holds_len, 2);
	CHECK_INT(fs_core_hold(&c, intent_str(1))->status, FS_HOLD_CONFIRMED);
	CHECK(fs_core_hold(&c, intent_str(1))->late);
	/* After a commit, a change marks again. */
	decide(&c, rec_buy("A", "b3", 1, 3, 9, 2400));
	CHECK_INT(c.dirty_holds_len, 1);
	decide(&c, rec_followup(FS_KIND_CANCEL, "A", 3, 10, 2500));
	CHECK_INT(c.dirty_holds_len, 1); /* created and cancelled in one batch: one entry */
	CHECK_INT(c.expired_len, 0);
	check_invariants(&c);
	/* Reset drops the holds and the heap. */
	decide(&c, rec_buy("A", "b3", 1, 4, 11, 2600));
	fs_core_reset(&c);
	CHECK_INT(c.holds_len, 0);
	CHECK_INT(c.heap_len, 0);
	CHECK_INT(c.dirty_holds_len, 0);
	CHECK_INT(c.expired_len, 0);
	CHECK_INT(fs_core_next_expiry(&c), -1);
	CHECK(fs_core_hold(&c, intent_str(4)) == NULL);
	CHECK_CTX("%s", "");
	fs_core_free(&c);
}

/* ---- reload from the store's rows ------------------------------------------------------- */

/* What the worker loads from Postgres after a commit: the SKU rows (by name), the buyer rows
 * with units > 0 (by SKU, buyer), the reservations (by offset) and the partition clock.
 * `reverse` loads every list in the opposite order (the decisions must not depend on it). */
static bool load_copy(struct fs_core *dst, const struct fs_core *src, bool reverse)
{
	bool ok = true;
	fs_core_init(dst, src->partition);
	uint32_t ns = src->skus_len, nb = src->buyers_len, nh = src->holds_len;
	uint32_t *order = malloc((size_t)(ns + nb + nh + 1) * sizeof *order);
	if (!CHECK(order != NULL))
		return false;
	/* SKUs by name. */
	uint32_t n = 0;
	for (uint32_t i = 0; i < ns; i++) {
		uint32_t j = n++;
		while (j > 0 && strcmp(src->skus[order[j - 1]].sku, src->skus[i].sku) > 0) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	for (uint32_t k = 0; k < n; k++) {
		const struct fs_sku *s = &src->skus[order[reverse ? n - 1 - k : k]];
		struct fs_sku row = {0};
		snprintf(row.sku, sizeof row.sku, "%s", s->sku);
		row.partition = s->partition;
		row.status = s->status;
		row.supply = s->base_supply;
		row.available = s->base_available;
		row.held = s->base_held;
		row.sold = s->base_sold;
		row.per_buyer_limit = s->per_buyer_limit;
		row.max_qty = s->max_qty;
		row.hold_ms = s->hold_ms;
		row.opens_at_ms = s->opens_at_ms;
		row.closes_at_ms = s->closes_at_ms;
		ok = CHECK_INT(fs_core_load_sku(dst, &row), 0) && ok;
	}
	/* Buyers with units by (SKU, buyer): the order does not matter to the core; use index
	 * order or its reverse. */
	for (uint32_t k = 0; k < nb; k++) {
		const struct fs_buyer *b = &src->buyers[reverse ? nb - 1 - k : k];
		if (b->base_units > 0)
			ok = CHECK_INT(fs_core_load_buyer(dst, src->skus[b->sku_index].sku,
							  b->buyer_id, b->base_units),
				       0) &&
			     ok;
	}
	/* Reservations by offset. */
	n = 0;
	for (uint32_t i = 0; i < nh; i++) {
		uint32_t j = n++;
		while (j > 0 && src->holds[order[j - 1]].offset > src->holds[i].offset) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	for (uint32_t k = 0; k < n; k++) {
		const struct fs_hold *h = &src->holds[order[reverse ? n - 1 - k : k]];
		struct fs_hold row = {0};
		snprintf(row.intent_id, sizeof row.intent_id, "%s", h->intent_id);
		row.qty = h->qty;
		row.expires_at_ms = h->expires_at_ms;
		row.offset = h->offset;
		row.status = h->status;
		row.late = h->late;
		row.ended_at_ms = h->ended_at_ms;
		row.ended_offset = h->ended_offset;
		ok = CHECK_INT(fs_core_load_hold(dst, &row, src->skus[h->sku_index].sku,
						 src->buyers[h->buyer_index].buyer_id),
			       0) &&
		     ok;
	}
	dst->clock_ms = src->clock_ms;
	free(order);
	return ok;
}

/* Two cores hold the same state, compared by names (indexes may differ). */
static bool same_state(const struct fs_core *a, const struct fs_core *b)
{
	bool ok = CHECK_INT(a->clock_ms, b->clock_ms);
	ok = CHECK_INT(a->skus_len, b->skus_len) && ok;
	ok = CHECK_INT(a->holds_len, b->holds_len) && ok;
	ok = CHECK_INT(fs_core_next_expiry(a), fs_core_next_expiry(b)) && ok;
	ok = CHECK_INT(a->heap_len, b->heap_len) && ok;
	for (uint32_t i = 0; ok && i < a->skus_len; i++) {
		const struct fs_sku *x = &a->skus[i], *y = fs_core_sku(b, x->sku);
		if (!CHECK(y != NULL))
			return false;
		ok = CHECK_INT(x->status, y->status) && ok;
		ok = CHECK_INT(x->supply, y->supply) && ok;
		ok = CHECK_INT(x->available, y->available) && ok;
		ok = CHECK_INT(x->held, y->held) && ok;
		ok = CHECK_INT(x->sold, y->sold) && ok;
	}
	for (uint32_t i = 0; ok && i < a->buyers_len; i++) {
		const struct fs_buyer *x = &a->buyers[i];
		const char *sku = a->skus[x->sku_index].sku;
		ok = CHECK_INT(x->units, buyer_units(b, sku, x->buyer_id)) && ok;
	}
	for (uint32_t i = 0; ok && i < b->buyers_len; i++) {
		const struct fs_buyer *x = &b->buyers[i];
		const char *sku = b->skus[x->sku_index].sku;
		ok = CHECK_INT(x->units, buyer_units(a, sku, x->buyer_id)) && ok;
	}
	for (uint32_t i = 0; ok && i < a->holds_len; i++) {
		const struct fs_hold *x = &a->holds[i], *y = fs_core_hold(b, x->intent_id);
		if (!CHECK(y != NULL))
			return false;
		ok = CHECK_STR(a->skus[x->sku_index].sku, b->skus[y->sku_index].sku) && ok;
		ok = CHECK_STR(a->buyers[x->buyer_index].buyer_id,
			       b->buyers[y->buyer_index].buyer_id) &&
		     ok;
		ok = CHECK_INT(x->qty, y->qty) && ok;
		ok = CHECK_INT(x->expires_at_ms, y->expires_at_ms) && ok;
		ok = CHECK_INT(x->offset, y->offset) && ok;
		ok = CHECK_INT(x->status, y->status) && ok;
		ok = CHECK_INT(x->late, y->late) && ok;
		ok = CHECK_INT(x->ended_at_ms, y->ended_at_ms) && ok;
		ok = CHECK_INT(x->ended_offset, y->ended_offset) && ok;
	}
	/* The lists since the last commit, by intent. */
	ok = CHECK_INT(a->expired_len, b->expired_len) && ok;
	for (uint32_t k = 0; ok && k < a->expired_len; k++)
		ok = CHECK_STR(a->holds[a->expired[k]].intent_id,
			       b->holds[b->expired[k]].intent_id) &&
		     ok;
	ok = CHECK_INT(a->dirty_holds_len, b->dirty_holds_len) && ok;
	for (uint32_t k = 0; ok && k < a->dirty_holds_len; k++)
		ok = CHECK_STR(a->holds[a->dirty_holds[k]].intent_id,
			       b->holds[b->dirty_holds[k]].intent_id) &&
		     ok;
	return ok;
}

static bool same_decision(const struct fs_decision *x, const struct fs_decision *y)
{
	bool ok = CHECK_STR(fs_outcome_name(x->outcome), fs_outcome_name(y->outcome));
	ok = CHECK_STR(x->reason, y->reason) && ok;
	ok = CHECK_INT(x->qty, y->qty) && ok;
	ok = CHECK_INT(x->expires_at_ms, y->expires_at_ms) && ok;
	ok = CHECK_INT(x->decided_at_ms, y->decided_at_ms) && ok;
	ok = CHECK_INT(x->reserve, y->reserve) && ok;
	return ok;
}

static const struct step reload_history[] = {
	/* A: 5 units, limit 2, 1 s holds; B: 2 units, limit 1, 3 s holds; C: closes at 9000. */
	{OPEN, "A", NULL, 5, 0, 1000, .open = {.limit = 2, .hold_ms = 1000}, .out = FS_OUT_APPLIED},
	{OPEN, "B", NULL, 2, 1, 1000, .open = {.limit = 1, .hold_ms = 3000}, .out = FS_OUT_APPLIED},
	{OPEN, "C", NULL, 2, 2, 1000, .open = {.limit = 1, .hold_ms = 5000, .closes = 9000},
	 .out = FS_OUT_APPLIED},
	{BUY, "A", "b1", 1, 3, 1000, 1, .out = FS_OUT_HELD, .expires = 2000},
	{BUY, "A", "b2", 1, 4, 1000, 2, .out = FS_OUT_HELD, .expires = 2000},
	{BUY, "A", "b3", 1, 5, 1100, 3, .out = FS_OUT_HELD, .expires = 2100},
	{CONFIRM, "A", NULL, 0, 6, 1200, 2, .out = FS_OUT_CONFIRMED},
	{CANCEL, "A", NULL, 0, 7, 1300, 3, .out = FS_OUT_CANCELLED},
	{TICK, "A", NULL, 0, 8, 2000, .out = FS_OUT_APPLIED, S(4, 0, 1, 5), EXPD(1)},
	{COMMIT, "A"},
	{CONFIRM, "A", NULL, 0, 9, 2100, 1, .out = FS_OUT_CONFIRMED_LATE, S(3, 0, 2, 5)},
	/* live holds with equal expiries: A ids 4 and 6 (4000), B ids 5 and 7 (6000) */
	{BUY, "A", "b4", 2, 10, 3000, 4, .out = FS_OUT_HELD, .expires = 4000},
	{BUY, "B", "b1", 1, 11, 1000, 5, .out = FS_OUT_HELD, .expires = 6000},
	{BUY, "A", "b2", 1, 12, 3000, 6, .out = FS_OUT_HELD, .expires = 4000, S(0, 3, 2, 5)},
	{BUY, "B", "b2", 1, 13, 3000, 7, .out = FS_OUT_HELD, .expires = 6000, S(0, 2, 0, 2)},
	{BUY, "C", "b9", 1, 14, 3000, 8, .out = FS_OUT_HELD, .expires = 8000},
	{BUY, "C", "b8", 1, 15, 3001, 9, .out = FS_OUT_HELD, .expires = 8001},
	{CANCEL, "C", NULL, 0, 16, 3002, 8, .out = FS_OUT_CANCELLED, S(1, 1, 0, 2)},
	{COMMIT, "A"},
	{BUY, "A", "b5", 1, 17, 3500, 10, .out = FS_OUT_SOLD_OUT, S(0, 3, 2, 5)},
	{COMMIT, "A", NX(4000), .clock = 3500},
};

/* The future, from offset 100 on, decided by the original and by the reloaded cores. */
static const struct step reload_future[] = {
	{CONFIRM, "A", NULL, 0, 100, 3600, 1, .out = FS_OUT_CONFIRMED_LATE,
	 .reason = "already_confirmed"},
	{CANCEL, "A", NULL, 0, 101, 3700, 3, .out = FS_OUT_CANCELLED,
	 .reason = "already_cancelled"},
	{CONFIRM, "A", NULL, 0, 102, 3700, 3, .out = FS_OUT_REFUND_REQUIRED, .reason = "cancelled"},
	{CONFIRM, "A", NULL, 0, 103, 3800, 2, .out = FS_OUT_CONFIRMED,
	 .reason = "already_confirmed"},
	{BUY, "A", "b1", 2, 104, 3900, 11, .out = FS_OUT_LIMIT_EXCEEDED},
	/* ids 4 and 6 expire at 4000, in offset order; b4 buys again */
	{BUY, "A", "b4", 1, 105, 4000, 12, .out = FS_OUT_HELD, .expires = 5000, S(2, 1, 2, 5),
	 UNITS({"b4", 1}, {"b2", 1}), HOLDS(HE(4, 4000, 105), HE(6, 4000, 105), HH(12)), NX(5000),
	 EXPD(4, 6)},
	/* a buy whose intent id already has a (loaded) hold */
	{BUY, "A", "b1", 1, 106, 4050, 1, .out = FS_OUT_REJECTED, .reason = "hold_exists",
	 S(2, 1, 2, 5), EXPD(4, 6)},
	{CONFIRM, "A", NULL, 0, 107, 4100, 4, .out = FS_OUT_REFUND_REQUIRED,
	 .reason = "limit_exceeded", S(2, 1, 2, 5), UNITS({"b4", 1}), EXPD(4, 6)},
	{CONFIRM, "A", NULL, 0, 108, 4150, 6, .out = FS_OUT_CONFIRMED_LATE, S(1, 1, 3, 5),
	 UNITS({"b2", 2}), HOLDS(HL(6, 4150, 108)), EXPD(4, 6)},
	{COMMIT, "A", S(1, 1, 3, 5)},
	/* 5000: id 12 (A); 6000: ids 5 and 7 (B), in offset order */
	{TICK, "B", NULL, 0, 109, 7000, .out = FS_OUT_APPLIED, S(2, 0, 0, 2),
	 HOLDS(HE(5, 7000, 109), HE(7, 7000, 109), HE(12, 7000, 109)), NX(8001), EXPD(12, 5, 7)},
	{CONFIRM, "B", NULL, 0, 110, 7100, 7, .out = FS_OUT_CONFIRMED_LATE, S(1, 0, 1, 2),
	 EXPD(12, 5, 7)},
	{BUY, "C", "b7", 1, 111, 7200, 13, .out = FS_OUT_HELD, .expires = 12200, S(0, 2, 0, 2),
	 EXPD(12, 5, 7)},
	{CONFIRM, "C", NULL, 0, 112, 9000, 9, .out = FS_OUT_REFUND_REQUIRED, .reason = "closed",
	 S(1, 1, 0, 2), HOLDS(HE(9, 9000, 112)), NX(12200), EXPD(12, 5, 7, 9)},
	{CONFIRM, "C", NULL, 0, 113, 9100, 13, .out = FS_OUT_CONFIRMED, S(1, 0, 1, 2),
	 EXPD(12, 5, 7, 9)},
	{CANCEL, "A", NULL, 0, 114, 9200, 12, .out = FS_OUT_EXPIRED, .reason = "already_expired",
	 EXPD(12, 5, 7, 9)},
	{TICK, "A", NULL, 0, 115, 99999, .out = FS_OUT_APPLIED, S(2, 0, 3, 5), NX(-1),
	 EXPD(12, 5, 7, 9)},
};

static void test_reload(void)
{
	struct fs_core a;
	fs_core_init(&a, 3);
	struct fs_decision d;
	for (size_t i = 0; i < sizeof reload_history / sizeof reload_history[0]; i++) {
		CHECK_CTX("reload: history step %zu", i + 1);
		run_step(&a, &reload_history[i], &d);
	}
	CHECK_CTX("reload: load");
	struct fs_core b, r;
	bool ok = load_copy(&b, &a, false);
	ok = load_copy(&r, &a, true) && ok;
	ok = same_state(&a, &b) && ok;
	ok = same_state(&a, &r) && ok;
	check_committed(&b);
	check_committed(&r);
	check_invariants(&b);
	check_invariants(&r);
	/* A loaded SKU, buyer or hold is clean; a hold for an unknown SKU or twice is refused. */
	CHECK(!fs_core_hold(&b, intent_str(4))->dirty);
	struct fs_hold dup = *fs_core_hold(&b, intent_str(4));
	CHECK_INT(fs_core_load_hold(&b, &dup, "A", "b4"), -EINVAL);
	snprintf(dup.intent_id, sizeof dup.intent_id, "%s", intent_str(77));
	CHECK_INT(fs_core_load_hold(&b, &dup, "Z", "b4"), -EINVAL);
	CHECK(fs_core_hold(&b, intent_str(77)) == NULL);
	for (size_t i = 0; ok && i < sizeof reload_future / sizeof reload_future[0]; i++) {
		struct fs_decision da, db, dr;
		CHECK_CTX("reload: future step %zu, original core", i + 1);
		run_step(&a, &reload_future[i], &da);
		CHECK_CTX("reload: future step %zu, reloaded core", i + 1);
		run_step(&b, &reload_future[i], &db);
		CHECK_CTX("reload: future step %zu, reloaded in reverse order", i + 1);
		run_step(&r, &reload_future[i], &dr);
		CHECK_CTX("reload: future step %zu, same decisions and state", i + 1);
		ok = same_decision(&da, &db) && same_decision(&da, &dr) && ok;
		ok = same_state(&a, &b) && same_state(&a, &r) && ok;
	}
	CHECK_CTX("%s", "");
	fs_core_free(&a);
	fs_core_free(&b);
	fs_core_free(&r);
}

/* ---- the expiry heap under removals: seeded random, 2,000 holds ------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int64_t rnd(int64_t lo, int64_t hi) /* inclusive */
{
	return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
}

enum { R_HOLDS = 2000, R_SKUS = 4, R_BUYERS = 50 };

static const int64_t r_hold_ms[R_SKUS] = {100000, 40000, 70000, 40000};

struct ref_hold {
	int64_t expires, off;
	int sku;
	int status;
	bool late;
};

struct ref {
	struct ref_hold h[R_HOLDS + 1]; /* by intent id, 1..n */
	int n;
};

static const char *r_sku(int i)
{
	static const char *const names[R_SKUS] = {"R0", "R1", "R2", "R3"};
	return names[i];
}

static int ref_cmp_ids(const struct ref *m, int a, int b)
{
	const struct ref_hold *x = &m->h[a], *y = &m->h[b];
	if (x->expires != y->expires)
		return x->expires < y->expires ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int64_t ref_next_expiry(const struct ref *m)
{
	int64_t best = -1;
	for (int i = 1; i <= m->n; i++)
		if (m->h[i].status == FS_HOLD_HELD && (best < 0 || m->h[i].expires < best))
			best = m->h[i].expires;
	return best;
}

/* Applies one record to the core (and the clone, if any), compares the decisions. */
static bool r_apply(struct fs_core *c, struct fs_core *clone, struct fs_record rec,
		    struct fs_decision *d)
{
	bool ok = CHECK_INT(fs_core_decide(c, &rec, d), 0);
	if (clone) {
		struct fs_decision d2;
		ok = CHECK_INT(fs_core_decide(clone, &rec, &d2), 0) && ok;
		ok = same_decision(d, &d2) && ok;
	}
	return ok;
}

/* A confirm or cancel of a random hold (any status); the reference says what it does. */
static bool r_followup(struct fs_core *c, struct fs_core *clone, struct ref *m, int64_t off,
		       int64_t ts, int64_t *held, int64_t *expired_len)
{
	int id = (int)rnd(1, m->n);
	struct ref_hold *h = &m->h[id];
	bool confirm = rnd(0, 1);
	struct fs_decision d;
	bool ok = r_apply(c, clone,
			  rec_followup(confirm ? FS_KIND_CONFIRM : FS_KIND_CANCEL, r_sku(h->sku),
				       id, off, ts),
			  &d);
	enum fs_outcome want;
	const char *reason = NULL;
	switch (h->status) {
	case FS_HOLD_HELD:
		want = confirm ? FS_OUT_CONFIRMED : FS_OUT_CANCELLED;
		h->status = confirm ? FS_HOLD_CONFIRMED : FS_HOLD_CANCELLED;
		(*held)--;
		break;
	case FS_HOLD_CONFIRMED:
		want = confirm ? (h->late ? FS_OUT_CONFIRMED_LATE : FS_OUT_CONFIRMED)
			       : FS_OUT_REJECTED;
		reason = "already_confirmed";
		break;
	case FS_HOLD_CANCELLED:
		want = confirm ? FS_OUT_REFUND_REQUIRED : FS_OUT_CANCELLED;
		reason = confirm ? "cancelled" : "already_cancelled";
		break;
	default: /* expired: stock and limits are ample, so a confirm is always late-confirmed */
		want = confirm ? FS_OUT_CONFIRMED_LATE : FS_OUT_EXPIRED;
		reason = confirm ? NULL : "already_expired";
		if (confirm) {
			h->status = FS_HOLD_CONFIRMED;
			h->late = true;
		}
		break;
	}
	ok = CHECK_STR(fs_outcome_name(d.outcome), fs_outcome_name(want)) && ok;
	ok = CHECK_STR(d.reason, reason) && ok;
	ok = CHECK_INT(c->expired_len, *expired_len) && ok;
	return ok;
}

static bool r_tick(struct fs_core *c, struct fs_core *clone, struct ref *m, int64_t off, int64_t ts,
		   int64_t *held, int64_t *expired_len)
{
	/* What must expire: the held ones with expires <= max(clock, ts), sorted. */
	int64_t clock = ts > c->clock_ms ? ts : c->clock_ms;
	int *due = malloc(sizeof(int) * (R_HOLDS + 1));
	if (!CHECK(due != NULL))
		return false;
	int nd = 0;
	for (int i = 1; i <= m->n; i++) {
		if (m->h[i].status != FS_HOLD_HELD || m->h[i].expires > clock)
			continue;
		int j = nd++;
		while (j > 0 && ref_cmp_ids(m, due[j - 1], i) > 0) {
			due[j] = due[j - 1];
			j--;
		}
		due[j] = i;
	}
	struct fs_decision d;
	uint32_t before = c->expired_len;
	bool ok = r_apply(c, clone, rec_base(FS_KIND_TICK, NULL, off, ts), &d);
	ok = CHECK_INT(d.outcome, FS_OUT_APPLIED) && ok;
	ok = CHECK_INT(c->expired_len - before, nd) && ok;
	for (int k = 0; ok && k < nd; k++) {
		const struct fs_hold *h = &c->holds[c->expired[before + k]];
		ok = CHECK_STR(h->intent_id, intent_str(due[k])) && ok;
		ok = CHECK_INT(h->ended_at_ms, clock) && ok;
		ok = CHECK_INT(h->ended_offset, off) && ok;
		ok = CHECK_INT(h->status, FS_HOLD_EXPIRED) && ok;
		m->h[due[k]].status = FS_HOLD_EXPIRED;
	}
	*held -= nd;
	*expired_len += nd;
	free(due);
	return ok;
}

static void test_heap_random(uint64_t seed)
{
	printf("test_holds: random heap seed=%" PRIu64 " (rerun: test_holds --seed %" PRIu64
	       " or FS_TEST_SEED=%" PRIu64 ")\n",
	       seed, seed, seed);
	fflush(stdout);
	rng_state = seed;
	struct ref *m = calloc(1, sizeof *m);
	struct fs_core c, clone;
	fs_core_init(&c, 0);
	fs_core_init(&clone, 0);
	bool have_clone = false;
	if (!CHECK(m != NULL))
		return;
	int64_t off = 0, ts = 1000000, held = 0, expired_len = 0;
	bool ok = true;
	for (int s = 0; s < R_SKUS; s++) {
		struct open_params p = {.limit = 1000, .max_qty = 3, .hold_ms = r_hold_ms[s]};
		struct fs_decision d;
		ok = r_apply(&c, NULL, rec_open(r_sku(s), 10000, p, off++, ts), &d) && ok;
	}
	/* Phase 1: 2,000 buys mixed with confirms and cancels of random holds. Timestamps move
	 * by 0..3 ms, so expiries tie often and none is reached (the shortest hold is 40 s). */
	int64_t steps = 0, removals = 0;
	while (ok && m->n < R_HOLDS) {
		CHECK_CTX("random heap (seed %" PRIu64 ") step %" PRId64 " holds %d", seed, steps,
			  m->n);
		ts += rnd(0, 3);
		if (m->n > 0 && rnd(0, 9) < 4) {
			int64_t before = held;
			ok = r_followup(&c, NULL, m, off++, ts, &held, &expired_len) && ok;
			removals += held < before;
		} else {
			int id = m->n + 1, sku = (int)rnd(0, R_SKUS - 1);
			char buyer[16];
			snprintf(buyer, sizeof buyer, "b%d", (int)rnd(0, R_BUYERS - 1));
			struct fs_decision d;
			ok = r_apply(&c, NULL, rec_buy(r_sku(sku), buyer, rnd(1, 3), id, off, ts),
				     &d) &&
			     ok;
			ok = CHECK_INT(d.outcome, FS_OUT_HELD) && ok;
			m->h[id] = (struct ref_hold){.expires = ts + r_hold_ms[sku],
						     .off = off,
						     .sku = sku,
						     .status = FS_HOLD_HELD};
			ok = CHECK_INT(d.expires_at_ms, m->h[id].expires) && ok;
			m->n++;
			off++;
			held++;
		}
		ok = CHECK_INT(fs_core_next_expiry(&c), ref_next_expiry(m)) && ok;
		ok = CHECK_INT(c.heap_len, held) && ok;
		if (steps % 25 == 0)
			ok = check_invariants(&c) && ok;
		steps++;
	}
	CHECK_CTX("random heap (seed %" PRIu64 ") after the buys", seed);
	ok = check_invariants(&c) && ok;
	CHECK_INT(m->n, R_HOLDS);
	CHECK(removals > 300);
	CHECK(held > 500);
	CHECK_INT(c.expired_len, 0);
	/* Commit, and reload into a clone that decides the rest alongside. */
	fs_core_commit(&c);
	have_clone = ok && load_copy(&clone, &c, (seed & 1) != 0);
	ok = have_clone && same_state(&c, &clone) && ok;
	/* Phase 2: ticks through the expiries, with removals in between. */
	int64_t lo = ref_next_expiry(m), hi = 0;
	for (int i = 1; i <= m->n; i++)
		if (m->h[i].expires > hi)
			hi = m->h[i].expires;
	int64_t t = lo - 1;
	int ticks = 0;
	while (ok && t < hi + 10) {
		CHECK_CTX("random heap (seed %" PRIu64 ") tick %d at %" PRId64, seed, ticks, t);
		ok = r_tick(&c, &clone, m, off++, t, &held, &expired_len) && ok;
		for (int k = (int)rnd(0, 20); ok && k > 0; k--)
			ok = r_followup(&c, &clone, m, off++, t, &held, &expired_len) && ok;
		/* Sometimes an older timestamp: it expires nothing. */
		if (ok && rnd(0, 3) == 0)
			ok = r_tick(&c, &clone, m, off++, t - rnd(1, 50000), &held, &expired_len) &&
			     ok;
		ok = CHECK_INT(fs_core_next_expiry(&c), ref_next_expiry(m)) && ok;
		ok = CHECK_INT(c.heap_len, held) && ok;
		ok = check_invariants(&c) && same_state(&c, &clone) && ok;
		t += rnd(1, (hi - lo) / 8 + 1);
		ticks++;
		if (t > hi / 2 + lo / 2 && held > 0 && rnd(0, 2) == 0)
			break; /* leave some for the far tick */
	}
	/* The far tick: exactly the still-held ones expire, in (expires_at, offset) order. */
	CHECK_CTX("random heap (seed %" PRIu64 ") far tick", seed);
	if (ok)
		ok = r_tick(&c, &clone, m, off++, INT64_C(1) << 50, &held, &expired_len);
	CHECK_INT(held, 0);
	CHECK_INT(c.heap_len, 0);
	CHECK_INT(fs_core_next_expiry(&c), -1);
	ok = check_invariants(&c) && same_state(&c, &clone) && ok;
	fs_core_commit(&c);
	check_committed(&c);
	if (!ok)
		fprintf(stderr, "test_holds: random heap failed (seed=%" PRIu64 ")\n", seed);
	printf("test_holds: random heap: %d holds, %" PRId64 " removals before expiry, %d ticks\n",
	       m->n, removals, ticks);
	CHECK_CTX("%s", "");
	free(m);
	fs_core_free(&c);
	fs_core_free(&clone);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_holds");
	}
	uint64_t seed = check_seed(&a);

	test_timelines();
	test_ticks();
	test_commit();
	test_reload();
	test_heap_random(seed);
	return check_done("test_holds");
}
