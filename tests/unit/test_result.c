/* test_result.c: the JSON of the results and stock topics (src/core/result.c). Every reply is
 * parsed back with jansson (duplicates rejected) and its fields compared. */
#include "check.h"
#include "core/batch.h"
#include "core/result.h"

#include <jansson.h>

#define U1 "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"

static const struct fs_record_limits no_limits = {0};

/* Parses one reply; NULL (and a failed check) if it is not one valid JSON object. */
static json_t *load(const char *s)
{
	json_error_t err;
	json_t *j = json_loads(s, JSON_REJECT_DUPLICATES, &err);
	if (!CHECK(j != NULL && json_is_object(j))) {
		fprintf(stderr, "  reply: %s\n  error: %s\n", s, err.text);
		json_decref(j);
		return NULL;
	}
	return j;
}

static const char *jstr(json_t *j, const char *k)
{
	json_t *v = json_object_get(j, k);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int64_t jint(json_t *j, const char *k)
{
	json_t *v = json_object_get(j, k);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -999;
}

/* Decides one batch of (key, payload) records and returns the reply of item `want`. */
struct batch_run {
	struct fs_batch b;
	struct fs_core c;
	struct fs_buf out;
};

static void run_batch(struct batch_run *r, const char *const *kv, int n)
{
	fs_batch_init(&r->b, 64);
	fs_core_init(&r->c, 2);
	memset(&r->out, 0, sizeof r->out);
	for (int i = 0; i < n; i++) {
		struct fs_item *it = fs_batch_push(&r->b);
		const char *key = kv[2 * i], *json = kv[2 * i + 1];
		fs_record_parse(&no_limits, key, key ? strlen(key) : 0, json, strlen(json), 2,
				50 + i, 10000 + i, &it->rec);
	}
	CHECK_INT(fs_batch_decide(&r->b, &r->c), 0);
}

static json_t *reply_of(struct batch_run *r, uint32_t i)
{
	fs_buf_clear(&r->out);
	fs_result_of(&r->out, &r->b.items[i]);
	CHECK(fs_buf_ok(&r->out));
	return load(fs_buf_cstr(&r->out));
}

static void free_batch(struct batch_run *r)
{
	fs_buf_free(&r->out);
	fs_core_free(&r->c);
	fs_batch_free(&r->b);
}

static void test_results(void)
{
	static const char *const kv[] = {
		"A",
		"{\"v\":1,\"type\":\"open\",\"sku\":\"A\",\"stock\":1,\"hold_seconds\":30}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"A\","
		"\"buyer_id\":\"q\\\"uote\",\"qty\":1}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"A\","
		"\"buyer_id\":\"q\\\"uote\",\"qty\":1}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"A\","
		"\"buyer_id\":\"q\\\"uote\",\"qty\":2}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"oops\":",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"00000000-0000-4000-8000-000000000002\","
		"\"sku\":\"A\",\"buyer_id\":\"b\",\"qty\":1}",
		NULL,
		"{\"v\":1,\"type\":\"tick\"}",
		"A",
		"{\"v\":1,\"type\":\"close\",\"sku\":\"A\"}",
	};
	struct batch_run r;
	run_batch(&r, kv, 8);

	json_t *j;
	CHECK_CTX("%s", "reply: open");
	if ((j = reply_of(&r, 0))) {
		CHECK_INT(jint(j, "v"), 1);
		CHECK_STR(jstr(j, "type"), "open");
		CHECK(json_is_null(json_object_get(j, "intent_id")));
		CHECK_STR(jstr(j, "sku"), "A");
		CHECK_STR(jstr(j, "outcome"), "applied");
		CHECK(json_object_get(j, "reason") == NULL);
		CHECK_INT(jint(j, "qty"), 1);
		CHECK_INT(jint(j, "partition"), 2);
		CHECK_INT(jint(j, "offset"), 50);
		CHECK(json_object_get(j, "expires_at") == NULL);
		CHECK(json_object_get(j, "duplicate") == NULL);
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: held");
	if ((j = reply_of(&r, 1))) {
		CHECK_STR(jstr(j, "type"), "buy");
		CHECK_STR(jstr(j, "intent_id"), U1);
		CHECK_STR(jstr(j, "sku"), "A");
		CHECK_STR(jstr(j, "outcome"), "held");
		CHECK_INT(jint(j, "qty"), 1);
		CHECK_INT(jint(j, "expires_at"), 10001 + 30000);
		CHECK_INT(jint(j, "decided_at"), 10001);
		CHECK_INT(jint(j, "offset"), 51);
		CHECK(json_object_get(j, "duplicate") == NULL);
		CHECK(json_object_get(j, "buyer_id") == NULL); /* never echoed */
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: repeat");
	if ((j = reply_of(&r, 2))) {
		CHECK_STR(jstr(j, "outcome"), "held");
		CHECK(json_is_true(json_object_get(j, "duplicate")));
		CHECK_INT(jint(j, "offset"), 51); /* where it was first decided */
		CHECK_INT(jint(j, "expires_at"), 10001 + 30000);
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: conflict");
	if ((j = reply_of(&r, 3))) {
		CHECK_STR(jstr(j, "outcome"), "conflict");
		CHECK_STR(jstr(j, "reason"), "intent_id_reused");
		CHECK_INT(jint(j, "qty"), 2);
		CHECK_INT(jint(j, "offset"), 53);
		CHECK(json_object_get(j, "duplicate") == NULL);
		CHECK(json_object_get(j, "expires_at") == NULL);
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: invalid");
	if ((j = reply_of(&r, 4))) {
		CHECK_STR(jstr(j, "type"), "invalid");
		CHECK(json_is_null(json_object_get(j, "intent_id")));
		CHECK(json_object_get(j, "sku") == NULL);
		CHECK_STR(jstr(j, "outcome"), "rejected");
		CHECK_STR(jstr(j, "reason"), "bad_json");
		CHECK_INT(jint(j, "offset"), 54);
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: sold out");
	if ((j = reply_of(&r, 5))) {
		CHECK_STR(jstr(j, "outcome"), "sold_out");
		CHECK(json_object_get(j, "reason") == NULL);
		CHECK(json_object_get(j, "expires_at") == NULL);
		json_decref(j);
	}
	CHECK_CTX("%s", "reply: close");
	if ((j = reply_of(&r, 7))) {
		CHECK_STR(jstr(j, "type"), "close");
		CHECK_STR(jstr(j, "outcome"), "applied");
		json_decref(j);
	}
	CHECK_CTX("%s", "");

	/* Appending: two replies in one buffer are two objects back to back. */
	fs_buf_clear(&r.out);
	fs_result_of(&r.out, &r.b.items[0]);
	size_t first = r.out.len;
	fs_result_of(&r.out, &r.b.items[1]);
	CHECK(r.out.len > first);
	CHECK(r.out.data[first] == '{');
	free_batch(&r);
}

/* Hostile input that the parser rejects or accepts must still give valid JSON replies. */
static void test_hostile_inputs_give_valid_json(void)
{
	static const char *const kv[] = {
		"a\"b",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"a\\\"b\","
		"\"buyer_id\":\"x\",\"qty\":1}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"A\","
		"\"buyer_id\":\"\\\"},{\\\\\",\"qty\":1}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\\\"\",\"sku\":\"A\","
		"\"buyer_id\":\"x\",\"qty\":1}",
		"A",
		"{\"v\":1,\"type\":\"open\",\"sku\":\"A\\n\",\"stock\":1}",
		"A\n",
		"{\"v\":1,\"type\":\"open\",\"sku\":\"A\",\"stock\":1}",
		"A",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\",\"sku\":\"A\","
		"\"buyer_id\":\"x\",\"qty\":1,\"token\":\"\\\"\\\\\"}",
		"A",
		"\"\\\"\"",
		"A",
		"{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\",\"sku\":\"B\\\"\"}",
		"\xff",
		"{\"v\":1,\"type\":\"restock\",\"sku\":\"\\u00ff\",\"add\":1}",
	};
	enum { N = sizeof kv / sizeof kv[0] / 2 };
	struct batch_run r;
	run_batch(&r, kv, N);
	for (uint32_t i = 0; i < N; i++) {
		CHECK_CTX("hostile reply %u", i);
		json_t *j = reply_of(&r, i);
		if (j) {
			const char *sku = jstr(j, "sku");
			CHECK(sku == NULL || fs_sku_valid(sku));
			CHECK(jstr(j, "outcome") != NULL);
		}
		json_decref(j);
	}
	CHECK_CTX("%s", "");
	free_batch(&r);
}

static void test_stock(void)
{
	struct fs_sku s = {0};
	snprintf(s.sku, sizeof s.sku, "%s", "sku:1");
	s.status = FS_SKU_OPEN;
	s.supply = 10;
	s.available = 3;
	s.held = 5;
	s.sold = 2;
	/* The window (issue 28, item 8): opens at 1000, closes at 2000 on the partition clock. */
	static const struct {
		int status;
		int64_t available, opens, closes, clock;
		const char *want;
	} rows[] = {
		{FS_SKU_OPEN, 3, 0, 0, 5, "open"},
		{FS_SKU_OPEN, 0, 0, 0, 5, "sold_out"},
		{FS_SKU_CLOSED, 3, 0, 0, 5, "closed"},
		{FS_SKU_CLOSED, 0, 0, 0, 5, "closed"},
		{FS_SKU_OPEN, 3, 1000, 2000, 999, "not_open"},
		{FS_SKU_OPEN, 0, 1000, 2000, 999, "not_open"},
		{FS_SKU_OPEN, 3, 1000, 2000, 1000, "open"},
		{FS_SKU_OPEN, 0, 1000, 2000, 1999, "sold_out"},
		{FS_SKU_OPEN, 3, 1000, 2000, 2000, "closed"},
		{FS_SKU_CLOSED, 3, 1000, 2000, 999, "closed"},
	};
	struct fs_buf out = {0};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("stock row %zu", i);
		s.status = rows[i].status;
		s.available = rows[i].available;
		s.held = 8 - rows[i].available;
		s.opens_at_ms = rows[i].opens;
		s.closes_at_ms = rows[i].closes;
		CHECK_STR(fs_sku_state_name(&s, rows[i].clock), rows[i].want);
		fs_buf_clear(&out);
		fs_result_stock(&out, &s, 3, 41, rows[i].clock);
		json_t *j = load(fs_buf_cstr(&out));
		if (!j)
			continue;
		CHECK_INT(jint(j, "v"), 1);
		CHECK_STR(jstr(j, "sku"), "sku:1");
		CHECK_STR(jstr(j, "status"), rows[i].want);
		CHECK_INT(jint(j, "supply"), 10);
		CHECK_INT(jint(j, "available"), rows[i].available);
		CHECK_INT(jint(j, "held"), 8 - rows[i].available);
		CHECK_INT(jint(j, "sold"), 2);
		CHECK_INT(jint(j, "partition"), 3);
		CHECK_INT(jint(j, "offset"), 41);
		CHECK_INT(jint(j, "clock_ms"), rows[i].clock);
		json_decref(j);
	}
	CHECK_CTX("window crossings");
	s.opens_at_ms = 1000;
	s.closes_at_ms = 2000;
	CHECK(fs_sku_window_crossed(&s, 999, 1000));
	CHECK(fs_sku_window_crossed(&s, 500, 2500));
	CHECK(fs_sku_window_crossed(&s, 1999, 2000));
	CHECK(!fs_sku_window_crossed(&s, 1000, 1999));
	CHECK(!fs_sku_window_crossed(&s, 2000, 5000));
	CHECK(!fs_sku_window_crossed(&s, 10, 999));
	s.opens_at_ms = s.closes_at_ms = 0;
	CHECK(!fs_sku_window_crossed(&s, 0, 5000));
	CHECK_CTX("%s", "");
	fs_buf_free(&out);
}

/* ---- known bugs ------------------------------------------------------------------------- */

/* BUG hostile_key_echoed: a confirm/cancel whose Kafka key is not a valid SKU is rejected with
 * key_mismatch, but parse_followup (src/core/record.c) has already copied the key into rec.sku, and
 * fs_result_of (src/core/result.c) writes rec.sku without escaping ("every string written here
 * is validated"). A key such as  a","outcome":"held  makes the worker publish a result whose JSON
 * is invalid or says something else; control bytes or invalid UTF-8 in the key do the same. */
static void test_hostile_key_echoed(void)
{
	static const char *const kv[] = {
		"a\",\"outcome\":\"held",
		"{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}",
		"a\"}",
		"{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}",
		"x\n\x01",
		"{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}",
	};
	struct batch_run r;
	run_batch(&r, kv, 3);
	for (uint32_t i = 0; i < 3; i++) {
		CHECK_CTX("confirm/cancel with key %u", i);
		CHECK_STR(r.b.items[i].rec.reject_reason, "key_mismatch");
		json_t *j = reply_of(&r, i);
		if (j) {
			CHECK_STR(jstr(j, "outcome"), "rejected");
			const char *sku = jstr(j, "sku");
			CHECK(sku == NULL || fs_sku_valid(sku));
		}
		json_decref(j);
	}
	free_batch(&r);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_result");
	}
	test_hostile_key_echoed();
	test_results();
	test_hostile_inputs_give_valid_json();
	test_stock();
	return check_done("test_result");
}
