/* publisher.c: results, forwards, expiries and stock records out, and their delivery tracked
 * (see publisher.h). */
#include "worker/publisher.h"

#include "core/result.h"
#include "io/log.h"
#include "worker/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int publish_one(struct worker *w, enum fs_topic topic, int32_t partition, const void *key,
		size_t key_len, const struct fs_buf *value, struct inflight *f)
{
	if (wio_produce(w->io, topic, partition, key, key_len, value->data, value->len, f) < 0)
		return -EIO;
	if (f)
		f->pending++;
	w->n.published++;
	return 0;
}

void publisher_delivered(struct worker *w, struct inflight *f, const char *err, int64_t appended_ms)
{
	if (err) {
		w->n.delivery_failed++;
		fs_error("result delivery failed: %s", err);
	}
	if (!f)
		return;
	if (err)
		f->failed = true;
	f->pending--;
	if (appended_ms > f->tr.appended_ms)
		f->tr.appended_ms = appended_ms;
	if (f->pending == 0 && f->tr.produced) {
		f->tr.delivered = trace_now(w);
		trace_write(w, &f->tr);
	}
}

/* Re-publishes a misrouted record, key and payload unchanged, to the partition the rule
 * names; tracked with the batch's results, so that a crash before its delivery forwards it
 * again (the target's dedupe on the intent id makes the second copy a repeat). */
static void forward(struct worker *w, const struct fs_batch *b, const struct fs_item *it,
		    struct inflight *f)
{
	if (it->fwd_at == SIZE_MAX) {
		/* Its bytes were not kept (out of memory): replied stops here, a restart reads
		 * the record again and forwards it then. */
		if (f)
			f->failed = true;
		return;
	}
	struct fs_buf one = {.data = (char *)fs_item_fwd_payload(b, it), .len = it->fwd_len};
	if (publish_one(w, FS_TOPIC_INTENTS, it->rec.route, fs_item_fwd_key(b, it), it->fwd_key_len,
			&one, f) < 0) {
		if (f)
			f->failed = true;
		return;
	}
	w->n.forwards_sent++;
}

/* Room for n results in w->outs. */
static bool outs_reserve(struct worker *w, uint32_t n)
{
	if (n <= w->outs_cap)
		return true;
	struct fs_out *o = realloc(w->outs, n * sizeof *o);
	if (!o)
		return false;
	w->outs = o;
	w->outs_cap = n;
	return true;
}

/* One result on its own (not batched, or not taken by the batch call). */
static void publish_alone(struct worker *w, const char *key, size_t key_len, const char *body,
			  size_t len, struct inflight *f)
{
	struct fs_buf one = {.data = (char *)body, .len = len};
	if (publish_one(w, FS_TOPIC_RESULTS, FS_PARTITION_ANY, key, key_len, &one, f) < 0 && f)
		f->failed = true;
}

/* The token of an admission (issue 33), into tok: NULL if the worker cannot sign (then the
 * answer says admitted without one; the sale's open record was refused without a key ring, so
 * only a ring that lost its keys since gets here). */
static const char *room_token(const struct worker *w, const char *sku, const char *buyer_id,
			      int64_t not_before, int64_t expires_at, char *tok)
{
	if (!w->has_keys || fs_token_mint(&w->keys, sku, buyer_id, not_before, expires_at, tok) < 0)
		return NULL;
	return tok;
}

/* A join's answer (issue 33), on its own under "SKU/BUYER": rare beside buys, and its key is
 * made here. */
static void publish_join(struct worker *w, const struct fs_item *it, struct inflight *f)
{
	char tok[FS_TOKEN_TEXT_MAX + 1], key[FS_ROOM_KEY_MAX + 1];
	const struct fs_decision *d = &it->dec;
	const char *t = d->outcome == FS_OUT_ADMITTED
				? room_token(w, it->rec.sku, it->rec.buyer_id, d->admitted_ms,
					     d->expires_at_ms, tok)
				: NULL;
	fs_buf_clear(&w->out);
	fs_result_join(&w->out, it, t);
	fs_room_key(key, it->rec.sku, it->rec.buyer_id);
	publish_alone(w, key, strlen(key), w->out.data, w->out.len, f);
	w->n.joins++;
}

/* Renders b's results into w->results and w->outs (batched), or produces each on its own;
 * forwards and joins go out here. Returns how many wait in w->outs. */
static uint32_t render_results(struct worker *w, const struct fs_batch *b, struct inflight *f,
			       bool batched)
{
	fs_buf_clear(&w->results);
	uint32_t n = 0;
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		/* A cart item's answers are the cart module's results (render_cart_out), made
		 * when the cart is decided, not when its record is read. */
		if (it->cls == FS_ITEM_TICK || it->cls == FS_ITEM_CART)
			continue;
		if (it->cls == FS_ITEM_FORWARD) {
			forward(w, b, it, f);
			continue;
		}
		if (it->cls == FS_ITEM_JOIN) {
			publish_join(w, it, f);
			continue;
		}
		const char *key = it->rec.has_intent ? it->rec.intent_id : it->rec.sku;
		if (!batched) {
			fs_buf_clear(&w->out);
			fs_result_of(&w->out, it);
			publish_alone(w, key, strlen(key), w->out.data, w->out.len, f);
			continue;
		}
		w->outs[n] =
			(struct fs_out){.key = key, .key_len = strlen(key), .at = w->results.len};
		fs_result_of(&w->results, it);
		n++;
	}
	if (batched && n > 0 && !fs_buf_ok(&w->results)) {
		fs_error("out of memory for results; they will be answered again after a restart");
		if (f)
			f->failed = true;
		n = 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t to = i + 1 < n ? w->outs[i + 1].at : w->results.len;
		w->outs[i].len = to - w->outs[i].at;
	}
	return n;
}

/* Publishes one result per record of the batch (ticks excepted), in one produce call: a
 * flood of bad records is one answer each, and one call for them all is cheaper than one call
 * each (S1: 94 -> 71 ms per 100,000 answers). What the call could not queue is produced one
 * by one (waiting while the local queue is full). */
struct inflight *publish_results(struct worker *w, struct part *p, struct fs_batch *b, int64_t end)
{
	struct inflight *f = calloc(1, sizeof *f);
	if (f) {
		f->end_offset = end;
		f->pending = 0;
	}
	uint32_t n = render_results(w, b, f, outs_reserve(w, b->len));
	int queued = n ? wio_produce_results(w->io, n, f) : 0;
	if (f)
		f->pending += queued;
	w->n.published += queued;
	for (uint32_t i = 0; queued < (int)n && i < n; i++)
		if (w->outs[i].failed)
			publish_alone(w, w->outs[i].key, w->outs[i].key_len,
				      w->results.data + w->outs[i].at, w->outs[i].len, f);
	if (!f) {
		fs_error("out of memory tracking result delivery; replies will be resent later");
		return NULL;
	}
	if (p->tail)
		p->tail->next = f;
	else
		p->head = f;
	p->tail = f;
	return f;
}

static struct extra *extras_add(struct extras *ex, const char *key, bool stock, size_t at)
{
	if (ex->len == ex->cap) {
		uint32_t cap = ex->cap ? ex->cap * 2 : 16;
		struct extra *e = realloc(ex->e, cap * sizeof *e);
		if (!e) {
			ex->failed = true;
			return NULL;
		}
		ex->e = e;
		ex->cap = cap;
	}
	size_t key_at = ex->buf.len;
	fs_buf_add(&ex->buf, key, strlen(key));
	ex->e[ex->len++] = (struct extra){.key = key_at,
					  .key_len = strlen(key),
					  .at = at,
					  .len = key_at - at,
					  .stock = stock};
	return &ex->e[ex->len - 1];
}

/* The carts' outbox (issue 31): protocol messages to the intents topic's partitions, and
 * the carts' results. The same rows are in the batch's transaction (cart_out), which a
 * restart sends again from (part_answer_again). */
static void render_cart_out(struct extras *ex, const struct part *p)
{
	const struct fs_carts *cs = p->core.carts;
	if (!cs)
		return;
	for (uint32_t i = 0; i < cs->out_len; i++) {
		const struct fs_cart_msg *m = &cs->out[i];
		size_t at = ex->buf.len;
		fs_cart_msg_json(&ex->buf, m);
		struct extra *e = extras_add(ex, m->key, false, at);
		if (e) {
			e->intents = true;
			e->to = fs_cart_msg_to(m);
		}
	}
	for (uint32_t i = 0; i < cs->events_len; i++) {
		size_t at = ex->buf.len;
		fs_cart_event_json(&ex->buf, &cs->events[i], p->id);
		struct extra *e = extras_add(ex, cs->events[i].cart_id, false, at);
		if (e)
			e->cart = true;
	}
}

/* The waiting rooms' admissions of the last decisions (issue 33), each with its token. */
static void render_admissions(const struct worker *w, struct extras *ex, const struct part *p)
{
	const struct fs_core *c = &p->core;
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		for (uint32_t i = 0; i < s->room->admitted_len; i++) {
			const struct fs_room_entry *e = &s->room->v[s->room->admitted[i]];
			char tok[FS_TOKEN_TEXT_MAX + 1], key[FS_ROOM_KEY_MAX + 1];
			const char *t = room_token(w, s->sku, e->buyer_id, e->admitted_ms,
						   e->minted_ms + s->admission.token_ms, tok);
			size_t at = ex->buf.len;
			fs_result_admitted(&ex->buf, s->sku, e, s->admission.token_ms, t, p->id);
			fs_room_key(key, s->sku, e->buyer_id);
			struct extra *x = extras_add(ex, key, false, at);
			if (x)
				x->room = true;
		}
	}
}

void publish_admissions_again(struct worker *w, struct part *p, int64_t from, int64_t to)
{
	const struct fs_core *c = &p->core;
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		for (uint32_t i = 0; i < s->room->len; i++) {
			const struct fs_room_entry *e = &s->room->v[i];
			/* Its admission's record, or its re-mint's (the latest result). */
			bool in = (e->decided_off >= from && e->decided_off < to) ||
				  (e->minted_off >= from && e->minted_off < to);
			if (e->admitted_ms < 0 || !in)
				continue;
			char tok[FS_TOKEN_TEXT_MAX + 1], key[FS_ROOM_KEY_MAX + 1];
			const char *t = room_token(w, s->sku, e->buyer_id, e->admitted_ms,
						   e->minted_ms + s->admission.token_ms, tok);
			fs_buf_clear(&w->out);
			fs_result_admitted(&w->out, s->sku, e, s->admission.token_ms, t, p->id);
			fs_room_key(key, s->sku, e->buyer_id);
			publish_alone(w, key, strlen(key), w->out.data, w->out.len, p->tail);
		}
	}
}

/* Renders what the core's last decisions owe besides the batch's own results: one `expired`
 * result per hold the clock ended and one `admission` per buyer a waiting room admitted
 * (tracked with the batch's results, so that a crash before delivery answers them again), and
 * the stock record of every SKU that changed, or whose window the clock opened or closed.
 * Before fs_core_commit, which forgets these lists. */
void render_extras(const struct worker *w, struct extras *ex, const struct part *p,
		   int64_t clock_before, int64_t last_offset)
{
	const struct fs_core *c = &p->core;
	fs_buf_clear(&ex->buf);
	ex->len = 0;
	ex->failed = false;
	for (uint32_t k = 0; k < c->expired_len; k++) {
		const struct fs_hold *h = &c->holds[c->expired[k]];
		size_t at = ex->buf.len;
		fs_result_expired(&ex->buf, h->intent_id, c->skus[h->sku_index].sku, h->qty,
				  c->expired_at_ms[k], p->id, c->expired_offset[k]);
		extras_add(ex, h->intent_id, false, at);
	}
	render_admissions(w, ex, p);
	for (uint32_t d = 0; d < c->dirty_skus_len; d++) {
		const struct fs_sku *s = &c->skus[c->dirty_skus[d]];
		size_t at = ex->buf.len;
		fs_result_stock(&ex->buf, s, p->id, last_offset, c->clock_ms);
		extras_add(ex, s->sku, true, at);
	}
	render_cart_out(ex, p);
	for (uint32_t i = 0; c->clock_ms > clock_before && i < c->skus_len; i++) {
		const struct fs_sku *s = &c->skus[i];
		if (s->dirty || !fs_sku_window_crossed(s, clock_before, c->clock_ms))
			continue;
		size_t at = ex->buf.len;
		fs_result_stock(&ex->buf, s, p->id, last_offset, c->clock_ms);
		extras_add(ex, s->sku, true, at);
	}
	if (!fs_buf_ok(&ex->buf))
		ex->failed = true;
}

void produce_extras(struct worker *w, struct part *p, const struct extras *ex)
{
	if (ex->failed) {
		fs_error("partition %" PRId32 ": out of memory for expiry and stock records; "
			 "expiries are answered again after a restart",
			 p->id);
		if (p->tail)
			p->tail->failed = true; /* replied stops here */
		return;
	}
	for (uint32_t i = 0; i < ex->len; i++) {
		const struct extra *e = &ex->e[i];
		struct fs_buf one = {.data = ex->buf.data + e->at, .len = e->len};
		const char *key = ex->buf.data + e->key;
		if (e->stock) {
			/* Tracked with the batch's results: a lost one stops the replied offset,
			 * and the next assignment publishes every SKU's again. */
			if (publish_one(w, FS_TOPIC_STOCK, FS_PARTITION_ANY, key, e->key_len, &one,
					p->tail) < 0 &&
			    p->tail)
				p->tail->failed = true;
			continue;
		}
		if (e->intents) {
			/* Tracked with the batch's results: a lost one stops the replied offset,
			 * and a restart sends it again (cart_out); its receiver's state makes the
			 * second copy harmless. */
			if (publish_one(w, FS_TOPIC_INTENTS, e->to, key, e->key_len, &one,
					p->tail) < 0 &&
			    p->tail)
				p->tail->failed = true;
			continue;
		}
		if (e->room)
			w->n.admitted++;
		else if (!e->cart)
			w->n.expired++;
		if (publish_one(w, FS_TOPIC_RESULTS, FS_PARTITION_ANY, key, e->key_len, &one,
				p->tail) < 0 &&
		    p->tail)
			p->tail->failed = true;
	}
}

void publish_stock_all(struct worker *w, const struct part *p)
{
	const struct fs_core *c = &p->core;
	int64_t last = p->meta.next_offset - 1; /* the state as of the last decided record */
	for (uint32_t i = 0; i < c->skus_len; i++) {
		fs_buf_clear(&w->out);
		fs_result_stock(&w->out, &c->skus[i], p->id, last, c->clock_ms);
		if (!fs_buf_ok(&w->out) ||
		    publish_one(w, FS_TOPIC_STOCK, FS_PARTITION_ANY, c->skus[i].sku,
				strlen(c->skus[i].sku), &w->out, NULL) < 0)
			fs_error("partition %" PRId32 ": the stock record of %s was not published; "
				 "it is with the SKU's next change or the next assignment",
				 p->id, c->skus[i].sku);
	}
}

void extras_free(struct extras *ex)
{
	fs_buf_free(&ex->buf);
	free(ex->e);
	memset(ex, 0, sizeof *ex);
}

/* Moves p->replied over every batch whose results were all delivered, in order. */
void advance_replied(struct part *p)
{
	while (p->head && p->head->pending == 0) {
		struct inflight *f = p->head;
		if (f->failed) {
			/* Stop here: a restart answers again from p->replied (INV-2). */
			break;
		}
		p->replied = f->end_offset;
		p->head = f->next;
		if (!p->head)
			p->tail = NULL;
		free(f);
	}
}

void reap_orphans(struct worker *w)
{
	struct inflight **pp = &w->orphans;
	while (*pp) {
		if ((*pp)->pending == 0) {
			struct inflight *f = *pp;
			*pp = f->next;
			free(f);
		} else {
			pp = &(*pp)->next;
		}
	}
}
