/* publisher.h: what goes out after a commit: a batch's results (one per record), the records
 * forwarded to their partition, the expiry results and stock records its decisions owe; and
 * the tracking of their delivery, which moves each partition's replied offset (DESIGN.md
 * section 4: a record is answered only after its batch is committed, and a restart answers
 * again from the replied offset). Owns part.head/tail/replied and worker.orphans. */
#ifndef FS_WORKER_PUBLISHER_H
#define FS_WORKER_PUBLISHER_H

#include "worker/context.h"
#include "worker/io.h"

/* Produces one message, tracked with f (may be NULL) and counted. 0 or -EIO. */
int publish_one(struct worker *w, enum fs_topic topic, int32_t partition, const void *key,
		size_t key_len, const struct fs_buf *value, struct inflight *f);
/* One result per record of b (ticks excepted; forwards re-published), tracked as the
 * partition's newest batch in flight, ending at end: that tracking (NULL: out of memory). */
struct inflight *publish_results(struct worker *w, struct part *p, struct fs_batch *b, int64_t end);
/* Renders what the core's last decisions owe besides the batch's results (decided on a
 * partition whose clock was clock_before; last_offset its last record); produces it. */
/* The admissions decided at records [from, to) (issue 33), from the loaded rooms: a restart
 * answering what was not delivered. */
void publish_admissions_again(struct worker *w, struct part *p, int64_t from, int64_t to);
void render_extras(const struct worker *w, struct extras *ex, const struct part *p,
		   int64_t clock_before, int64_t last_offset);
/* The stock record of every SKU of the partition, as loaded (issue 28, item 8: a crash
 * between a commit and its stock records, or a lost delivery, is made good on the next
 * assignment). */
void publish_stock_all(struct worker *w, const struct part *p);
void produce_extras(struct worker *w, struct part *p, const struct extras *ex);
void extras_free(struct extras *ex);
/* A delivery report (io.c): tag is what wio_produce was given; err NULL when delivered;
 * appended_ms the broker's stamp of the message when its topic has LogAppendTime, else 0. */
void publisher_delivered(struct worker *w, struct inflight *tag, const char *err,
			 int64_t appended_ms);
/* Moves p->replied over every batch whose results were all delivered, in order. */
void advance_replied(struct part *p);
/* Frees the revoked partitions' batches whose deliveries are all in. */
void reap_orphans(struct worker *w);

#endif
