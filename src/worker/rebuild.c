/* rebuild.c: flashsale-worker --replay (see rebuild.h). */
#include "worker/rebuild.h"

#include "io/log.h"
#include "worker/io.h"
#include "worker/partition.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

/* Replay: a progress bar with the rate on stderr; true once every partition reached the end
 * offset it had when the replay started. */
bool replay_progress(struct worker *w, bool final)
{
	int64_t done = 0;
	bool all = true;
	for (int i = 0; i < w->replay_parts; i++) {
		const struct part *p = w->parts[i];
		int64_t next = p && p->loaded ? p->meta.next_offset : -1;
		/* Loaded with nothing decided yet: at 0, which is also the end of an empty
		 * partition (a replay of a topic with one waited for it forever). */
		if (next < 0 && p && p->loaded)
			next = 0;
		if (next < w->replay_end[i])
			all = false;
		if (next > w->replay_from[i])
			done += next - w->replay_from[i];
	}
	int64_t now = wio_now_ms(w->io);
	if (!final && !all && now - w->replay_last_ms < 1000)
		return false;
	w->replay_last_ms = now;
	double el = (double)(now - w->replay_start_ms) / 1000.0;
	int64_t total = w->replay_total > 0 ? w->replay_total : 1;
	int filled = (int)(30 * (done > total ? total : done) / total);
	fprintf(stderr, "replay [%.*s%.*s] %" PRId64 "/%" PRId64 " records, %.0f records/s%s",
		filled, "##############################", 30 - filled,
		"..............................", done, w->replay_total,
		el > 0 ? (double)done / el : 0.0, all || final ? "\n" : "\r");
	return all;
}

/* Partition i: loaded, and where its rebuild starts and ends. */
static int replay_plan(struct worker *w, int32_t i)
{
	int64_t lo, hi;
	int e = wio_watermarks(w->io, i, &lo, &hi);
	struct part *p = part_get(w, i);
	if (e < 0 || !p) {
		fs_error("replay: partition %d: %s", i, e < 0 ? wio_error(w->io) : "no memory");
		return -EIO;
	}
	p->assigned = true;
	if (part_load(w, p) < 0)
		return -EINTR;
	w->replay_end[i] = hi;
	int64_t from = p->meta.next_offset < 0 ? 0 : p->meta.next_offset;
	w->replay_from[i] = from;
	/* A rebuild must see every record: an empty database needs the log from 0. */
	if (from < lo) {
		fs_error("replay: partition %d: the database needs records from offset %" PRId64
			 " but the log starts at %" PRId64 " (below the log's start): records "
			 "are gone, refusing to skip them",
			 i, from, lo);
		return -ERANGE;
	}
	w->replay_total += hi - from;
	w->replay_start[i] = p->meta.next_offset < 0 ? FS_OFFSET_BEGINNING : p->meta.next_offset;
	fs_info("replay: partition %d from %" PRId64 " to %" PRId64, i, from, hi);
	return 0;
}

/* Assigns every partition of the intents topic, each from its stored offset, and notes where
 * the log ends now. */
int replay_assign(struct worker *w)
{
	int32_t n;
	if (wio_partitions(w->io, 10000, &n) < 0) {
		fs_error("replay: topic %s: %s", w->cfg.topic_intents, wio_error(w->io));
		return -EIO;
	}
	if (n > PARTITIONS_MAX) {
		fs_error("replay: %d partitions, at most %d", n, PARTITIONS_MAX);
		return -EINVAL;
	}
	w->replay_parts = n;
	for (int i = 0; i < n; i++) {
		int rc = replay_plan(w, i);
		if (rc < 0)
			return rc;
	}
	int rc = wio_assign(w->io, w->replay_start, n);
	w->replay_start_ms = wio_now_ms(w->io);
	return rc < 0 ? -EIO : 0;
}
