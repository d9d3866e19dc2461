/* pipeline.c: one batch from decided to answered (see pipeline.h). */
#include "worker/pipeline.h"

#include "core/result.h"
#include "io/log.h"
#include "worker/metrics.h"
#include "worker/partition.h"
#include "worker/publisher.h"
#include "worker/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void count_attempt(struct worker *w, const struct fs_store *att, int rc)
{
	switch (rc) {
	case FS_COMMIT_FENCED:
		w->n.tx_failed[TX_FENCED]++;
		break;
	case FS_COMMIT_REDO:
		w->n.tx_failed[fs_store_sql_error(att) ? TX_SQL_ERROR : TX_REDO]++;
		break;
	case FS_COMMIT_RETRY:
		w->n.tx_failed[TX_TRANSIENT]++;
		break;
	case FS_COMMIT_UNKNOWN:
		w->n.tx_failed[TX_UNKNOWN]++;
		break;
	default: /* committed, or COMMIT_AGAIN: a predecessor's failure, counted there */
		break;
	}
}

void count_commit(struct counters *n, int64_t us)
{
	n->us_commit += us;
	if (us > n->us_commit_max)
		n->us_commit_max = us;
	if (n->commit_seconds.n) /* metrics.listen set (metrics_init) */
		metrics_count_commit(n, us);
}

static void count_batch(struct worker *w, const struct fs_batch *b)
{
	w->n.records += b->counts.records;
	w->n.fresh += b->counts.fresh;
	w->n.repeats += b->counts.repeats;
	w->n.conflicts += b->counts.conflicts;
	w->n.invalid += b->counts.invalid;
	w->n.sale += b->counts.sale;
	w->n.forwarded += b->counts.forwarded;
	w->n.wrong_partition += b->counts.wrong_partition;
	w->n.batches++;
	if (b->counts.records - b->counts.invalid > w->cfg.batch_max)
		w->n.batches_behind++;
	if (w->metrics)
		metrics_count_batch(&w->n, b);
}

/* The floor below which ended holds stay in memory (the simulator builds with 2, so that its
 * sweep decides follow-ups of forgotten holds all the time). */
#ifndef FS_FORGET_ENDED_MIN
#define FS_FORGET_ENDED_MIN 1024
#endif

/* Ended holds out of memory (issue 28, item 12), once they outnumber the live ones (and a
 * floor): each pass costs one walk over the holds, so it is paid once per that many ends.
 * Only with nothing in flight: the ends are then committed, and a lookup finds them. */
static void forget_ended(struct worker *w, struct part *p)
{
	uint32_t ended = fs_core_ended(&p->core);
	if (p->n_fly == 0 && ended > FS_FORGET_ENDED_MIN && ended > p->core.heap_len)
		w->n.holds_forgotten += fs_core_forget_ended(&p->core);
}

/* The rooms this batch drew (their opening passed between the clock before it and after it):
 * one line each, with the time the batch's decisions took, the draw's share of it (issue 33's
 * bench reads it; an operator sees when the draw happened and how many were in it). */
static void log_draws(const struct fs_core *c, int64_t clock_before, int64_t decide_us)
{
	if (c->clock_ms == clock_before)
		return;
	for (uint32_t k = 0; k < c->room_skus_len; k++) {
		const struct fs_sku *s = &c->skus[c->room_skus[k]];
		const struct fs_room *r = s->room;
		if (!r->drawn || r->opens_at_ms <= clock_before || r->opens_at_ms > c->clock_ms)
			continue;
		uint32_t early = 0;
		for (uint32_t i = 0; i < r->len; i++)
			early += r->v[i].early;
		fs_info("room %s: drawn at %" PRId64 ", %" PRIu32 " buyer(s) in the draw, %" PRIu32
			" admitted so far; the batch's decisions took %.1f ms",
			s->sku, r->opens_at_ms, early, r->next, (double)decide_us / 1000.0);
	}
}

/* The part of a commit attempt before the commit: repeats from memory (or a lookup), then
 * the decisions. 0, or FS_COMMIT_RETRY (the core's state must be reloaded). */
int part_decide(struct worker *w, struct part *p, struct fs_batch *b, bool in_line)
{
	if (p->replied < 0)
		p->replied = b->items[0].rec.offset; /* nothing below the first record to answer */
	fs_batch_reset_decisions(b);
	int64_t t0 = wio_now_us(w->io);
	/* Repeats are answered from memory. Ids not in memory are taken for new: the decisions
	 * insert asserts it, and if one was decided before (another run, another worker), the
	 * transaction aborts and the batch is redone with a lookup. A follow-up that may find no
	 * hold is the exception (batch.h): the batch is looked up first. */
	fs_batch_add_seen(b, &p->seen);
	forget_ended(w, p);
	bool lookup = p->need_lookup || fs_batch_needs_lookup(b, &p->core);
	if (lookup && !in_line)
		return PART_DECIDE_IN_LINE; /* the store is a committer's now (slot 0's) */
	int rc = lookup ? fs_store_lookup(w->store, b) : 0;
	if (rc == 0 && lookup) /* the ended holds its follow-ups name (fs_core_forget_ended) */
		rc = fs_store_lookup_holds(w->store, b, &p->core);
	wio_crash_at(w->io, "after_lookup");
	int64_t t1 = wio_now_us(w->io), clock_before = p->core.clock_ms;
	if (rc == 0)
		rc = fs_batch_decide(b, &p->core);
	int64_t t2 = wio_now_us(w->io);
	w->n.us_lookup += t1 - t0;
	w->n.us_decide += t2 - t1;
	if (rc == 0 && p->core.room_skus_len)
		log_draws(&p->core, clock_before, t2 - t1);
	return rc == 0 ? 0 : FS_COMMIT_RETRY;
}

/* The dedupe cache learns the batch's new decisions. */
void seen_add_batch(struct part *p, const struct fs_batch *b)
{
	for (uint32_t i = 0; i < b->len; i++)
		if (b->items[i].cls == FS_ITEM_NEW && fs_seen_add(&p->seen, &b->items[i]) < 0)
			fs_seen_clear(&p->seen); /* out of memory: forget; lookups cover it */
}

/* The partition's meta once b, decided on the state `before` describes, is committed. */
struct fs_part_meta meta_after(const struct part *p, const struct fs_part_meta *before,
			       const struct fs_batch *b)
{
	struct fs_part_meta m = *before;
	m.next_offset = batch_end(b);
	if (m.first_offset < 0)
		m.first_offset = b->items[0].rec.offset;
	m.clock_ms = p->core.clock_ms;
	return m;
}

/* b is committed (m: the partition's meta now): answer its records, produce its extras. */
void batch_done(struct worker *w, struct part *p, struct fs_batch *b, const struct fs_part_meta *m,
		const struct extras *ex)
{
	wio_crash_at(w->io, "after_commit");
	p->need_lookup = false;
	int64_t next = m->next_offset;
	p->meta.next_offset = next;
	p->meta.first_offset = m->first_offset;
	p->meta.clock_ms = m->clock_ms;
	count_batch(w, b);
	p->n_records += b->counts.records;
	if (w->replay) {
		p->replied = next; /* the live run answered these; a replay answers nothing */
	} else {
		int64_t t0 = wio_now_us(w->io), done = trace_now(w);
		struct inflight *f = publish_results(w, p, b, next);
		produce_extras(w, p, ex);
		w->n.us_publish += wio_now_us(w->io) - t0;
		if (f && w->tr_done) {
			f->tr = *w->tr_done;
			if (f->tr.in_line)
				f->tr.committed = f->tr.finished = done;
			f->tr.produced = trace_now(w);
		}
	}
	wio_crash_at(w->io, "after_publish");
	if (!w->replay)
		wio_commit_offset(w->io, p->id, next);
	fs_batch_clear(b);
	if (b == &p->batch)
		p->batch_costly = 0;
}

/* Reads the stored offset back on s and whether the attempt with this commit token moved it,
 * retrying until it answers or shutdown. */
static void read_stored(struct worker *w, struct fs_store *s, const char *token, int32_t part,
			int64_t *stored, bool *mine)
{
	int64_t backoff = 0;
	*stored = -2;
	*mine = false;
	while (!wio_stopping(w->io)) {
		if (fs_store_ensure(s) == 0 &&
		    fs_store_read_next(s, w->cfg.group, w->cfg.topic_intents, part, token, stored,
				       mine) == 0)
			return;
		fs_warn("partition %" PRId32 ": reading the stored offset: %s", part,
			fs_store_error(s));
		wio_sleep_ms(w->io, backoff = backoff_next(w, backoff));
	}
}

struct again_ctx {
	struct worker *w;
	struct part *p;
};

static void answer_expired_again(void *ctx, const char *intent_id, const char *sku, int64_t qty,
				 int64_t ended_at_ms, int64_t ended_offset)
{
	struct again_ctx *a = ctx;
	fs_buf_clear(&a->w->out);
	fs_result_expired(&a->w->out, intent_id, sku, qty, ended_at_ms, a->p->id, ended_offset);
	if (publish_one(a->w, FS_TOPIC_RESULTS, FS_PARTITION_ANY, intent_id, strlen(intent_id),
			&a->w->out, a->p->tail) < 0 &&
	    a->p->tail)
		a->p->tail->failed = true;
}

/* A cart's outbox row of a record below the stored offset (issue 31): sent again. */
static void cart_out_again(void *ctx, bool intents, int32_t to, const char *key,
			   const char *payload, size_t len)
{
	struct again_ctx *a = ctx;
	struct fs_buf one = {.data = (char *)payload, .len = len};
	if (publish_one(a->w, intents ? FS_TOPIC_INTENTS : FS_TOPIC_RESULTS,
			intents ? to : FS_PARTITION_ANY, key, strlen(key), &one, a->p->tail) < 0 &&
	    a->p->tail)
		a->p->tail->failed = true;
}

/* One in-line attempt: b decided on the partition's state and committed on the worker's own
 * store. An enum fs_commit_result, or ATTEMPT_STOPPED (shutting down: the state abandoned). */
enum { ATTEMPT_STOPPED = -1 };
static int attempt(struct worker *w, struct part *p, struct fs_batch *b, int64_t next)
{
	if (store_ready(w) < 0) {
		part_abandon(p);
		return ATTEMPT_STOPPED;
	}
	int rc = part_decide(w, p, b, true);
	if (rc == 0) {
		int64_t t = wio_now_us(w->io);
		rc = fs_store_commit(w->store, w->cfg.group, w->cfg.topic_intents, &p->meta, next,
				     p->replied < 0 ? -1 : p->replied, b, &p->core, p->need_lookup);
		count_commit(&w->n, wio_now_us(w->io) - t);
	}
	return rc;
}

/* The connection died with COMMIT in flight: only the stored offset knows. The offset at our
 * batch's end is not enough: another worker may have committed the same range. The commit
 * token says whose commit it was. */
static int resolve_unknown(struct worker *w, struct part *p, struct fs_store *att,
			   const char *token, int64_t expected, int64_t next)
{
	w->n.unknown++;
	int64_t stored;
	bool mine;
	read_stored(w, att, token, p->id, &stored, &mine);
	int rc;
	if (stored == next && mine) {
		w->n.unknown_committed++;
		rc = FS_COMMIT_OK;
	} else if (stored == expected) {
		rc = FS_COMMIT_RETRY;
	} else {
		rc = FS_COMMIT_FENCED;
	}
	fs_warn("partition %" PRId32 ": commit outcome unknown, stored offset %" PRId64 ": %s",
		p->id, stored,
		rc == FS_COMMIT_OK	? "committed"
		: rc == FS_COMMIT_RETRY ? "not committed"
					: "fenced");
	return rc;
}

/* The partition's state loaded again from the truth: 0 to decide again; -1 when the load
 * failed, or when another worker moved the offset meanwhile (fenced, logged). */
static int reload_unfenced(struct worker *w, struct part *p, int64_t expected)
{
	if (part_load(w, p) < 0)
		return -1;
	if (p->meta.next_offset != expected) {
		part_fenced(w, p, expected);
		return -1;
	}
	return 0;
}

/* Not committed (rc): the core's state moved while deciding; count it, wait the backoff and
 * reload the state from the truth. 0: decide again; -1: shutting down, or fenced meanwhile. */
static int before_redo(struct worker *w, struct part *p, const struct fs_store *att, int rc,
		       int64_t expected, int64_t *backoff)
{
	if (rc == FS_COMMIT_REDO) {
		w->n.redo++;
		if (!p->need_lookup)
			w->n.lookups_forced++;
		p->need_lookup = true;
	} else if (rc != COMMIT_AGAIN) {
		w->n.retries++;
	}
	if (rc != COMMIT_AGAIN) {
		*backoff = backoff_next(w, *backoff);
		fs_warn("partition %" PRId32 ": batch at %" PRId64
			" not committed (%s); reloading, "
			"retry in %" PRId64 " ms",
			p->id, expected, fs_store_error(att), *backoff);
	}
	if (wio_stopping(w->io)) {
		part_abandon(p); /* the core holds this attempt's decisions */
		return -1;
	}
	if (rc != COMMIT_AGAIN)
		wio_sleep_ms(w->io, *backoff);
	return reload_unfenced(w, p, expected);
}

/* b, decided in line on the partition's state, is committed: remember, answer, move on. */
static void done_in_line(struct worker *w, struct part *p, struct fs_batch *b)
{
	seen_add_batch(p, b);
	struct fs_part_meta m = meta_after(p, &p->meta, b);
	render_extras(w, &w->ex, p, p->meta.clock_ms, batch_end(b) - 1);
	fs_core_commit(&p->core);
	batch_done(w, p, b, &m, &w->ex);
}

/* Appends from's items k.. to `to` (with a forwarded item's bytes) and cuts from to k. */
static int move_tail(struct fs_batch *from, uint32_t k, struct fs_batch *to)
{
	for (uint32_t i = k; i < from->len; i++) {
		const struct fs_item *src = &from->items[i];
		struct fs_item *it = fs_batch_push(to);
		if (!it)
			return -ENOBUFS;
		*it = *src;
		if (fs_batch_keep(to, it, fs_item_fwd_key(from, src), src->fwd_key_len,
				  fs_item_fwd_payload(from, src), src->fwd_len) < 0)
			return -ENOMEM;
		if (src->ext < from->exts_len &&
		    fs_batch_keep_ext(to, it, &from->exts[src->ext]) < 0)
			return -ENOMEM;
	}
	from->len = k;
	return 0;
}

/* One in-line attempt at b, its unknown outcome resolved; the state reloaded unless it
 * committed (-1: fenced or shutting down). *refused: the store refused it for good. */
static int attempt_isolated(struct worker *w, struct part *p, struct fs_batch *b, int64_t *backoff,
			    bool *refused)
{
	int64_t expected = p->meta.next_offset, next = batch_end(b);
	p->need_lookup = true; /* careful: a refusal is then the records', not the dedupe's */
	int rc = attempt(w, p, b, next);
	if (rc == ATTEMPT_STOPPED)
		return -1;
	count_attempt(w, w->store, rc);
	if (rc == FS_COMMIT_UNKNOWN)
		rc = resolve_unknown(w, p, w->store, fs_store_token(w->store), expected, next);
	if (rc == FS_COMMIT_FENCED) {
		part_fenced(w, p, expected);
		return -1;
	}
	*refused = rc == FS_COMMIT_REDO && fs_store_refused(w->store);
	if (rc != FS_COMMIT_OK && before_redo(w, p, w->store, rc, expected, backoff) < 0)
		return -1;
	return rc;
}

/* A record left alone that the store still refuses is tried, in turn (issue 47, item 5): as
 * itself; with the waiting groups of other carts that it wakes and takes units for refused
 * (the row was theirs: each refused store_refused to its coordinator); rejected
 * store_refused (the refused row was its own decision's); as itself with
 * expiries its clock brings refused (the row was a hold's expiry: recorded against the hold,
 * which stays held); rejected with them refused (both). A bad record's reject skips to the
 * clock. An attempt that commits is final, so the expiries refused grow from none: each due
 * hold alone, then each pair, then all of them (more than LONE_DUE_MAX due: all at once), and
 * the first that commits refuses no innocent hold unless three or more due at that one record
 * were refused. Past that (a cart's or a room's step on the clock) it backs off, again. */
enum lone_stage { LONE_AS_IS, LONE_WOKEN, LONE_REJECTED, LONE_CLOCK, LONE_BOTH, LONE_STUCK };
/* The simulator's mutation (tests/sim/meson.build): FS_REFUSE_MUTATE=1 skips the woken
 * groups' and the clock's stages (issue 28's isolation, before issue 47): the sweep must fail
 * on it. */
#ifndef FS_REFUSE_MUTATE
#define FS_REFUSE_MUTATE 0
#endif
enum { LONE_DUE_MAX = 8 };   /* due holds tried one and two at a time; more: all at once */
enum { LONE_WOKEN_MAX = 8 }; /* waiting groups woken by the record, refused at once */

struct lone {
	enum lone_stage stage;
	struct fs_record rec; /* the record as it came, before fs_item_refuse */
	uint64_t key_h;
	uint32_t due;  /* holds due at it (at most LONE_DUE_MAX of them named in ids) */
	uint32_t pin;  /* which of them are refused: see lone_pins */
	uint32_t pins; /* how many choices: singles, pairs, then all */
	char ids[LONE_DUE_MAX][FS_UUID_LEN + 1];
	const char *chosen[2];
	uint32_t woken; /* waiting groups of other carts the record woke and took units for */
	char woken_ids[LONE_WOKEN_MAX][FS_UUID_LEN + 1];
	struct fs_group_ref groups[LONE_WOKEN_MAX];
};

static bool lone_named(const struct lone *l, const struct fs_group_ref *g)
{
	for (uint32_t i = 0; i < l->woken; i++)
		if (l->groups[i].round == g->round && strcmp(l->groups[i].cart_id, g->cart_id) == 0)
			return true;
	return false;
}

/* The waiting groups of other carts that the record (alone in b) wakes and takes units for,
 * those already named refused: decided once on the loaded state to see, then the state is
 * loaded again. A group refused may leave units to the next one waiting, so each try may
 * name more. *added: how many it named. -1: fenced meanwhile, or shutting down. */
static int lone_woken(struct worker *w, struct part *p, struct fs_batch *b, struct lone *l,
		      uint32_t *added)
{
	struct fs_group_ref refs[LONE_WOKEN_MAX];
	int64_t expected = p->meta.next_offset;
	*added = 0;
	if (!p->core.carts)
		return 0;
	b->refuse_groups = l->groups;
	b->refuse_groups_len = l->woken;
	if (part_decide(w, p, b, true) == 0) {
		uint32_t n =
			fs_carts_woken(p->core.carts, b->items[0].rec.offset, refs, LONE_WOKEN_MAX);
		for (uint32_t i = 0; i < n && i < LONE_WOKEN_MAX && l->woken < LONE_WOKEN_MAX;
		     i++) {
			if (lone_named(l, &refs[i]))
				continue;
			snprintf(l->woken_ids[l->woken], sizeof l->woken_ids[l->woken], "%s",
				 refs[i].cart_id);
			l->groups[l->woken] =
				(struct fs_group_ref){l->woken_ids[l->woken], refs[i].round};
			l->woken++;
			(*added)++;
		}
	}
	return reload_unfenced(w, p, expected);
}

/* Which expiries the next attempt refuses: pin < due, due[pin] alone; then the pairs in
 * order; then (pin == pins - 1) every one. */
static void lone_pins(struct fs_batch *b, struct lone *l)
{
	uint32_t q = l->pin, n = 0;
	if (l->due <= LONE_DUE_MAX && q < l->due) {
		l->chosen[n++] = l->ids[q];
	} else if (l->due <= LONE_DUE_MAX && q + 1 < l->pins) {
		q -= l->due;
		for (uint32_t i = 0; i < l->due && n == 0; i++) {
			if (q < l->due - i - 1) {
				l->chosen[n++] = l->ids[i];
				l->chosen[n++] = l->ids[i + 1 + q];
			} else {
				q -= l->due - i - 1;
			}
		}
	}
	b->refuse_ids = n ? l->chosen : NULL;
	b->refuse_ids_len = n;
}

/* Enters a stage that refuses expiries: the holds due at the record, on the loaded state. */
static void lone_clock(struct part *p, const struct fs_item *it, struct lone *l)
{
	const char *due[LONE_DUE_MAX];
	l->due = fs_core_due(&p->core, it->rec.ts_ms, due, LONE_DUE_MAX);
	for (uint32_t i = 0; i < l->due && i < LONE_DUE_MAX; i++)
		snprintf(l->ids[i], sizeof l->ids[i], "%s", due[i]);
	l->pins = l->due <= 1 || l->due > LONE_DUE_MAX ? 1 : l->due + l->due * (l->due - 1) / 2 + 1;
	l->pin = 0;
}

static int lone_next(struct worker *w, struct part *p, struct fs_batch *b, struct lone *l)
{
	struct fs_item *it = &b->items[0];
	uint32_t added = 0;
	if (l->stage == LONE_AS_IS) {
		l->rec = it->rec;
		l->key_h = it->key_h;
		l->woken = 0;
	}
	if ((l->stage == LONE_AS_IS || l->stage == LONE_WOKEN) && FS_REFUSE_MUTATE != 1 &&
	    lone_woken(w, p, b, l, &added) < 0)
		return -1;
	if (added > 0) {
		l->stage = LONE_WOKEN;
	} else if (l->stage == LONE_AS_IS || l->stage == LONE_WOKEN) {
		l->stage = l->rec.kind == FS_KIND_INVALID && FS_REFUSE_MUTATE != 1 ? LONE_CLOCK
										   : LONE_REJECTED;
		if (l->stage == LONE_CLOCK)
			lone_clock(p, it, l);
	} else if ((l->stage == LONE_CLOCK || l->stage == LONE_BOTH) && l->pin + 1 < l->pins) {
		l->pin++; /* the next choice of due holds, or all of them */
	} else if (l->stage < LONE_STUCK && FS_REFUSE_MUTATE != 1 &&
		   (l->stage != LONE_CLOCK || l->rec.kind != FS_KIND_INVALID)) {
		l->stage++;
		if (l->stage == LONE_CLOCK || l->stage == LONE_BOTH)
			lone_clock(p, it, l);
	} else {
		l->stage = LONE_STUCK; /* refusing all it can, as LONE_BOTH's last try */
		l->pin = l->pins - 1;
	}
	it->rec = l->rec;
	it->key_h = l->key_h;
	it->refuse_due = l->stage >= LONE_CLOCK;
	if (l->stage >= LONE_REJECTED && l->stage != LONE_CLOCK && l->rec.kind != FS_KIND_INVALID)
		fs_item_refuse(it);
	lone_pins(b, l);
	b->refuse_groups = l->stage == LONE_WOKEN ? l->groups : NULL;
	b->refuse_groups_len = l->stage == LONE_WOKEN ? l->woken : 0;
	if (l->stage == LONE_STUCK)
		fs_error("partition %" PRId32 ": the store refuses the record at %" PRId64
			 " whatever is refused with it (a cart's or a room's step on its clock?): "
			 "trying again",
			 p->id, it->rec.offset);
	return 0;
}

/* The lone record committed at its stage: say so, loudly, and count it. */
static void lone_done(struct worker *w, struct part *p, const struct fs_item *it,
		      const struct lone *l)
{
	if (l->stage >= LONE_REJECTED && l->stage != LONE_CLOCK && l->rec.kind != FS_KIND_INVALID) {
		fs_error("partition %" PRId32 ": the store refused the record at %" PRId64
			 " on its own, carefully: rejected store_refused; the other records of "
			 "its batch are decided",
			 p->id, it->rec.offset);
		w->n.refused++;
	}
	for (uint32_t i = 0; i < p->core.refused_len; i++)
		fs_error("partition %" PRId32 ": the store refused the expiry of hold %s due at "
			 "record %" PRId64 ": it stays held (expiry_refused) until confirmed or "
			 "cancelled",
			 p->id, p->core.holds[p->core.refused[i]].intent_id,
			 p->core.refused_offset[i]);
	w->n.expiries_refused += p->core.refused_len;
	for (uint32_t i = 0; l->stage == LONE_WOKEN && i < l->woken; i++)
		fs_error("partition %" PRId32
			 ": the store refused the units of cart %s (round %" PRId32
			 "), woken by record %" PRId64 ": its group is refused store_refused",
			 p->id, l->groups[i].cart_id, l->groups[i].round, it->rec.offset);
}

/* The store refused b twice, carefully, for a reason that does not pass (a data or integrity
 * error: a constraint the core cannot know of). So that no refusal stops the partition or the
 * worker, b is committed in parts, halving the part that is refused, until the record it is
 * refused for stands alone: that one is tried as lone_next says, and every other record is
 * decided as usual (issue 28, item 1; issue 47, item 5). 0, or -1 (fenced, shutting down,
 * out of memory). */
static int isolate(struct worker *w, struct part *p, struct fs_batch *b)
{
	struct fs_batch rest;
	if (fs_batch_init(&rest, b->cap) < 0)
		return -1;
	uint32_t k = b->len > 1 ? b->len / 2 : 1; /* the whole was refused */
	int64_t backoff = 0;
	struct lone lone = {.stage = LONE_AS_IS};
	int rc = 0;
	while (b->len > 0 && rc == 0) {
		bool refused = false;
		fs_batch_clear(&rest);
		if (move_tail(b, k, &rest) < 0)
			break;
		int r = attempt_isolated(w, p, b, &backoff, &refused);
		if (r < 0) {
			rc = -1;
		} else if (r == FS_COMMIT_OK) {
			if (b->len == 1)
				lone_done(w, p, &b->items[0], &lone);
			lone.stage = LONE_AS_IS;
			b->refuse_ids = NULL;
			b->refuse_ids_len = 0;
			b->refuse_groups = NULL;
			b->refuse_groups_len = 0;
			done_in_line(w, p, b); /* clears b */
			k = rest.len;	       /* the rest may pass whole */
		} else if (refused && k > 1) {
			k /= 2;
		} else if (refused) {
			fs_warn("partition %" PRId32 ": the store refused the record at %" PRId64
				" on its own (%s)",
				p->id, b->items[0].rec.offset, fs_store_error(w->store));
			if (lone_next(w, p, b, &lone) < 0)
				rc = -1;
			backoff = 0; /* a refusal does not pass with time: the next try at once */
		}		     /* else a fault that passes: again, backing off */
		if (rc == 0 && move_tail(&rest, 0, b) < 0)
			break;
	}
	if (b->len > 0 && rc == 0) {
		fs_error("partition %" PRId32 ": out of memory isolating a refused record", p->id);
		part_abandon(p);
		rc = -1;
	}
	b->refuse_ids = NULL; /* (they name this call's `lone`) */
	b->refuse_ids_len = 0;
	b->refuse_groups = NULL;
	b->refuse_groups_len = 0;
	fs_batch_free(&rest);
	return rc;
}

int part_process_from(struct worker *w, struct part *p, struct fs_batch *b, int rc0,
		      struct slot *sl)
{
	if (b->len == 0)
		return 0;
	int64_t expected = p->meta.next_offset;
	int64_t next = batch_end(b);
	int64_t backoff = 0;
	bool reloaded = false;
	int refused = 0; /* attempts in a row the store refused for good */
	for (;;) {
		int rc = rc0;
		struct fs_store *att = sl ? sl->store : w->store;
		rc0 = -1;
		if (rc < 0 && (rc = attempt(w, p, b, next)) == ATTEMPT_STOPPED)
			return -1;
		fs_debug("partition %" PRId32 ": batch of %u at %" PRId64 ": %d", p->id, b->len,
			 expected, rc);
		count_attempt(w, att, rc);
		if (rc == FS_COMMIT_UNKNOWN)
			rc = resolve_unknown(w, p, att, sl ? sl->token : fs_store_token(w->store),
					     expected, next);
		if (rc == FS_COMMIT_OK)
			break;
		if (rc == FS_COMMIT_FENCED) {
			part_fenced(w, p, expected);
			return -1;
		}
		sl = NULL; /* from here on decided and committed in line */
		refused = rc == FS_COMMIT_REDO && fs_store_refused(att) ? refused + 1 : 0;
		if (before_redo(w, p, att, rc, expected, &backoff) < 0)
			return -1;
		reloaded = true;
		if (refused >= 2) /* the second was careful (a redo looks the batch up) */
			return isolate(w, p, b) < 0 ? -1 : 1;
	}
	if (sl) {
		/* Committed as handed over: the core moved past it then. */
		batch_done(w, p, b, &sl->meta, &sl->ex);
		return 0;
	}
	done_in_line(w, p, b);
	return reloaded ? 1 : 0;
}

/* The stored decision of the item's intent id under key kind `kind`, made at or before the
 * item (a row made later, on the same partition, did not exist when the item was answered). */
static const struct fs_stored *stored_before(const struct fs_batch *b, const struct fs_item *it,
					     int kind)
{
	for (uint32_t k = 0; k < b->stored_len; k++) {
		const struct fs_stored *s = &b->stored[k];
		if (s->kind == kind && strcmp(s->intent_id, it->rec.intent_id) == 0 &&
		    (s->partition != it->rec.partition || s->offset <= it->rec.offset))
			return s;
	}
	return NULL;
}

/* A record read again below the stored offset gets its stored decision (b->stored), as the
 * live answer gave it; false when there is none. */
static bool again_item(const struct fs_batch *b, struct fs_item *it)
{
	it->first_partition = it->rec.partition;
	it->first_offset = it->rec.offset;
	if (it->rec.misrouted) {
		/* Parsing is pure: misrouted then, misrouted now; forwarded again. */
		it->cls = FS_ITEM_FORWARD;
		return true;
	}
	if (it->rec.kind == FS_KIND_INVALID) {
		/* Parsing is pure: the same bytes give the same reason. */
		it->cls = FS_ITEM_INVALID;
		it->dec.outcome = FS_OUT_REJECTED;
		it->dec.reason = it->rec.reject_reason;
		it->dec.decided_at_ms = it->rec.ts_ms; /* as the live answer (batch.c) */
		return true;
	}
	if (!fs_item_has_key(it)) {
		it->cls = FS_ITEM_TICK; /* sale records and ticks: not buyer-facing */
		return true;
	}
	/* The decision that answered it live: its own key's, if made at or before it; else
	 * that of a follow-up that found no hold (itself, or the one it repeated). */
	const struct fs_stored *s = stored_before(b, it, (int)it->rec.kind);
	if (!s && fs_kind_has_unmatched((int)it->rec.kind))
		s = stored_before(b, it, (int)it->rec.kind + FS_KEY_UNMATCHED);
	if (s) {
		it->dec = s->dec;
		it->first_partition = s->partition;
		it->first_offset = s->offset;
		if (s->body_hash != it->rec.body_hash) {
			fs_item_answer_conflict(it); /* as the live answer */
		} else {
			it->dec.duplicate = s->offset != it->rec.offset;
		}
		return true;
	}
	return false; /* no decision: the caller asks whether the store refused it */
}

/* A record below the stored offset with no decision: rejected store_refused (its reject
 * row says so), or a hole, said loudly and left unanswered. */
static void again_unanswered(struct worker *w, struct part *p, struct fs_item *it)
{
	int r = fs_store_refused_at(w->store, p->id, it->rec.offset);
	if (r == 1) {
		fs_item_refuse(it);
		again_item(&p->again, it); /* an invalid record now: its reject */
		return;
	}
	fs_error("partition %" PRId32 ": record at %" PRId64 " is below the stored "
		 "offset but has no decision%s",
		 p->id, it->rec.offset, r < 0 ? " (or the store could not say)" : "");
	it->cls = FS_ITEM_TICK;
}

void part_answer_again(struct worker *w, struct part *p)
{
	struct fs_batch *b = &p->again;
	if (b->len == 0)
		return;
	int64_t backoff = 0;
	while (store_ready(w) == 0) {
		fs_batch_reset_decisions(b);
		if (fs_store_lookup(w->store, b) == 0)
			break;
		wio_sleep_ms(w->io, backoff = backoff_next(w, backoff));
	}
	if (wio_stopping(w->io))
		return;
	for (uint32_t i = 0; i < b->len; i++) {
		struct fs_item *it = &b->items[i];
		/* A cart the store refused has no outbox rows to answer it again: its reject
		 * does (issue 47, item 5). */
		if (it->rec.kind == FS_KIND_CART && !it->rec.misrouted &&
		    fs_store_refused_at(w->store, p->id, it->rec.offset) == 1)
			fs_item_refuse(it);
		if (!again_item(b, it))
			again_unanswered(w, p, it);
		else if (it->cls == FS_ITEM_TICK && it->rec.kind == FS_KIND_JOIN &&
			 fs_core_join_answer(&p->core, &it->rec, &it->dec) == 0)
			it->cls = FS_ITEM_JOIN; /* from the loaded room (issue 33) */
	}
	int64_t end = batch_end(b);
	w->n.answered_again += b->len;
	publish_results(w, p, b, end);
	publish_admissions_again(w, p, b->items[0].rec.offset, end);
	struct again_ctx ctx = {w, p};
	if (fs_store_expired(w->store, p->id, b->items[0].rec.offset, end, answer_expired_again,
			     &ctx) < 0 &&
	    p->tail) {
		fs_warn("partition %" PRId32 ": expiries not answered again: %s", p->id,
			fs_store_error(w->store));
		p->tail->failed = true; /* replied stops here: the next start tries again */
	}
	if (p->core.carts &&
	    fs_store_cart_out(w->store, p->id, b->items[0].rec.offset, end, cart_out_again, &ctx) <
		    0 &&
	    p->tail) {
		fs_warn("partition %" PRId32 ": carts' messages and results not sent again: %s",
			p->id, fs_store_error(w->store));
		p->tail->failed = true;
	}
	fs_batch_clear(b);
}
