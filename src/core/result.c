/* result.c: results and stock records (see result.h). */
#include "core/result.h"

#include <inttypes.h>

/* Every string written here is validated (SKU charset, canonical UUID) or a static name, so
 * no JSON escaping is needed; buyer ids, which may hold quotes, are never echoed. */
void fs_result_of(struct fs_buf *out, const struct fs_item *it)
{
	/* One per record, floods included: appends only, no printf. */
	const struct fs_record *r = &it->rec;
	const struct fs_decision *d = &it->dec;
	fs_buf_str(out, "{\"v\":1,\"type\":\"");
	fs_buf_str(out, r->kind == FS_KIND_INVALID ? "invalid" : fs_kind_name(r->kind));
	fs_buf_str(out, "\",\"intent_id\":");
	if (r->has_intent) {
		fs_buf_str(out, "\"");
		fs_buf_str(out, r->intent_id);
		fs_buf_str(out, "\"");
	} else {
		fs_buf_str(out, "null");
	}
	/* Defence in depth: only a SKU that passed validation is echoed. */
	if (r->sku[0] && fs_sku_valid(r->sku)) {
		fs_buf_str(out, ",\"sku\":\"");
		fs_buf_str(out, r->sku);
		fs_buf_str(out, "\"");
	}
	fs_buf_str(out, ",\"outcome\":\"");
	fs_buf_str(out, fs_outcome_name(d->outcome));
	fs_buf_str(out, "\"");
	if (d->reason) {
		fs_buf_str(out, ",\"reason\":\"");
		fs_buf_str(out, d->reason);
		fs_buf_str(out, "\"");
	}
	if (r->kind == FS_KIND_INVALID && fs_record_off_route(r)) {
		/* wrong_partition: where the rule puts it, so the producer's owner sees the fix */
		fs_buf_str(out, ",\"expected_partition\":");
		fs_buf_int(out, r->route);
		fs_buf_str(out, ",\"partitioner\":\"" FS_PARTITIONER_NAME "\"");
	}
	fs_buf_str(out, ",\"qty\":");
	fs_buf_int(out, d->qty);
	if (d->outcome == FS_OUT_HELD) {
		fs_buf_str(out, ",\"expires_at\":");
		fs_buf_int(out, d->expires_at_ms);
	}
	fs_buf_str(out, ",\"decided_at\":");
	fs_buf_int(out, d->decided_at_ms);
	fs_buf_str(out, ",\"partition\":");
	fs_buf_int(out, it->first_partition);
	fs_buf_str(out, ",\"offset\":");
	fs_buf_int(out, it->first_offset);
	if (d->duplicate)
		fs_buf_str(out, ",\"duplicate\":true");
	fs_buf_str(out, "}");
}

void fs_result_expired(struct fs_buf *out, const char *intent_id, const char *sku, int64_t qty,
		       int64_t ended_at_ms, int32_t partition, int64_t ended_offset)
{
	/* Both strings come from the core or the store, validated when the buy was read. */
	fs_buf_printf(out,
		      "{\"v\":1,\"type\":\"expire\",\"intent_id\":\"%s\",\"sku\":\"%s\","
		      "\"outcome\":\"expired\",\"qty\":%" PRId64 ",\"decided_at\":%" PRId64
		      ",\"partition\":%" PRId32 ",\"offset\":%" PRId64 "}",
		      intent_id, sku, qty, ended_at_ms, partition, ended_offset);
}

const char *fs_sku_state_name(const struct fs_sku *s, int64_t clock_ms)
{
	/* As the core decides a buy (core.c): a window closed at closes_at, open from opens_at. */
	if (s->status == FS_SKU_CLOSED || (s->closes_at_ms && clock_ms >= s->closes_at_ms))
		return "closed";
	if (s->opens_at_ms && clock_ms < s->opens_at_ms)
		return "not_open";
	return s->available == 0 ? "sold_out" : "open";
}

bool fs_sku_window_crossed(const struct fs_sku *s, int64_t from_ms, int64_t to_ms)
{
	return (s->opens_at_ms && from_ms < s->opens_at_ms && to_ms >= s->opens_at_ms) ||
	       (s->closes_at_ms && from_ms < s->closes_at_ms && to_ms >= s->closes_at_ms);
}

void fs_result_stock(struct fs_buf *out, const struct fs_sku *s, int32_t partition, int64_t offset,
		     int64_t clock_ms)
{
	fs_buf_printf(out,
		      "{\"v\":1,\"sku\":\"%s\",\"status\":\"%s\",\"supply\":%" PRId64
		      ",\"available\":%" PRId64 ",\"held\":%" PRId64 ",\"sold\":%" PRId64
		      ",\"partition\":%" PRId32 ",\"offset\":%" PRId64 ",\"clock_ms\":%" PRId64 "}",
		      s->sku, fs_sku_state_name(s, clock_ms), s->supply, s->available, s->held,
		      s->sold, partition, offset, clock_ms);
}
