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
/* Appends one stock record for a SKU. */
void fs_result_stock(struct fs_buf *out, const struct fs_sku *s);
/* open | sold_out | closed */
const char *fs_sku_state_name(const struct fs_sku *s);

#endif
