/* trace.c: trace.batches (see trace.h). */
#include "worker/trace.h"

#include "io/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int trace_open(struct worker *w)
{
	if (!w->cfg.trace_batches[0])
		return 0;
	w->trace = fopen(w->cfg.trace_batches, "a");
	if (!w->trace) {
		int e = errno;
		fs_error("trace.batches: cannot open %s: %s", w->cfg.trace_batches, strerror(e));
		return -e;
	}
	/* A line at a time, so that a reader sees each batch as it is done (a write a batch). */
	setvbuf(w->trace, NULL, _IOLBF, 0);
	fs_info("trace.batches: a line per batch to %s", w->cfg.trace_batches);
	return 0;
}

void trace_close(struct worker *w)
{
	if (!w->trace)
		return;
	if (fclose(w->trace) != 0)
		fs_warn("trace.batches: writing %s: %s", w->cfg.trace_batches, strerror(errno));
	w->trace = NULL;
}

int64_t trace_now(const struct worker *w)
{
	if (!w->trace)
		return 0;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void trace_read(struct worker *w, struct part *p, int64_t ts_ms)
{
	if (!w->trace)
		return;
	int64_t now = trace_now(w);
	if (p->batch.len == 0) {
		memset(&p->tr, 0, sizeof p->tr);
		p->tr.append_first_ms = ts_ms;
		p->tr.read_first = now;
		p->tr.poll_start = w->poll_start;
	}
	p->tr.append_last_ms = ts_ms;
	p->tr.read_last = now;
}

void trace_write(struct worker *w, const struct btrace *t)
{
	if (!w->trace || !t->read_first)
		return;
	/* Every moment in microseconds of the wall clock (the broker's timestamps in ms). */
	fprintf(w->trace,
		"part=%" PRId32 " off=%" PRId64 " n=%" PRIu32 " inline=%d after=%d"
		" append_first_ms=%" PRId64 " append_last_ms=%" PRId64 " read_first=%" PRId64
		" read_last=%" PRId64 " decide=%" PRId64 " handed=%" PRId64 " start=%" PRId64
		" prepared=%" PRId64 " phase=%" PRId64 " committed=%" PRId64 " finished=%" PRId64
		" produced=%" PRId64 " delivered=%" PRId64 " appended_ms=%" PRId64
		" poll_start=%" PRId64 "\n",
		t->partition, t->offset, t->records, t->in_line, t->after, t->append_first_ms,
		t->append_last_ms, t->read_first, t->read_last, t->decide, t->handed, t->start,
		t->prepared, t->phase, t->committed, t->finished, t->produced, t->delivered,
		t->appended_ms, t->poll_start);
}

void trace_handed(struct worker *w, struct part *p, int64_t decide, bool in_line)
{
	if (!w->trace || !p->tr.read_first || p->batch.len == 0)
		return;
	struct btrace *t = &p->tr;
	t->decide = decide;
	t->handed = trace_now(w);
	t->in_line = in_line;
	t->start = in_line ? t->handed : 0;
	t->partition = p->id;
	t->offset = p->batch.items[0].rec.offset;
	t->records = p->batch.len;
}
