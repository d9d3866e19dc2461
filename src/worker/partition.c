/* partition.c: a partition's state, batch and records read (see partition.h). */
#include "worker/partition.h"

#include "io/log.h"
#include "worker/publisher.h"
#include "worker/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int64_t backoff_next(const struct worker *w, int64_t ms)
{
	ms = ms ? ms * 2 : BACKOFF_MIN_MS;
	return ms > w->cfg.retry_backoff_max_ms ? w->cfg.retry_backoff_max_ms : ms;
}

/* Connects (again) to Postgres, waiting with backoff; gives up only on shutdown. */
int store_ready(struct worker *w)
{
	int64_t backoff = 0;
	for (;;) {
		if (fs_store_ensure(w->store) == 0)
			return 0;
		w->n.retries++;
		backoff = backoff_next(w, backoff);
		fs_warn("%s; retrying in %" PRId64 " ms", fs_store_error(w->store), backoff);
		if (wio_stopping(w->io))
			return -EINTR;
		wio_sleep_ms(w->io, backoff);
		wio_serve(w->io);
	}
}

void batch_clear(struct part *p)
{
	fs_batch_clear(&p->batch);
	p->batch_costly = 0;
}

/* Shutting down with the partition's state not known (a batch not committed, or not loaded):
 * nothing more is decided here; whoever owns the partition next decides what was read. */
void part_abandon(struct part *p)
{
	batch_clear(p);
	fs_core_reset(&p->core);
	p->loaded = false;
}

/* Loads a partition's state from Postgres, retrying transient failures. */
int part_load(struct worker *w, struct part *p)
{
	int64_t backoff = 0;
	for (;;) {
		if (store_ready(w) < 0) {
			part_abandon(p);
			return -EINTR;
		}
		if (fs_store_load(w->store, w->cfg.group, w->cfg.topic_intents, p->id, &p->core,
				  &p->meta) == 0) {
			p->loaded = true;
			if (p->replied < p->meta.replied_offset)
				p->replied = p->meta.replied_offset;
			return 0;
		}
		w->n.retries++;
		backoff = backoff_next(w, backoff);
		fs_warn("partition %" PRId32 ": load: %s; retrying in %" PRId64 " ms", p->id,
			fs_store_error(w->store), backoff);
		wio_sleep_ms(w->io, backoff);
	}
}

/* Where consumption starts: the stored offset (Postgres is the truth, DESIGN.md section 3),
 * or earlier if some decided records were never answered. */
int64_t start_offset(const struct part *p)
{
	if (p->meta.next_offset < 0)
		return FS_OFFSET_BEGINNING;
	if (p->meta.replied_offset >= 0 && p->meta.replied_offset < p->meta.next_offset)
		return p->meta.replied_offset;
	return p->meta.next_offset;
}

/* A batch holds up to batch.max records that cost a database row each (buys, confirms, sale
 * records ...), batch.max.behind while the worker is far behind, and BAD_FACTOR times
 * batch.max in all besides: bad records are cheap (a run of them is one rejects row), so a
 * poison flood does not cut batches short for the valid ones. */
static int64_t batch_extra(const struct worker *w)
{
	return w->cfg.batch_max_behind > w->cfg.batch_max
		       ? w->cfg.batch_max_behind - w->cfg.batch_max
		       : 0;
}

uint32_t batch_room(const struct worker *w)
{
	return (uint32_t)(w->cfg.batch_max * BAD_FACTOR + batch_extra(w));
}

struct part *part_get(struct worker *w, int32_t id)
{
	if (id < 0 || id >= PARTITIONS_MAX)
		return NULL;
	if (!w->parts[id]) {
		struct part *p = calloc(1, sizeof *p);
		if (!p)
			return NULL;
		p->id = id;
		p->lent = -1;
		fs_seen_init(&p->seen, (uint32_t)w->cfg.dedupe_cache_max);
		if (fs_core_init(&p->core, id) < 0 || fs_batch_init(&p->batch, batch_room(w)) < 0 ||
		    fs_batch_init(&p->again, (uint32_t)w->cfg.batch_max) < 0) {
			fs_batch_free(&p->batch);
			fs_batch_free(&p->again);
			free(p);
			return NULL;
		}
		/* Carts once the topic's partition count is known: the coordinator of a cart is
		 * the partition of its id, and a message goes where its key routes it. */
		if (w->limits.carts &&
		    fs_carts_init(&p->carts, id, w->limits.partitions, FS_CART_LINES_MAX) == 0)
			p->core.carts = &p->carts;
		p->core.keys = w->has_keys ? &w->keys : NULL;
		w->parts[id] = p;
		int j = w->n_parts++;
		for (; j > 0 && w->part_ids[j - 1] > id; j--)
			w->part_ids[j] = w->part_ids[j - 1];
		w->part_ids[j] = id;
	}
	return w->parts[id];
}

/* A partial batch waits batch.max.wait ms for more records; but while records are already
 * waiting in the consumer's queue (a backlog), it waits up to ten times that, to fill. */
bool batch_waited(const struct worker *w, const struct part *p, int64_t now)
{
	int64_t age = now - p->first_ms;
	if (age >= 10 * w->cfg.batch_wait_ms)
		return true;
	return age >= w->cfg.batch_wait_ms && wio_backlog(w->io) == 0;
}

/* Full: no room, or batch.max costly records; past batch.max, a batch goes on filling while
 * it and the records waiting in the consumer's queue are at least batch.max.behind together,
 * up to that many (the batch's own count in it: the last of a crowd then goes in fewer
 * transactions). A sale's crowd arrives at once (S1, S4 in
 * docs/BENCHMARKS.md): each transaction has a fixed cost (its round trips, its flush), and
 * fewer of them drain the backlog sooner. A worker that keeps up (S5) never has that many
 * queued, and its batches stay small: a record waits for its whole batch's commit, so a larger
 * batch after a short stall would only make the first of its records wait longer. */
bool batch_full(const struct worker *w, const struct part *p)
{
	const struct fs_batch *t = &p->batch;
	int64_t costly = p->batch_costly;
	if (t->len == t->cap || costly >= w->cfg.batch_max + batch_extra(w))
		return true;
	if (costly < w->cfg.batch_max)
		return false;
	return costly + (int64_t)wio_backlog(w->io) < w->cfg.batch_max_behind;
}

/* Drops what is pending and forgets the state; deliveries still in flight become orphans. The
 * partition has no batch in flight (commit_wait first). */
void part_drop(struct worker *w, struct part *p)
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
		struct inflight *f = p->head;
		p->head = f->next;
		f->orphan = true;
		f->next = w->orphans;
		w->orphans = f;
	}
	p->tail = NULL;
}

/* The partition was fenced: another worker committed past us. Forget our state, reload,
 * and go on from the stored offset (the group will revoke the partition if it is not ours).
 * No batch of it is in flight. expected: the stored offset the batch was decided on (the
 * state may have been reloaded since, before a redo). */
void part_fenced(struct worker *w, struct part *p, int64_t expected)
{
	w->n.fenced++;
	p->fences++;
	batch_clear(p); /* and what was read after it: the seek below reads it again */
	fs_batch_clear(&p->again);
	if (part_load(w, p) < 0)
		return;
	fs_warn("partition %" PRId32 ": fenced (expected offset %" PRId64 ", stored %" PRId64
		"); batch dropped, state reloaded",
		p->id, expected, p->meta.next_offset);
	/* Records in [replied, next) may have been committed without being answered (by us, in a
	 * batch whose outcome we misjudged, or by a worker that died): answer them again. */
	int64_t from = p->meta.next_offset;
	if (from >= 0 && p->replied >= 0 && p->replied < from)
		from = p->replied;
	wio_seek(w->io, p->id, from < 0 ? FS_OFFSET_BEGINNING : from);
}

/* Writes the replied offsets of the given partitions (best effort: a restart answers again). */
void save_replied(struct worker *w, struct part *p)
{
	advance_replied(p);
	if (p->replied <= p->meta.replied_offset || p->meta.next_offset < 0 || !p->loaded)
		return;
	/* One try: this runs in the revoke callback, which must not stall the group. */
	if (fs_store_ensure(w->store) < 0)
		return;
	/* Reuse the commit path with an empty batch would move counters; a plain guarded update
	 * is enough: the replied offset never passes the stored next offset. */
	(void)fs_store_save_replied(w->store, w->cfg.group, w->cfg.topic_intents, p->id,
				    p->meta.next_offset, p->replied);
	p->meta.replied_offset = p->replied;
}

/* Time on a partition moves only with its records. When a partition with live holds has been
 * idle for a tick interval and its earliest hold is due by the wall clock, the worker appends
 * a `tick` record to it: the broker stamps it (LogAppendTime), the clock moves, the hold
 * expires, and a replay sees the same tick. The wall clock only decides when to ask; the
 * decision reads the tick's timestamp. A waiting room's next slot (or its draw) is due the
 * same way, after admission.tick.ms of idleness instead: an admitted buyer learns it within
 * about that much of the slot, where tick.interval.ms (a bound on how late an expiry is)
 * would hold every admission of a second back until the second's end. */
/* Whether the worker has read p's log to its end (as its last fetch saw it): a tick appended
 * now is decided right after the records already read. While it reads a backlog (a restart
 * after an outage) it is not. */
static bool part_caught_up(const struct worker *w, const struct part *p)
{
	int64_t end = wio_log_end(w->io, p->id);
	if (end < 0)
		return false;
	int64_t read = p->n_fly ? p->ahead.next_offset : p->meta.next_offset;
	if (p->batch.len)
		read = batch_end(&p->batch);
	/* A transaction's marker after the last record leaves read short of the end: the
	 * consumer's position says it is read. */
	return read >= end || wio_position(w->io, p->id) >= end;
}

/* Waiting rooms admit at ticks only (core.c, admit_at_tick), busy partition or idle: a room
 * with someone due gets a tick every admission.tick.ms once the worker has caught up (or the
 * partition has been idle that long), so that every admission is decided at a record stamped
 * moments before, never at an old record of a backlog. */
static bool room_tick_due(const struct worker *w, const struct part *p, int64_t now)
{
	int64_t every = w->cfg.admission_tick_ms;
	if (now - p->last_tick_ms < every)
		return false;
	return part_caught_up(w, p) ||
	       (!p->batch.len && !p->n_fly && now - p->last_record_ms >= every);
}

bool part_tick_due(const struct worker *w, const struct part *p, int64_t now, int64_t wall)
{
	int64_t due = fs_core_next_expiry(&p->core);
	int64_t cart_due = p->core.carts ? fs_carts_next_expiry(p->core.carts) : -1;
	if (cart_due >= 0 && (due < 0 || cart_due < due))
		due = cart_due;
	/* One tick in flight at a time (until it is read back, or ten intervals if it got lost). */
	bool in_flight = p->tick_pending && now - p->last_tick_ms < 10 * w->cfg.tick_interval_ms;
	int64_t room_due = fs_core_next_room_due(&p->core); /* a draw, or a waiting buyer's slot */
	if (room_due >= 0 && room_due <= wall && !in_flight && room_tick_due(w, p, now))
		return true;
	return !(due < 0 || p->batch.len || p->n_fly || in_flight ||
		 now - p->last_record_ms < w->cfg.tick_interval_ms || wall < due);
}

void maybe_tick(struct worker *w, struct part *p, int64_t now)
{
	if (!part_tick_due(w, p, now, wio_wall_ms(w->io)))
		return;
	p->last_tick_ms = now;
	p->tick_pending = wio_append_tick(w->io, p->id) == 0;
	if (p->tick_pending)
		w->n.ticks++;
}

void part_free(struct worker *w, struct part *p)
{
	part_drop(w, p);
	fs_core_free(&p->core);
	fs_carts_free(&p->carts);
	fs_batch_free(&p->batch);
	fs_batch_free(&p->again);
	fs_seen_free(&p->seen);
	free(p);
}

int64_t batch_end(const struct fs_batch *b)
{
	return b->items[b->len - 1].rec.offset + 1;
}

enum route part_route(struct worker *w, struct part *p, int64_t off)
{
	/* The batch follows those in flight (commit.overlap), if any, or the stored offset; the
	 * next record follows the batch's last (not its start plus its length: the log may have
	 * gaps). */
	int64_t expected = p->n_fly ? p->ahead.next_offset : p->meta.next_offset;
	if (p->batch.len)
		expected = batch_end(&p->batch);

	if (p->meta.next_offset >= 0 && off < p->meta.next_offset) {
		if (off < p->replied) {
			w->n.skipped_stale++;
			return ROUTE_SKIP;
		}
		return ROUTE_AGAIN;
	}
	if (expected >= 0 && off < expected) {
		w->n.skipped_stale++; /* already in the batch: a fetch from before a seek */
		return ROUTE_SKIP;
	}
	/* Offsets no consumer is given: a transaction's marker, an aborted transaction's
	 * records (issue 28, item 9). The batch's commit counts them (partitions.n_gaps). */
	if (expected >= 0 && off > expected)
		w->n.gaps += off - expected;
	return ROUTE_BATCH;
}

void part_push(struct worker *w, struct part *p, struct fs_batch *target, const struct fs_msg *m)
{
	int64_t now = wio_now_ms(w->io);
	if (target != &p->again && target->len == 0)
		p->first_ms = now;
	p->last_record_ms = now;
	if (target == &p->batch)
		trace_read(w, p, m->ts_ms);
	struct fs_item *it = fs_batch_push(target);
	fs_record_parse_ext(&w->limits, m->key, m->key_len, m->payload, m->len, m->partition,
			    m->offset, m->ts_ms, &it->rec, &w->ext);
	if (fs_kind_is_cart((int)it->rec.kind) && !it->rec.misrouted &&
	    fs_batch_keep_ext(target, it, &w->ext) < 0) {
		fs_error("partition %" PRId32 ": out of memory keeping a cart record at %" PRId64
			 "; it is rejected",
			 p->id, m->offset);
		it->ext = UINT32_MAX; /* decide_cart rejects it: the state stays whole */
	}
	if (it->rec.kind == FS_KIND_TICK)
		p->tick_pending = false;
	if (it->rec.misrouted &&
	    fs_batch_keep(target, it, m->key, m->key_len, m->payload, m->len) < 0) {
		fs_error("partition %" PRId32 ": out of memory keeping a misrouted record at "
			 "%" PRId64 "; it is forwarded after a restart",
			 p->id, m->offset);
		it->fwd_at = SIZE_MAX;
	}
	if (target != &p->again && it->rec.kind != FS_KIND_INVALID && !it->rec.misrouted)
		p->batch_costly++;
}
