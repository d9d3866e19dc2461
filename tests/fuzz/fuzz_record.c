/* fuzz_record.c: libFuzzer target for the record parser, the core and the reply writer.
 *
 * Input: one byte n (key length, mod 65), n key bytes, then the payload. Each input is parsed
 * with fs_record_parse, decided by a core that has one open SKU ("S"), and answered with
 * fs_result_of. It must never crash or trip a sanitizer, the core's invariants must hold,
 * and every reply must be valid JSON with no duplicate keys (a hostile key or body must never
 * leak into the results topic). The parser's two paths (the flat-object scanner, jansson)
 * must give the same record, byte for byte. Run: scripts/fuzz [SECONDS]. */
#include "core/batch.h"
#include "core/buf.h"
#include "core/core.h"
#include "core/record.h"
#include "core/result.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fs_core core;
static struct fs_buf out;
static int64_t offset;

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_record: %s\n", what);
	abort();
}

static void init_once(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	fs_core_init(&core, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init_once();
	if (size == 0)
		return 0;
	size_t key_len = data[0] % 65;
	if (key_len > size - 1)
		key_len = size - 1;
	const uint8_t *key = data + 1;
	const uint8_t *payload = key + key_len;
	size_t len = size - 1 - key_len;

	/* A fresh sale every 256 inputs, so that stock, limits and holds keep changing. */
	if (core.skus_len == 0 || offset % 256 == 0) {
		fs_core_reset(&core);
		struct fs_record open = {.kind = FS_KIND_OPEN,
					 .qty = 5,
					 .per_buyer_limit = 2,
					 .max_qty = 2,
					 .hold_ms = 1000,
					 .offset = offset};
		strcpy(open.sku, "S");
		struct fs_decision d;
		fs_core_decide(&core, &open, &d);
	}
	/* The partitioning rule too: 1-4 partitions, the record on partition 0, either mode
	 * (the reply of a wrong_partition rejection names the rule and must stay JSON). */
	struct fs_record_limits limits = {.bytes_max = 4096,
					  .partitions = (int32_t)(1 + offset % 4),
					  .misrouted_reject = offset / 4 % 2 == 1};
	struct fs_item it;
	memset(&it, 0, sizeof it);
	int rc = fs_record_parse(&limits, key_len ? key : NULL, key_len, payload, len, 0, offset,
				 offset * 100, &it.rec);
	if ((rc == 0) != (it.rec.kind != FS_KIND_INVALID) || (rc != 0 && !it.rec.reject_reason))
		fail("parse result and reject reason disagree");
	if (it.rec.misrouted != (!limits.misrouted_reject && it.rec.route > 0) ||
	    (it.rec.route >= 0) != (key_len > 0))
		fail("the partitioning rule and the record disagree");
	struct fs_record_limits ref_limits = limits;
	ref_limits.jansson_only = true;
	struct fs_record ref;
	if (fs_record_parse(&ref_limits, key_len ? key : NULL, key_len, payload, len, 0, offset,
			    offset * 100, &ref) != rc ||
	    memcmp(&ref, &it.rec, sizeof ref) != 0)
		fail("the flat scanner and jansson read the payload differently");
	offset++;
	if (fs_core_decide(&core, &it.rec, &it.dec) < 0)
		return 0;
	for (uint32_t i = 0; i < core.skus_len; i++) {
		const struct fs_sku *s = &core.skus[i];
		if (s->available < 0 || s->held < 0 ||
		    s->available + s->held + s->sold != s->supply)
			fail("stock invariant broken");
	}
	fs_core_commit(&core);

	fs_buf_clear(&out);
	it.first_offset = it.rec.offset;
	fs_result_of(&out, &it);
	json_error_t err;
	json_t *j = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &err);
	if (!j || !json_is_object(j))
		fail("reply is not a JSON object");
	json_decref(j);
	return 0;
}
