/* test_core.c: the decision core (src/core/core.c): table-driven timelines, the dirty lists and
 * commit, reset and load, and a seeded random sequence checked against a reference model and
 * the invariants of DESIGN.md (INV-1). */
#include "check.h"
#include "core/core.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

/* ---- records ---------------------------------------------------------------------------- */

static int64_t next_offset;

static struct fs_record rec_base(enum fs_kind kind, const char *sku, int64_t ts)
{
	struct fs_record r = {0};
	r.kind = kind;
	r.partition = 0;
	r.offset = next_offset++;
	r.ts_ms = ts;
	if (sku)
		snprintf(r.sku, sizeof r.sku, "%s", sku);
	return r;
}

static struct fs_record rec_buy(const char *sku, const char *buyer, int64_t qty, int64_t ts)
{
	struct fs_record r = rec_base(FS_KIND_BUY, sku, ts);
	r.has_intent = true;
	snprintf(r.intent_id, sizeof r.intent_id, "00000000-0000-4000-8000-%012" PRId64, r.offset);
	snprintf(r.buyer_id, sizeof r.buyer_id, "%s", buyer);
	r.qty = qty;
	r.body_hash = r.offset + 1;
	return r;
}

struct open_params {
	int64_t stock, limit, max_qty, hold_ms, opens, closes;
};

static struct fs_record rec_open(const char *sku, struct open_params p, int64_t ts)
{
	struct fs_record r = rec_base(FS_KIND_OPEN, sku, ts);
	r.qty = p.stock;
	r.per_buyer_limit = p.limit ? p.limit : 1;
	r.max_qty = p.max_qty ? p.max_qty : r.per_buyer_limit;
	r.hold_ms = p.hold_ms ? p.hold_ms : 600000;
	r.opens_at_ms = p.opens;
	r.closes_at_ms = p.closes;
	return r;
}

/* ---- table-driven timelines ------------------------------------------------------------- */

enum op { OPEN = 1, BUY, RESTOCK, CLOSE, TICK, INVALID, CONFIRM };

struct step {
	enum op op;
	const char *sku;
	const char *buyer;
	int64_t qty; /* buy: units; open: stock; restock: add */
	int64_t ts;
	struct open_params open; /* open only (stock is qty) */
	enum fs_outcome out;
	const char *reason;
	/* checked when set: the SKU's counters after the step, the hold's expiry, the clock */
	bool state;
	int64_t avail, held;
	int64_t expires, clock;
};

#define S(a, h) .state = true, .avail = (a), .held = (h)

struct timeline {
	const char *name;
	struct step steps[24];
};

static const struct timeline timelines[] = {
	{"exact sell-out",
	 {
		 {OPEN, "A", .qty = 3, .ts = 1000, .out = FS_OUT_APPLIED, S(3, 0)},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(2, 1)},
		 {BUY, "A", "b2", 1, 1002, .out = FS_OUT_HELD, S(1, 2)},
		 {BUY, "A", "b3", 1, 1003, .out = FS_OUT_HELD, S(0, 3)},
		 {BUY, "A", "b4", 1, 1004, .out = FS_OUT_SOLD_OUT, S(0, 3)},
		 {BUY, "A", "b5", 1, 1005, .out = FS_OUT_SOLD_OUT, S(0, 3)},
	 }},
	{"zero stock",
	 {
		 {OPEN, "A", .qty = 0, .ts = 1000, .out = FS_OUT_APPLIED, S(0, 0)},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_SOLD_OUT, S(0, 0)},
	 }},
	{"qty > 1, partial availability is sold_out",
	 {
		 {OPEN, "A", .qty = 3, .ts = 1000, .open = {.limit = 5}, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 2, 1001, .out = FS_OUT_HELD, S(1, 2)},
		 {BUY, "A", "b2", 2, 1002, .out = FS_OUT_SOLD_OUT, S(1, 2)},
		 {BUY, "A", "b2", 5, 1003, .out = FS_OUT_SOLD_OUT, S(1, 2)},
		 {BUY, "A", "b2", 1, 1004, .out = FS_OUT_HELD, S(0, 3)},
		 {BUY, "A", "b3", 1, 1005, .out = FS_OUT_SOLD_OUT, S(0, 3)},
	 }},
	{"per-buyer limit, counted per SKU",
	 {
		 {OPEN, "A", .qty = 10, .ts = 1000, .open = {.limit = 2}, .out = FS_OUT_APPLIED},
		 {OPEN, "B", .qty = 10, .ts = 1000, .open = {.limit = 2}, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(9, 1)},
		 {BUY, "A", "b1", 1, 1002, .out = FS_OUT_HELD, S(8, 2)},
		 {BUY, "A", "b1", 1, 1003, .out = FS_OUT_LIMIT_EXCEEDED, S(8, 2)},
		 {BUY, "A", "b2", 2, 1004, .out = FS_OUT_HELD, S(6, 4)},
		 {BUY, "A", "b2", 1, 1005, .out = FS_OUT_LIMIT_EXCEEDED, S(6, 4)},
		 {BUY, "B", "b1", 2, 1006, .out = FS_OUT_HELD, S(8, 2)},
		 {BUY, "B", "b1", 1, 1007, .out = FS_OUT_LIMIT_EXCEEDED, S(8, 2)},
		 /* buyer ids are exact strings: "B1" is another buyer */
		 {BUY, "A", "B1", 2, 1008, .out = FS_OUT_HELD, S(4, 6)},
	 }},
	{"limit before stock",
	 {
		 {OPEN, "A", .qty = 1, .ts = 1000, .open = {.limit = 1}, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(0, 1)},
		 {BUY, "A", "b1", 1, 1002, .out = FS_OUT_LIMIT_EXCEEDED, S(0, 1)},
		 {BUY, "A", "b2", 1, 1003, .out = FS_OUT_SOLD_OUT, S(0, 1)},
	 }},
	{"max_qty",
	 {
		 {OPEN, "A", .qty = 10, .ts = 1000, .open = {.limit = 5, .max_qty = 2},
		  .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 3, 1001, .out = FS_OUT_REJECTED, .reason = "qty_over_cap",
		  S(10, 0)},
		 {BUY, "A", "b1", 1000000, 1002, .out = FS_OUT_REJECTED, .reason = "qty_over_cap"},
		 {BUY, "A", "b1", 2, 1003, .out = FS_OUT_HELD, S(8, 2)},
		 {BUY, "A", "b1", 2, 1004, .out = FS_OUT_HELD, S(6, 4)},
		 {BUY, "A", "b1", 2, 1005, .out = FS_OUT_LIMIT_EXCEEDED, S(6, 4)},
		 /* max_qty above the limit: the limit still applies */
		 {OPEN, "B", .qty = 10, .ts = 1006, .open = {.limit = 2, .max_qty = 5},
		  .out = FS_OUT_APPLIED},
		 {BUY, "B", "b1", 3, 1007, .out = FS_OUT_LIMIT_EXCEEDED, S(10, 0)},
		 {BUY, "B", "b1", 6, 1008, .out = FS_OUT_REJECTED, .reason = "qty_over_cap"},
	 }},
	{"unknown SKU",
	 {
		 {BUY, "Z", "b1", 1, 1000, .out = FS_OUT_REJECTED, .reason = "unknown_sku"},
		 {RESTOCK, "Z", .qty = 5, .ts = 1001, .out = FS_OUT_REJECTED,
		  .reason = "unknown_sku"},
		 {CLOSE, "Z", .ts = 1002, .out = FS_OUT_REJECTED, .reason = "unknown_sku"},
		 {OPEN, "A", .qty = 1, .ts = 1003, .out = FS_OUT_APPLIED},
		 {BUY, "a", "b1", 1, 1004, .out = FS_OUT_REJECTED, .reason = "unknown_sku"},
		 {BUY, "A", "b1", 1, 1005, .out = FS_OUT_HELD, S(0, 1)},
	 }},
	{"open twice",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .out = FS_OUT_APPLIED, S(5, 0)},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(4, 1)},
		 {OPEN, "A", .qty = 7, .ts = 1002, .out = FS_OUT_REJECTED, .reason = "already_open",
		  S(4, 1)},
		 {BUY, "A", "b2", 1, 1003, .out = FS_OUT_HELD, S(3, 2)},
	 }},
	{"restock after sold out",
	 {
		 {OPEN, "A", .qty = 1, .ts = 1000, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(0, 1)},
		 {BUY, "A", "b2", 1, 1002, .out = FS_OUT_SOLD_OUT, S(0, 1)},
		 {RESTOCK, "A", .qty = 2, .ts = 1003, .out = FS_OUT_APPLIED, S(2, 1)},
		 {BUY, "A", "b2", 1, 1004, .out = FS_OUT_HELD, S(1, 2)},
		 {BUY, "A", "b3", 1, 1005, .out = FS_OUT_HELD, S(0, 3)},
		 {BUY, "A", "b4", 1, 1006, .out = FS_OUT_SOLD_OUT, S(0, 3)},
	 }},
	{"close",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1001, .out = FS_OUT_HELD, S(4, 1)},
		 {CLOSE, "A", .ts = 1002, .out = FS_OUT_APPLIED, S(4, 1)},
		 {BUY, "A", "b2", 1, 1003, .out = FS_OUT_CLOSED, S(4, 1)},
		 /* closed beats every later check: over cap, over limit, sold out */
		 {BUY, "A", "b1", 9, 1004, .out = FS_OUT_CLOSED, S(4, 1)},
		 {OPEN, "A", .qty = 5, .ts = 1005, .out = FS_OUT_REJECTED,
		  .reason = "already_open"},
		 {BUY, "A", "b3", 1, 1006, .out = FS_OUT_CLOSED, S(4, 1)},
	 }},
	{"window on the record clock",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .open = {.opens = 2000, .closes = 3000},
		  .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1500, .out = FS_OUT_NOT_OPEN, S(5, 0)},
		 {BUY, "A", "b1", 1, 1999, .out = FS_OUT_NOT_OPEN, S(5, 0)},
		 {BUY, "A", "b1", 1, 2000, .out = FS_OUT_HELD, S(4, 1)},
		 {BUY, "A", "b2", 1, 2999, .out = FS_OUT_HELD, S(3, 2)},
		 {BUY, "A", "b3", 1, 3000, .out = FS_OUT_CLOSED, S(3, 2)},
		 /* an older timestamp does not reopen the window */
		 {BUY, "A", "b4", 1, 2500, .out = FS_OUT_CLOSED, S(3, 2), .clock = 3000},
	 }},
	{"window: closes_at only, opens_at only",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .open = {.closes = 1500}, .out = FS_OUT_APPLIED},
		 {OPEN, "B", .qty = 5, .ts = 1000, .open = {.opens = 1200}, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1100, .out = FS_OUT_HELD},
		 {BUY, "B", "b1", 1, 1100, .out = FS_OUT_NOT_OPEN},
		 {BUY, "B", "b1", 1, 1500, .out = FS_OUT_HELD},
		 {BUY, "A", "b2", 1, 1500, .out = FS_OUT_CLOSED},
		 {BUY, "B", "b2", 1, 99999999, .out = FS_OUT_HELD},
	 }},
	{"a tick opens the window, a late record stays open",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .open = {.opens = 2000}, .out = FS_OUT_APPLIED},
		 {TICK, .ts = 2500, .out = FS_OUT_APPLIED, .clock = 2500},
		 {BUY, "A", "b1", 1, 1000, .out = FS_OUT_HELD, .clock = 2500},
	 }},
	{"a tick closes the window",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .open = {.closes = 2000}, .out = FS_OUT_APPLIED},
		 {TICK, .ts = 2000, .out = FS_OUT_APPLIED},
		 {BUY, "A", "b1", 1, 1500, .out = FS_OUT_CLOSED},
	 }},
	{"clock monotonic, expires_at = clock + hold",
	 {
		 {OPEN, "A", .qty = 5, .ts = 1000, .open = {.limit = 5, .hold_ms = 60000},
		  .out = FS_OUT_APPLIED, .clock = 1000},
		 {BUY, "A", "b1", 1, 5000, .out = FS_OUT_HELD, .expires = 65000, .clock = 5000},
		 {BUY, "A", "b1", 1, 4000, .out = FS_OUT_HELD, .expires = 65000, .clock = 5000},
		 {BUY, "A", "b1", 1, 0, .out = FS_OUT_HELD, .expires = 65000, .clock = 5000},
		 {BUY, "A", "b1", 1, 5001, .out = FS_OUT_HELD, .expires = 65001, .clock = 5001},
		 {INVALID, .ts = 9000, .out = FS_OUT_REJECTED, .reason = "bad_json", .clock = 9000},
		 {BUY, "A", "b1", 1, 1, .out = FS_OUT_HELD, .expires = 69000, .clock = 9000},
	 }},
	{"invalid records have no effect",
	 {
		 {OPEN, "A", .qty = 2, .ts = 1000, .out = FS_OUT_APPLIED},
		 {INVALID, "A", .ts = 1001, .out = FS_OUT_REJECTED, .reason = "bad_json", S(2, 0)},
		 {BUY, "A", "b1", 1, 1002, .out = FS_OUT_HELD, S(1, 1)},
	 }},
};

static void run_step(struct fs_core *c, const struct step *s, struct fs_decision *d, int *rc)
{
	struct fs_record r;
	switch (s->op) {
	case OPEN: {
		struct open_params p = s->open;
		p.stock = s->qty;
		r = rec_open(s->sku, p, s->ts);
		break;
	}
	case BUY:
		r = rec_buy(s->sku, s->buyer, s->qty, s->ts);
		break;
	case RESTOCK:
		r = rec_base(FS_KIND_RESTOCK, s->sku, s->ts);
		r.qty = s->qty;
		break;
	case CLOSE:
		r = rec_base(FS_KIND_CLOSE, s->sku, s->ts);
		break;
	case TICK:
		r = rec_base(FS_KIND_TICK, NULL, s->ts);
		break;
	case INVALID:
		r = rec_base(FS_KIND_INVALID, s->sku, s->ts);
		r.reject_reason = s->reason;
		break;
	case CONFIRM:
	default:
		r = rec_base(FS_KIND_CONFIRM, s->sku, s->ts);
		break;
	}
	*rc = fs_core_decide(c, &r, d);
}

static void test_timelines(void)
{
	for (size_t t = 0; t < sizeof timelines / sizeof timelines[0]; t++) {
		const struct timeline *tl = &timelines[t];
		struct fs_core c;
		fs_core_init(&c, 0);
		for (int i = 0; i < 24 && tl->steps[i].op; i++) {
			const struct step *s = &tl->steps[i];
			CHECK_CTX("timeline '%s' step %d", tl->name, i + 1);
			struct fs_decision d;
			int rc;
			run_step(&c, s, &d, &rc);
			CHECK_INT(rc, 0);
			CHECK_STR(fs_outcome_name(d.outcome), fs_outcome_name(s->out));
			CHECK_STR(d.reason, s->reason);
			CHECK(!d.duplicate);
			CHECK(d.reserve == (d.outcome == FS_OUT_HELD));
			CHECK_INT(d.decided_at_ms, c.clock_ms);
			CHECK(c.clock_ms >= s->ts);
			if (s->op == BUY || s->op == RESTOCK || s->op == OPEN)
				CHECK_INT(d.qty, s->qty);
			if (d.outcome != FS_OUT_HELD)
				CHECK_INT(d.expires_at_ms, 0);
			if (s->expires)
				CHECK_INT(d.expires_at_ms, s->expires);
			if (s->clock)
				CHECK_INT(c.clock_ms, s->clock);
			if (s->state) {
				const struct fs_sku *k = fs_core_sku(&c, s->sku);
				if (CHECK(k != NULL)) {
					CHECK_INT(k->available, s->avail);
					CHECK_INT(k->held, s->held);
				}
			}
		}
		/* Conservation on every SKU at the end of every timeline. */
		for (uint32_t i = 0; i < c.skus_len; i++) {
			const struct fs_sku *k = &c.skus[i];
			CHECK_CTX("timeline '%s' end, sku %s", tl->name, k->sku);
			CHECK_INT(k->available + k->held + k->sold, k->supply);
			CHECK(k->available >= 0);
		}
		fs_core_free(&c);
	}
	CHECK_CTX("%s", "");
}

/* The state a sale record leaves behind. */
static void test_sale_state(void)
{
	struct fs_core c;
	fs_core_init(&c, 7);
	struct fs_decision d;
	CHECK(fs_core_sku(&c, "A") == NULL);
	struct fs_record r = rec_open("A",
				      (struct open_params){.stock = 40,
							   .limit = 3,
							   .max_qty = 2,
							   .hold_ms = 90000,
							   .opens = 10,
							   .closes = 99},
				      5);
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	const struct fs_sku *s = fs_core_sku(&c, "A");
	if (!CHECK(s != NULL))
		return;
	CHECK_STR(s->sku, "A");
	CHECK_INT(s->partition, 7);
	CHECK_INT(s->status, FS_SKU_OPEN);
	CHECK_INT(s->supply, 40);
	CHECK_INT(s->available, 40);
	CHECK_INT(s->held, 0);
	CHECK_INT(s->sold, 0);
	CHECK_INT(s->per_buyer_limit, 3);
	CHECK_INT(s->max_qty, 2);
	CHECK_INT(s->hold_ms, 90000);
	CHECK_INT(s->opens_at_ms, 10);
	CHECK_INT(s->closes_at_ms, 99);
	CHECK(!s->stored);

	r = rec_base(FS_KIND_RESTOCK, "A", 6);
	r.qty = 5;
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	s = fs_core_sku(&c, "A");
	CHECK_INT(s->supply, 45);
	CHECK_INT(s->available, 45);

	r = rec_base(FS_KIND_CLOSE, "A", 7);
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	s = fs_core_sku(&c, "A");
	CHECK_INT(s->status, FS_SKU_CLOSED);
	CHECK_INT(s->supply, 45);
	/* A restock after close still adds stock (the sale log is applied in order). */
	r = rec_base(FS_KIND_RESTOCK, "A", 8);
	r.qty = 1;
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_INT(d.outcome, FS_OUT_APPLIED);
	CHECK_INT(fs_core_sku(&c, "A")->supply, 46);
	CHECK_INT(fs_core_sku(&c, "A")->status, FS_SKU_CLOSED);
	fs_core_free(&c);
}

/* confirm / cancel of an intent that was never held: whatever the outcome, no stock effect and
 * not a hold. (The hold lifecycle is being written; this does not pin its outcome names.) */
static void test_followup_without_hold(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	struct fs_decision d;
	struct fs_record r = rec_open("A", (struct open_params){.stock = 3}, 1000);
	fs_core_decide(&c, &r, &d);
	r = rec_buy("A", "b1", 1, 1001);
	fs_core_decide(&c, &r, &d);
	enum fs_kind kinds[] = {FS_KIND_CONFIRM, FS_KIND_CANCEL};
	for (int k = 0; k < 2; k++) {
		CHECK_CTX("%s of an unknown intent", k ? "cancel" : "confirm");
		r = rec_base(kinds[k], "A", 1002);
		r.has_intent = true;
		snprintf(r.intent_id, sizeof r.intent_id, "%s",
			 "00000000-0000-4000-8000-ffffffffffff");
		CHECK_INT(fs_core_decide(&c, &r, &d), 0);
		CHECK(d.outcome != FS_OUT_HELD && d.outcome != FS_OUT_CONFIRMED &&
		      d.outcome != FS_OUT_CANCELLED);
		CHECK(!d.reserve);
		const struct fs_sku *s = fs_core_sku(&c, "A");
		CHECK_INT(s->available, 2);
		CHECK_INT(s->held, 1);
		CHECK_INT(s->sold, 0);
		CHECK_INT(s->supply, 3);
	}
	CHECK_CTX("%s", "");
	fs_core_free(&c);
}

/* A record stamped at the end of time (a CreateTime topic lets a producer do it; the worker
 * refuses such topics, this is the core's own guard): the hold's expiry saturates instead of
 * overflowing (UBSan aborted here), and the hold does not expire before it. Issue 28, item 4. */
static void test_clock_overflow(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	struct fs_decision d;
	struct fs_record r =
		rec_open("A", (struct open_params){.stock = 3, .hold_ms = 600000}, 1000);
	fs_core_decide(&c, &r, &d);
	r = rec_buy("A", "b1", 1, INT64_MAX - 5);
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_INT(d.outcome, FS_OUT_HELD);
	CHECK_INT(d.expires_at_ms, INT64_MAX);
	CHECK_INT(fs_core_next_expiry(&c), INT64_MAX);
	CHECK_INT(fs_core_sku(&c, "A")->held, 1);
	fs_core_free(&c);
}

static void test_outcome_names(void)
{
	static const char *const names[] = {
		NULL,	     "held",	       "sold_out",	  "limit_exceeded",
		"not_open",  "closed",	       "rejected",	  "conflict",
		"confirmed", "confirmed_late", "refund_required", "cancelled",
		"expired",   "unknown_intent", "applied",	  "waiting",
		"admitted",
	};
	for (int i = 1; i < (int)(sizeof names / sizeof names[0]); i++) {
		CHECK_CTX("outcome %d", i);
		CHECK_STR(fs_outcome_name((enum fs_outcome)i), names[i]);
		enum fs_outcome o = 0;
		CHECK_INT(fs_outcome_parse(names[i], &o), 0);
		CHECK_INT(o, i);
	}
	CHECK_CTX("%s", "");
	CHECK_STR(fs_outcome_name((enum fs_outcome)0), "invalid");
	CHECK_STR(fs_outcome_name((enum fs_outcome)17), "invalid");
	CHECK_STR(fs_outcome_name((enum fs_outcome) - 1), "invalid");
	enum fs_outcome o = FS_OUT_HELD;
	CHECK_INT(fs_outcome_parse("nope", &o), -EINVAL);
	CHECK_INT(fs_outcome_parse("", &o), -EINVAL);
	CHECK_INT(fs_outcome_parse("invalid", &o), -EINVAL);
	CHECK_INT(fs_outcome_parse("HELD", &o), -EINVAL);
	CHECK_INT(o, FS_OUT_HELD);
}

/* ---- dirty lists, commit, reset, load --------------------------------------------------- */

static bool decide_ok(struct fs_core *c, struct fs_record r, enum fs_outcome want)
{
	struct fs_decision d;
	int rc = fs_core_decide(c, &r, &d);
	bool ok = CHECK_INT(rc, 0);
	ok = CHECK_STR(fs_outcome_name(d.outcome), fs_outcome_name(want)) && ok;
	return ok;
}

static void test_dirty_and_commit(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	CHECK_INT(c.dirty_skus_len, 0);

	decide_ok(&c, rec_open("A", (struct open_params){.stock = 10, .limit = 3}, 1),
		  FS_OUT_APPLIED);
	CHECK_INT(c.dirty_skus_len, 1);
	CHECK_INT(c.dirty_skus[0], 0);
	CHECK(c.skus[0].dirty);
	CHECK(!c.skus[0].stored);
	CHECK_INT(c.skus[0].base_available, 0);

	decide_ok(&c, rec_buy("A", "b1", 1, 2), FS_OUT_HELD);
	decide_ok(&c, rec_buy("A", "b1", 1, 3), FS_OUT_HELD);
	CHECK_INT(c.dirty_skus_len, 1); /* no duplicates */
	CHECK_INT(c.dirty_buyers_len, 1);
	CHECK_INT(c.buyers[0].units, 2);
	CHECK_INT(c.buyers[0].base_units, 0);

	decide_ok(&c, rec_open("B", (struct open_params){.stock = 1}, 4), FS_OUT_APPLIED);
	decide_ok(&c, rec_buy("B", "b1", 1, 5), FS_OUT_HELD);
	CHECK_INT(c.dirty_skus_len, 2);
	CHECK_INT(c.dirty_skus[0], 0);
	CHECK_INT(c.dirty_skus[1], 1); /* first-changed order */
	CHECK_INT(c.dirty_buyers_len, 2);

	fs_core_commit(&c);
	CHECK_INT(c.dirty_skus_len, 0);
	CHECK_INT(c.dirty_buyers_len, 0);
	for (uint32_t i = 0; i < c.skus_len; i++) {
		const struct fs_sku *s = &c.skus[i];
		CHECK_CTX("after commit, sku %s", s->sku);
		CHECK(!s->dirty);
		CHECK(s->stored);
		CHECK_INT(s->base_available, s->available);
		CHECK_INT(s->base_held, s->held);
		CHECK_INT(s->base_sold, s->sold);
		CHECK_INT(s->base_supply, s->supply);
	}
	for (uint32_t i = 0; i < c.buyers_len; i++) {
		CHECK_CTX("after commit, buyer %u", i);
		CHECK(!c.buyers[i].dirty);
		CHECK_INT(c.buyers[i].base_units, c.buyers[i].units);
	}
	CHECK_CTX("%s", "");
	CHECK_INT(fs_core_sku(&c, "A")->base_available, 8);
	CHECK_INT(fs_core_sku(&c, "A")->base_held, 2);
	CHECK_INT(fs_core_sku(&c, "B")->base_available, 0);

	/* Rejections leave nothing dirty. */
	decide_ok(&c, rec_buy("B", "b2", 1, 6), FS_OUT_SOLD_OUT);
	decide_ok(&c, rec_buy("A", "b1", 2, 7), FS_OUT_LIMIT_EXCEEDED);
	decide_ok(&c, rec_open("A", (struct open_params){.stock = 1}, 8), FS_OUT_REJECTED);
	decide_ok(&c, rec_buy("Z", "b1", 1, 9), FS_OUT_REJECTED);
	decide_ok(&c, rec_base(FS_KIND_TICK, NULL, 10), FS_OUT_APPLIED);
	CHECK_INT(c.dirty_skus_len, 0);
	CHECK_INT(c.dirty_buyers_len, 0);
	CHECK_INT(c.buyers_len, 2); /* a rejected buyer is not added */

	/* A change after commit: only that SKU is dirty, its base is the committed value. */
	decide_ok(&c, rec_buy("A", "b2", 1, 11), FS_OUT_HELD);
	CHECK_INT(c.dirty_skus_len, 1);
	CHECK_STR(c.skus[c.dirty_skus[0]].sku, "A");
	CHECK_INT(fs_core_sku(&c, "A")->available, 7);
	CHECK_INT(fs_core_sku(&c, "A")->base_available, 8);
	CHECK_INT(c.dirty_buyers_len, 1);
	CHECK_STR(c.buyers[c.dirty_buyers[0]].buyer_id, "b2");
	CHECK_INT(c.buyers[c.dirty_buyers[0]].base_units, 0);

	/* close marks dirty without moving counters */
	fs_core_commit(&c);
	decide_ok(&c, rec_base(FS_KIND_CLOSE, "B", 12), FS_OUT_APPLIED);
	CHECK_INT(c.dirty_skus_len, 1);
	CHECK_STR(c.skus[c.dirty_skus[0]].sku, "B");

	/* Reset drops all state. */
	fs_core_reset(&c);
	CHECK_INT(c.skus_len, 0);
	CHECK_INT(c.buyers_len, 0);
	CHECK_INT(c.dirty_skus_len, 0);
	CHECK_INT(c.dirty_buyers_len, 0);
	CHECK_INT(c.clock_ms, 0);
	CHECK(fs_core_sku(&c, "A") == NULL);
	CHECK(fs_core_sku(&c, "B") == NULL);
	decide_ok(&c, rec_buy("A", "b1", 1, 13), FS_OUT_REJECTED);
	decide_ok(&c, rec_open("A", (struct open_params){.stock = 2}, 14), FS_OUT_APPLIED);
	decide_ok(&c, rec_buy("A", "b1", 1, 15), FS_OUT_HELD);
	CHECK_INT(fs_core_sku(&c, "A")->available, 1);
	CHECK_INT(c.buyers_len, 1);
	fs_core_free(&c);
}

static void test_load(void)
{
	struct fs_core c;
	fs_core_init(&c, 2);
	struct fs_sku s = {0};
	snprintf(s.sku, sizeof s.sku, "%s", "A");
	s.partition = 2;
	s.status = FS_SKU_OPEN;
	s.supply = 10;
	s.available = 4;
	s.held = 5;
	s.sold = 1;
	s.per_buyer_limit = 2;
	s.max_qty = 2;
	s.hold_ms = 30000;
	s.dirty = true; /* whatever the caller passes: a loaded SKU is clean and stored */
	CHECK_INT(fs_core_load_sku(&c, &s), 0);
	CHECK_INT(fs_core_load_sku(&c, &s), -EEXIST);
	CHECK_INT(fs_core_load_buyer(&c, "A", "full", 2), 0);
	CHECK_INT(fs_core_load_buyer(&c, "A", "half", 1), 0);
	CHECK_INT(fs_core_load_buyer(&c, "A", "full", 1), -EINVAL);
	CHECK_INT(fs_core_load_buyer(&c, "Z", "full", 1), -EINVAL);
	const struct fs_sku *k = fs_core_sku(&c, "A");
	if (!CHECK(k != NULL))
		return;
	CHECK(k->stored);
	CHECK(!k->dirty);
	CHECK_INT(k->base_available, 4);
	CHECK_INT(k->base_held, 5);
	CHECK_INT(k->base_sold, 1);
	CHECK_INT(k->base_supply, 10);
	CHECK_INT(c.dirty_skus_len, 0);
	CHECK_INT(c.dirty_buyers_len, 0);
	CHECK_INT(c.buyers_len, 2);

	c.clock_ms = 50000; /* the store restores the partition clock */
	decide_ok(&c, rec_buy("A", "full", 1, 40000), FS_OUT_LIMIT_EXCEEDED);
	decide_ok(&c, rec_buy("A", "half", 2, 40001), FS_OUT_LIMIT_EXCEEDED);
	struct fs_decision d;
	struct fs_record r = rec_buy("A", "half", 1, 40002);
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_INT(d.outcome, FS_OUT_HELD);
	CHECK_INT(d.decided_at_ms, 50000);
	CHECK_INT(d.expires_at_ms, 80000);
	decide_ok(&c, rec_buy("A", "new1", 2, 40003), FS_OUT_HELD);
	decide_ok(&c, rec_buy("A", "new2", 2, 40004), FS_OUT_SOLD_OUT);
	decide_ok(&c, rec_buy("A", "new2", 1, 40005), FS_OUT_HELD);
	decide_ok(&c, rec_buy("A", "new3", 1, 40006), FS_OUT_SOLD_OUT);
	k = fs_core_sku(&c, "A");
	CHECK_INT(k->available, 0);
	CHECK_INT(k->held, 9);
	CHECK_INT(k->sold, 1);
	CHECK_INT(k->supply, 10);
	CHECK_INT(k->base_available, 4); /* base stays until commit */
	CHECK(k->dirty);
	CHECK_INT(c.dirty_buyers_len, 3); /* half, new1, new2 */
	for (uint32_t i = 0; i < c.dirty_buyers_len; i++) {
		const struct fs_buyer *b = &c.buyers[c.dirty_buyers[i]];
		CHECK_CTX("dirty buyer %s", b->buyer_id);
		CHECK(strcmp(b->buyer_id, "full") != 0);
		CHECK_INT(b->base_units, strcmp(b->buyer_id, "half") == 0 ? 1 : 0);
	}
	CHECK_CTX("%s", "");
	/* A loaded closed SKU stays closed. */
	struct fs_sku cl = s;
	snprintf(cl.sku, sizeof cl.sku, "%s", "C");
	cl.status = FS_SKU_CLOSED;
	CHECK_INT(fs_core_load_sku(&c, &cl), 0);
	decide_ok(&c, rec_buy("C", "x", 1, 40007), FS_OUT_CLOSED);
	fs_core_free(&c);
}

/* Many SKUs and buyers: the arrays and indexes grow, every entry stays reachable. */
static void test_growth(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	enum { NSKU = 300, NBUY = 40 };
	char sku[16], buyer[16];
	for (int i = 0; i < NSKU; i++) {
		snprintf(sku, sizeof sku, "s%d", i);
		if (!decide_ok(&c,
			       rec_open(sku, (struct open_params){.stock = NBUY / 2 + i % 3}, i),
			       FS_OUT_APPLIED))
			break;
	}
	CHECK_INT(c.skus_len, NSKU);
	CHECK_INT(c.dirty_skus_len, NSKU);
	int held = 0, sold_out = 0;
	for (int i = 0; i < NSKU; i++) {
		snprintf(sku, sizeof sku, "s%d", i);
		for (int j = 0; j < NBUY; j++) {
			snprintf(buyer, sizeof buyer, "b%d", j);
			struct fs_record r = rec_buy(sku, buyer, 1, 1000);
			struct fs_decision d;
			fs_core_decide(&c, &r, &d);
			held += d.outcome == FS_OUT_HELD;
			sold_out += d.outcome == FS_OUT_SOLD_OUT;
		}
	}
	int want_held = 0;
	for (int i = 0; i < NSKU; i++)
		want_held += NBUY / 2 + i % 3;
	CHECK_INT(held, want_held);
	CHECK_INT(sold_out, NSKU * NBUY - want_held);
	CHECK_INT(c.buyers_len, want_held);
	CHECK_INT(c.dirty_buyers_len, want_held);
	for (int i = 0; i < NSKU; i++) {
		snprintf(sku, sizeof sku, "s%d", i);
		const struct fs_sku *s = fs_core_sku(&c, sku);
		if (!CHECK(s != NULL) || !CHECK_STR(s->sku, sku) || !CHECK_INT(s->available, 0))
			break;
	}
	/* Every buyer is found again (second buy: limit 1 reached). */
	for (int j = 0; j < NBUY / 2; j++) {
		snprintf(buyer, sizeof buyer, "b%d", j);
		if (!decide_ok(&c, rec_buy("s0", buyer, 1, 1001), FS_OUT_LIMIT_EXCEEDED))
			break;
	}
	fs_core_free(&c);
}

/* ---- random sequences against a reference model ---------------------------------------- */

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

enum { M_SKUS = 65, M_BUYERS = 40 }; /* the last SKU is never opened */

struct model_sku {
	bool exists, closed;
	int64_t supply, available, held, limit, max_qty, hold_ms, opens, closes;
	int64_t units[M_BUYERS];
};

struct model {
	int64_t clock;
	struct model_sku s[M_SKUS];
};

static void model_decide(struct model *m, const struct fs_record *r, int si, int bi,
			 struct fs_decision *want)
{
	memset(want, 0, sizeof *want);
	if (r->ts_ms > m->clock)
		m->clock = r->ts_ms;
	want->decided_at_ms = m->clock;
	want->qty = r->qty;
	struct model_sku *s = si >= 0 ? &m->s[si] : NULL;
	switch (r->kind) {
	case FS_KIND_INVALID:
		want->outcome = FS_OUT_REJECTED;
		want->reason = r->reject_reason;
		want->qty = 0;
		return;
	case FS_KIND_TICK:
		want->outcome = FS_OUT_APPLIED;
		want->qty = 0;
		return;
	case FS_KIND_OPEN:
		if (s->exists) {
			want->outcome = FS_OUT_REJECTED;
			want->reason = "already_open";
			return;
		}
		memset(s, 0, sizeof *s);
		s->exists = true;
		s->supply = s->available = r->qty;
		s->limit = r->per_buyer_limit;
		s->max_qty = r->max_qty;
		s->hold_ms = r->hold_ms;
		s->opens = r->opens_at_ms;
		s->closes = r->closes_at_ms;
		want->outcome = FS_OUT_APPLIED;
		return;
	case FS_KIND_RESTOCK:
	case FS_KIND_CLOSE:
		if (!s->exists) {
			want->outcome = FS_OUT_REJECTED;
			want->reason = "unknown_sku";
			return;
		}
		if (r->kind == FS_KIND_RESTOCK) {
			s->supply += r->qty;
			s->available += r->qty;
		} else {
			s->closed = true;
		}
		want->outcome = FS_OUT_APPLIED;
		return;
	case FS_KIND_BUY:
		break;
	default:
		want->outcome = FS_OUT_REJECTED; /* not compared: see below */
		return;
	}
	if (!s || !s->exists) {
		want->outcome = FS_OUT_REJECTED;
		want->reason = "unknown_sku";
	} else if (s->closed || (s->closes && m->clock >= s->closes)) {
		want->outcome = FS_OUT_CLOSED;
	} else if (s->opens && m->clock < s->opens) {
		want->outcome = FS_OUT_NOT_OPEN;
	} else if (r->qty > s->max_qty) {
		want->outcome = FS_OUT_REJECTED;
		want->reason = "qty_over_cap";
	} else if (s->units[bi] + r->qty > s->limit) {
		want->outcome = FS_OUT_LIMIT_EXCEEDED;
	} else if (s->available < r->qty) {
		want->outcome = FS_OUT_SOLD_OUT;
	} else {
		s->available -= r->qty;
		s->held += r->qty;
		s->units[bi] += r->qty;
		want->outcome = FS_OUT_HELD;
		want->reserve = true;
		want->expires_at_ms = m->clock + s->hold_ms;
	}
}

static const char *model_sku_name(int i)
{
	static char names[M_SKUS][16];
	if (!names[i][0]) {
		if (i == M_SKUS - 1)
			snprintf(names[i], sizeof names[i], "%s", "never-opened");
		else
			snprintf(names[i], sizeof names[i], "s%d", i);
	}
	return names[i];
}

/* Checks the core against the model and the invariants; returns false on the first failure. */
static bool check_state(const struct fs_core *c, const struct model *m, int64_t step)
{
	CHECK_CTX("random step %" PRId64, step);
	bool ok = CHECK_INT(c->clock_ms, m->clock);
	for (int i = 0; i < M_SKUS; i++) {
		const struct model_sku *ms = &m->s[i];
		const struct fs_sku *s = fs_core_sku(c, model_sku_name(i));
		if (!ms->exists) {
			ok = CHECK(s == NULL) && ok;
			continue;
		}
		if (!CHECK(s != NULL))
			return false;
		/* INV-1: conservation, no oversell. */
		ok = CHECK_INT(s->available + s->held + s->sold, s->supply) && ok;
		ok = CHECK(s->available >= 0) && ok;
		ok = CHECK_INT(s->supply, ms->supply) && ok;
		ok = CHECK_INT(s->available, ms->available) && ok;
		ok = CHECK_INT(s->held, ms->held) && ok; /* held == sum of held qty */
		ok = CHECK_INT(s->sold, 0) && ok;
		ok = CHECK(s->status == (ms->closed ? FS_SKU_CLOSED : FS_SKU_OPEN)) && ok;
	}
	int64_t units_total[M_SKUS] = {0};
	for (uint32_t i = 0; i < c->buyers_len; i++) {
		const struct fs_buyer *b = &c->buyers[i];
		const struct fs_sku *s = &c->skus[b->sku_index];
		int si = -1, bi = atoi(b->buyer_id + 1);
		for (int k = 0; k < M_SKUS; k++)
			if (strcmp(model_sku_name(k), s->sku) == 0)
				si = k;
		if (!CHECK(si >= 0 && bi >= 0 && bi < M_BUYERS))
			return false;
		ok = CHECK(b->units <= s->per_buyer_limit) && ok;
		ok = CHECK(b->units >= 0) && ok;
		ok = CHECK_INT(b->units, m->s[si].units[bi]) && ok;
		units_total[si] += b->units;
	}
	/* No sold units yet (the hold lifecycle is not in the core): units are all held. */
	for (int k = 0; k < M_SKUS; k++)
		if (m->s[k].exists)
			ok = CHECK_INT(units_total[k], m->s[k].held) && ok;
	/* Dirty bookkeeping: every changed entry is on its dirty list, once. */
	uint32_t dirty = 0;
	for (uint32_t i = 0; i < c->skus_len; i++) {
		const struct fs_sku *s = &c->skus[i];
		bool changed = s->available != s->base_available || s->held != s->base_held ||
			       s->sold != s->base_sold || s->supply != s->base_supply || !s->stored;
		ok = CHECK(!changed || s->dirty) && ok;
		dirty += s->dirty;
	}
	ok = CHECK_INT(dirty, c->dirty_skus_len) && ok;
	for (uint32_t i = 0; i < c->dirty_skus_len; i++)
		ok = CHECK(c->skus[c->dirty_skus[i]].dirty) && ok;
	dirty = 0;
	for (uint32_t i = 0; i < c->buyers_len; i++) {
		const struct fs_buyer *b = &c->buyers[i];
		ok = CHECK(b->units == b->base_units || b->dirty) && ok;
		dirty += b->dirty;
	}
	ok = CHECK_INT(dirty, c->dirty_buyers_len) && ok;
	return ok;
}

/* After a commit: what "Postgres" holds is the core's state; reset and load it back, as the
 * worker does after a failed transaction. */
static void reload(struct fs_core *c)
{
	uint32_t ns = c->skus_len, nb = c->buyers_len;
	struct fs_sku *skus = malloc((ns + 1) * sizeof *skus);
	struct fs_buyer *buyers = malloc((nb + 1) * sizeof *buyers);
	if (!CHECK(skus && buyers)) {
		free(skus);
		free(buyers);
		return;
	}
	/* A core without buyers (or SKUs) yet has no array: memcpy from NULL is undefined. */
	if (ns)
		memcpy(skus, c->skus, ns * sizeof *skus);
	if (nb)
		memcpy(buyers, c->buyers, nb * sizeof *buyers);
	int64_t clock = c->clock_ms;
	fs_core_reset(c);
	/* Load in reverse order: indexes change, names must not. */
	for (uint32_t i = ns; i-- > 0;) {
		struct fs_sku s = skus[i];
		s.available = s.base_available;
		s.held = s.base_held;
		s.sold = s.base_sold;
		s.supply = s.base_supply;
		CHECK_INT(fs_core_load_sku(c, &s), 0);
	}
	for (uint32_t i = nb; i-- > 0;)
		CHECK_INT(fs_core_load_buyer(c, skus[buyers[i].sku_index].sku, buyers[i].buyer_id,
					     buyers[i].base_units),
			  0);
	c->clock_ms = clock;
	free(skus);
	free(buyers);
}

static void test_random(uint64_t seed, int64_t steps)
{
	printf("test_core: random sequence seed=%" PRIu64 " (rerun: test_core --seed %" PRIu64
	       " or FS_TEST_SEED=%" PRIu64 ")\n",
	       seed, seed, seed);
	fflush(stdout);
	rng_state = seed;
	struct fs_core c;
	fs_core_init(&c, 0);
	struct model *m = calloc(1, sizeof *m);
	if (!CHECK(m != NULL))
		return;
	int64_t ts = 1000000, next_commit = rnd(1, 200);
	int64_t counts[FS_OUT_APPLIED + 1] = {0};
	int reloads = 0;
	static const char *const reasons[] = {"bad_json", "bad_qty", "key_mismatch"};
	for (int64_t step = 0; step < steps; step++) {
		/* Timestamps: mostly forward, sometimes back (the clock must not follow). */
		int64_t r100 = rnd(0, 99);
		if (r100 < 10)
			ts -= rnd(0, 3000);
		else
			ts += rnd(0, 60);
		if (ts < 0)
			ts = 0;
		/* Eight SKUs in play at a time; the set moves on every 1000 steps, so that closed
		 * and ended sales give way to new ones. */
		int lo = (int)(step / 1000) * 6;
		if (lo > M_SKUS - 1 - 8)
			lo = M_SKUS - 1 - 8;
		int si = rnd(0, 99) < 3 ? M_SKUS - 1 : lo + (int)rnd(0, 7);
		int bi = (int)rnd(0, M_BUYERS - 1);
		char buyer[16];
		snprintf(buyer, sizeof buyer, "b%d", bi);
		const char *sku = model_sku_name(si);
		struct fs_record r;
		int64_t pick = rnd(0, 99);
		if (pick < 4) {
			struct open_params p = {.stock = rnd(0, 25),
						.limit = rnd(1, 4),
						.hold_ms = rnd(1, 600) * 1000};
			p.max_qty = rnd(1, 5);
			int64_t clock = ts > m->clock ? ts : m->clock;
			if (rnd(0, 3) == 0)
				p.opens = clock + rnd(0, 3000);
			if (rnd(0, 3) == 0)
				p.closes = (p.opens ? p.opens : clock) + rnd(1, 20000);
			r = rec_open(sku, p, ts);
		} else if (pick < 7) {
			r = rec_base(FS_KIND_RESTOCK, sku, ts);
			r.qty = rnd(1, 10);
		} else if (pick < 8 && rnd(0, 3) == 0) {
			r = rec_base(FS_KIND_CLOSE, sku, ts);
		} else if (pick < 11) {
			r = rec_base(FS_KIND_TICK, NULL, ts);
		} else if (pick < 14) {
			r = rec_base(FS_KIND_INVALID, rnd(0, 1) ? sku : NULL, ts);
			r.reject_reason = reasons[rnd(0, 2)];
		} else if (pick < 16) {
			r = rec_base(rnd(0, 1) ? FS_KIND_CONFIRM : FS_KIND_CANCEL, sku, ts);
			r.has_intent = true;
			snprintf(r.intent_id, sizeof r.intent_id,
				 "00000000-0000-4000-8000-%012" PRId64, rnd(0, step));
		} else {
			r = rec_buy(sku, buyer, rnd(0, 9) == 0 ? rnd(1, 6) : rnd(1, 2), ts);
		}
		struct fs_decision got, want;
		int rc = fs_core_decide(&c, &r, &got);
		model_decide(m, &r, si, bi, &want);
		CHECK_CTX("random step %" PRId64 " kind %s sku %s buyer %s qty %" PRId64
			  " ts %" PRId64,
			  step, fs_kind_name(r.kind), r.sku, r.buyer_id, r.qty, r.ts_ms);
		bool ok = CHECK_INT(rc, 0);
		if (r.kind == FS_KIND_CONFIRM || r.kind == FS_KIND_CANCEL) {
			/* No hold lifecycle in the model: only "no effect". */
			ok = CHECK(got.outcome != FS_OUT_HELD && !got.reserve) && ok;
		} else {
			ok = CHECK_STR(fs_outcome_name(got.outcome),
				       fs_outcome_name(want.outcome)) &&
			     ok;
			ok = CHECK_STR(got.reason, want.reason) && ok;
			ok = CHECK_INT(got.expires_at_ms, want.expires_at_ms) && ok;
			ok = CHECK(got.reserve == want.reserve) && ok;
			if (r.kind != FS_KIND_INVALID && r.kind != FS_KIND_TICK)
				ok = CHECK_INT(got.qty, want.qty) && ok;
		}
		ok = CHECK_INT(got.decided_at_ms, want.decided_at_ms) && ok;
		ok = CHECK(!got.duplicate) && ok;
		if (got.outcome > 0 && got.outcome <= FS_OUT_APPLIED)
			counts[got.outcome]++;
		ok = check_state(&c, m, step) && ok;
		if (!ok) {
			fprintf(stderr,
				"test_core: random sequence failed at step %" PRId64
				" (seed=%" PRIu64 ")\n",
				step, seed);
			break;
		}
		if (--next_commit == 0) {
			fs_core_commit(&c);
			CHECK_INT(c.dirty_skus_len, 0);
			CHECK_INT(c.dirty_buyers_len, 0);
			if (rnd(0, 3) == 0) {
				reload(&c);
				reloads++;
				if (!check_state(&c, m, step))
					break;
			}
			next_commit = rnd(1, 200);
		}
	}
	CHECK_CTX("%s", "");
	/* The sequence exercised what it claims to (else a pass means little). */
	CHECK(counts[FS_OUT_HELD] > 100);
	CHECK(counts[FS_OUT_SOLD_OUT] > 10);
	CHECK(counts[FS_OUT_LIMIT_EXCEEDED] > 10);
	CHECK(counts[FS_OUT_CLOSED] > 10);
	CHECK(counts[FS_OUT_REJECTED] > 10);
	CHECK(reloads > 5);
	printf("test_core: random: held %" PRId64 ", sold_out %" PRId64 ", limit %" PRId64
	       ", not_open %" PRId64 ", closed %" PRId64 ", rejected %" PRId64 ", reloads %d\n",
	       counts[FS_OUT_HELD], counts[FS_OUT_SOLD_OUT], counts[FS_OUT_LIMIT_EXCEEDED],
	       counts[FS_OUT_NOT_OPEN], counts[FS_OUT_CLOSED], counts[FS_OUT_REJECTED], reloads);
	free(m);
	fs_core_free(&c);
}

/* Ended holds out of memory (issue 28, item 12): only committed ends go, the live holds keep
 * their expiry order, and a dirty core is left alone. */
static void test_forget_ended(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	decide_ok(&c,
		  rec_open("F", (struct open_params){.stock = 10, .limit = 10, .hold_ms = 1000}, 1),
		  FS_OUT_APPLIED);
	char ids[6][FS_UUID_LEN + 1];
	for (int i = 0; i < 6; i++) {
		struct fs_record r = rec_buy("F", "b", 1, 10 + i);
		memcpy(ids[i], r.intent_id, sizeof ids[i]);
		decide_ok(&c, r, FS_OUT_HELD);
	}
	for (int i = 0; i < 2; i++) {
		struct fs_record r = rec_base(FS_KIND_CONFIRM, "F", 20);
		r.has_intent = true;
		memcpy(r.intent_id, ids[i], sizeof ids[i]);
		decide_ok(&c, r, FS_OUT_CONFIRMED);
	}
	CHECK_CTX("forget: before the commit");
	CHECK_INT(fs_core_ended(&c), 2);
	CHECK_INT(fs_core_forget_ended(&c), 0); /* the ends are not committed yet */
	fs_core_commit(&c);
	int64_t next = fs_core_next_expiry(&c);
	CHECK_CTX("forget: after the commit");
	CHECK_INT(fs_core_forget_ended(&c), 2);
	CHECK_INT(c.holds_len, 4);
	CHECK_INT(fs_core_ended(&c), 0);
	CHECK(fs_core_hold(&c, ids[0]) == NULL && fs_core_hold(&c, ids[1]) == NULL);
	for (int i = 2; i < 6; i++)
		CHECK(fs_core_hold(&c, ids[i]) != NULL);
	CHECK_INT(fs_core_next_expiry(&c), next);
	CHECK_INT(fs_core_sku(&c, "F")->held, 4);
	CHECK_INT(fs_core_sku(&c, "F")->sold, 2);
	/* The live holds expire in their order (expiry, then the buy's offset), as before. */
	fs_core_advance(&c, 5000, next_offset++);
	if (CHECK_INT(c.expired_len, 4))
		for (uint32_t k = 0; k < 4; k++)
			CHECK_STR(c.holds[c.expired[k]].intent_id, ids[2 + k]);
	fs_core_free(&c);
}

/* The store refused a hold's expiry (issue 47, item 5): fs_core_refuse_due takes the listed
 * holds due at the record out of the clock for good (held, listed for the transaction); the
 * others due there expire as the clock moves; a reload with the flag keeps it out; a cancel
 * still ends it. */
static void test_refuse_due(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	decide_ok(&c,
		  rec_open("R", (struct open_params){.stock = 10, .limit = 10, .hold_ms = 1000}, 1),
		  FS_OUT_APPLIED);
	char ids[3][FS_UUID_LEN + 1];
	for (int i = 0; i < 3; i++) {
		struct fs_record r = rec_buy("R", "b", 1, 10 + i);
		memcpy(ids[i], r.intent_id, sizeof ids[i]);
		decide_ok(&c, r, FS_OUT_HELD);
	}
	fs_core_commit(&c);
	CHECK_CTX("refuse_due");
	const char *due[4];
	CHECK_INT(fs_core_due(&c, 5000, due, 4), 3);
	CHECK_STR(due[0], ids[0]);
	CHECK_STR(due[2], ids[2]);
	CHECK_INT(fs_core_due(&c, 1010, due, 4), 1); /* only the first is due by then */
	const char *refuse[] = {ids[1]};
	fs_core_refuse_due(&c, 5000, 77, refuse, 1);
	CHECK_INT(c.refused_len, 1);
	CHECK_INT(c.refused_offset[0], 77);
	fs_core_advance(&c, 5000, 77);
	CHECK_INT(c.expired_len, 2);
	CHECK_INT(fs_core_hold(&c, ids[1])->status, FS_HOLD_HELD);
	CHECK(fs_core_hold(&c, ids[1])->expiry_refused);
	CHECK_INT(fs_core_sku(&c, "R")->held, 1);
	fs_core_commit(&c);
	fs_core_advance(&c, 1000000, 78); /* never again */
	CHECK_INT(c.expired_len, 0);
	CHECK_INT(fs_core_next_expiry(&c), -1);
	/* Loaded with its flag, it stays out of the clock. */
	struct fs_core d;
	fs_core_init(&d, 0);
	decide_ok(&d,
		  rec_open("R", (struct open_params){.stock = 10, .limit = 10, .hold_ms = 1000}, 1),
		  FS_OUT_APPLIED);
	struct fs_hold h = *fs_core_hold(&c, ids[1]);
	CHECK_INT(fs_core_load_hold(&d, &h, "R", "b"), 0);
	CHECK_INT(fs_core_next_expiry(&d), -1);
	/* A cancel still ends it: its units back to stock. */
	struct fs_record r = rec_base(FS_KIND_CANCEL, "R", 2000000);
	r.has_intent = true;
	memcpy(r.intent_id, ids[1], sizeof ids[1]);
	decide_ok(&c, r, FS_OUT_CANCELLED);
	CHECK_INT(fs_core_sku(&c, "R")->held, 0);
	fs_core_free(&d);
	fs_core_free(&c);
}

/* A partition holds at most FS_SKUS_PER_PARTITION_MAX SKUs: one more is rejected. */
static void test_sku_cap(void)
{
	struct fs_core c;
	fs_core_init(&c, 0);
	char name[16];
	int applied = 0;
	for (int i = 0; i < FS_SKUS_PER_PARTITION_MAX; i++) {
		snprintf(name, sizeof name, "S%d", i);
		struct fs_record r = rec_open(name, (struct open_params){.stock = 1}, 1);
		struct fs_decision d;
		applied += fs_core_decide(&c, &r, &d) == 0 && d.outcome == FS_OUT_APPLIED;
	}
	CHECK_CTX("sku cap");
	CHECK_INT(applied, FS_SKUS_PER_PARTITION_MAX);
	struct fs_record r = rec_open("one-more", (struct open_params){.stock = 1}, 2);
	struct fs_decision d;
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_STR(fs_outcome_name(d.outcome), "rejected");
	CHECK_STR(d.reason ? d.reason : "", "too_many_skus");
	r = rec_open("S7", (struct open_params){.stock = 1}, 3);
	CHECK_INT(fs_core_decide(&c, &r, &d), 0);
	CHECK_STR(d.reason ? d.reason : "", "already_open");
	CHECK_INT(c.skus_len, FS_SKUS_PER_PARTITION_MAX);
	fs_core_free(&c);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_core");
	}
	uint64_t seed = check_seed(&a);

	test_timelines();
	test_sale_state();
	test_followup_without_hold();
	test_clock_overflow();
	test_outcome_names();
	test_dirty_and_commit();
	test_load();
	test_growth();
	test_forget_ended();
	test_refuse_due();
	test_sku_cap();
	test_random(seed, 10000);
	return check_done("test_core");
}
