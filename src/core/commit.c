/* commit.c: a decided batch's transaction as data (see commit.h). */
#include "core/commit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void fs_tx_init(struct fs_tx *t)
{
	memset(t, 0, sizeof *t);
}

void fs_tx_free(struct fs_tx *t)
{
	free(t->decisions.v);
	free(t->rejects.v);
	free(t->sales.v);
	free(t->forwards.v);
	free(t->holds.v);
	free(t->skus.v);
	free(t->buyers.v);
	fs_tx_init(t);
}

/* Room for n rows of size `size` in the array (v, cap). */
static int reserve(void **v, uint32_t *cap, uint32_t n, size_t size)
{
	if (n <= *cap)
		return 0;
	uint32_t c = *cap ? *cap : 16;
	while (c < n)
		c *= 2;
	void *p = realloc(*v, (size_t)c * size);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = c;
	return 0;
}
#define RESERVE(arr, n) reserve((void **)&(arr).v, &(arr).cap, (n), sizeof *(arr).v)

static void add_decision(struct fs_tx *t, const struct fs_item *it)
{
	t->decisions.v[t->decisions.len++] = (struct fs_tx_decision){
		.intent_id = it->rec.intent_id,
		.kind = fs_item_key_kind(it),
		.body_hash = it->rec.body_hash,
		.offset = it->rec.offset,
		.sku = it->rec.sku,
		.buyer_id = it->rec.kind == FS_KIND_BUY ? it->rec.buyer_id : NULL,
		.qty = it->dec.qty,
		.outcome = fs_outcome_name(it->dec.outcome),
		.reason = it->dec.reason,
		.has_expiry = it->dec.reserve,
		.expires_at_ms = it->dec.reserve ? it->dec.expires_at_ms : 0,
		.decided_at_ms = it->dec.decided_at_ms,
	};
}

static void add_sale(struct fs_tx *t, const struct fs_item *it)
{
	t->sales.v[t->sales.len++] = (struct fs_tx_sale){
		.offset = it->rec.offset,
		.kind = it->rec.kind,
		.sku = it->rec.sku,
		.amount = it->rec.kind == FS_KIND_CLOSE ? 0 : it->rec.qty,
		.outcome = fs_outcome_name(it->dec.outcome),
		.reason = it->dec.reason,
	};
}

static void add_forward(struct fs_tx *t, const struct fs_item *it)
{
	bool named =
		it->rec.has_intent && it->rec.kind >= FS_KIND_BUY && it->rec.kind <= FS_KIND_CANCEL;
	t->forwards.v[t->forwards.len++] = (struct fs_tx_forward){
		.offset = it->rec.offset,
		.to_partition = it->rec.route,
		.intent_id = it->rec.has_intent ? it->rec.intent_id : NULL,
		.kind = named ? it->rec.kind : 0,
	};
}

/* The batch's own rows: decisions, rejects (runs), sale_log, forwards. */
static int build_items(struct fs_tx *t, const struct fs_batch *b)
{
	if (RESERVE(t->decisions, b->len) < 0 || RESERVE(t->rejects, b->len) < 0 ||
	    RESERVE(t->sales, b->len) < 0 || RESERVE(t->forwards, b->len) < 0)
		return -ENOMEM;
	const struct fs_item *prev = NULL; /* the last invalid item, if the run goes on */
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		switch (it->cls) {
		case FS_ITEM_NEW:
			add_decision(t, it);
			break;
		case FS_ITEM_INVALID:
			if (fs_item_extends_reject_run(prev, it)) {
				t->rejects.v[t->rejects.len - 1].offset_end = it->rec.offset;
			} else {
				t->rejects.v[t->rejects.len++] = (struct fs_tx_reject){
					.offset = it->rec.offset,
					.offset_end = it->rec.offset,
					.intent_id = it->rec.has_intent ? it->rec.intent_id : NULL,
					.reason = fs_item_reject_reason(it),
				};
			}
			break;
		case FS_ITEM_SALE:
			add_sale(t, it);
			break;
		case FS_ITEM_FORWARD:
			add_forward(t, it);
			break;
		default:
			break;
		}
		prev = it->cls == FS_ITEM_INVALID ? it : NULL;
	}
	return 0;
}

static void add_hold(struct fs_tx *t, const struct fs_core *core, const struct fs_hold *h,
		     bool careful)
{
	bool ended = h->status != FS_HOLD_HELD;
	bool copy = !h->stored && !careful;
	t->n_hold_copies += copy;
	t->holds.v[t->holds.len++] = (struct fs_tx_hold){
		.copy = copy,
		.intent_id = h->intent_id,
		.sku = core->skus[h->sku_index].sku,
		.buyer_id = core->buyers[h->buyer_index].buyer_id,
		.qty = h->qty,
		.expires_at_ms = h->expires_at_ms,
		.offset = h->offset,
		.status = fs_hold_status_name(h->status),
		.late = h->late,
		.ended = ended,
		.ended_at_ms = ended ? h->ended_at_ms : 0,
		.ended_offset = ended ? h->ended_offset : 0,
	};
}

static void add_sku(struct fs_tx *t, const struct fs_sku *v)
{
	t->n_sku_inserts += !v->stored;
	t->n_sku_updates += v->stored;
	t->skus.v[t->skus.len++] = (struct fs_tx_sku){
		.insert = !v->stored,
		.sku = v->sku,
		.status = v->status == FS_SKU_OPEN ? "open" : "closed",
		.supply = v->supply,
		.available = v->available,
		.held = v->held,
		.sold = v->sold,
		.per_buyer_limit = v->per_buyer_limit,
		.max_qty = v->max_qty,
		.hold_ms = v->hold_ms,
		.opens_at_ms = v->opens_at_ms,
		.closes_at_ms = v->closes_at_ms,
		.base_supply = v->base_supply,
		.base_available = v->base_available,
		.base_held = v->base_held,
		.base_sold = v->base_sold,
	};
}

/* The core's changed rows: holds, SKUs, buyers. */
static int build_core(struct fs_tx *t, const struct fs_core *core, bool careful)
{
	if (RESERVE(t->holds, core->dirty_holds_len) < 0 ||
	    RESERVE(t->skus, core->dirty_skus_len) < 0 ||
	    RESERVE(t->buyers, core->dirty_buyers_len) < 0)
		return -ENOMEM;
	for (uint32_t d = 0; d < core->dirty_holds_len; d++)
		add_hold(t, core, &core->holds[core->dirty_holds[d]], careful);
	for (uint32_t d = 0; d < core->dirty_skus_len; d++)
		add_sku(t, &core->skus[core->dirty_skus[d]]);
	for (uint32_t d = 0; d < core->dirty_buyers_len; d++) {
		const struct fs_buyer *v = &core->buyers[core->dirty_buyers[d]];
		bool copy = !v->stored && !careful;
		t->n_buyer_copies += copy;
		t->buyers.v[t->buyers.len++] = (struct fs_tx_buyer){
			.copy = copy,
			.sku = core->skus[v->sku_index].sku,
			.buyer_id = v->buyer_id,
			.units = v->units,
		};
	}
	return 0;
}

int fs_tx_build(struct fs_tx *t, int32_t partition, int64_t expected, int64_t next_offset,
		int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
		bool careful)
{
	t->decisions.len = t->rejects.len = t->sales.len = t->forwards.len = 0;
	t->holds.len = t->skus.len = t->buyers.len = 0;
	t->n_sku_inserts = t->n_sku_updates = t->n_hold_copies = t->n_buyer_copies = 0;
	t->cas = (struct fs_tx_cas){
		.partition = partition,
		.expected = expected,
		.next = next_offset,
		.replied = replied_offset,
		.clock_ms = core->clock_ms,
		.first_off = b->len ? b->items[0].rec.offset : next_offset,
		.counts = b->counts,
	};
	int64_t from = expected >= 0 ? expected : t->cas.first_off;
	if (next_offset - from > (int64_t)b->len)
		t->cas.gaps = next_offset - from - (int64_t)b->len;
	if (build_items(t, b) < 0 || build_core(t, core, careful) < 0)
		return -ENOMEM;
	return 0;
}
