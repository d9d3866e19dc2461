/* committer.c: the committer threads and the batches in flight (see committer.h). */
#include "worker/committer.h"

#include "io/log.h"
#include "worker/io.h"
#include "worker/partition.h"
#include "worker/pipeline.h"
#include "worker/publisher.h"
#include "worker/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Committer thread: around its compare-and-set (fs_store_commit_send's hook). */
static void on_cas(void *ctx, bool before)
{
	struct slot *sl = ctx;
	struct worker *w = sl->w;
	wio_lock(w->io);
	if (before) {
		const struct slot *pr = sl->pred >= 0 ? &w->slots[sl->pred] : NULL;
		while (pr && pr->gen == sl->pred_gen && !pr->cas_done && !pr->done)
			wio_wait(w->io);
	} else {
		sl->cas_done = true;
		wio_broadcast(w->io);
	}
	wio_unlock(w->io);
}

static void *committer_main(void *arg)
{
	struct slot *sl = arg;
	struct worker *w = sl->w;
	wio_lock(w->io);
	for (;;) {
		while (!sl->ready && !sl->quit)
			wio_wait(w->io);
		if (sl->quit)
			break;
		sl->ready = false;
		wio_unlock(w->io);
		int64_t t = wio_now_us(w->io);
		sl->tr.start = trace_now(w);
		/* The statements are rendered here, off the main thread (about a tenth of its
		 * work per record, scripts/profile), while it reads the next records. */
		bool ok = fs_store_commit_prepare(sl->store, w->cfg.group, w->cfg.topic_intents,
						  &sl->before, batch_end(&sl->batch), sl->replied,
						  &sl->batch, &sl->p->core, false,
						  sl->after ? sl->pred_token : NULL) == 0;
		sl->tr.prepared = trace_now(w);
		wio_lock(w->io);
		snprintf(sl->token, sizeof sl->token, "%s", ok ? fs_store_token(sl->store) : "");
		sl->prepared = true;
		wio_broadcast(w->io);
		wio_unlock(w->io);
		/* Out of memory, or a connection that cannot be made: nothing was sent. */
		int rc = ok && fs_store_ensure(sl->store) == 0
				 ? fs_store_commit_send(sl->store, on_cas, sl)
				 : FS_COMMIT_RETRY;
		t = wio_now_us(w->io) - t;
		if (w->trace) {
			sl->tr.phase = fs_store_phase_us(sl->store);
			sl->tr.committed = trace_now(w);
		}
		wio_lock(w->io);
		sl->rc = rc;
		sl->us = t;
		sl->cas_done = true;
		sl->prepared = true;
		sl->done = true;
		wio_broadcast(w->io);
		/* Wake the main thread if it waits in the consumer's poll: the batch's answers
		 * can go. (The queue outlives this thread: teardown joins it first.) */
		wio_unlock(w->io);
		wio_wake(w->io);
		wio_lock(w->io);
	}
	wio_unlock(w->io);
	return NULL;
}

/* Waits until every slot in flight is done. */
static void wait_all(struct worker *w)
{
	wio_lock(w->io);
	for (int i = 0; i < w->n_fly; i++)
		while (!w->slots[w->fly[i]].done)
			wio_wait(w->io);
	wio_unlock(w->io);
}

/* Once the committer that was handed p's last batch has rendered its statements, the core's
 * decided state becomes its base (fs_core_commit), as if that batch were committed: the next
 * batch is decided on top of it. Any failure reloads the core (recover). */
static void core_settle(struct worker *w, struct part *p)
{
	if (p->lent < 0)
		return;
	const struct slot *sl = &w->slots[p->lent];
	wio_lock(w->io);
	while (!sl->prepared)
		wio_wait(w->io);
	wio_unlock(w->io);
	fs_core_commit(&p->core);
	p->lent = -1;
}

/* Takes the slot at fly[i] out of flight (it is done). */
static struct slot *fly_take(struct worker *w, int i)
{
	struct slot *sl = &w->slots[w->fly[i]];
	for (int j = i + 1; j < w->n_fly; j++)
		w->fly[j - 1] = w->fly[j];
	w->n_fly--;
	core_settle(w, sl->p);
	count_commit(&w->n, sl->us);
	sl->p->n_fly--;
	return sl;
}

/* sl0's transaction, the oldest of its partition in flight, did not commit (or its outcome is
 * unknown). The partition's later batches in flight were decided on top of it: wait for them
 * all, then settle the partition's batches in order, the first through part_process_from's
 * retry paths and the later ones decided again on the state it leaves (their transactions'
 * compare-and-set failed, as their predecessor's had not committed; or one of them committed,
 * and then so did sl0's). Other partitions' batches stay in flight, finished in turn. */
static void recover(struct worker *w, struct slot *sl0)
{
	struct part *p = sl0->p;
	wait_all(w);
	struct slot *chain[SLOTS_MAX];
	int n = 0;
	chain[n++] = sl0;
	for (int i = 0; i < w->n_fly;) {
		if (w->slots[w->fly[i]].p == p)
			chain[n++] = fly_take(w, i);
		else
			i++;
	}
	/* The cache has the ids of the batches handed over: a redo would answer its own records
	 * as repeats. Committed decisions are in Postgres; lookups cover what it forgets. */
	fs_seen_clear(&p->seen);
	bool live = true, redone = false;
	for (int i = 0; i < n; i++) {
		struct slot *sl = chain[i];
		if (!live || !p->loaded) {
			fs_batch_clear(&sl->batch); /* read again after the seek, or dropped */
			continue;
		}
		int rc = sl->rc;
		for (int j = i + 1; rc == FS_COMMIT_UNKNOWN && j < n; j++) {
			if (chain[j]->rc == FS_COMMIT_OK) {
				/* A successor's compare-and-set found this batch's end. */
				w->n.unknown++;
				w->n.unknown_committed++;
				count_attempt(w, sl->store, FS_COMMIT_UNKNOWN);
				rc = FS_COMMIT_OK;
				fs_warn("partition %" PRId32 ": commit outcome unknown, stored "
					"offset %" PRId64 ": committed (the batch after it "
					"committed on top of it)",
					p->id, chain[j]->meta.next_offset);
			}
		}
		if (rc == FS_COMMIT_OK && !redone) {
			batch_done(w, p, &sl->batch, &sl->meta, &sl->ex);
			continue;
		}
		/* Decided on a state that did not commit: decide again. A successor's failed
		 * compare-and-set is its predecessor's failure, not a fence (the reload checks). */
		if (redone || (i > 0 && rc == FS_COMMIT_FENCED))
			rc = COMMIT_AGAIN;
		int r = part_process_from(w, p, &sl->batch, rc, redone ? NULL : sl);
		if (r < 0)
			live = false;
		if (r > 0)
			redone = true;
		if (r > 0 && i > 0)
			w->n.stacked_redone++;
		fs_batch_clear(&sl->batch);
	}
}

/* Finishes the oldest transaction in flight (waiting for it if block): answers its batch, or
 * takes the retry and fencing paths. false if it is not done yet (or none is in flight). */
bool finish_oldest(struct worker *w, bool block)
{
	if (w->n_fly == 0)
		return false;
	struct slot *sl = &w->slots[w->fly[0]];
	wio_lock(w->io);
	while (block && !sl->done)
		wio_wait(w->io);
	bool done = sl->done;
	wio_unlock(w->io);
	if (!done)
		return false;
	sl->tr.finished = trace_now(w);
	fly_take(w, 0);
	fs_debug("partition %" PRId32 ": batch of %u at %" PRId64 "%s: %d, transaction %" PRId64
		 " us, handed over %" PRId64 " us before",
		 sl->p->id, sl->batch.len, sl->before.next_offset, sl->after ? " (stacked)" : "",
		 sl->rc, sl->us, wio_now_us(w->io) - sl->handed_us);
	if (sl->rc == FS_COMMIT_OK) {
		w->tr_done = &sl->tr;
		batch_done(w, sl->p, &sl->batch, &sl->meta, &sl->ex);
		w->tr_done = NULL;
	} else {
		recover(w, sl);
	}
	return true;
}

/* Finishes every transaction in flight that is done, in order (or block: all of them). */
void commit_finish(struct worker *w, bool block)
{
	while (finish_oldest(w, block))
		;
}

void commit_wait(struct worker *w)
{
	commit_finish(w, true);
}

bool slot_free(const struct worker *w)
{
	return w->n_fly < w->depth;
}

static bool slot_busy(const struct worker *w, int k)
{
	for (int i = 0; i < w->n_fly; i++)
		if (w->fly[i] == k)
			return true;
	return false;
}

/* p's batch decided and committed on this thread (part_process_from from RC0), traced from
 * DECIDE. */
static void process_in_line(struct worker *w, struct part *p, int64_t decide, int rc0)
{
	trace_handed(w, p, decide, true);
	w->tr_done = &p->tr;
	part_process_from(w, p, &p->batch, rc0, NULL);
	w->tr_done = NULL;
}

/* Decides p->batch and, with commit.overlap, hands its transaction to a committer thread and
 * returns (waiting first for a free one); otherwise, or when it needs the store (a lookup),
 * commits it in line. Its expiry and stock records are rendered now and its new ids go into
 * the dedupe cache; the committer renders its statements from the core, which then takes the
 * decided state as its base (core_settle). At depth 2 the next batch is decided on top of
 * it while it is in flight; a failure of either undoes all that (recover). */
void part_process_start(struct worker *w, struct part *p)
{
	while (w->depth > 0 && !slot_free(w))
		finish_oldest(w, true);
	if (!p->loaded || p->batch.len == 0)
		return;
	int64_t decide = trace_now(w);
	if (w->depth == 0 || p->need_lookup) {
		commit_wait(w);
		if (p->loaded)
			process_in_line(w, p, decide, -1);
		return;
	}
	int k = 0;
	while (slot_busy(w, k))
		k++;
	struct slot *sl = &w->slots[k];
	core_settle(w, p);
	int rc = part_decide(w, p, &p->batch, false);
	if (rc != 0) { /* it needs a lookup (decided in line, from scratch), or a reload */
		commit_wait(w);
		if (p->loaded)
			process_in_line(w, p, decide, rc == PART_DECIDE_IN_LINE ? -1 : rc);
		return;
	}
	sl->before = p->n_fly ? p->ahead : p->meta;
	render_extras(w, &sl->ex, p, sl->before.clock_ms, batch_end(&p->batch) - 1);
	seen_add_batch(p, &p->batch);
	sl->meta = meta_after(p, &sl->before, &p->batch);
	sl->replied = p->replied < 0 ? -1 : p->replied;
	sl->after = p->n_fly > 0;
	p->ahead = sl->meta;
	p->lent = k;
	trace_handed(w, p, decide, false);
	sl->tr = p->tr;
	sl->tr.after = p->n_fly > 0;
	struct fs_batch t = sl->batch;
	sl->batch = p->batch;
	p->batch = t;
	p->batch_costly = 0;
	sl->p = p;
	sl->pred = -1;
	for (int i = 0; i < w->n_fly; i++) {
		if (w->slots[w->fly[i]].p == p) {
			sl->pred = w->fly[i];
			sl->pred_gen = w->slots[w->fly[i]].gen;
		}
	}
	/* Every batch of p in flight has rendered its statements (core_settle above waited for
	 * the last one), and so has its token. */
	if (sl->pred >= 0)
		memcpy(sl->pred_token, w->slots[sl->pred].token, sizeof sl->pred_token);
	if (p->n_fly)
		w->n.stacked++;
	p->n_fly++;
	w->fly[w->n_fly++] = k;
	sl->handed_us = wio_now_us(w->io);
	wio_lock(w->io);
	sl->gen++;
	sl->done = false;
	sl->prepared = false;
	sl->cas_done = false;
	sl->ready = true;
	wio_broadcast(w->io);
	wio_unlock(w->io);
}

/* Ends the committer threads (nothing is in flight): the batches that come after, if any,
 * commit in line. */
void committers_stop(struct worker *w)
{
	wio_lock(w->io);
	for (int i = 0; i < SLOTS_MAX; i++)
		w->slots[i].quit = true;
	wio_broadcast(w->io);
	wio_unlock(w->io);
	for (int i = 0; i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		if (sl->up)
			wio_thread_join(w->io, i);
		sl->up = false;
	}
	w->depth = 0;
}

/* Opens commit.overlap's committer slots (slot 0 on the worker's store, the others on their
 * own connections) and starts their threads; the depth is what could be started. */
void committers_start(struct worker *w)
{
	for (int i = 0; i < w->cfg.commit_overlap && i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		sl->w = w;
		sl->index = i;
		if (i == 0) {
			sl->store = w->store;
		} else if (fs_store_open(w->cfg.pg, &sl->store) < 0) {
			if (!sl->store) {
				fs_warn("commit.overlap: out of memory for a connection");
				break;
			}
			fs_warn("%s (will retry)", fs_store_error(sl->store));
		}
		wio_store_hook(w->io, sl->store);
		int e = fs_batch_init(&sl->batch, batch_room(w)) < 0 ? ENOMEM : 0;
		if (e == 0)
			e = wio_thread_start(w->io, i, committer_main, sl);
		if (e) {
			fs_warn("commit.overlap: no committer thread %d (%s); %d in flight at most",
				i, strerror(e), i);
			break;
		}
		sl->up = true;
		w->depth = i + 1;
	}
}

/* Closes the slots' own connections and frees their batches (the threads are stopped). */
void committers_free(struct worker *w)
{
	for (int i = 0; i < SLOTS_MAX; i++) {
		struct slot *sl = &w->slots[i];
		if (sl->store != w->store)
			fs_store_close(sl->store);
		sl->store = NULL;
		fs_batch_free(&sl->batch);
		extras_free(&sl->ex);
	}
}
