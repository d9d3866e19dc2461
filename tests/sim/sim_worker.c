/* sim_worker.c: the simulated worker (see sim_worker.h). Function names follow src/worker/main.c;
 * where the real code loops (retries, backoff), the simulated one stays in the same state and
 * tries again at its next step. */
#include "sim_worker.h"

#include "core/buf.h"
#include "core/result.h"
#include "sim_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char tick_json[] = "{\"v\":1,\"type\":\"tick\"}";

enum {
	BAD_FACTOR = 10, /* a batch holds up to this many times batch.max records in all */
};

void sw_init(struct sw_worker *w, int id)
{
	memset(w, 0, sizeof *w);
	w->id = id;
	w->load_step = -1;
	for (int i = 0; i < SIM_PARTS_MAX; i++)
		w->parts[i].id = i;
}

/* A transient store fault (connection lost, server restarting): the call does nothing. */
static bool store_fails(struct sim_world *W)
{
	if (W->healing || !rng_chance(&W->rng, W->f.store_err))
		return false;
	W->stats->store_errors++;
	return true;
}

static struct sw_part *part_get(struct sim_world *W, struct sw_worker *w, int32_t id)
{
	struct sw_part *p = &w->parts[id];
	if (!p->init) {
		fs_seen_init(&p->seen, (uint32_t)W->dedupe_cache_max);
		if (fs_core_init(&p->core, id) < 0 ||
		    fs_batch_init(&p->batch, (uint32_t)W->batch_max * BAD_FACTOR) < 0 ||
		    fs_batch_init(&p->again, (uint32_t)W->batch_max) < 0)
			abort();
		p->init = true;
	}
	return p;
}

static void free_list(struct sw_inflight *f)
{
	while (f) {
		struct sw_inflight *n = f->next;
		free(f);
		f = n;
	}
}

void sw_free(struct sw_worker *w)
{
	for (int i = 0; i < SIM_PARTS_MAX; i++) {
		struct sw_part *p = &w->parts[i];
		free_list(p->head);
		if (p->init) {
			fs_core_free(&p->core);
			fs_batch_free(&p->batch);
			fs_batch_free(&p->again);
			fs_seen_free(&p->seen);
		}
	}
	free_list(w->orphans);
	for (size_t i = 0; i < w->queue.len; i++)
		free(w->queue.v[i].r.json);
	free(w->queue.v);
	int id = w->id;
	sw_init(w, id);
}

static void land(struct sim_world *W, struct sim_result *r);

void sw_crash(struct sim_world *W, struct sw_worker *w)
{
	W->stats->crashes++;
	W->stats->crash_at[sw_where(w)]++;
	TRACE(W, "w%d CRASH at %d (%zu results queued)", w->id, (int)sw_where(w), w->queue.len);
	/* Results already handed to the broker may land; the process learns nothing more. */
	for (size_t i = 0; i < w->queue.len; i++)
		if (rng_chance(&W->rng, 500))
			land(W, &w->queue.v[i].r);
	sw_free(w);
	w->up = false;
}

enum sw_where sw_where(const struct sw_worker *w)
{
	switch (w->act) {
	case ACT_ASSIGN:
		return AT_ASSIGN_LOAD;
	case ACT_AGAIN:
		return w->state == AG_LOOKUP ? AT_AGAIN_LOOKUP : AT_AGAIN_EXPIRED;
	case ACT_PROCESS:
		switch (w->state) {
		case PS_LOOKUP:
			return AT_LOOKUP;
		case PS_DECIDE:
			return AT_DECIDE;
		case PS_COMMIT:
			return AT_COMMIT;
		case PS_RESOLVE:
			return AT_RESOLVE;
		case PS_RELOAD:
			return AT_RELOAD;
		case PS_FENCED:
			return AT_FENCED_LOAD;
		default:
			return AT_PUBLISH;
		}
	default:
		return w->loop == LP_POLL ? AT_POLL : AT_DUE;
	}
}

/* ---- results ----------------------------------------------------------------------------- */

static void produce(struct sw_worker *w, struct fs_buf *out, struct sw_inflight *f, int32_t part,
		    int64_t off, bool expire)
{
	struct sw_msg *m = VEC_PUSH(w->queue);
	m->f = f;
	m->r.part = part;
	m->r.off = off;
	m->r.expire = expire;
	m->r.forward_to = -1;
	m->r.json = sim_strndup(out->data, out->len);
	if (f)
		f->pending++;
}

/* forward(): the misrouted record's key and payload, unchanged, to the rule's partition; its
 * delivery report counts with the batch's results (a restart forwards it again). */
static void produce_forward(struct sim_world *W, struct sw_worker *w, struct sw_inflight *f,
			    const struct fs_item *it)
{
	struct sw_msg *m = VEC_PUSH(w->queue);
	memset(m, 0, sizeof *m);
	m->f = f;
	m->r.part = it->rec.partition;
	m->r.off = it->rec.offset;
	m->r.forward_to = it->rec.route;
	W->stats->forwards_queued++;
	if (f)
		f->pending++;
}

/* What the broker does with a message it accepted: a result joins the results log, a forward
 * is appended to the intents log it names (the broker stamps it). */
static void land(struct sim_world *W, struct sim_result *r)
{
	if (r->forward_to < 0) {
		*VEC_PUSH(W->results) = *r;
		r->json = NULL;
		return;
	}
	const struct sim_rec *o = &W->log[r->part].recs.v[r->off];
	/* Copied first: appending may move the log that holds the original. */
	char *key = o->key ? sim_strndup(o->key, o->key_len) : NULL;
	char *val = sim_strndup(o->val, o->val_len);
	size_t key_len = o->key_len, val_len = o->val_len;
	W->stats->forwards_landed++;
	VEC(uint8_t) *l = (void *)&W->landed[r->part];
	while ((int64_t)l->len <= r->off)
		*VEC_PUSH(*l) = 0;
	l->v[r->off] = 1;
	sim_log_append(W, r->forward_to, key, key_len, val, val_len);
	free(key);
	free(val);
}

void sw_deliver(struct sim_world *W, struct sw_worker *w, size_t i)
{
	struct sw_msg m = w->queue.v[i];
	memmove(&w->queue.v[i], &w->queue.v[i + 1], (w->queue.len - i - 1) * sizeof m);
	w->queue.len--;
	bool fail = !W->healing && rng_chance(&W->rng, W->f.deliver_fail);
	bool twice = !W->healing && !fail && rng_chance(&W->rng, W->f.deliver_double);
	if (fail) {
		W->stats->deliver_failed++;
		free(m.r.json);
	} else {
		W->stats->delivered++;
		if (twice) {
			W->stats->deliver_doubled++;
			struct sim_result d = m.r;
			d.json = m.r.json ? sim_strndup(m.r.json, strlen(m.r.json)) : NULL;
			land(W, &d);
		}
		land(W, &m.r);
	}
	/* dr_cb */
	if (!m.f)
		return;
	if (fail)
		m.f->failed = true;
	m.f->pending--;
}

/* publish_results: one result per record of the batch (ticks excepted). */
static void publish_results(struct sim_world *W, struct sw_worker *w, struct sw_part *p,
			    const struct fs_batch *b, int64_t end)
{
	struct sw_inflight *f = calloc(1, sizeof *f);
	if (!f)
		abort();
	f->end_offset = end;
	struct fs_buf out = {0};
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		if (it->cls == FS_ITEM_TICK)
			continue;
		if (it->cls == FS_ITEM_FORWARD) {
			produce_forward(W, w, f, it);
			continue;
		}
		fs_buf_clear(&out);
		fs_reply_result(&out, it);
		produce(w, &out, f, p->id, it->rec.offset, false);
	}
	fs_buf_free(&out);
	if (p->tail)
		p->tail->next = f;
	else
		p->head = f;
	p->tail = f;
}

/* publish_expired: one `expired` result per hold the clock ended in this batch. */
static void publish_expired(struct sim_world *W, struct sw_worker *w, struct sw_part *p)
{
	const struct fs_core *c = &p->core;
	struct fs_buf out = {0};
	for (uint32_t k = 0; k < c->expired_len; k++) {
		const struct fs_hold *h = &c->holds[c->expired[k]];
		fs_buf_clear(&out);
		fs_reply_expired(&out, h->intent_id, c->skus[h->sku_index].sku, h->qty,
				 c->expired_at_ms[k], p->id, c->expired_offset[k]);
		produce(w, &out, p->tail, p->id, c->expired_offset[k], true);
		W->stats->expired_replies++;
	}
	fs_buf_free(&out);
}

static void advance_replied(struct sw_part *p)
{
	while (p->head && p->head->pending == 0) {
		struct sw_inflight *f = p->head;
		if (f->failed)
			break; /* a restart answers again from p->replied */
		p->replied = f->end_offset;
		p->head = f->next;
		if (!p->head)
			p->tail = NULL;
		free(f);
	}
}

static void reap_orphans(struct sw_worker *w)
{
	struct sw_inflight **pp = &w->orphans;
	while (*pp) {
		if ((*pp)->pending == 0) {
			struct sw_inflight *f = *pp;
			*pp = f->next;
			free(f);
		} else {
			pp = &(*pp)->next;
		}
	}
}

/* fs_store_lookup, or a transient fault (-EIO). A lookup that does not fit the batch
 * (-ENOBUFS: it returned more stored decisions than the batch has items) fails the same way
 * every time: the real loops (part_process, part_answer_again) would retry it forever. */
static int lookup(struct sim_world *W, const struct sw_worker *w, const struct sw_part *p,
		  struct fs_batch *b)
{
	if (store_fails(W))
		return -EIO;
	int rc = ss_lookup(W->store, b);
	if (rc < 0)
		sim_fail(W, "INV-7",
			 "worker %d partition %d: the lookup returns more stored decisions than "
			 "the batch of %u items holds (%d)",
			 w->id, (int)p->id, b->len, rc);
	return rc;
}

/* ---- partitions -------------------------------------------------------------------------- */

/* A state loaded from one snapshot of the store is consistent with itself: per SKU, held and
 * sold are its holds'; per buyer, units are its held and confirmed holds'. */
static void check_loaded(struct sim_world *W, const struct sw_part *p)
{
	const struct fs_core *c = &p->core;
	for (uint32_t k = 0; k < c->skus_len; k++) {
		int64_t held = 0, sold = 0;
		for (uint32_t i = 0; i < c->holds_len; i++) {
			const struct fs_hold *h = &c->holds[i];
			if (h->sku_index == k && h->status == FS_HOLD_HELD)
				held += h->qty;
			else if (h->sku_index == k && h->status == FS_HOLD_CONFIRMED)
				sold += h->qty;
		}
		if (held != c->skus[k].held || sold != c->skus[k].sold)
			sim_fail(W, "INV-1",
				 "partition %d loaded sku %s with held %lld sold %lld, but its "
				 "holds say %lld and %lld (a torn snapshot)",
				 (int)p->id, c->skus[k].sku, (long long)c->skus[k].held,
				 (long long)c->skus[k].sold, (long long)held, (long long)sold);
	}
	for (uint32_t b = 0; b < c->buyers_len; b++) {
		int64_t units = 0;
		for (uint32_t i = 0; i < c->holds_len; i++) {
			const struct fs_hold *h = &c->holds[i];
			if (h->buyer_index == b &&
			    (h->status == FS_HOLD_HELD || h->status == FS_HOLD_CONFIRMED))
				units += h->qty;
		}
		if (units != c->buyers[b].units)
			sim_fail(W, "INV-1",
				 "partition %d loaded buyer %s with %lld units, but its holds say "
				 "%lld (a torn snapshot)",
				 (int)p->id, c->buyers[b].buyer_id, (long long)c->buyers[b].units,
				 (long long)units);
	}
}

/* One step of part_load (fs_store_load, started again on a failure): the partition row's
 * insert, then the snapshot. True when done. */
static bool part_load_step(struct sim_world *W, struct sw_worker *w, struct sw_part *p)
{
	if (w->load_step < 0)
		w->load_step = 0;
	if (store_fails(W)) {
		W->stats->retries++;
		w->load_step = 0;
		return false;
	}
	int rc = ss_load_step(W->store, w->load_step, p->id, &p->core, &p->meta);
	if (rc < 0) {
		/* One snapshot of a consistent store loads: part_load would retry forever. */
		sim_fail(W, "INV-7",
			 "worker %d partition %d: loading one snapshot fails (%d): the stored "
			 "state does not load",
			 w->id, (int)p->id, rc);
		w->load_step = 0;
		return false;
	}
	if (++w->load_step < SS_LOAD_STEPS)
		return false;
	w->load_step = -1;
	check_loaded(W, p);
	p->loaded = true;
	if (p->replied < p->meta.replied_offset)
		p->replied = p->meta.replied_offset;
	return true;
}

static int64_t start_offset(const struct sw_part *p)
{
	if (p->meta.next_offset < 0)
		return 0; /* RD_KAFKA_OFFSET_BEGINNING */
	if (p->meta.replied_offset >= 0 && p->meta.replied_offset < p->meta.next_offset)
		return p->meta.replied_offset;
	return p->meta.next_offset;
}

/* A batch holds up to batch.max records that cost a row each and BAD_FACTOR times as many in
 * all: a run of bad records is one rejects row. */
static void batch_clear(struct sw_part *p)
{
	fs_batch_clear(&p->batch);
	p->batch_costly = 0;
}

static bool batch_full(const struct sim_world *W, const struct sw_part *p)
{
	return p->batch.len == p->batch.cap || p->batch_costly >= W->batch_max;
}

static void part_drop(struct sw_worker *w, struct sw_part *p)
{
	batch_clear(p);
	fs_batch_clear(&p->again);
	fs_core_reset(&p->core);
	fs_seen_clear(&p->seen);
	p->need_lookup = false;
	p->loaded = false;
	p->assigned = false;
	p->replied = -1;
	while (p->head) {
		struct sw_inflight *f = p->head;
		p->head = f->next;
		f->orphan = true;
		f->next = w->orphans;
		w->orphans = f;
	}
	p->tail = NULL;
}

static void save_replied(struct sim_world *W, struct sw_part *p)
{
	advance_replied(p);
	if (p->replied <= p->meta.replied_offset || p->meta.next_offset < 0 || !p->loaded)
		return;
	if (store_fails(W))
		return; /* one try: this runs in the revoke callback */
	ss_save_replied(W->store, p->id, p->meta.next_offset, p->replied);
	p->meta.replied_offset = p->replied;
}

/* ---- activities -------------------------------------------------------------------------- */

static void push_record(struct sim_world *W, struct sw_part *p, struct fs_batch *target,
			const struct fs_record *rec)
{
	p->last_record_ms = W->now_ms;
	struct fs_item *it = fs_batch_push(target);
	it->rec = *rec; /* fs_record_parse of the message: see struct sim_rec */
	if (it->rec.kind == FS_KIND_TICK)
		p->tick_pending = false;
	if (target == &p->batch && it->rec.kind != FS_KIND_INVALID && !it->rec.misrouted)
		p->batch_costly++;
}

static void act_done(struct sim_world *W, struct sw_worker *w)
{
	struct sw_part *p = &w->parts[w->act_part];
	w->act = ACT_NONE;
	if (!w->inhand)
		return;
	/* Back in on_message with the message that found the batch full. */
	w->inhand = false;
	struct fs_batch *target = w->inhand_again ? &p->again : &p->batch;
	if (!p->loaded || target->len == target->cap || (target == &p->batch && batch_full(W, p)))
		return;
	if (w->inhand_fenced && W->mutation != MUT_INHAND_PUSH) {
		/* on_message: fenced while making room, the seek reads the message again;
		 * pushed into the emptied batch, it would make the records before it stale. */
		W->stats->inhand_after_fence++;
		return;
	}
	push_record(W, p, target, &w->inhand_rec);
}

static void start_process(struct sw_worker *w, struct sw_part *p)
{
	struct fs_batch *b = &p->batch;
	w->act = ACT_PROCESS;
	w->act_part = p->id;
	w->state = PS_LOOKUP;
	w->load_step = -1;
	w->expected = p->meta.next_offset;
	w->next = b->items[b->len - 1].rec.offset + 1;
	if (p->replied < 0)
		p->replied = b->items[0].rec.offset;
}

static void start_again(struct sw_worker *w, struct sw_part *p)
{
	w->act = ACT_AGAIN;
	w->act_part = p->id;
	w->state = AG_LOOKUP;
}

/* part_process, one step: lookup, decide, commit, and the ways a commit can go. */
static void process_step(struct sim_world *W, struct sw_worker *w, struct sw_part *p)
{
	struct fs_batch *b = &p->batch;
	int rc;
	switch (w->state) {
	case PS_LOOKUP:
		/* Repeats are answered from memory; ids not in memory are taken for new, unless
		 * the last commit found one decided before (need_lookup): then ask the store. */
		fs_batch_reset_decisions(b);
		fs_batch_add_seen(b, &p->seen);
		rc = p->need_lookup ? lookup(W, w, p, b) : 0;
		if (rc < 0) {
			W->stats->retries++; /* rc = FS_COMMIT_RETRY: reload, redo */
			TRACE(W, "w%d p%d lookup failed (%d): reload", w->id, (int)p->id, rc);
			w->state = PS_RELOAD;
			return;
		}
		w->state = PS_DECIDE;
		return;
	case PS_DECIDE:
		rc = fs_batch_decide(b, &p->core);
		if (rc < 0) {
			W->stats->retries++;
			w->state = PS_RELOAD;
			return;
		}
		w->state = PS_COMMIT;
		return;
	case PS_COMMIT: {
		/* A cut commit that is going to be fenced reads back another worker's offset, maybe
		 * its own batch's end (the same range committed by another): aim at it. */
		enum ss_fault fault = SS_FAULT_NONE;
		bool stale = W->store->parts[p->id].next_offset != p->meta.next_offset;
		if (!W->healing && rng_chance(&W->rng, W->f.commit_unknown * (stale ? 3 : 1)))
			fault = rng_below(&W->rng, 2) ? SS_FAULT_CUT_APPLIED : SS_FAULT_CUT_LOST;
		/* A token per attempt (the store's random id and a counter in add_cas). */
		w->token = ++W->commit_tokens;
		int64_t before;
		bool applied;
		rc = ss_commit(W->store, &p->meta, w->next, p->replied < 0 ? -1 : p->replied, b,
			       &p->core, w->token, fault, &before, &applied);
		W->stats->commits++;
		TRACE(W, "w%d p%d commit [%lld..%lld) expected %lld stored %lld -> rc %d%s", w->id,
		      (int)p->id, (long long)b->items[0].rec.offset, (long long)w->next,
		      (long long)w->expected, (long long)before, rc, applied ? " applied" : "");
		if (applied)
			sim_observe_commit(W, p->id, before, w->next, b);
		if (fault != SS_FAULT_NONE) {
			if (applied)
				W->stats->unknown_applied++;
			else
				W->stats->unknown_lost++;
		}
		if (W->store->check_failed[0])
			sim_fail(W,
				 strncmp(W->store->check_failed, "partitions", 10) ? "INV-1"
										   : "INV-5",
				 "the store refused a row: %s (partition %d)",
				 W->store->check_failed, (int)p->id);
		switch (rc) {
		case FS_COMMIT_OK:
			w->state = PS_PUBLISH;
			return;
		case FS_COMMIT_FENCED:
			w->state = PS_FENCED;
			w->load_step = -1;
			return;
		case FS_COMMIT_UNKNOWN:
			w->state = PS_RESOLVE;
			return;
		default:
			W->stats->redo++;
			p->need_lookup = true;
			w->state = PS_RELOAD;
			return;
		}
	}
	case PS_RESOLVE: {
		/* The connection died with COMMIT in flight: the stored offset and commit token
		 * know. The offset at the batch's end is not enough: another worker may have
		 * committed the same range. */
		int64_t stored;
		uint64_t token;
		if (store_fails(W) || ss_read_next(W->store, p->id, &stored, &token) < 0)
			return;
		bool mine = w->token && token == w->token;
		TRACE(W,
		      "w%d p%d unknown outcome: stored %lld (token %llu, %s), next %lld, expected "
		      "%lld",
		      w->id, (int)p->id, (long long)stored, (unsigned long long)token,
		      mine ? "mine" : "not mine", (long long)w->next, (long long)w->expected);
		if (stored == w->next && !mine)
			W->stats->unknown_same_range++;
		if (stored == w->next && mine) {
			w->state = PS_PUBLISH;
		} else if (stored == w->expected) {
			W->stats->retries++;
			w->state = PS_RELOAD;
		} else {
			w->state = PS_FENCED;
			w->load_step = -1;
		}
		return;
	}
	case PS_RELOAD:
		if (!part_load_step(W, w, p))
			return;
		if (p->meta.next_offset != w->expected) {
			w->state = PS_FENCED;
			w->load_step = -1;
			return;
		}
		w->state = PS_LOOKUP;
		return;
	case PS_FENCED: {
		/* part_fenced: forget, reload, seek to what may still need an answer. */
		if (w->load_step < 0) {
			W->stats->fenced++;
			batch_clear(p);
			fs_batch_clear(&p->again);
		}
		if (!part_load_step(W, w, p))
			return;
		int64_t from = p->meta.next_offset;
		if (from >= 0 && p->replied >= 0 && p->replied < from)
			from = p->replied;
		p->fetch = from < 0 ? 0 : from;
		TRACE(W, "w%d p%d fenced: stored %lld, seek %lld", w->id, (int)p->id,
		      (long long)p->meta.next_offset, (long long)p->fetch);
		w->inhand_fenced = true;
		act_done(W, w);
		return;
	}
	default: /* PS_PUBLISH: committed */
		p->need_lookup = false;
		for (uint32_t i = 0; i < b->len; i++)
			if (b->items[i].cls == FS_ITEM_NEW &&
			    fs_seen_add(&p->seen, &b->items[i]) < 0)
				fs_seen_clear(&p->seen);
		p->meta.next_offset = w->next;
		if (p->meta.first_offset < 0)
			p->meta.first_offset = b->items[0].rec.offset;
		p->meta.clock_ms = p->core.clock_ms;
		publish_results(W, w, p, b, w->next);
		publish_expired(W, w, p);
		fs_core_commit(&p->core);
		batch_clear(p);
		W->stats->batches_published++;
		act_done(W, w);
		return;
	}
}

struct again_ctx {
	struct sw_worker *w;
	struct sw_part *p;
};

static void answer_expired_again(void *ctx, const struct ss_resv *r)
{
	struct again_ctx *a = ctx;
	struct fs_buf out = {0};
	fs_reply_expired(&out, r->intent_id, r->sku, r->qty, r->ended_at_ms, a->p->id,
			 r->ended_off);
	produce(a->w, &out, a->p->tail, a->p->id, r->ended_off, true);
	fs_buf_free(&out);
}

/* part_answer_again, one step: look up the stored decisions, answer; then the expiries. */
static void again_step(struct sim_world *W, struct sw_worker *w, struct sw_part *p)
{
	struct fs_batch *b = &p->again;
	if (w->state == AG_LOOKUP) {
		fs_batch_reset_decisions(b);
		if (lookup(W, w, p, b) < 0)
			return; /* the real loop retries until it succeeds */
		for (uint32_t i = 0; i < b->len; i++) {
			struct fs_item *it = &b->items[i];
			it->first_partition = it->rec.partition;
			it->first_offset = it->rec.offset;
			if (it->rec.misrouted) {
				/* Misrouted then, misrouted now: forwarded again. */
				it->cls = W->mutation == MUT_NO_REFORWARD ? FS_ITEM_TICK
									  : FS_ITEM_FORWARD;
				W->stats->forwards_again++;
				continue;
			}
			if (it->rec.kind == FS_KIND_INVALID) {
				it->cls = FS_ITEM_INVALID;
				it->dec.outcome = FS_OUT_REJECTED;
				it->dec.reason = it->rec.reject_reason;
				it->dec.decided_at_ms = it->rec.ts_ms; /* as the live answer */
				W->stats->again_invalid++;
				continue;
			}
			if (!fs_item_has_key(it)) {
				it->cls = FS_ITEM_TICK;
				continue;
			}
			bool found = false;
			for (uint32_t k = 0; k < b->stored_len && !found; k++) {
				const struct fs_stored *s = &b->stored[k];
				if (s->kind != it->rec.kind ||
				    strcmp(s->intent_id, it->rec.intent_id) != 0)
					continue;
				found = true;
				it->dec = s->dec;
				it->first_partition = s->partition;
				it->first_offset = s->offset;
				if (s->body_hash != it->rec.body_hash) {
					/* As the live answer: the record's own qty and time. */
					memset(&it->dec, 0, sizeof it->dec);
					it->dec.outcome = FS_OUT_CONFLICT;
					it->dec.reason = "intent_id_reused";
					it->dec.qty = it->rec.qty;
					it->dec.decided_at_ms = it->rec.ts_ms;
					W->stats->again_conflicts++;
					it->first_partition = it->rec.partition;
					it->first_offset = it->rec.offset;
				} else {
					it->dec.duplicate = s->offset != it->rec.offset;
				}
			}
			if (!found) {
				/* The real worker logs an error and answers nothing; the checker
				 * judges what that leads to. */
				W->stats->again_missing++;
				TRACE(W,
				      "w%d p%d record %lld below the stored offset has no "
				      "decision",
				      w->id, (int)p->id, (long long)it->rec.offset);
				it->cls = FS_ITEM_TICK;
			}
		}
		w->next = b->items[b->len - 1].rec.offset + 1;
		W->stats->again_answered += b->len;
		publish_results(W, w, p, b, w->next);
		w->state = AG_EXPIRED;
		return;
	}
	struct again_ctx ctx = {w, p};
	if (store_fails(W)) {
		if (p->tail)
			p->tail->failed = true; /* replied stops here: the next start tries again */
	} else {
		ss_expired(W->store, p->id, b->items[0].rec.offset, w->next, answer_expired_again,
			   &ctx);
	}
	fs_batch_clear(b);
	act_done(W, w);
}

/* The rebalance callback, assign: load every partition of the set, then start fetching. */
static void assign_step(struct sim_world *W, struct sw_worker *w)
{
	while (w->assign_i < W->n_parts && !(w->assign_set & (1u << w->assign_i)))
		w->assign_i++;
	if (w->assign_i == W->n_parts) {
		for (int i = 0; i < W->n_parts; i++)
			if (w->assign_set & (1u << i))
				w->parts[i].consuming = w->parts[i].loaded;
		TRACE(W, "w%d assigned 0x%x", w->id, w->assign_set);
		w->act = ACT_NONE;
		return;
	}
	struct sw_part *p = part_get(W, w, w->assign_i);
	if (w->load_step < 0) {
		p->assigned = true;
		p->replied = -1;
	}
	if (!part_load_step(W, w, p))
		return;
	p->fetch = start_offset(p);
	TRACE(W, "w%d p%d loaded: next %lld replied %lld start %lld", w->id, (int)p->id,
	      (long long)p->meta.next_offset, (long long)p->meta.replied_offset,
	      (long long)p->fetch);
	w->assign_i++;
}

/* The rebalance callback, revoke: deliver what was published, save replied, forget. */
static void revoke(struct sim_world *W, struct sw_worker *w)
{
	TRACE(W, "w%d revoked%s", w->id, w->kicked ? " (lost)" : "");
	while (w->queue.len)
		sw_deliver(W, w, 0); /* flush_producer */
	for (int i = 0; i < W->n_parts; i++) {
		struct sw_part *p = &w->parts[i];
		if (!p->init || !p->assigned)
			continue;
		save_replied(W, p);
		part_drop(w, p);
	}
	for (int i = 0; i < W->n_parts; i++)
		w->parts[i].consuming = false;
	w->pending_revoke = false;
}

/* ---- the main loop ----------------------------------------------------------------------- */

static void on_message(struct sim_world *W, struct sw_worker *w, struct sw_part *p,
		       const struct sim_rec *m, int64_t off)
{
	if (!p->init || !p->assigned || !p->loaded)
		return;
	int64_t expected = p->meta.next_offset;
	if (expected >= 0)
		expected += p->batch.len;
	else if (p->batch.len)
		expected = p->batch.items[p->batch.len - 1].rec.offset + 1;

	struct fs_batch *target = &p->batch;
	if (p->meta.next_offset >= 0 && off < p->meta.next_offset) {
		if (off < p->replied) {
			W->stats->skipped_stale++;
			return;
		}
		target = &p->again;
	} else if (expected >= 0 && off < expected) {
		W->stats->skipped_stale++;
		return;
	} else if (expected >= 0 && off > expected) {
		W->stats->gaps++;
		sim_fail(W, "INV-2", "worker %d partition %d: offset gap %lld -> %lld", w->id,
			 (int)p->id, (long long)expected, (long long)off);
	}
	if (target->len == target->cap || (target == &p->batch && batch_full(W, p))) {
		/* Decide what is there first; the message waits in hand (see act_done). */
		w->inhand = true;
		w->inhand_fenced = false;
		w->inhand_again = target == &p->again;
		w->inhand_rec = m->parsed;
		if (target == &p->batch)
			start_process(w, p);
		else
			start_again(w, p);
		return;
	}
	push_record(W, p, target, &m->parsed);
}

/* maybe_tick: a partition with a due hold that sees no records gets a tick appended. */
bool sw_tick_due(const struct sim_world *W, const struct sw_part *p)
{
	int64_t due = fs_core_next_expiry(&p->core);
	bool in_flight =
		p->tick_pending && W->now_ms - p->last_tick_ms < 10 * (int64_t)SIM_TICK_INTERVAL_MS;
	return !(due < 0 || p->batch.len || in_flight ||
		 W->now_ms - p->last_record_ms < SIM_TICK_INTERVAL_MS || W->now_ms < due);
}

static void poll(struct sim_world *W, struct sw_worker *w)
{
	/* The rebalance callbacks run inside the poll. A member that was kicked out may still
	 * return messages it had fetched before it learns that. */
	bool stale_fetch = w->kicked && rng_chance(&W->rng, 500);
	if (w->pending_revoke && !stale_fetch) {
		revoke(W, w);
		w->loop = LP_DUE;
		w->due_all = true;
		w->due_part = w->due_sub = 0;
		return;
	}
	if (w->pending_assign && !w->pending_revoke) {
		w->pending_assign = false;
		w->act = ACT_ASSIGN;
		w->assign_set = w->assign_parts;
		w->assign_i = 0;
		w->load_step = -1;
		w->loop = LP_DUE;
		w->due_all = true;
		w->due_part = w->due_sub = 0;
		return;
	}
	int cand[SIM_PARTS_MAX], n = 0;
	for (int i = 0; i < W->n_parts; i++)
		if (w->parts[i].consuming && w->parts[i].fetch < (int64_t)W->log[i].recs.len)
			cand[n++] = i;
	bool got = n > 0 && rng_chance(&W->rng, 850);
	if (got) {
		struct sw_part *p = &w->parts[cand[rng_below(&W->rng, (uint32_t)n)]];
		int64_t off = p->fetch++;
		W->stats->records++;
		on_message(W, w, p, &W->log[p->id].recs.v[off], off);
	}
	w->loop = LP_DUE;
	w->due_all = !got;
	w->due_part = w->due_sub = 0;
}

/* process_due, up to the next activity it starts. */
static void process_due(struct sim_world *W, struct sw_worker *w)
{
	for (; w->due_part < W->n_parts; w->due_part++, w->due_sub = 0) {
		struct sw_part *p = &w->parts[w->due_part];
		if (!p->init || !p->assigned)
			continue;
		if (w->due_sub == 0) {
			w->due_sub = 1;
			if (p->again.len) {
				start_again(w, p);
				return;
			}
		}
		if (w->due_sub == 1) {
			w->due_sub = 2;
			bool waited = rng_chance(&W->rng, 250); /* batch_waited() */
			/* commit.overlap: both committers busy, a full batch is not handed over
			 * yet, and the next poll's message finds it full (on_message). */
			bool busy = W->f.busy && !w->due_all && rng_chance(&W->rng, W->f.busy);
			if (p->batch.len && !busy && (w->due_all || batch_full(W, p) || waited)) {
				start_process(w, p);
				return;
			}
		}
		if (p->loaded && sw_tick_due(W, p)) {
			sim_log_append(W, p->id, NULL, 0, tick_json, sizeof tick_json - 1);
			p->last_tick_ms = W->now_ms;
			p->tick_pending = true;
			W->stats->ticks_appended++;
			TRACE(W, "w%d p%d tick appended at %lld", w->id, (int)p->id,
			      (long long)W->log[p->id].recs.len - 1);
		}
	}
	for (int i = 0; i < W->n_parts; i++)
		if (w->parts[i].init && w->parts[i].assigned)
			advance_replied(&w->parts[i]);
	reap_orphans(w);
	w->loop = LP_POLL;
}

void sw_step(struct sim_world *W, struct sw_worker *w)
{
	switch (w->act) {
	case ACT_ASSIGN:
		assign_step(W, w);
		return;
	case ACT_PROCESS:
		process_step(W, w, &w->parts[w->act_part]);
		return;
	case ACT_AGAIN:
		again_step(W, w, &w->parts[w->act_part]);
		return;
	default:
		break;
	}
	if (w->loop == LP_POLL)
		poll(W, w);
	else
		process_due(W, w);
}

bool sw_idle(const struct sim_world *W, const struct sw_worker *w)
{
	if (w->act != ACT_NONE || w->loop != LP_POLL || w->queue.len || w->pending_revoke ||
	    w->pending_assign)
		return false;
	for (int i = 0; i < W->n_parts; i++) {
		const struct sw_part *p = &w->parts[i];
		if (!p->init || !p->assigned)
			continue;
		if (p->batch.len || p->again.len || sw_tick_due(W, p) ||
		    (p->consuming && p->fetch < (int64_t)W->log[i].recs.len))
			return false;
	}
	return true;
}
