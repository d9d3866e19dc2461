/* result.c: results and stock records (see result.h). */
#include "core/result.h"

#include <inttypes.h>
#include <stdio.h>

/* Every string written here is validated (SKU charset, canonical UUID) or a static name, so
 * no JSON escaping is needed; buyer ids, which may hold quotes, are never echoed. */
/* ,"outcome":...[,"reason":...] (static names: nothing to escape) */
static void outcome_members(struct fs_buf *out, const struct fs_decision *d)
{
	fs_buf_str(out, ",\"outcome\":\"");
	fs_buf_str(out, fs_outcome_name(d->outcome));
	fs_buf_str(out, "\"");
	if (d->reason) {
		fs_buf_str(out, ",\"reason\":\"");
		fs_buf_str(out, d->reason);
		fs_buf_str(out, "\"");
	}
}

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
	outcome_members(out, d);
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
		      ",\"partition\":%" PRId32 ",\"offset\":%" PRId64 ",\"clock_ms\":%" PRId64,
		      s->sku, fs_sku_state_name(s, clock_ms), s->supply, s->available, s->held,
		      s->sold, partition, offset, clock_ms);
	if (s->room)
		fs_buf_printf(out,
			      ",\"room\":{\"joined\":%" PRIu32 ",\"drawn\":%s,\"admitted\":%" PRIu32
			      ",\"rate_per_s\":%" PRId64 ",\"opens_at\":%" PRId64 "}",
			      s->room->len, s->room->drawn ? "true" : "false", s->room->next,
			      s->admission.rate_per_s, s->opens_at_ms);
	fs_buf_str(out, "}");
}

/* The members a join's answer and an admission share: the buyer (escaped: a buyer id may
 * hold a quote) and, admitted, the token and its life. */
static void room_members(struct fs_buf *out, const char *sku, const char *buyer_id,
			 const char *token, int64_t not_before, int64_t expires_at)
{
	fs_buf_str(out, ",\"sku\":\"");
	fs_buf_str(out, sku);
	fs_buf_str(out, "\",\"buyer_id\":");
	fs_buf_json_str(out, buyer_id);
	if (token) {
		fs_buf_str(out, ",\"token\":\"");
		fs_buf_str(out, token); /* base64url and digits: nothing to escape */
		fs_buf_str(out, "\"");
		fs_buf_json_int(out, "not_before", not_before);
		fs_buf_json_int(out, "expires_at", expires_at);
	}
}

void fs_result_join(struct fs_buf *out, const struct fs_item *it, const char *token)
{
	const struct fs_record *r = &it->rec;
	const struct fs_decision *d = &it->dec;
	fs_buf_str(out, "{\"v\":1,\"type\":\"join\"");
	room_members(out, fs_sku_valid(r->sku) ? r->sku : "", r->buyer_id,
		     d->outcome == FS_OUT_ADMITTED ? token : NULL, d->admitted_ms,
		     d->expires_at_ms);
	outcome_members(out, d);
	if (d->outcome == FS_OUT_WAITING && d->position > 0) {
		fs_buf_json_int(out, "position", d->position);
		fs_buf_json_int(out, "ahead", d->ahead);
	}
	fs_buf_json_int(out, "decided_at", d->decided_at_ms);
	fs_buf_json_int(out, "partition", it->first_partition);
	fs_buf_json_int(out, "offset", it->first_offset);
	if (d->duplicate)
		fs_buf_str(out, ",\"duplicate\":true");
	fs_buf_str(out, "}");
}

void fs_result_admitted(struct fs_buf *out, const char *sku, const struct fs_room_entry *e,
			int64_t token_ms, const char *token, int32_t partition)
{
	fs_buf_str(out, "{\"v\":1,\"type\":\"admission\"");
	room_members(out, sku, e->buyer_id, token, e->admitted_ms, e->minted_ms + token_ms);
	fs_buf_str(out, ",\"outcome\":\"admitted\"");
	/* A re-mint (room.h) is told at the tick that minted its token, so that a reader that
	 * keeps the latest result per buyer (by offset) keeps the live token. */
	fs_buf_json_int(out, "decided_at", e->minted_ms);
	fs_buf_json_int(out, "partition", partition);
	fs_buf_json_int(out, "offset", e->minted_off);
	if (e->minted_off != e->decided_off) {
		fs_buf_str(out, ",\"reminted\":true");
		fs_buf_json_int(out, "admitted_at", e->decided_ms);
		fs_buf_json_int(out, "admitted_offset", e->decided_off);
	}
	fs_buf_str(out, "}");
}

void fs_room_key(char out[FS_ROOM_KEY_MAX + 1], const char *sku, const char *buyer_id)
{
	snprintf(out, FS_ROOM_KEY_MAX + 1, "%s/%s", sku, buyer_id);
}
