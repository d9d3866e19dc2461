/* loop.c: the worker's loop (see loop.h). */
#include "worker/loop.h"

#include "io/log.h"
#include "worker/committer.h"
#include "worker/io.h"
#include "worker/partition.h"
#include "worker/pipeline.h"
#include "worker/publisher.h"
#include "worker/rebuild.h"
#include "worker/trace.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Makes room in p's batch for one more record: a full batch is decided and committed (handed
 * to a committer, once one is free). false: no room now (shutting down, or fenced). */
static bool make_room(struct worker *w, struct part *p)
{
	int64_t fences = p->fences;
	for (int n = 0; batch_full(w, p); n++) {
		if (n == 3)
			return false; /* could not make room (shutting down): read again later */
		part_process_start(w, p);
		if (!p->loaded)
			return false;
		/* Fenced while making room: the batch was dropped and the partition reloaded and
		 * sought back, so this message comes again. Pushed now into the emptied batch, it
		 * would sit where the stored offset's record belongs, the re-read records up to it
		 * would be skipped as stale, and the offset would move past them undecided (seen
		 * in 70-crash-points' commit_cut: 200 records lost; the hardening review, issue
		 * 28). */
		if (p->fences != fences)
			return false;
	}
	return true;
}

/* A record read: into its partition's batch (or the batch to answer again), once there is
 * room. */
static void on_message(struct worker *w, const struct fs_msg *m)
{
	struct part *p =
		m->partition >= 0 && m->partition < PARTITIONS_MAX ? w->parts[m->partition] : NULL;
	if (!p || !p->assigned || !p->loaded)
		return; /* not ours (any more) */
	enum route r = part_route(w, p, m->offset);
	if (r == ROUTE_SKIP)
		return;
	struct fs_batch *target = r == ROUTE_AGAIN ? &p->again : &p->batch;
	if (r == ROUTE_AGAIN && target->len == target->cap) {
		commit_wait(w); /* it asks the store */
		part_answer_again(w, p);
		if (!p->loaded || target->len == target->cap)
			return;
	}
	if (r == ROUTE_BATCH && !make_room(w, p))
		return;
	part_push(w, p, target, m);
}

static void process_due(struct worker *w, bool all)
{
	int64_t now = wio_now_ms(w->io);
	for (int j = 0; j < w->n_parts; j++) {
		struct part *p = w->parts[w->part_ids[j]];
		if (!p->assigned)
			continue;
		if (p->again.len) {
			commit_wait(w); /* it asks the store */
			part_answer_again(w, p);
		}
		/* With every committer busy, a batch waits for the loop to finish one (all: it
		 * waits here). */
		if (p->loaded && p->batch.len && (all || slot_free(w) || w->depth == 0) &&
		    (all || batch_full(w, p) || (!p->n_fly && batch_waited(w, p, now))))
			part_process_start(w, p);
		if (p->loaded && !wio_stopping(w->io) && !w->replay)
			maybe_tick(w, p, now);
	}
}

static int64_t next_due_ms(const struct worker *w)
{
	/* A committer that finishes wakes the poll (wio_wake): no need to look for
	 * the commits' end on a clock. */
	int64_t wait = w->cfg.poll_timeout_ms, now = wio_now_ms(w->io);
	for (int j = 0; j < w->n_parts; j++) {
		const struct part *p = w->parts[w->part_ids[j]];
		if (!p->assigned || p->batch.len == 0 || (w->depth > 0 && !slot_free(w)))
			continue;
		int64_t left = p->first_ms + w->cfg.batch_wait_ms - now;
		if (left < wait)
			wait = left < 0 ? 0 : left;
	}
	return wait;
}

int64_t loop_stalled_broken(const struct worker *w)
{
	int64_t n = w->store ? fs_store_stalled_broken(w->store) : 0;
	for (int i = 1; i < SLOTS_MAX; i++)
		if (w->slots[i].store)
			n += fs_store_stalled_broken(w->slots[i].store);
	return n;
}

void log_stats(struct worker *w, const char *when)
{
	fs_info("%s: records=%" PRId64 " fresh=%" PRId64 " repeats=%" PRId64 " conflicts=%" PRId64
		" invalid=%" PRId64 " sale=%" PRId64 " expired=%" PRId64 " ticks_sent=%" PRId64
		" batches=%" PRId64 " fenced=%" PRId64 " redo=%" PRId64 " retries=%" PRId64
		" unknown=%" PRId64 " unknown_committed=%" PRId64 " answered_again=%" PRId64
		" stale=%" PRId64 " gaps=%" PRId64 " published=%" PRId64 " delivery_failed=%" PRId64
		" stalled_broken=%" PRId64 " ms_lookup=%" PRId64 " ms_decide=%" PRId64
		" ms_commit=%" PRId64 " ms_commit_max=%" PRId64 " ms_publish=%" PRId64
		" lookups_forced=%" PRId64 " batches_behind=%" PRId64 " stacked=%" PRId64
		" stacked_redone=%" PRId64 " forwarded=%" PRId64 " forwards_sent=%" PRId64
		" wrong_partition=%" PRId64 " refused=%" PRId64 " expiries_refused=%" PRId64
		" holds_forgotten=%" PRId64,
		when, w->n.records, w->n.fresh, w->n.repeats, w->n.conflicts, w->n.invalid,
		w->n.sale, w->n.expired, w->n.ticks, w->n.batches, w->n.fenced, w->n.redo,
		w->n.retries, w->n.unknown, w->n.unknown_committed, w->n.answered_again,
		w->n.skipped_stale, w->n.gaps, w->n.published, w->n.delivery_failed,
		loop_stalled_broken(w), w->n.us_lookup / 1000, w->n.us_decide / 1000,
		w->n.us_commit / 1000, w->n.us_commit_max / 1000, w->n.us_publish / 1000,
		w->n.lookups_forced, w->n.batches_behind, w->n.stacked, w->n.stacked_redone,
		w->n.forwarded, w->n.forwards_sent, w->n.wrong_partition, w->n.refused,
		w->n.expiries_refused, w->n.holds_forgotten);
}

/* One line a minute at most while records arrive on the wrong partition: how many, and the
 * fix, so that the producer's owner sees the cause without reading the stats. */
static void warn_misrouted(struct worker *w, int64_t now)
{
	int64_t n = w->n.forwarded + w->n.wrong_partition;
	if (n == w->misrouted_warned_n ||
	    (w->misrouted_warned_ms && now - w->misrouted_warned_ms < MISROUTED_WARN_MS))
		return;
	fs_warn("%" PRId64 " record(s) arrived on the wrong partition of %s since the last "
		"warning (%s); the rule is Kafka's default, toPositive(murmur2(key)) %% "
		"%" PRId32 ": set the producer's partitioner to murmur2 (librdkafka and "
		"confluent-kafka: partitioner=murmur2_random; sarama: "
		"NewMurmur2Partitioner; docs/web-tier.md)",
		n - w->misrouted_warned_n, w->cfg.topic_intents,
		w->limits.misrouted_reject ? "rejected wrong_partition" : "forwarded",
		w->limits.partitions);
	w->misrouted_warned_n = n;
	w->misrouted_warned_ms = now;
}

int loop_run(struct worker *w)
{
	int rc = 0;
	while (!wio_stopping(w->io)) {
		struct fs_msg m;
		w->poll_start = trace_now(w);
		int got = wio_poll(w->io, next_due_ms(w), &m);
		if (got < 0) {
			rc = got;
			break;
		}
		if (got == 1) {
			on_message(w, &m);
			wio_release(w->io);
		}
		wio_serve(w->io);
		commit_finish(w, false);
		process_due(w, got == 0);
		for (int j = 0; j < w->n_parts; j++)
			if (w->parts[w->part_ids[j]]->assigned)
				advance_replied(w->parts[w->part_ids[j]]);
		reap_orphans(w);
		int64_t now = wio_now_ms(w->io);
		if (w->cfg.stats_interval_ms &&
		    now - w->last_stats_ms >= w->cfg.stats_interval_ms) {
			log_stats(w, "stats");
			w->last_stats_ms = now;
		}
		warn_misrouted(w, now);
		if (w->replay && replay_progress(w, false))
			break;
	}
	/* Drain: decide what was already read (one try each), then leave the group cleanly. */
	commit_wait(w);
	if (rc == 0) {
		process_due(w, true);
		commit_wait(w);
		process_due(w, true); /* what was read during the last commit */
		commit_wait(w);
	}
	return rc;
}

void loop_assigned(struct worker *w, const int32_t *ids, int64_t *offsets, int n)
{
	commit_wait(w); /* the commits in flight finish first (and the store is free) */
	for (int i = 0; i < n; i++) {
		if (ids[i] >= w->limits.partitions) {
			/* The topic grew while we ran: the rule's count is the recorded one. */
			fs_error("partition %" PRId32 " of %s is beyond the %" PRId32
				 " recorded for the topic: it grew, and the partitioning "
				 "rule would move SKUs away from their state; not consuming "
				 "it (docs/reference/operations.md: Growing the intents topic)",
				 ids[i], w->cfg.topic_intents, w->limits.partitions);
			offsets[i] = FS_OFFSET_END;
			continue;
		}
		struct part *p = part_get(w, ids[i]);
		if (!p) {
			fs_error("partition %" PRId32 " out of range or out of memory; "
				 "not consuming it",
				 ids[i]);
			offsets[i] = FS_OFFSET_END; /* never decided: stays pending */
			continue;
		}
		p->assigned = true;
		p->replied = -1;
		if (part_load(w, p) < 0)
			continue;
		if (!w->replay)
			publish_stock_all(w, p);
		offsets[i] = start_offset(p);
		fs_info("partition %" PRId32 " assigned: next offset %" PRId64 ", replied %" PRId64
			", start %" PRId64,
			p->id, p->meta.next_offset, p->meta.replied_offset, offsets[i]);
	}
}

void loop_revoked(struct worker *w, const int32_t *ids, int n)
{
	commit_wait(w);
	/* Stop deciding; deliver what was committed; forget the state. */
	wio_crash_at(w->io, "in_revoke");
	wio_flush(w->io, w->cfg.flush_timeout_ms);
	for (int i = 0; i < n; i++) {
		struct part *p = part_get(w, ids[i]);
		if (!p || !p->assigned)
			continue;
		save_replied(w, p);
		part_drop(w, p);
		fs_info("partition %" PRId32 " revoked", p->id);
	}
}

void loop_free(struct worker *w)
{
	for (int i = 0; i < PARTITIONS_MAX; i++)
		if (w->parts[i])
			part_free(w, w->parts[i]);
	memset(w->parts, 0, sizeof w->parts);
	w->n_parts = 0;
	while (w->orphans) {
		struct inflight *f = w->orphans;
		w->orphans = f->next;
		free(f);
	}
	committers_free(w);
	extras_free(&w->ex);
	fs_store_close(w->store);
	w->store = NULL; /* log_stats runs after teardown */
	fs_buf_free(&w->out);
	fs_buf_free(&w->results);
	free(w->outs);
	w->outs = NULL;
	w->outs_cap = 0;
}
