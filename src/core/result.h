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
/* The waiting room (issue 33). A join's answer: waiting (with its place once drawn), admitted
 * at once (token: the one fs_token_mint gives for it, NULL if none could be made), or refused
 * (unknown_sku, no_waiting_room). An admission (no record of its own: the clock reached the
 * buyer's slot), with its token; offset names the record that moved the clock. Both go to the
 * results topic under fs_room_key: "SKU/BUYER" (a SKU holds no '/'). The token's life is
 * [not_before, expires_at): the slot, and the admission's clock plus the token's seconds. */
void fs_result_join(struct fs_buf *out, const struct fs_item *it, const char *token);
void fs_result_admitted(struct fs_buf *out, const char *sku, const struct fs_room_entry *e,
			int64_t token_ms, const char *token, int32_t partition);
enum { FS_ROOM_KEY_MAX = FS_SKU_LEN_MAX + 1 + FS_BUYER_LEN_MAX };
void fs_room_key(char out[FS_ROOM_KEY_MAX + 1], const char *sku, const char *buyer_id);

/* The SKU's state at the partition clock: closed (closed, or past its window), not_open
 * (before its window), sold_out or open. */
const char *fs_sku_state_name(const struct fs_sku *s, int64_t clock_ms);
/* True if the SKU's window opened or closed when the clock moved from from_ms to to_ms: its
 * state changed with the clock alone, no record of its own. */
bool fs_sku_window_crossed(const struct fs_sku *s, int64_t from_ms, int64_t to_ms);

#endif
