/* metrics.c: the worker's counts for its metrics, and their text (see metrics.h; the names
 * are docs/reference/metrics.md's). */
#include "worker/metrics.h"

#include "io/prom.h"
#include "worker/io.h"
#include "worker/loop.h"

#include <stdio.h>
#include <string.h>

void metrics_init(struct counters *n)
{
	fs_prom_hist_init(&n->batch_records, fs_prom_records_bounds, fs_prom_records_n);
	fs_prom_hist_init(&n->commit_seconds, fs_prom_seconds_bounds, fs_prom_seconds_n);
}

static void count_reject(struct counters *n, const char *reason)
{
	for (int i = 0; i < n->n_reasons; i++)
		if (strcmp(n->rejects[i].reason, reason) == 0) {
			n->rejects[i].n++;
			return;
		}
	if (n->n_reasons == METRIC_REASONS_MAX || strlen(reason) >= METRIC_REASON_LEN) {
		n->rejects_other++;
		return;
	}
	snprintf(n->rejects[n->n_reasons].reason, METRIC_REASON_LEN, "%s", reason);
	n->rejects[n->n_reasons++].n = 1;
}

void metrics_count_batch(struct counters *n, const struct fs_batch *b)
{
	fs_prom_hist_observe(&n->batch_records, (double)b->counts.records);
	for (uint32_t i = 0; i < b->len; i++) {
		const struct fs_item *it = &b->items[i];
		/* First decisions only: a repeat is answered with one made before, a conflict makes
		 * none, a tick and a forwarded record are decided by nobody here. */
		if (it->cls != FS_ITEM_NEW && it->cls != FS_ITEM_SALE && it->cls != FS_ITEM_INVALID)
			continue;
		unsigned kind = (unsigned)it->rec.kind, out = (unsigned)it->dec.outcome;
		if (it->cls == FS_ITEM_INVALID)
			kind = FS_KIND_INVALID, out = FS_OUT_REJECTED;
		if (kind < METRIC_KINDS && out < METRIC_OUTCOMES)
			n->decided[kind][out]++;
		if (out == FS_OUT_REJECTED)
			count_reject(n, fs_item_reject_reason(it));
	}
}

void metrics_count_commit(struct counters *n, int64_t us)
{
	fs_prom_hist_observe(&n->commit_seconds, (double)us / 1e6);
}

static void counters_text(const struct worker *w, struct fs_buf *b)
{
	const struct counters *n = &w->n;
	fs_prom_one(b, "flashsale_records_total", "counter",
		    "Records decided (every record of a committed batch).", n->records);
	fs_prom_family(b, "flashsale_decisions_total", "counter",
		       "First decisions made, by record type and outcome.");
	for (int k = 0; k < METRIC_KINDS; k++)
		for (int o = 1; o < METRIC_OUTCOMES; o++) {
			if (!n->decided[k][o])
				continue;
			struct fs_prom_label l[] = {
				{"type", fs_kind_name((enum fs_kind)k)},
				{"outcome", fs_outcome_name((enum fs_outcome)o)}};
			fs_prom_int(b, "flashsale_decisions_total", l, 2, n->decided[k][o]);
		}
	fs_prom_family(b, "flashsale_rejects_total", "counter",
		       "Decisions rejected, by reason (docs/reference/records.md).");
	for (int i = 0; i < n->n_reasons; i++) {
		struct fs_prom_label l[] = {{"reason", n->rejects[i].reason}};
		fs_prom_int(b, "flashsale_rejects_total", l, 1, n->rejects[i].n);
	}
	if (n->rejects_other) {
		struct fs_prom_label l[] = {{"reason", "other"}};
		fs_prom_int(b, "flashsale_rejects_total", l, 1, n->rejects_other);
	}
	const struct {
		const char *name, *help;
		int64_t v;
	} plain[] = {
		{"flashsale_duplicates_total",
		 "Repeated intent ids answered with their first decision.", n->repeats},
		{"flashsale_conflicts_total",
		 "Intent ids reused with another body, answered conflict.", n->conflicts},
		{"flashsale_forwarded_total",
		 "Records that arrived on the wrong partition, forwarded to theirs.", n->forwarded},
		{"flashsale_expiries_total", "Holds expired.", n->expired},
		{"flashsale_ticks_sent_total",
		 "Tick records appended to idle partitions with live holds.", n->ticks},
		{"flashsale_records_refused_total",
		 "Records Postgres refused for good, rejected store_refused.", n->refused},
		{"flashsale_expiries_refused_total",
		 "Holds whose expiry Postgres refused for good: held until confirmed or cancelled.",
		 n->expiries_refused},
		{"flashsale_results_published_total",
		 "Results, forwards, expiry results and stock records produced.", n->published},
		{"flashsale_delivery_failures_total",
		 "Deliveries the broker refused (sent again from the replied offset).",
		 n->delivery_failed},
	};
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
		fs_prom_one(b, plain[i].name, "counter", plain[i].help, plain[i].v);
}

static void transactions_text(const struct worker *w, struct fs_buf *b, int64_t stalled)
{
	const struct counters *n = &w->n;
	fs_prom_family(b, "flashsale_batch_records", "histogram", "Records per committed batch.");
	fs_prom_hist_write(b, "flashsale_batch_records", NULL, 0, &n->batch_records);
	fs_prom_family(b, "flashsale_batch_commit_seconds", "histogram",
		       "Time of each batch transaction, from its first statement to COMMIT's "
		       "answer.");
	fs_prom_hist_write(b, "flashsale_batch_commit_seconds", NULL, 0, &n->commit_seconds);
	fs_prom_family(b, "flashsale_transactions_failed_total", "counter",
		       "Batch transactions that did not commit, by cause.");
	const struct {
		const char *cause;
		int64_t v;
	} causes[] = {{"fenced", n->tx_failed[TX_FENCED]},
		      {"redo", n->tx_failed[TX_REDO]},
		      {"sql_error", n->tx_failed[TX_SQL_ERROR]},
		      {"transient", n->tx_failed[TX_TRANSIENT]},
		      {"unknown_outcome", n->tx_failed[TX_UNKNOWN]}};
	for (size_t i = 0; i < sizeof causes / sizeof causes[0]; i++) {
		struct fs_prom_label l[] = {{"cause", causes[i].cause}};
		fs_prom_int(b, "flashsale_transactions_failed_total", l, 1, causes[i].v);
	}
	fs_prom_one(b, "flashsale_transactions_stalled_total", "counter",
		    "Sessions of stalled workers this worker ended (a lock held past its "
		    "timeout).",
		    stalled);
}

static int64_t in_flight(const struct worker *w)
{
	int64_t n = 0;
	for (const struct inflight *f = w->orphans; f; f = f->next)
		n += f->pending;
	for (int j = 0; j < w->n_parts; j++)
		for (const struct inflight *f = w->parts[w->part_ids[j]]->head; f; f = f->next)
			n += f->pending;
	return n;
}

static void partitions_text(struct worker *w, struct fs_buf *b)
{
	int64_t assigned = 0, live = 0;
	const char *fams[][3] = {
		{"flashsale_partition_next_offset", "gauge",
		 "The next offset to decide, as committed."},
		{"flashsale_partition_lag_records", "gauge",
		 "Records on the log not decided yet (the partition's end minus the next offset)."},
		{"flashsale_partition_records_total", "counter",
		 "Records decided on the partition."},
	};
	for (int f = 0; f < 3; f++) {
		fs_prom_family(b, fams[f][0], fams[f][1], fams[f][2]);
		for (int j = 0; j < w->n_parts; j++) {
			struct part *p = w->parts[w->part_ids[j]];
			if (!p->assigned || !p->loaded)
				continue;
			char id[16];
			snprintf(id, sizeof id, "%d", (int)p->id);
			struct fs_prom_label l[] = {{"partition", id}};
			/* No offset stored yet: the partition is read from its beginning. */
			int64_t next = p->meta.next_offset < 0 ? 0 : p->meta.next_offset;
			int64_t v = p->n_records;
			if (f == 0) {
				v = next;
			} else if (f == 1) {
				int64_t end = wio_log_end(w->io, p->id);
				if (end < 0)
					continue; /* not known yet */
				v = end > next ? end - next : 0;
				/* Everything read and decided: offsets left before the end hold
				 * no record (a transaction's marker), not a record waiting. */
				if (p->batch.len == 0 && p->n_fly == 0 &&
				    wio_position(w->io, p->id) >= end)
					v = 0;
			}
			fs_prom_int(b, fams[f][0], l, 1, v);
			if (f == 0) {
				assigned++;
				live += p->core.heap_len;
			}
		}
	}
	fs_prom_one(b, "flashsale_assigned_partitions", "gauge",
		    "Partitions of the intents topic assigned to this worker (and loaded).",
		    assigned);
	fs_prom_one(b, "flashsale_holds_live", "gauge",
		    "Holds not yet confirmed, cancelled or expired, on the assigned partitions.",
		    live);
	fs_prom_one(b, "flashsale_results_in_flight", "gauge",
		    "Produced and not yet acknowledged by the broker.", in_flight(w));
}

void metrics_render(struct worker *w, struct fs_buf *out)
{
	fs_prom_family(out, "flashsale_worker_info", "gauge",
		       "1; the consumer group and the intents topic the worker serves.");
	struct fs_prom_label l[] = {{"group", w->cfg.group}, {"topic", w->cfg.topic_intents}};
	fs_prom_int(out, "flashsale_worker_info", l, 2, 1);
	fs_prom_family(out, "flashsale_worker_start_time_seconds", "gauge",
		       "When the process started, seconds since the epoch.");
	fs_prom_double(out, "flashsale_worker_start_time_seconds", NULL, 0,
		       (double)w->start_ms / 1000.0);
	counters_text(w, out);
	transactions_text(w, out, loop_stalled_broken(w));
	partitions_text(w, out);
}
