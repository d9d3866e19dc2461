/* commit.c: a decided batch's transaction as data (see commit.h). */
#include "core/commit.h"
#include "core/token.h"

#include <stdint.h>

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
	free(t->carts.v);
	free(t->groups.v);
	free(t->outs.v);
	free(t->joins.v);
	free(t->refusals.v);
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
		.admission = &v->admission,
		.base_supply = v->base_supply,
		.base_available = v->base_available,
		.base_held = v->base_held,
		.base_sold = v->base_sold,
	};
}

/* An admitted entry's token: the one its latest admission result carries (publisher.c mints
 * the same bytes from the same ring and claims); it ends at its mint's clock plus the life
 * (the admission's, or a re-mint's: room.h, fs_room_remint). */
static void join_token(struct fs_tx_join *j, const struct fs_core *core, const struct fs_sku *s)
{
	const struct fs_room_entry *e = j->e;
	j->token[0] = '\0';
	if (e->admitted_ms < 0 || !core->keys)
		return;
	int64_t life = s->admission.token_ms;
	int64_t exp = e->minted_ms > INT64_MAX - life ? INT64_MAX : e->minted_ms + life;
	if (fs_token_mint(core->keys, s->sku, e->buyer_id, e->admitted_ms, exp, j->token) < 0)
		j->token[0] = '\0';
}

/* The waiting rooms' new and changed entries (room_joins). */
static int build_joins(struct fs_tx *t, const struct fs_core *core, bool careful)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < core->room_skus_len; k++)
		n += core->skus[core->room_skus[k]].room->dirty_len;
	if (RESERVE(t->joins, n) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < core->room_skus_len; k++) {
		const struct fs_sku *s = &core->skus[core->room_skus[k]];
		for (uint32_t d = 0; d < s->room->dirty_len; d++) {
			const struct fs_room_entry *e = &s->room->v[s->room->dirty[d]];
			bool copy = !e->stored && !careful;
			t->n_join_copies += copy;
			struct fs_tx_join *j = &t->joins.v[t->joins.len++];
			*j = (struct fs_tx_join){.copy = copy, .sku = s->sku, .e = e};
			join_token(j, core, s);
		}
	}
	return 0;
}

/* The core's changed rows: holds, SKUs, buyers, the waiting rooms' entries. */
static int build_core(struct fs_tx *t, const struct fs_core *core, bool careful)
{
	if (RESERVE(t->holds, core->dirty_holds_len) < 0 ||
	    RESERVE(t->skus, core->dirty_skus_len) < 0 ||
	    RESERVE(t->buyers, core->dirty_buyers_len) < 0 ||
	    RESERVE(t->refusals, core->refused_len + (core->carts ? core->carts->refused_len : 0)) <
		    0)
		return -ENOMEM;
	for (uint32_t d = 0; d < core->dirty_holds_len; d++)
		add_hold(t, core, &core->holds[core->dirty_holds[d]], careful);
	for (uint32_t d = 0; d < core->refused_len; d++)
		t->refusals.v[t->refusals.len++] = (struct fs_tx_refusal){
			.offset = core->refused_offset[d],
			.intent_id = core->holds[core->refused[d]].intent_id,
		};
	for (uint32_t d = 0; core->carts && d < core->carts->refused_len; d++) {
		const struct fs_group *g = &core->carts->groups[core->carts->refused[d].group];
		t->refusals.v[t->refusals.len++] = (struct fs_tx_refusal){
			.offset = core->carts->refused[d].offset,
			.intent_id = g->cart_id,
			.round = g->round,
		};
	}
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
	return build_joins(t, core, careful);
}

/* The carts' changed rows and outbox (core->carts; none when carts are off): the new carts and
 * groups first (COPY rows, unless careful), then the stored ones. Messages are numbered from 0
 * and results from FS_TX_EVENT_SEQ in their lists' order. */
#define FS_TX_EVENT_SEQ 1000000
static int build_carts(struct fs_tx *t, const struct fs_carts *cs, bool careful)
{
	t->n_cart_copies = t->n_group_copies = 0;
	if (!cs)
		return 0;
	if (RESERVE(t->carts, cs->dirty_carts_len) < 0 ||
	    RESERVE(t->groups, cs->dirty_groups_len) < 0 ||
	    RESERVE(t->outs, cs->out_len + cs->events_len) < 0)
		return -ENOMEM;
	/* pass 0 the new rows, pass 1 the stored ones (and every one when careful) */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t d = 0; d < cs->dirty_carts_len; d++) {
			const struct fs_cart *k = &cs->carts[cs->dirty_carts[d]];
			if ((!k->stored && !careful) == (pass == 0))
				t->carts.v[t->carts.len++] = k;
		}
		for (uint32_t d = 0; d < cs->dirty_groups_len; d++) {
			const struct fs_group *g = &cs->groups[cs->dirty_groups[d]];
			if ((!g->stored && !careful) == (pass == 0))
				t->groups.v[t->groups.len++] = g;
		}
		if (pass == 0) {
			t->n_cart_copies = t->carts.len;
			t->n_group_copies = t->groups.len;
		}
	}
	for (uint32_t i = 0; i < cs->out_len; i++)
		t->outs.v[t->outs.len++] = (struct fs_tx_cart_out){
			.offset = cs->out[i].origin, .seq = (int32_t)i, .msg = &cs->out[i]};
	for (uint32_t i = 0; i < cs->events_len; i++)
		t->outs.v[t->outs.len++] =
			(struct fs_tx_cart_out){.offset = cs->events[i].offset,
						.seq = FS_TX_EVENT_SEQ + (int32_t)i,
						.ev = &cs->events[i]};
	return 0;
}

int fs_tx_build(struct fs_tx *t, int32_t partition, int64_t expected, int64_t next_offset,
		int64_t replied_offset, const struct fs_batch *b, const struct fs_core *core,
		bool careful)
{
	t->decisions.len = t->rejects.len = t->sales.len = t->forwards.len = 0;
	t->holds.len = t->skus.len = t->buyers.len = t->refusals.len = 0;
	t->carts.len = t->groups.len = t->outs.len = t->joins.len = 0;
	t->n_join_copies = 0;
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
	if (build_items(t, b) < 0 || build_core(t, core, careful) < 0 ||
	    build_carts(t, core->carts, careful) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- the cart rows: JSON for the upserts, COPY data for the new ------------------------- */

static void json_text(struct fs_buf *b, const char *name, const char *v)
{
	fs_buf_str(b, ",\"");
	fs_buf_str(b, name);
	fs_buf_str(b, "\":");
	fs_buf_json_str(b, v);
}

/* A cart's lines column: [{"sku", "qty", "part"}] */
static void cart_lines(struct fs_buf *b, const struct fs_cart *k)
{
	fs_buf_str(b, "[");
	for (uint32_t i = 0; i < k->nlines; i++) {
		fs_buf_str(b, i ? ",{\"sku\":" : "{\"sku\":");
		fs_buf_json_str(b, k->lines[i].sku);
		fs_buf_json_int(b, "qty", k->lines[i].qty);
		fs_buf_json_int(b, "part", k->lines[i].part);
		fs_buf_str(b, "}");
	}
	fs_buf_str(b, "]");
}

/* A group's lines column: [{"sku", "qty", "line"}] */
static void group_lines(struct fs_buf *b, const struct fs_group *g)
{
	fs_buf_str(b, "[");
	for (uint32_t i = 0; i < g->nlines; i++) {
		fs_buf_str(b, i ? ",{\"sku\":" : "{\"sku\":");
		fs_buf_json_str(b, g->lines[i].sku);
		fs_buf_json_int(b, "qty", g->lines[i].qty);
		fs_buf_json_int(b, "line", g->lines[i].line);
		fs_buf_str(b, "}");
	}
	fs_buf_str(b, "]");
}

static void cart_json(struct fs_buf *b, const struct fs_cart *k, int32_t partition)
{
	fs_buf_str(b, "{\"cart_id\":\"");
	fs_buf_str(b, k->cart_id);
	fs_buf_str(b, "\"");
	fs_buf_json_int(b, "part", partition);
	json_text(b, "buyer_id", k->buyer_id);
	fs_buf_json_int(b, "body_hash", k->body_hash);
	fs_buf_str(b, ",\"lines\":");
	cart_lines(b, k);
	json_text(b, "state", fs_cart_state_name(k->state));
	fs_buf_json_int(b, "round", k->round);
	fs_buf_json_int(b, "at", k->at);
	fs_buf_str(b, k->cancel_asked ? ",\"cancel_asked\":true" : ",\"cancel_asked\":false");
	fs_buf_json_int(b, "hold_ms", k->hold_ms);
	fs_buf_json_int(b, "expires_at_ms", k->expires_at_ms);
	fs_buf_json_int(b, "off", k->offset);
	json_text(b, "outcome", k->outcome ? fs_outcome_name(k->outcome) : NULL);
	json_text(b, "reason", k->reason);
	fs_buf_json_int(b, "line", k->line);
	json_text(b, "answer", k->answer ? fs_outcome_name(k->answer) : NULL);
	json_text(b, "answer_reason", k->answer_reason);
	fs_buf_str(b, "}");
}

static void group_json(struct fs_buf *b, const struct fs_group *g, int32_t partition)
{
	fs_buf_str(b, "{\"cart_id\":\"");
	fs_buf_str(b, g->cart_id);
	fs_buf_str(b, "\"");
	fs_buf_json_int(b, "round", g->round);
	fs_buf_json_int(b, "part", partition);
	fs_buf_json_int(b, "coord", g->coord);
	json_text(b, "buyer_id", g->buyer_id);
	fs_buf_str(b, ",\"lines\":");
	group_lines(b, g);
	json_text(b, "state", fs_group_state_name(g->state));
	fs_buf_json_int(b, "off", g->offset);
	fs_buf_str(b, "}");
}

void fs_tx_carts_json(const struct fs_tx *t, int32_t partition, struct fs_buf *carts,
		      struct fs_buf *groups)
{
	fs_buf_clear(carts);
	fs_buf_clear(groups);
	fs_buf_str(carts, "[");
	for (uint32_t i = t->n_cart_copies; i < t->carts.len; i++) {
		if (i > t->n_cart_copies)
			fs_buf_str(carts, ",");
		cart_json(carts, t->carts.v[i], partition);
	}
	fs_buf_str(carts, "]");
	fs_buf_str(groups, "[");
	for (uint32_t i = t->n_group_copies; i < t->groups.len; i++) {
		if (i > t->n_group_copies)
			fs_buf_str(groups, ",");
		group_json(groups, t->groups.v[i], partition);
	}
	fs_buf_str(groups, "]");
}

/* A jsonb field in COPY's binary format: the format's version (1), then the text. */
#define COPY_JSONB(b, write)                                                                       \
	do {                                                                                       \
		size_t at_ = fs_copy_open(b);                                                      \
		fs_buf_add(b, "\1", 1);                                                            \
		write;                                                                             \
		fs_copy_close(b, at_);                                                             \
	} while (0)

static void cart_copy(struct fs_buf *b, const struct fs_cart *k, int32_t partition)
{
	fs_copy_row(b, 17);
	fs_copy_id(b, k->cart_id);
	fs_copy_int4(b, partition);
	fs_copy_text(b, k->buyer_id);
	fs_copy_int8(b, k->body_hash);
	COPY_JSONB(b, cart_lines(b, k));
	fs_copy_text(b, fs_cart_state_name(k->state));
	fs_copy_int4(b, k->round);
	fs_copy_int4(b, (int32_t)k->at);
	fs_copy_bool(b, k->cancel_asked);
	fs_copy_int8(b, k->hold_ms);
	fs_copy_int8(b, k->expires_at_ms);
	fs_copy_int8(b, k->offset);
	fs_copy_text(b, k->outcome ? fs_outcome_name(k->outcome) : NULL);
	fs_copy_text(b, k->reason);
	fs_copy_int4(b, k->line);
	fs_copy_text(b, k->answer ? fs_outcome_name(k->answer) : NULL);
	fs_copy_text(b, k->answer_reason);
}

static void group_copy(struct fs_buf *b, const struct fs_group *g, int32_t partition)
{
	fs_copy_row(b, 8);
	fs_copy_id(b, g->cart_id);
	fs_copy_int4(b, g->round);
	fs_copy_int4(b, partition);
	fs_copy_int4(b, g->coord);
	fs_copy_text(b, g->buyer_id);
	COPY_JSONB(b, group_lines(b, g));
	fs_copy_text(b, fs_group_state_name(g->state));
	fs_copy_int8(b, g->offset);
}

static void out_copy(struct fs_buf *b, const struct fs_tx_cart_out *o, int32_t partition)
{
	fs_copy_row(b, 7);
	fs_copy_int4(b, partition);
	fs_copy_int8(b, o->offset);
	fs_copy_int4(b, o->seq);
	fs_copy_text(b, o->msg ? "intents" : "results");
	if (o->msg)
		fs_copy_int4(b, fs_cart_msg_to(o->msg));
	else
		fs_copy_null(b);
	fs_copy_text(b, o->msg ? o->msg->key : o->ev->cart_id);
	size_t at = fs_copy_open(b); /* json: the text as is */
	if (o->msg)
		fs_cart_msg_json(b, o->msg);
	else
		fs_cart_event_json(b, o->ev, partition);
	fs_copy_close(b, at);
}

void fs_tx_carts_copy(const struct fs_tx *t, int32_t partition, struct fs_buf *carts,
		      struct fs_buf *groups, struct fs_buf *outs)
{
	struct fs_buf *all[] = {carts, groups, outs};
	for (int i = 0; i < 3; i++) {
		fs_buf_clear(all[i]);
		fs_copy_begin(all[i]);
	}
	for (uint32_t i = 0; i < t->n_cart_copies; i++)
		cart_copy(carts, t->carts.v[i], partition);
	for (uint32_t i = 0; i < t->n_group_copies; i++)
		group_copy(groups, t->groups.v[i], partition);
	for (uint32_t i = 0; i < t->outs.len; i++)
		out_copy(outs, &t->outs.v[i], partition);
	for (int i = 0; i < 3; i++)
		fs_copy_end(all[i]);
}
