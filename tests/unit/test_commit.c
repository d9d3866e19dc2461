/* test_commit.c: a decided batch's transaction as data (src/core/commit.c), without Postgres:
 * the compare-and-set's values, one decision row per new intent, runs of alike invalid records
 * as one rejects row, sale_log amounts, forwards, holds and buyers by COPY only when new (and
 * never when careful), SKU inserts against guarded updates with the committed base values.
 * Records are made with the real parser and decided by the real core. */
#include "check.h"
#include "core/batch.h"
#include "core/commit.h"

#define U(n) "00000000-0000-4000-8000-00000000000" #n

static struct fs_record_limits limits = {0};

static void push(struct fs_batch *b, int32_t part, int64_t off, const char *key, const char *json,
		 int64_t ts)
{
	struct fs_item *it = fs_batch_push(b);
	if (!CHECK(it != NULL))
		return;
	fs_record_parse(&limits, key, key ? strlen(key) : 0, json, strlen(json), part, off, ts,
			&it->rec);
	if (it->rec.misrouted)
		CHECK_INT(fs_batch_keep(b, it, key, strlen(key), json, strlen(json)), 0);
}

/* A test's batch, core and transaction: made empty, and freed. */
static void fixture_init(struct fs_batch *b, struct fs_core *c, struct fs_tx *t, uint32_t cap,
			 int32_t partition)
{
	fs_tx_init(t);
	CHECK_INT(fs_batch_init(b, cap), 0);
	CHECK_INT(fs_core_init(c, partition), 0);
}

static void fixture_free(struct fs_batch *b, struct fs_core *c, struct fs_tx *t)
{
	fs_tx_free(t);
	fs_batch_free(b);
	fs_core_free(c);
}

static const struct fs_item *item_at(const struct fs_batch *b, int64_t off)
{
	for (uint32_t i = 0; i < b->len; i++)
		if (b->items[i].rec.offset == off)
			return &b->items[i];
	return NULL;
}

/* A new partition: an open, buys (one held, one over the limit), a run of three alike bad
 * records, a bad record with an intent id, another reason, a close. */
static void test_first_batch(void)
{
	struct fs_batch b;
	struct fs_core c;
	struct fs_tx t;
	fixture_init(&b, &c, &t, 64, 0);
	push(&b, 0, 10, "A",
	     "{\"v\":1,\"type\":\"open\",\"sku\":\"A\",\"stock\":3,\"per_buyer_limit\":1}", 1000);
	push(&b, 0, 11, "A",
	     "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U(
		     1) "\",\"sku\":\"A\",\"buyer_id\":\"b1\",\"qty\":1}",
	     1001);
	push(&b, 0, 12, "A", "garbage", 1002);
	push(&b, 0, 13, "A", "garbage", 1002);
	push(&b, 0, 14, "A", "garbage", 1003);
	push(&b, 0, 15, "A", "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U(2) "\",\"qty\":1}",
	     1004);
	push(&b, 0, 16, "A", "[1]", 1004);
	push(&b, 0, 17, "A",
	     "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U(
		     3) "\",\"sku\":\"A\",\"buyer_id\":\"b1\",\"qty\":1}",
	     1005);
	push(&b, 0, 18, "A", "{\"v\":1,\"type\":\"close\",\"sku\":\"A\"}", 1006);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	CHECK_INT(fs_tx_build(&t, 0, -1, 19, 5, &b, &c, false), 0);

	CHECK_CTX("compare-and-set");
	CHECK_INT(t.cas.partition, 0);
	CHECK_INT(t.cas.expected, -1);
	CHECK_INT(t.cas.next, 19);
	CHECK_INT(t.cas.replied, 5);
	CHECK_INT(t.cas.first_off, 10);
	CHECK_INT(t.cas.clock_ms, c.clock_ms);
	CHECK_INT(t.cas.counts.records, 9);
	CHECK_INT(t.cas.counts.invalid, b.counts.invalid);

	CHECK_CTX("decisions: one per new intent, in order");
	CHECK_INT(t.decisions.len, b.counts.fresh);
	CHECK_INT(t.decisions.len, 2);
	for (uint32_t i = 0; i < t.decisions.len; i++) {
		const struct fs_tx_decision *d = &t.decisions.v[i];
		const struct fs_item *it = item_at(&b, d->offset);
		if (!CHECK(it != NULL))
			continue;
		CHECK_INT(it->cls, FS_ITEM_NEW);
		CHECK_STR(d->intent_id, it->rec.intent_id);
		CHECK_INT(d->kind, FS_KIND_BUY);
		CHECK_INT(d->body_hash, it->rec.body_hash);
		CHECK_STR(d->buyer_id, "b1");
		CHECK_STR(d->outcome, fs_outcome_name(it->dec.outcome));
		CHECK_STR(d->reason, it->dec.reason);
		CHECK_INT(d->has_expiry, it->dec.reserve);
		CHECK_INT(d->decided_at_ms, it->dec.decided_at_ms);
	}
	CHECK_INT(t.decisions.v[0].offset, 11);
	CHECK_STR(t.decisions.v[0].outcome, "held");
	CHECK(t.decisions.v[0].has_expiry);
	CHECK_INT(t.decisions.v[1].offset, 17);
	CHECK_STR(t.decisions.v[1].outcome, "limit_exceeded");
	CHECK(!t.decisions.v[1].has_expiry);

	CHECK_CTX("rejects: a run of alike ones, then one per intent id or reason");
	if (CHECK_INT(t.rejects.len, 3)) {
		CHECK_INT(t.rejects.v[0].offset, 12);
		CHECK_INT(t.rejects.v[0].offset_end, 14);
		CHECK(t.rejects.v[0].intent_id == NULL);
		CHECK_STR(t.rejects.v[0].reason, item_at(&b, 12)->dec.reason);
		CHECK_INT(t.rejects.v[1].offset, 15);
		CHECK_INT(t.rejects.v[1].offset_end, 15);
		CHECK_STR(t.rejects.v[1].intent_id, U(2));
		CHECK_INT(t.rejects.v[2].offset, 16);
		CHECK_INT(t.rejects.v[2].offset_end, 16);
		CHECK(strcmp(t.rejects.v[2].reason, t.rejects.v[0].reason) != 0);
	}

	CHECK_CTX("sale_log: the stock opened, 0 for a close");
	if (CHECK_INT(t.sales.len, 2)) {
		CHECK_INT(t.sales.v[0].offset, 10);
		CHECK_INT(t.sales.v[0].kind, FS_KIND_OPEN);
		CHECK_INT(t.sales.v[0].amount, 3);
		CHECK_STR(t.sales.v[0].sku, "A");
		CHECK_INT(t.sales.v[1].kind, FS_KIND_CLOSE);
		CHECK_INT(t.sales.v[1].amount, 0);
	}
	CHECK_INT(t.forwards.len, 0);

	CHECK_CTX("core rows: all new, by COPY");
	if (CHECK_INT(t.holds.len, 1)) {
		const struct fs_tx_hold *h = &t.holds.v[0];
		CHECK(h->copy);
		CHECK_STR(h->intent_id, U(1));
		CHECK_STR(h->sku, "A");
		CHECK_STR(h->buyer_id, "b1");
		CHECK_INT(h->qty, 1);
		CHECK_INT(h->offset, 11);
		CHECK_STR(h->status, "held");
		CHECK(!h->ended);
	}
	CHECK_INT(t.n_hold_copies, 1);
	if (CHECK_INT(t.skus.len, 1)) {
		const struct fs_tx_sku *k = &t.skus.v[0];
		CHECK(k->insert);
		CHECK_STR(k->status, "closed");
		CHECK_INT(k->supply, 3);
		CHECK_INT(k->available + k->held + k->sold, k->supply);
		CHECK_INT(k->held, 1);
		CHECK_INT(k->per_buyer_limit, 1);
	}
	CHECK_INT(t.n_sku_inserts, 1);
	CHECK_INT(t.n_sku_updates, 0);
	if (CHECK_INT(t.buyers.len, 1)) {
		CHECK(t.buyers.v[0].copy);
		CHECK_STR(t.buyers.v[0].buyer_id, "b1");
		CHECK_INT(t.buyers.v[0].units, 1);
	}

	CHECK_CTX("careful: nothing taken for new");
	CHECK_INT(fs_tx_build(&t, 0, -1, 19, 5, &b, &c, true), 0);
	CHECK_INT(t.n_hold_copies, 0);
	CHECK_INT(t.n_buyer_copies, 0);
	CHECK(t.holds.len == 1 && !t.holds.v[0].copy);
	CHECK(t.buyers.len == 1 && !t.buyers.v[0].copy);
	CHECK_INT(t.decisions.len, 2); /* decisions are asserted new either way */

	fixture_free(&b, &c, &t);
}

/* The batch after a committed one: the SKU is updated against its committed base values, the
 * hold (now stored) goes by upsert with its end, and a rebuild of the same batch reuses the
 * arrays. */
static void test_second_batch(void)
{
	struct fs_batch b;
	struct fs_core c;
	struct fs_tx t;
	fixture_init(&b, &c, &t, 16, 0);
	push(&b, 0, 0, "B",
	     "{\"v\":1,\"type\":\"open\",\"sku\":\"B\",\"stock\":2,\"per_buyer_limit\":2}", 1000);
	push(&b, 0, 1, "B",
	     "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U(
		     4) "\",\"sku\":\"B\",\"buyer_id\":\"b2\",\"qty\":2}",
	     1001);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	fs_core_commit(&c);
	fs_batch_clear(&b);
	push(&b, 0, 2, "B", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U(4) "\"}", 2000);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	CHECK_INT(fs_tx_build(&t, 0, 2, 3, -1, &b, &c, false), 0);

	CHECK_CTX("second batch");
	CHECK_INT(t.cas.expected, 2);
	CHECK_INT(t.cas.first_off, 2);
	CHECK_INT(t.cas.replied, -1);
	CHECK_INT(t.decisions.len, 1);
	CHECK_INT(t.decisions.v[0].kind, FS_KIND_CONFIRM);
	CHECK(t.decisions.v[0].buyer_id == NULL);
	if (CHECK_INT(t.holds.len, 1)) {
		const struct fs_tx_hold *h = &t.holds.v[0];
		CHECK(!h->copy);
		CHECK_STR(h->status, "confirmed");
		CHECK(h->ended);
		CHECK_INT(h->ended_offset, 2);
		CHECK_INT(h->ended_at_ms, 2000);
	}
	if (CHECK_INT(t.skus.len, 1)) {
		const struct fs_tx_sku *k = &t.skus.v[0];
		CHECK(!k->insert);
		CHECK_INT(k->held, 0);
		CHECK_INT(k->sold, 2);
		CHECK_INT(k->base_held, 2);
		CHECK_INT(k->base_sold, 0);
		CHECK_INT(k->base_available, 0);
		CHECK_INT(k->base_supply, 2);
	}
	CHECK_INT(t.n_sku_updates, 1);
	CHECK_INT(t.buyers.len, 0); /* a confirm keeps the buyer's units */

	fixture_free(&b, &c, &t);
}

/* Records on the wrong partition: one forwards row each, naming the intent's kind only when
 * the record names an intent. */
static void test_forwards(void)
{
	struct fs_batch b;
	struct fs_core c;
	struct fs_tx t;
	limits.partitions = 4;
	const char *key = "K1";
	int32_t rule = fs_partition_of(key, strlen(key), 4);
	int32_t here = (rule + 1) % 4;
	fixture_init(&b, &c, &t, 16, here);
	push(&b, here, 7, key,
	     "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U(
		     5) "\",\"sku\":\"K1\",\"buyer_id\":\"b\",\"qty\":1}",
	     10);
	push(&b, here, 8, key, "{\"v\":1,\"type\":\"restock\",\"sku\":\"K1\",\"add\":1}", 11);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	CHECK_INT(fs_tx_build(&t, here, 7, 9, -1, &b, &c, false), 0);
	CHECK_CTX("forwards");
	CHECK_INT(t.cas.counts.forwarded, 2);
	if (CHECK_INT(t.forwards.len, 2)) {
		CHECK_INT(t.forwards.v[0].offset, 7);
		CHECK_INT(t.forwards.v[0].to_partition, rule);
		CHECK_STR(t.forwards.v[0].intent_id, U(5));
		CHECK_INT(t.forwards.v[0].kind, FS_KIND_BUY);
		CHECK_INT(t.forwards.v[1].offset, 8);
		CHECK(t.forwards.v[1].intent_id == NULL);
		CHECK_INT(t.forwards.v[1].kind, 0);
	}
	CHECK_INT(t.decisions.len + t.sales.len + t.holds.len + t.skus.len, 0);
	limits.partitions = 0;
	fixture_free(&b, &c, &t);
}

/* Offsets no consumer is given (a transaction's marker, an aborted transaction's records,
 * issue 28 item 9): counted with the batch that follows them, none for a contiguous batch. */
static void test_gaps(void)
{
	struct fs_batch b;
	struct fs_core c;
	struct fs_tx t;
	fixture_init(&b, &c, &t, 16, 0);
	/* Stored next 3; records at 5 and 9: offsets 3, 4 and 6-8 hold none. */
	push(&b, 0, 5, "G", "{\"v\":1,\"type\":\"open\",\"sku\":\"G\",\"stock\":2}", 1000);
	push(&b, 0, 9, "G", "{\"v\":1,\"type\":\"restock\",\"sku\":\"G\",\"add\":1}", 1001);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	CHECK_INT(fs_tx_build(&t, 0, 3, 10, -1, &b, &c, false), 0);
	CHECK_CTX("gaps after a stored offset");
	CHECK_INT(t.cas.gaps, 5);
	CHECK_INT(t.cas.counts.records, 2);
	/* A partition's first batch: counted from its first record, not from 0. */
	CHECK_INT(fs_tx_build(&t, 0, -1, 10, -1, &b, &c, false), 0);
	CHECK_CTX("gaps in a first batch");
	CHECK_INT(t.cas.first_off, 5);
	CHECK_INT(t.cas.gaps, 3);
	fs_batch_clear(&b);
	fs_core_commit(&c);
	push(&b, 0, 10, "G", "{\"v\":1,\"type\":\"close\",\"sku\":\"G\"}", 1002);
	CHECK_INT(fs_batch_decide(&b, &c), 0);
	CHECK_INT(fs_tx_build(&t, 0, 10, 11, -1, &b, &c, false), 0);
	CHECK_CTX("no gaps");
	CHECK_INT(t.cas.gaps, 0);
	fixture_free(&b, &c, &t);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_commit");
	}
	test_first_batch();
	test_second_batch();
	test_forwards();
	test_gaps();
	return check_done("test_commit");
}
