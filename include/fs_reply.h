/* fs_reply.h: the JSON of the results and stock topics (DESIGN.md section 2). Pure. */
#ifndef FS_REPLY_H
#define FS_REPLY_H

#include "fs_batch.h"
#include "fs_buf.h"
#include "fs_core.h"

/* Appends one result record for a decided item. */
void fs_reply_result(struct fs_buf *out, const struct fs_item *it);
/* Appends one stock record for a SKU. */
void fs_reply_stock(struct fs_buf *out, const struct fs_sku *s);
/* open | sold_out | closed */
const char *fs_sku_state_name(const struct fs_sku *s);

#endif
