/* result.h: the JSON of the results and stock topics (DESIGN.md section 2). Pure. */
#ifndef FS_REPLY_H
#define FS_REPLY_H

#include "core/batch.h"
#include "core/buf.h"
#include "core/core.h"

/* Appends one result record for a decided item. */
void fs_result_of(struct fs_buf *out, const struct fs_item *it);
/* Appends the result of a hold that expired (no record of its own: the clock ended it). */
void fs_result_expired(struct fs_buf *out, const char *intent_id, const char *sku, int64_t qty,
		       int64_t ended_at_ms, int32_t partition, int64_t ended_offset);
/* Appends one stock record for a SKU: its state at the partition clock clock_ms, and where it
 * was decided, the partition and the offset of the last record it reflects (issue 28, item
 * 8): a reader keeps, per SKU, the record with the highest offset (a late copy from a worker
 * that has since lost the partition carries a lower one). */
void fs_result_stock(struct fs_buf *out, const struct fs_sku *s, int32_t partition, int64_t offset,
		     int64_t clock_ms);
/* The SKU's state at the partition clock: closed (closed, or past its window), not_open
 * (before its window), sold_out or open. */
const char *fs_sku_state_name(const struct fs_sku *s, int64_t clock_ms);
/* True if the SKU's window opened or closed when the clock moved from from_ms to to_ms: its
 * state changed with the clock alone, no record of its own. */
bool fs_sku_window_crossed(const struct fs_sku *s, int64_t from_ms, int64_t to_ms);

#endif
