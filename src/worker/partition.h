/* partition.h: one partition of the intents topic as this worker holds it: its state loaded
 * from Postgres (and reloaded when fenced), its batch and where a record read goes in it, when
 * the batch is full or has waited long enough, the ticks that move its clock, and forgetting
 * it when revoked. Owns struct part but its delivery fields (publisher.h). */
#ifndef FS_WORKER_PARTITION_H
#define FS_WORKER_PARTITION_H

#include "worker/context.h"
#include "worker/io.h"

/* The partition's entry, made on first use (NULL: out of range or out of memory). */
struct part *part_get(struct worker *w, int32_t id);
void part_free(struct worker *w, struct part *p);
/* Connects (again) to Postgres, waiting with backoff; -EINTR only on shutdown. */
int store_ready(struct worker *w);
int64_t backoff_next(const struct worker *w, int64_t ms);
/* Loads the partition's state from Postgres, retrying transient failures; -EINTR on shutdown
 * (the state is then abandoned). */
int part_load(struct worker *w, struct part *p);
/* Where consumption starts: the stored offset, or earlier if decided records were never
 * answered. */
int64_t start_offset(const struct part *p);
/* Fenced (the batch expected the stored offset `expected`): forget the batch, reload, seek
 * back to what may not have been answered. */
void part_fenced(struct worker *w, struct part *p, int64_t expected);
/* Shutting down with the state not known: nothing more is decided here. */
void part_abandon(struct part *p);
/* Revoked: drop what is pending and forget the state (deliveries in flight become orphans);
 * save_replied first writes the replied offset, best effort. */
void part_drop(struct worker *w, struct part *p);
void save_replied(struct worker *w, struct part *p);

/* The batch: how many records it holds, whether it is full, whether a partial one has
 * waited long enough. */
uint32_t batch_room(const struct worker *w);
void batch_clear(struct part *p);
/* The offset after b's last record (b not empty). */
int64_t batch_end(const struct fs_batch *b);
bool batch_full(const struct worker *w, const struct part *p);
bool batch_waited(const struct worker *w, const struct part *p, int64_t now);

enum route {
	ROUTE_SKIP,  /* stale: already read, or already answered */
	ROUTE_BATCH, /* the next record of the batch to decide */
	ROUTE_AGAIN, /* below the stored offset: to answer again */
};
/* Where the record at off goes (a gap is counted and logged). */
enum route part_route(struct worker *w, struct part *p, int64_t off);
/* Parses m into target (the partition's batch or its again batch). */
void part_push(struct worker *w, struct part *p, struct fs_batch *target, const struct fs_msg *m);
/* Appends a tick when the partition's earliest hold is due and it has been idle. */
/* Whether a tick is due on p now (maybe_tick asks it; the simulator too). */
bool part_tick_due(const struct worker *w, const struct part *p, int64_t now, int64_t wall);
void maybe_tick(struct worker *w, struct part *p, int64_t now);

#endif
