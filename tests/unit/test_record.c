/* test_record.c: the intents-record parser (src/core/record.c), table-driven. */
#include "check.h"
#include "core/record.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <uuid/uuid.h>

#include <errno.h>

#define U1 "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
#define U1_UPPER "6F1C2D3E-4A5B-4C6D-8E7F-0123456789AB"
#define BUY_HEAD "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\""
#define BUY(rest) BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"alice\"" rest "}"
#define OPEN(rest) "{\"v\":1,\"type\":\"open\",\"sku\":\"sku-1\"" rest "}"

static const struct fs_record_limits no_limits = {0};

static int parse_n(const char *key, size_t key_len, const void *payload, size_t n,
		   struct fs_record *r)
{
	return fs_record_parse(&no_limits, key, key_len, payload, n, 3, 100, 5000, r);
}

static int parse(const char *key, const char *json, struct fs_record *r)
{
	return parse_n(key, key ? strlen(key) : 0, json, strlen(json), r);
}

/* Holds for every record the parser returns, valid or not: what it copied out is safe to echo
 * (SKU charset, printable buyer, canonical UUID), and the reason is set iff invalid. */
static void check_record_shape(const struct fs_record *r, int rc)
{
	CHECK(rc == 0 || rc == -EINVAL);
	CHECK((rc == 0) == (r->kind != FS_KIND_INVALID));
	CHECK((r->kind == FS_KIND_INVALID) == (r->reject_reason != NULL));
	CHECK(r->sku[0] == '\0' || fs_sku_valid(r->sku));
	CHECK(r->buyer_id[0] == '\0' || fs_buyer_valid(r->buyer_id));
	if (r->has_intent) {
		char canon[FS_UUID_LEN + 1];
		CHECK(fs_uuid_canon(r->intent_id, canon) && strcmp(canon, r->intent_id) == 0);
	}
	if (r->kind == FS_KIND_INVALID)
		CHECK_INT(r->body_hash, 0);
	CHECK(r->body_hash >= 0);
	CHECK_INT(r->partition, 3);
	CHECK_INT(r->offset, 100);
	CHECK_INT(r->ts_ms, 5000);
}

/* ---- rejects --------------------------------------------------------------------------- */

struct reject_row {
	const char *name;
	const char *key; /* NULL: no key */
	const char *json;
	const char *reason;
	/* Set on rows that also trip a known bug (see the end of the file): the default run
	 * checks the reason only, `--known-bug NAME` checks the rest. */
	const char *bug;
};

static const struct reject_row reject_rows[] = {
	/* bad_json: not JSON, or JSON that jansson refuses at the top level */
	{"unterminated", "sku-1", "{", "bad_json"},
	{"trailing comma", "sku-1", "{\"v\":1,}", "bad_json"},
	{"bare word", "sku-1", "nul", "bad_json"},
	{"blank", "sku-1", "   \n\t", "bad_json"},
	{"top-level string", "sku-1", "\"buy\"", "bad_json"},
	{"top-level number", "sku-1", "1", "bad_json"},
	{"top-level null", "sku-1", "null", "bad_json"},
	{"two objects", "sku-1", "{\"v\":1,\"type\":\"tick\"}{}", "bad_json"},
	{"single quotes", "sku-1", "{'v':1,'type':'tick'}", "bad_json"},
	{"NaN", "sku-1", "{\"v\":1,\"type\":\"tick\",\"x\":NaN}", "bad_json"},
	{"integer beyond int64", "sku-1", BUY(",\"qty\":99999999999999999999999"), "bad_json"},
	{"NUL escape in sku", "sku-1",
	 BUY_HEAD ",\"sku\":\"sku-1\\u0000x\",\"buyer_id\":\"alice\",\"qty\":1}", "bad_json"},
	{"NUL escape in buyer", "sku-1",
	 BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"al\\u0000\",\"qty\":1}", "bad_json"},
	{"NUL escape in type", "sku-1", "{\"v\":1,\"type\":\"tick\\u0000buy\"}", "bad_json"},
	{"NUL escape in unknown field", "sku-1", BUY(",\"qty\":1,\"note\":\"\\u0000\""),
	 "bad_json"},
	{"NUL escape in key name", "sku-1", BUY(",\"qty\":1,\"qty\\u0000\":2"), "bad_json"},
	{"invalid UTF-8", "sku-1", BUY(",\"qty\":1,\"note\":\"\xff\xfe\""), "bad_json"},
	{"raw control char in string", "sku-1", BUY(",\"qty\":1,\"note\":\"a\x01z\""), "bad_json"},

	/* duplicate_key */
	{"duplicate qty", "sku-1", BUY(",\"qty\":1,\"qty\":2"), "duplicate_key"},
	{"duplicate v", "sku-1", "{\"v\":1,\"v\":1,\"type\":\"tick\"}", "duplicate_key"},
	{"duplicate in nested object", "sku-1", BUY(",\"qty\":1,\"x\":{\"a\":1,\"a\":1}"),
	 "duplicate_key"},

	/* not_object */
	{"top-level array", "sku-1", "[]", "not_object"},
	{"top-level array of object", "sku-1", "[{\"v\":1,\"type\":\"tick\"}]", "not_object"},

	/* bad_version */
	{"v missing", "sku-1", "{\"type\":\"tick\"}", "bad_version"},
	{"v 2", "sku-1", "{\"v\":2,\"type\":\"tick\"}", "bad_version"},
	{"v 0", "sku-1", "{\"v\":0,\"type\":\"tick\"}", "bad_version"},
	{"v string", "sku-1", "{\"v\":\"1\",\"type\":\"tick\"}", "bad_version"},
	{"v real", "sku-1", "{\"v\":1.0,\"type\":\"tick\"}", "bad_version"},
	{"v null", "sku-1", "{\"v\":null,\"type\":\"tick\"}", "bad_version"},
	{"empty object", "sku-1", "{}", "bad_version"},

	/* bad_type */
	{"type missing", "sku-1", "{\"v\":1}", "bad_type"},
	{"type unknown", "sku-1", "{\"v\":1,\"type\":\"refund\"}", "bad_type"},
	{"type upper case", "sku-1", "{\"v\":1,\"type\":\"BUY\"}", "bad_type"},
	{"type number", "sku-1", "{\"v\":1,\"type\":1}", "bad_type"},
	{"type null", "sku-1", "{\"v\":1,\"type\":null}", "bad_type"},
	{"type empty", "sku-1", "{\"v\":1,\"type\":\"\"}", "bad_type"},
	{"type invalid", "sku-1", "{\"v\":1,\"type\":\"invalid\"}", "bad_type"},

	/* missing_intent_id / bad_intent_id */
	{"buy without intent", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "missing_intent_id"},
	{"buy intent null", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":null,\"sku\":\"sku-1\",\"buyer_id\":\"a\","
	 "\"qty\":1}",
	 "missing_intent_id"},
	{"intent not a uuid", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"x\",\"sku\":\"sku-1\",\"buyer_id\":\"a\","
	 "\"qty\":"
	 "1}",
	 "bad_intent_id"},
	{"intent non-hex", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"6f1c2d3e-4a5b-4c6d-8e7f-0123456789zz\","
	 "\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "bad_intent_id"},
	{"intent without hyphens", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"6f1c2d3e4a5b4c6d8e7f0123456789ab\","
	 "\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "bad_intent_id"},
	{"intent hyphen misplaced", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"6f1c2d3e4-a5b-4c6d-8e7f-0123456789ab\","
	 "\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "bad_intent_id"},
	{"intent one char long", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "0\","
	 "\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "bad_intent_id"},
	{"intent in braces", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"{" U1 "}\","
	 "\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}",
	 "bad_intent_id"},
	{"intent number", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":1,\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":"
	 "1}",
	 "bad_intent_id"},
	{"intent empty", "sku-1",
	 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"\",\"sku\":\"sku-1\",\"buyer_id\":\"a\","
	 "\"qty\":1}",
	 "bad_intent_id"},

	/* missing_sku / bad_sku */
	{"sku missing", "sku-1", BUY_HEAD ",\"buyer_id\":\"alice\",\"qty\":1}", "missing_sku"},
	{"sku null", "sku-1", BUY_HEAD ",\"sku\":null,\"buyer_id\":\"alice\",\"qty\":1}",
	 "missing_sku"},
	{"sku empty", "", BUY_HEAD ",\"sku\":\"\",\"buyer_id\":\"alice\",\"qty\":1}", "bad_sku"},
	{"sku with space", "a b", BUY_HEAD ",\"sku\":\"a b\",\"buyer_id\":\"alice\",\"qty\":1}",
	 "bad_sku"},
	{"sku with quote", "a\"b", BUY_HEAD ",\"sku\":\"a\\\"b\",\"buyer_id\":\"alice\",\"qty\":1}",
	 "bad_sku"},
	{"sku with slash", "a/b", BUY_HEAD ",\"sku\":\"a/b\",\"buyer_id\":\"alice\",\"qty\":1}",
	 "bad_sku"},
	{"sku non-ascii", "\xc3\xa9",
	 BUY_HEAD ",\"sku\":\"\xc3\xa9\",\"buyer_id\":\"alice\",\"qty\":1}", "bad_sku"},
	{"sku 65 chars", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	 BUY_HEAD ",\"sku\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
		  "\"buyer_id\":\"alice\",\"qty\":1}",
	 "bad_sku"},
	{"sku number", "1", BUY_HEAD ",\"sku\":1,\"buyer_id\":\"alice\",\"qty\":1}", "bad_sku"},
	{"sku array", "sku-1", BUY_HEAD ",\"sku\":[\"sku-1\"],\"buyer_id\":\"alice\",\"qty\":1}",
	 "bad_sku"},

	/* key_mismatch (buy, open, restock, close check the key against the body's SKU) */
	{"buy key other", "sku-2", BUY(",\"qty\":1"), "key_mismatch"},
	{"buy key missing", NULL, BUY(",\"qty\":1"), "key_mismatch"},
	{"buy key prefix", "sku-", BUY(",\"qty\":1"), "key_mismatch"},
	{"buy key longer", "sku-1x", BUY(",\"qty\":1"), "key_mismatch"},
	{"buy key case", "SKU-1", BUY(",\"qty\":1"), "key_mismatch"},
	{"open key other", "sku-2", OPEN(",\"stock\":5"), "key_mismatch"},
	{"restock key other", "sku-2", "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":5}",
	 "key_mismatch"},
	{"close key other", "sku-2", "{\"v\":1,\"type\":\"close\",\"sku\":\"sku-1\"}",
	 "key_mismatch"},
	{"confirm body sku other", "sku-1",
	 "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\",\"sku\":\"sku-2\"}",
	 "key_mismatch"},
	{"confirm body sku number", "sku-1",
	 "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\",\"sku\":1}", "key_mismatch"},
	{"cancel key missing", NULL, "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}",
	 "key_mismatch"},
	{"cancel key empty", "", "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}",
	 "key_mismatch"},
	{"cancel key bad chars", "a b", "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}",
	 "key_mismatch", "followup_hostile_key"},
	{"cancel key 65 chars", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	 "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}", "key_mismatch"},

	/* buyer */
	{"buyer missing", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"qty\":1}", "missing_buyer_id"},
	{"buyer null", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":null,\"qty\":1}",
	 "missing_buyer_id"},
	{"buyer empty", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer space", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"a b\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer tab", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"a\\tb\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer newline", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"a\\n\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer DEL", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"a\\u007f\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer non-ascii", "sku-1",
	 BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"\\u00e9\",\"qty\":1}", "bad_buyer_id"},
	{"buyer 65 chars", "sku-1",
	 BUY_HEAD
	 ",\"sku\":\"sku-1\",\"buyer_id\":"
	 "\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"qty\":1}",
	 "bad_buyer_id"},
	{"buyer number", "sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":7,\"qty\":1}",
	 "bad_buyer_id"},

	/* qty */
	{"qty missing", "sku-1", BUY(""), "missing_qty"},
	{"qty null", "sku-1", BUY(",\"qty\":null"), "missing_qty"},
	{"qty 0", "sku-1", BUY(",\"qty\":0"), "bad_qty"},
	{"qty -0", "sku-1", BUY(",\"qty\":-0"), "bad_qty"},
	{"qty -1", "sku-1", BUY(",\"qty\":-1"), "bad_qty"},
	{"qty 1.0", "sku-1", BUY(",\"qty\":1.0"), "bad_qty"},
	{"qty 1.5", "sku-1", BUY(",\"qty\":1.5"), "bad_qty"},
	{"qty 1e3", "sku-1", BUY(",\"qty\":1e3"), "bad_qty"},
	{"qty string", "sku-1", BUY(",\"qty\":\"1\""), "bad_qty"},
	{"qty true", "sku-1", BUY(",\"qty\":true"), "bad_qty"},
	{"qty array", "sku-1", BUY(",\"qty\":[1]"), "bad_qty"},
	{"qty 10^12", "sku-1", BUY(",\"qty\":1000000000000"), "bad_qty"},
	{"qty max+1", "sku-1", BUY(",\"qty\":1000001"), "bad_qty"},
	{"qty int64 min", "sku-1", BUY(",\"qty\":-9223372036854775808"), "bad_qty"},
	{"qty int64 max", "sku-1", BUY(",\"qty\":9223372036854775807"), "bad_qty"},

	/* token */
	{"token number", "sku-1", BUY(",\"qty\":1,\"token\":1"), "bad_token"},
	{"token object", "sku-1", BUY(",\"qty\":1,\"token\":{}"), "bad_token"},
	{"token false", "sku-1", BUY(",\"qty\":1,\"token\":false"), "bad_token"},

	/* open */
	{"open stock missing", "sku-1", OPEN(""), "bad_stock"},
	{"open stock null", "sku-1", OPEN(",\"stock\":null"), "bad_stock"},
	{"open stock -1", "sku-1", OPEN(",\"stock\":-1"), "bad_stock"},
	{"open stock over max", "sku-1", OPEN(",\"stock\":1000000001"), "bad_stock"},
	{"open stock string", "sku-1", OPEN(",\"stock\":\"5\""), "bad_stock"},
	{"open stock real", "sku-1", OPEN(",\"stock\":5.0"), "bad_stock"},
	{"open limit 0", "sku-1", OPEN(",\"stock\":5,\"per_buyer_limit\":0"), "bad_limit"},
	{"open limit -1", "sku-1", OPEN(",\"stock\":5,\"per_buyer_limit\":-1"), "bad_limit"},
	{"open limit over max", "sku-1", OPEN(",\"stock\":5,\"per_buyer_limit\":1000001"),
	 "bad_limit"},
	{"open limit string", "sku-1", OPEN(",\"stock\":5,\"per_buyer_limit\":\"2\""), "bad_limit"},
	{"open max_qty 0", "sku-1", OPEN(",\"stock\":5,\"max_qty\":0"), "bad_limit"},
	{"open max_qty real", "sku-1", OPEN(",\"stock\":5,\"max_qty\":2.0"), "bad_limit"},
	{"open hold 0", "sku-1", OPEN(",\"stock\":5,\"hold_seconds\":0"), "bad_hold"},
	{"open hold over a week", "sku-1", OPEN(",\"stock\":5,\"hold_seconds\":604801"),
	 "bad_hold"},
	{"open hold string", "sku-1", OPEN(",\"stock\":5,\"hold_seconds\":\"60\""), "bad_hold"},
	{"open window reversed", "sku-1", OPEN(",\"stock\":5,\"opens_at\":2000,\"closes_at\":1000"),
	 "bad_window"},
	{"open window empty", "sku-1", OPEN(",\"stock\":5,\"opens_at\":2000,\"closes_at\":2000"),
	 "bad_window"},
	{"open opens_at negative", "sku-1", OPEN(",\"stock\":5,\"opens_at\":-1"), "bad_window"},
	{"open closes_at negative", "sku-1", OPEN(",\"stock\":5,\"closes_at\":-1"), "bad_window"},
	{"open closes_at string", "sku-1", OPEN(",\"stock\":5,\"closes_at\":\"x\""), "bad_window"},
	{"open opens_at huge", "sku-1", OPEN(",\"stock\":5,\"opens_at\":9223372036854775807"),
	 "bad_window"},
	{"open sku missing", "sku-1", "{\"v\":1,\"type\":\"open\",\"stock\":5}", "missing_sku"},

	/* restock */
	{"restock add missing", "sku-1", "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\"}",
	 "bad_stock"},
	{"restock add 0", "sku-1", "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":0}",
	 "bad_stock"},
	{"restock add -5", "sku-1", "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":-5}",
	 "bad_stock"},
	{"restock add over max", "sku-1",
	 "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":1000000001}", "bad_stock"},
	{"restock stock not add", "sku-1",
	 "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"stock\":5}", "bad_stock"},

	/* close, confirm, cancel */
	{"close sku missing", "sku-1", "{\"v\":1,\"type\":\"close\"}", "missing_sku"},
	{"close sku bad", "sku-1", "{\"v\":1,\"type\":\"close\",\"sku\":\"a b\"}", "bad_sku"},
	{"confirm intent missing", "sku-1", "{\"v\":1,\"type\":\"confirm\"}", "missing_intent_id"},
	{"confirm intent bad", "sku-1", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"nope\"}",
	 "bad_intent_id"},
	{"cancel intent bad", "sku-1", "{\"v\":1,\"type\":\"cancel\",\"intent_id\":[]}",
	 "bad_intent_id"},
};

static void test_reject_table(void)
{
	for (size_t i = 0; i < sizeof reject_rows / sizeof reject_rows[0]; i++) {
		const struct reject_row *t = &reject_rows[i];
		CHECK_CTX("reject row '%s'", t->name);
		struct fs_record r;
		int rc = parse(t->key, t->json, &r);
		CHECK_INT(rc, -EINVAL);
		CHECK_INT(r.kind, FS_KIND_INVALID);
		CHECK_STR(r.reject_reason, t->reason);
		if (!t->bug)
			check_record_shape(&r, rc);
	}
	CHECK_CTX("%s", "");
}

/* Every reject reason of src/core/record.c appears in the table above (the table is the spec). */
/* ---- carts (issue 31) ------------------------------------------------------------------- */

#define CART(rest)                                                                                 \
	"{\"v\":1,\"type\":\"cart\",\"cart_id\":\"" U1 "\",\"buyer_id\":\"alice\"" rest "}"
#define LINES2 ",\"lines\":[{\"sku\":\"A-1\",\"qty\":2},{\"sku\":\"B.2\",\"qty\":1}]"

static int parse_cart(const char *key, const char *json, bool on, struct fs_record *r,
		      struct fs_record_ext *x)
{
	struct fs_record_limits lim = {.carts = on};
	return fs_record_parse_ext(&lim, key, key ? strlen(key) : 0, json, strlen(json), 3, 100,
				   5000, r, x);
}

static void test_carts(void)
{
	struct fs_record r;
	static struct fs_record_ext x;
	/* A valid cart: its lines kept outside the record, its id the record's intent id. */
	CHECK_INT(parse_cart(U1, CART(LINES2), true, &r, &x), 0);
	check_record_shape(&r, 0);
	CHECK_INT(r.kind, FS_KIND_CART);
	CHECK_STR(r.intent_id, U1);
	CHECK_STR(x.cart.cart_id, U1);
	CHECK_STR(x.cart.buyer_id, "alice");
	CHECK_INT(x.cart.nlines, 2);
	CHECK_STR(x.cart.lines[1].sku, "B.2");
	CHECK_INT(x.cart.lines[0].qty, 2);
	CHECK_INT(r.qty, 3);
	int64_t h = r.body_hash;
	CHECK(h != 0);
	/* Another line order is another body (a conflict when the id is reused). */
	CHECK_INT(parse_cart(U1,
			     CART(",\"lines\":[{\"sku\":\"B.2\",\"qty\":1},{\"sku\":\"A-1\","
				  "\"qty\":2}]"),
			     true, &r, NULL),
		  0);
	CHECK(r.body_hash != h);
	/* Without carts on, a cart is what it was before carts: bad_type. */
	CHECK_INT(parse_cart(U1, CART(LINES2), false, &r, NULL), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_type");
	/* Confirm and cancel of a cart name its id, keyed by it. */
	const char *conf = "{\"v\":1,\"type\":\"confirm\",\"cart_id\":\"" U1 "\"}";
	CHECK_INT(parse_cart(U1, conf, true, &r, NULL), 0);
	CHECK_INT(r.kind, FS_KIND_CART_CONFIRM);
	CHECK_STR(fs_kind_name(r.kind), "cart_confirm");
	CHECK_INT(parse_cart(U1, "{\"v\":1,\"type\":\"cancel\",\"cart_id\":\"" U1 "\"}", true, &r,
			     NULL),
		  0);
	CHECK_INT(r.kind, FS_KIND_CART_CANCEL);
	CHECK_INT(parse_cart(U1, conf, false, &r, NULL), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_type");
	static const struct {
		const char *key, *json, *reason;
	} bad[] = {
		{U1, CART(""), "missing_lines"},
		{U1, CART(",\"lines\":3"), "bad_lines"},
		{U1, CART(",\"lines\":{}"), "bad_lines"},
		{U1, CART(",\"lines\":[]"), "no_lines"},
		{U1, CART(",\"lines\":[{\"sku\":\"A\",\"qty\":1},{\"sku\":\"A\",\"qty\":1}]"),
		 "duplicate_sku"},
		{U1, CART(",\"lines\":[{\"sku\":\"A\",\"qty\":0}]"), "bad_qty"},
		{U1, CART(",\"lines\":[{\"sku\":\"A\",\"qty\":\"1\"}]"), "bad_qty"},
		{U1, CART(",\"lines\":[{\"sku\":\"A B\",\"qty\":1}]"), "bad_line"},
		{U1, CART(",\"lines\":[7]"), "bad_line"},
		{U1, CART(",\"lines\":[{\"qty\":1}]"), "bad_line"},
		{U1,
		 CART(",\"lines\":[{\"sku\":\"A\",\"qty\":1},{\"sku\":\"B\",\"qty\":1},{\"sku\":"
		      "\"C\",\"qty\":1},"
		      "{\"sku\":\"D\",\"qty\":1},{\"sku\":\"E\",\"qty\":1},{\"sku\":\"F\",\"qty\":"
		      "1},"
		      "{\"sku\":\"G\",\"qty\":1},{\"sku\":\"H\",\"qty\":1},{\"sku\":\"I\",\"qty\":"
		      "1}]"),
		 "too_many_lines"},
		{"A-1", CART(LINES2), "key_mismatch"},
		{NULL, CART(LINES2), "key_mismatch"},
		/* Upper case would route to another coordinator than its canonical form. */
		{U1_UPPER,
		 "{\"v\":1,\"type\":\"cart\",\"cart_id\":\"" U1_UPPER "\",\"buyer_id\":\"a\"" LINES2
		 "}",
		 "bad_cart_id"},
		{U1, "{\"v\":1,\"type\":\"cart\",\"buyer_id\":\"a\"" LINES2 "}", "missing_cart_id"},
		{U1, "{\"v\":1,\"type\":\"cart\",\"cart_id\":\"" U1 "\"" LINES2 "}",
		 "missing_buyer_id"},
		{"x",
		 "{\"v\":1,\"type\":\"cart_end\",\"cart_id\":\"" U1
		 "\",\"round\":1,\"coord\":0,\"part\":1,\"action\":\"drop\"}",
		 "bad_message"},
		{"x",
		 "{\"v\":1,\"type\":\"cart_end\",\"cart_id\":\"" U1
		 "\",\"round\":0,\"coord\":0,\"part\":1,\"action\":\"commit\"}",
		 "bad_message"},
		{"x",
		 "{\"v\":1,\"type\":\"cart_answer\",\"cart_id\":\"" U1
		 "\",\"round\":1,\"coord\":0,\"part\":1,\"outcome\":\"confirmed\"}",
		 "bad_message"},
		{"x",
		 "{\"v\":1,\"type\":\"cart_answer\",\"cart_id\":\"" U1
		 "\",\"round\":1,\"coord\":0,\"part\":1,\"outcome\":\"sold_out\",\"reason\":\"made_"
		 "up\"}",
		 "bad_message"},
		{"x",
		 "{\"v\":1,\"type\":\"cart_reserve\",\"cart_id\":\"" U1
		 "\",\"round\":1,\"coord\":0,\"part\":1,\"buyer_id\":\"a\",\"lines\":[{\"sku\":"
		 "\"A\",\"qty\":1}]}",
		 "bad_line"},
		{"",
		 "{\"v\":1,\"type\":\"cart_end\",\"cart_id\":\"" U1
		 "\",\"round\":1,\"coord\":0,\"part\":1,\"action\":\"commit\"}",
		 "key_mismatch"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("cart row %zu: %s", i, bad[i].json);
		int rc = parse_cart(bad[i].key, bad[i].json, true, &r, &x);
		CHECK_INT(rc, -EINVAL);
		CHECK_STR(r.reject_reason ? r.reject_reason : "(none)", bad[i].reason);
		check_record_shape(&r, rc);
	}
	CHECK_CTX("%s", "");
	/* A protocol message is not answered by id (its state dedupes it). */
	CHECK_INT(parse_cart("x",
			     "{\"v\":1,\"type\":\"cart_end\",\"cart_id\":\"" U1
			     "\",\"round\":2,\"coord\":0,\"part\":1,\"action\":\"release\"}",
			     true, &r, &x),
		  0);
	CHECK_INT(r.kind, FS_KIND_CART_MSG);
	CHECK(!r.has_intent);
	CHECK_INT(x.msg.round, 2);
	CHECK_STR(x.msg.key, "x");
}

static void test_every_reason_covered(void)
{
	static const char *const reasons[] = {
		"too_large",	    "empty",	       "bad_json",    "duplicate_key",
		"not_object",	    "bad_version",     "bad_type",    "missing_intent_id",
		"bad_intent_id",    "missing_sku",     "bad_sku",     "key_mismatch",
		"missing_buyer_id", "bad_buyer_id",    "missing_qty", "bad_qty",
		"bad_token",	    "bad_stock",       "bad_limit",   "bad_hold",
		"bad_window",	    "wrong_partition",
	};
	for (size_t k = 0; k < sizeof reasons / sizeof reasons[0]; k++) {
		/* too_large and empty need payloads a table row cannot hold: see
		 * test_size_and_empty. */
		bool found = strcmp(reasons[k], "too_large") == 0 ||
			     strcmp(reasons[k], "empty") == 0 ||
			     strcmp(reasons[k], "wrong_partition") == 0; /* test_routing */
		for (size_t i = 0; i < sizeof reject_rows / sizeof reject_rows[0]; i++)
			if (strcmp(reject_rows[i].reason, reasons[k]) == 0)
				found = true;
		CHECK_CTX("reason %s", reasons[k]);
		CHECK(found);
	}
	CHECK_CTX("%s", "");
}

/* ---- size, empty, NUL bytes, nesting ---------------------------------------------------- */

static void test_size_and_empty(void)
{
	struct fs_record r;
	const char *json = BUY(",\"qty\":1");
	size_t n = strlen(json);

	/* A configured cap: one byte over is too_large, exactly at the cap parses. */
	struct fs_record_limits lim = {.bytes_max = n - 1};
	CHECK_INT(fs_record_parse(&lim, "sku-1", 5, json, n, 3, 100, 5000, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "too_large");
	check_record_shape(&r, -EINVAL);
	lim.bytes_max = n;
	CHECK_INT(fs_record_parse(&lim, "sku-1", 5, json, n, 3, 100, 5000, &r), 0);
	CHECK_INT(r.kind, FS_KIND_BUY);

	/* The ceiling applies even when the configured cap is larger; the check comes before
	 * parsing, so a huge valid-looking payload is never handed to jansson. */
	size_t big = FS_RECORD_BYTES_MAX + 1;
	char *p = malloc(big);
	CHECK(p != NULL);
	if (!p)
		return;
	memset(p, ' ', big);
	memcpy(p, json, n);
	lim.bytes_max = (size_t)FS_RECORD_BYTES_MAX * 4;
	CHECK_INT(fs_record_parse(&lim, "sku-1", 5, p, big, 3, 100, 5000, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "too_large");
	CHECK_INT(fs_record_parse(&no_limits, "sku-1", 5, p, big, 3, 100, 5000, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "too_large");
	/* At the ceiling with trailing spaces: valid. */
	CHECK_INT(fs_record_parse(&no_limits, "sku-1", 5, p, big - 1, 3, 100, 5000, &r), 0);
	CHECK_INT(r.kind, FS_KIND_BUY);
	free(p);

	/* empty */
	CHECK_INT(parse_n("sku-1", 5, "", 0, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "empty");
	check_record_shape(&r, -EINVAL);
	CHECK_INT(parse_n("sku-1", 5, NULL, 0, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "empty");
	CHECK_INT(parse_n("sku-1", 5, NULL, 10, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "empty");
}

static void test_nul_bytes(void)
{
	struct fs_record r;
	/* A raw NUL byte inside a string value. */
	static const char in_string[] = "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1 "\","
					"\"sku\":\"sku-1\",\"buyer_id\":\"al\0ice\",\"qty\":1}";
	CHECK_CTX("%s", "raw NUL in string");
	CHECK_INT(parse_n("sku-1", 5, in_string, sizeof in_string - 1, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");
	check_record_shape(&r, -EINVAL);

	/* A raw NUL byte after a complete, valid object (the payload length includes it). */
	static const char after[] = BUY(",\"qty\":1") "\0";
	CHECK_CTX("%s", "raw NUL after object");
	CHECK_INT(parse_n("sku-1", 5, after, sizeof after, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* A raw NUL byte before the object. */
	static const char before[] = "\0" BUY(",\"qty\":1");
	CHECK_CTX("%s", "raw NUL before object");
	CHECK_INT(parse_n("sku-1", 5, before, sizeof before - 1, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* A payload of NUL bytes only. */
	static const char zeros[16] = {0};
	CHECK_CTX("%s", "NUL bytes only");
	CHECK_INT(parse_n("sku-1", 5, zeros, sizeof zeros, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* A buy key with a NUL byte: the key is compared by length, so it is not the SKU. */
	CHECK_CTX("%s", "NUL in buy key");
	const char *json = BUY(",\"qty\":1");
	CHECK_INT(fs_record_parse(&no_limits, "sku-1\0zz", 8, json, strlen(json), 3, 100, 5000, &r),
		  -EINVAL);
	CHECK_STR(r.reject_reason, "key_mismatch");
	CHECK_CTX("%s", "");
}

static void test_deep_nesting(void)
{
	struct fs_record r;
	enum { DEPTH = 10000 };
	char *p = malloc(2 * DEPTH + 256);
	CHECK(p != NULL);
	if (!p)
		return;

	/* 10000 '[' and nothing else. */
	memset(p, '[', DEPTH);
	CHECK_INT(parse_n("sku-1", 5, p, DEPTH, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* Balanced, 10000 deep. */
	memset(p + DEPTH, ']', DEPTH);
	CHECK_INT(parse_n("sku-1", 5, p, 2 * DEPTH, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* 10000 '{"a":' unterminated. */
	size_t n = 0;
	for (int i = 0; i < DEPTH / 5; i++) {
		memcpy(p + n, "{\"a\":", 5);
		n += 5;
	}
	CHECK_INT(parse_n("sku-1", 5, p, n, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");

	/* A valid buy with a deeply nested unknown field: the parser's depth cap refuses it. */
	n = (size_t)sprintf(p, "%s", BUY_HEAD ",\"x\":");
	memset(p + n, '[', 5000);
	n += 5000;
	memset(p + n, ']', 5000);
	n += 5000;
	n += (size_t)sprintf(p + n, ",\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1}");
	CHECK_INT(parse_n("sku-1", 5, p, n, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_json");
	free(p);

	/* Shallow nesting in an unknown field is fine. */
	CHECK_INT(parse("sku-1", BUY(",\"qty\":1,\"x\":[[[[{\"y\":[1]}]]]]"), &r), 0);
	CHECK_INT(r.kind, FS_KIND_BUY);
}

/* ---- valid records ---------------------------------------------------------------------- */

static void test_valid_buy(void)
{
	struct fs_record r;
	CHECK_CTX("%s", "valid buy");
	int rc = parse("sku-1", BUY(",\"qty\":3,\"token\":\"tok-1\""), &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_BUY);
	CHECK(r.reject_reason == NULL);
	CHECK(r.has_intent);
	CHECK_STR(r.intent_id, U1);
	CHECK_STR(r.sku, "sku-1");
	CHECK_STR(r.buyer_id, "alice");
	CHECK_INT(r.qty, 3);
	CHECK(r.body_hash > 0);
	check_record_shape(&r, rc);

	/* Bounds: qty 1 and FS_QTY_MAX; SKU and buyer of exactly 64 characters; printable buyer
	 * with quotes and backslashes; token of exactly FS_TOKEN_LEN_MAX. */
	CHECK_INT(parse("sku-1", BUY(",\"qty\":1"), &r), 0);
	CHECK_INT(r.qty, 1);
	CHECK_INT(parse("sku-1", BUY(",\"qty\":1000000"), &r), 0);
	CHECK_INT(r.qty, FS_QTY_MAX);

	char sku64[65], buyer64[65], token[FS_TOKEN_LEN_MAX + 2], json[1024];
	memset(sku64, 'S', 64);
	sku64[64] = '\0';
	memset(buyer64, 'b', 64);
	buyer64[64] = '\0';
	snprintf(
		json, sizeof json,
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\",\"buyer_id\":\"%s\","
		"\"qty\":2}",
		U1, sku64, buyer64);
	CHECK_CTX("%s", "64-char sku and buyer");
	CHECK_INT(parse(sku64, json, &r), 0);
	CHECK_STR(r.sku, sku64);
	CHECK_STR(r.buyer_id, buyer64);

	CHECK_CTX("%s", "sku charset");
	CHECK_INT(parse("A-z_0.9:x",
			BUY_HEAD ",\"sku\":\"A-z_0.9:x\",\"buyer_id\":\"a\",\"qty\":1}", &r),
		  0);
	CHECK_STR(r.sku, "A-z_0.9:x");

	CHECK_CTX("%s", "buyer with quote and backslash");
	CHECK_INT(parse("sku-1",
			BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"o'\\\"x\\\\y~!\",\"qty\":1}",
			&r),
		  0);
	CHECK_STR(r.buyer_id, "o'\"x\\y~!");

	memset(token, 't', FS_TOKEN_LEN_MAX);
	token[FS_TOKEN_LEN_MAX] = '\0';
	snprintf(json, sizeof json,
		 "%s,\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1,\"token\":\"%s\"}", BUY_HEAD,
		 token);
	CHECK_CTX("%s", "token at max");
	CHECK_INT(parse("sku-1", json, &r), 0);
	token[FS_TOKEN_LEN_MAX] = 't';
	token[FS_TOKEN_LEN_MAX + 1] = '\0';
	snprintf(json, sizeof json,
		 "%s,\"sku\":\"sku-1\",\"buyer_id\":\"a\",\"qty\":1,\"token\":\"%s\"}", BUY_HEAD,
		 token);
	CHECK_CTX("%s", "token over max");
	CHECK_INT(parse("sku-1", json, &r), -EINVAL);
	CHECK_STR(r.reject_reason, "bad_token");

	/* Unknown fields are ignored, whatever their type. */
	CHECK_CTX("%s", "unknown fields");
	CHECK_INT(parse("sku-1",
			"{\"extra\":{\"a\":[1,2,{\"b\":null}]},\"v\":1,\"type\":\"buy\",\"intent_"
			"id\":\"" U1
			"\",\"sku\":\"sku-1\",\"buyer_id\":\"alice\",\"qty\":2,\"note\":\"hi\","
			"\"price\":1.5,\"flag\":true,\"n\":null}",
			&r),
		  0);
	CHECK_INT(r.kind, FS_KIND_BUY);
	CHECK_INT(r.qty, 2);
	CHECK_CTX("%s", "");
}

static void test_uuid(void)
{
	struct fs_record r;
	CHECK_CTX("%s", "upper-case intent id");
	CHECK_INT(parse("sku-1",
			"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1_UPPER
			"\",\"sku\":\"sku-1\",\"buyer_id\":\"alice\",\"qty\":1}",
			&r),
		  0);
	CHECK(r.has_intent);
	CHECK_STR(r.intent_id, U1);

	CHECK_CTX("%s", "mixed-case intent id on confirm");
	CHECK_INT(parse("sku-1",
			"{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"6f1C2d3E-4A5b-4c6d-8E7f-"
			"0123456789aB\"}",
			&r),
		  0);
	CHECK_STR(r.intent_id, U1);

	/* The id survives on records rejected after it was read (the reply can name it). */
	CHECK_CTX("%s", "intent kept on later reject");
	CHECK_INT(parse("sku-1", BUY(",\"qty\":0"), &r), -EINVAL);
	CHECK(r.has_intent);
	CHECK_STR(r.intent_id, U1);

	struct {
		const char *in, *out;
	} rows[] = {
		{U1, U1},
		{U1_UPPER, U1},
		{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"},
		{"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "ffffffff-ffff-ffff-ffff-ffffffffffff"},
		{"", NULL},
		{"6f1c2d3e", NULL},
		{U1 " ", NULL},
		{" " U1, NULL},
		{"6f1c2d3e-4a5b-4c6d-8e7f-0123456789a", NULL},
		{"6f1c2d3e_4a5b_4c6d_8e7f_0123456789ab", NULL},
		{"6f1c2d3e-4a5b-4c6d-8e7f-0123456789ag", NULL},
		{"{6f1c2d3e-4a5b-4c6d-8e7f-0123456789}", NULL},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("fs_uuid_canon('%s')", rows[i].in);
		char out[FS_UUID_LEN + 1] = "";
		bool ok = fs_uuid_canon(rows[i].in, out);
		CHECK(ok == (rows[i].out != NULL));
		if (ok && rows[i].out)
			CHECK_STR(out, rows[i].out);
	}
	CHECK_CTX("%s", "");
}

static void test_valid_sale_and_followups(void)
{
	struct fs_record r;
	int rc;

	CHECK_CTX("%s", "open with defaults");
	rc = parse("sku-1", OPEN(",\"stock\":100"), &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_OPEN);
	CHECK_STR(r.sku, "sku-1");
	CHECK_INT(r.qty, 100);
	CHECK_INT(r.per_buyer_limit, 1);
	CHECK_INT(r.max_qty, 1);
	CHECK_INT(r.hold_ms, 600 * 1000);
	CHECK_INT(r.opens_at_ms, 0);
	CHECK_INT(r.closes_at_ms, 0);
	CHECK(!r.has_intent);
	check_record_shape(&r, rc);

	CHECK_CTX("%s", "open with everything");
	rc = parse("sku-1",
		   OPEN(",\"stock\":0,\"per_buyer_limit\":4,\"max_qty\":2,"
			"\"hold_seconds\":604800,\"opens_at\":1000,\"closes_at\":2000"),
		   &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.qty, 0);
	CHECK_INT(r.per_buyer_limit, 4);
	CHECK_INT(r.max_qty, 2);
	CHECK_INT(r.hold_ms, 604800LL * 1000);
	CHECK_INT(r.opens_at_ms, 1000);
	CHECK_INT(r.closes_at_ms, 2000);

	CHECK_CTX("%s", "open max_qty defaults to the limit");
	CHECK_INT(parse("sku-1", OPEN(",\"stock\":7,\"per_buyer_limit\":3"), &r), 0);
	CHECK_INT(r.max_qty, 3);
	CHECK_CTX("%s", "open with closes_at only, opens_at 0");
	CHECK_INT(parse("sku-1", OPEN(",\"stock\":7,\"closes_at\":1"), &r), 0);
	CHECK_INT(r.closes_at_ms, 1);
	CHECK_CTX("%s", "open with opens_at only");
	CHECK_INT(parse("sku-1", OPEN(",\"stock\":7,\"opens_at\":5000"), &r), 0);
	CHECK_INT(r.opens_at_ms, 5000);
	CHECK_INT(r.closes_at_ms, 0);
	CHECK_CTX("%s", "open stock at max");
	CHECK_INT(parse("sku-1", OPEN(",\"stock\":1000000000"), &r), 0);
	CHECK_INT(r.qty, FS_STOCK_MAX);

	CHECK_CTX("%s", "restock");
	rc = parse("sku-1", "{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":25}", &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_RESTOCK);
	CHECK_STR(r.sku, "sku-1");
	CHECK_INT(r.qty, 25);
	check_record_shape(&r, rc);

	CHECK_CTX("%s", "close");
	rc = parse("sku-1", "{\"v\":1,\"type\":\"close\",\"sku\":\"sku-1\"}", &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_CLOSE);
	CHECK_STR(r.sku, "sku-1");
	check_record_shape(&r, rc);

	CHECK_CTX("%s", "confirm, sku from the key");
	rc = parse("sku-1", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}", &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_CONFIRM);
	CHECK_STR(r.intent_id, U1);
	CHECK_STR(r.sku, "sku-1");
	CHECK(r.body_hash > 0);
	check_record_shape(&r, rc);

	CHECK_CTX("%s", "cancel with matching sku");
	rc = parse("sku-1",
		   "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\",\"sku\":\"sku-1\"}", &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_CANCEL);
	CHECK_STR(r.sku, "sku-1");
	check_record_shape(&r, rc);

	CHECK_CTX("%s", "tick, no key needed");
	rc = parse(NULL, "{\"v\":1,\"type\":\"tick\"}", &r);
	CHECK_INT(rc, 0);
	CHECK_INT(r.kind, FS_KIND_TICK);
	CHECK_INT(r.body_hash, 0);
	check_record_shape(&r, rc);
	CHECK_CTX("%s", "");
}

/* ---- body hash -------------------------------------------------------------------------- */

static int64_t hash_of(const char *key, const char *json)
{
	struct fs_record r;
	int rc = parse(key, json, &r);
	CHECK_CTX("hash_of %s", json);
	CHECK_INT(rc, 0);
	CHECK_CTX("%s", "");
	return r.body_hash;
}

static void test_body_hash(void)
{
	const char *base = BUY(",\"qty\":2,\"token\":\"t1\"");
	int64_t h = hash_of("sku-1", base);
	CHECK(h != 0);

	/* Equal: verbatim retry, another offset/partition/timestamp, keys reordered, whitespace,
	 * unknown fields, the intent id's case. */
	CHECK_INT(hash_of("sku-1", base), h);
	struct fs_record r;
	CHECK_INT(fs_record_parse(&no_limits, "sku-1", 5, base, strlen(base), 9, 77777, 123456, &r),
		  0);
	CHECK_INT(r.body_hash, h);
	CHECK_INT(hash_of("sku-1",
			  "{\"token\":\"t1\",\"qty\":2,\"buyer_id\":\"alice\",\"sku\":\"sku-1\","
			  "\"intent_id\":\"" U1 "\",\"type\":\"buy\",\"v\":1}"),
		  h);
	CHECK_INT(hash_of("sku-1",
			  " { \"v\" : 1 , \"type\" : \"buy\" , \"intent_id\" : \"" U1
			  "\" , \"sku\" : \"sku-1\" , \"buyer_id\" : \"alice\" , \"qty\" : 2 , "
			  "\"token\" : \"t1\" } "),
		  h);
	CHECK_INT(hash_of("sku-1", BUY(",\"qty\":2,\"token\":\"t1\",\"note\":\"retry #2\"")), h);
	CHECK_INT(
		hash_of("sku-1",
			"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1_UPPER
			"\",\"sku\":\"sku-1\",\"buyer_id\":\"alice\",\"qty\":2,\"token\":\"t1\"}"),
		h);
	CHECK_INT(hash_of("sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"ali\\u0063e\","
					    "\"qty\":2,\"token\":\"t1\"}"),
		  h);
	/* Another intent id with the same body hashes the same (the id is the dedupe key). */
	CHECK_INT(hash_of("sku-1", "{\"v\":1,\"type\":\"buy\",\"intent_id\":"
				   "\"00000000-0000-0000-0000-000000000001\",\"sku\":\"sku-1\","
				   "\"buyer_id\":\"alice\",\"qty\":2,\"token\":\"t1\"}"),
		  h);

	/* The token is not part of the body (not verified yet): a retry whose token was refreshed,
	 * dropped or emptied is the same intent, not a conflict (issue 28, item 7). */
	CHECK_INT(hash_of("sku-1", BUY(",\"qty\":2,\"token\":\"t2\"")), h);
	CHECK_INT(hash_of("sku-1", BUY(",\"qty\":2")), h);
	CHECK_INT(hash_of("sku-1", BUY(",\"qty\":2,\"token\":\"\"")), h);

	/* Different: qty, sku, buyer, kind. */
	CHECK(hash_of("sku-1", BUY(",\"qty\":3,\"token\":\"t1\"")) != h);
	CHECK(hash_of("sku-2", BUY_HEAD ",\"sku\":\"sku-2\",\"buyer_id\":\"alice\",\"qty\":2,"
					"\"token\":\"t1\"}") != h);
	CHECK(hash_of("sku-1", BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"alicf\",\"qty\":2,"
					"\"token\":\"t1\"}") != h);
	/* A null token is an absent token. */
	CHECK_INT(hash_of("sku-1", BUY(",\"qty\":2,\"token\":null")),
		  hash_of("sku-1", BUY(",\"qty\":2")));
	/* Field boundaries: ("ab","c") and ("a","bc") differ. */
	CHECK(hash_of("ab", BUY_HEAD ",\"sku\":\"ab\",\"buyer_id\":\"c\",\"qty\":1}") !=
	      hash_of("a", BUY_HEAD ",\"sku\":\"a\",\"buyer_id\":\"bc\",\"qty\":1}"));
	/* confirm and cancel of one intent differ. */
	CHECK(hash_of("sku-1", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}") !=
	      hash_of("sku-1", "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\"}"));
	/* A confirm with or without the optional sku is the same body. */
	CHECK_INT(hash_of("sku-1", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}"),
		  hash_of("sku-1", "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1
				   "\",\"sku\":\"sku-1\"}"));
	/* 63 bits: never negative, over many bodies. */
	for (int q = 1; q <= 2000; q++) {
		char json[256];
		snprintf(json, sizeof json,
			 BUY_HEAD ",\"sku\":\"sku-1\",\"buyer_id\":\"b%d\",\"qty\":%d}", q,
			 q % 7 + 1);
		int64_t x = hash_of("sku-1", json);
		if (!CHECK(x > 0))
			break;
	}
}

static void test_validators(void)
{
	CHECK(fs_sku_valid("a"));
	CHECK(fs_sku_valid("Z9-_.:"));
	CHECK(!fs_sku_valid(""));
	CHECK(!fs_sku_valid("a b"));
	CHECK(!fs_sku_valid("a,b"));
	CHECK(!fs_sku_valid("a\"b"));
	CHECK(!fs_sku_valid("a'b"));
	CHECK(!fs_sku_valid("a\\b"));
	CHECK(!fs_sku_valid("a\nb"));
	CHECK(!fs_sku_valid("a{b}"));
	CHECK(fs_buyer_valid("!"));
	CHECK(fs_buyer_valid("~"));
	CHECK(fs_buyer_valid("a\"b\\c"));
	CHECK(!fs_buyer_valid(""));
	CHECK(!fs_buyer_valid(" "));
	CHECK(!fs_buyer_valid("\x7f"));
	CHECK(!fs_buyer_valid("\x80"));
	CHECK(!fs_buyer_valid("a\tb"));

	CHECK_STR(fs_kind_name(FS_KIND_BUY), "buy");
	CHECK_STR(fs_kind_name(FS_KIND_CONFIRM), "confirm");
	CHECK_STR(fs_kind_name(FS_KIND_CANCEL), "cancel");
	CHECK_STR(fs_kind_name(FS_KIND_OPEN), "open");
	CHECK_STR(fs_kind_name(FS_KIND_RESTOCK), "restock");
	CHECK_STR(fs_kind_name(FS_KIND_CLOSE), "close");
	CHECK_STR(fs_kind_name(FS_KIND_TICK), "tick");
	CHECK_STR(fs_kind_name(FS_KIND_INVALID), "invalid");
	CHECK_STR(fs_kind_name((enum fs_kind)99), "invalid");
}

/* ---- known bugs (not in the default run; see tests/meson.build) ------------------------- */

/* BUG followup_key_nul: parse_followup (src/core/record.c) copies the key with memcpy and then
 * validates it with strlen, so a confirm/cancel whose key is "sku-1\0zz" (8 bytes) is accepted
 * as SKU "sku-1". The key decides the partition: the record lands where "sku-1\0zz" hashes,
 * not where sku-1's records live. The buy path rejects the same key (key_mismatch). */
static void test_followup_key_nul(void)
{
	struct fs_record r;
	const char *json = "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}";
	CHECK_CTX("%s", "confirm, key \"sku-1\\0zz\" (8 bytes)");
	int rc = fs_record_parse(&no_limits, "sku-1\0zz", 8, json, strlen(json), 3, 100, 5000, &r);
	CHECK_INT(rc, -EINVAL);
	CHECK_STR(r.reject_reason, "key_mismatch");
	json = "{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\",\"sku\":\"sku-1\"}";
	CHECK_CTX("%s", "cancel with sku-1 in the body, key \"sku-1\\0zz\" (8 bytes)");
	rc = fs_record_parse(&no_limits, "sku-1\0zz", 8, json, strlen(json), 3, 100, 5000, &r);
	CHECK_INT(rc, -EINVAL);
	CHECK_STR(r.reject_reason, "key_mismatch");
}

/* BUG followup_hostile_key: parse_followup copies the key into r->sku before validating it and
 * leaves it there when it rejects (key_mismatch). The invalid record then carries an unchecked
 * SKU (quotes, control bytes), which fs_result_of echoes unescaped (see test_result). */
static void test_followup_hostile_key(void)
{
	struct fs_record r;
	const char *json = "{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}";
	CHECK_CTX("%s", "confirm, key a\",\"outcome\":\"held");
	int rc = parse("a\",\"outcome\":\"held", json, &r);
	CHECK_INT(rc, -EINVAL);
	CHECK_STR(r.reject_reason, "key_mismatch");
	check_record_shape(&r, rc);
	CHECK_CTX("%s", "confirm, key x\\n\\x01");
	rc = parse("x\n\x01", json, &r);
	CHECK_INT(rc, -EINVAL);
	check_record_shape(&r, rc);
	for (size_t i = 0; i < sizeof reject_rows / sizeof reject_rows[0]; i++) {
		const struct reject_row *t = &reject_rows[i];
		if (!t->bug || strcmp(t->bug, "followup_hostile_key") != 0)
			continue;
		CHECK_CTX("reject row '%s'", t->name);
		rc = parse(t->key, t->json, &r);
		check_record_shape(&r, rc);
	}
}

/* The parser answers bad_json without jansson when the first byte after JSON whitespace is
 * neither '{' nor '['. Differential check against jansson itself: for short payloads built
 * from bytes that matter at the start (whitespace, brackets, quotes, digits, letters, NUL,
 * high bytes), that answer is exactly when jansson fails to load them, and a payload jansson
 * loads is never bad_json. */
static void test_fast_bad_json(void)
{
	static const char alphabet[] = " \t\n\r{}[]\"1-tfnx:,\0\xff\xef";
	uint64_t x = 0x243f6a8885a308d3ULL;
	char buf[8];
	for (int round = 0; round < 200000; round++) {
		check_xorshift(&x);
		size_t len = 1 + x % sizeof buf;
		for (size_t i = 0; i < len; i++)
			buf[i] = alphabet[(x >> (8 + 4 * i)) % (sizeof alphabet - 1)];
		struct fs_record r;
		fs_record_parse(&no_limits, "K", 1, buf, len, 0, 0, 0, &r);
		json_error_t err;
		json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
		bool loads = j != NULL;
		json_decref(j);
		bool bad = r.kind == FS_KIND_INVALID && r.reject_reason &&
			   strcmp(r.reject_reason, "bad_json") == 0;
		CHECK_CTX("payload of %zu bytes, round %d", len, round);
		if (loads)
			CHECK(!bad);
		else if (json_error_code(&err) != json_error_duplicate_key)
			CHECK(bad);
	}
}

/* fs_uuid_canon reads ids without libuuid: it must accept exactly what uuid_parse accepts
 * (36 bytes) and give uuid_unparse_lower's text. Ids built from hex digits of both cases,
 * hyphens and near misses, compared with libuuid. */
static void test_uuid_vs_libuuid(void)
{
	static const char alphabet[] = "0123456789abcdefABCDEF-gG {}x\xff";
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	char in[FS_UUID_LEN + 1];
	for (int round = 0; round < 100000; round++) {
		memcpy(in, U1_UPPER, sizeof in);
		check_xorshift(&x);
		for (int k = 0; k < (int)(x % 4); k++) {
			uint64_t y = x >> (16 + 12 * k);
			in[y % FS_UUID_LEN] = alphabet[(y >> 6) % (sizeof alphabet - 1)];
		}
		uuid_t u;
		char want[FS_UUID_LEN + 1] = "", got[FS_UUID_LEN + 1] = "";
		bool lib = uuid_parse(in, u) == 0;
		if (lib)
			uuid_unparse_lower(u, want);
		CHECK_CTX("fs_uuid_canon('%s') against libuuid", in);
		CHECK(fs_uuid_canon(in, got) == lib);
		if (lib)
			CHECK_STR(got, want);
	}
	CHECK_CTX("%s", "");
}

/* fs_uuid_v7: libuuid reads the ids back as version 7 of the RFC variant, with the time in
 * the first 48 bits and the caller's bits where RFC 9562 puts them; ids of later
 * milliseconds sort after earlier ones as text, the property the decisions' index uses. */
static void test_uuid_v7(void)
{
	static const int64_t times[] = {0, 1, 1796062752598, 0xFFFFFFFFFFFFLL};
	static const uint64_t bits[] = {0, ~0ULL, 0x0123456789abcdefULL, 0xfedcba9876543210ULL};
	for (size_t t = 0; t < sizeof times / sizeof times[0]; t++) {
		for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
			uint64_t r1 = bits[i], r2 = bits[(i + 1) % 4];
			char id[FS_UUID_LEN + 1], canon[FS_UUID_LEN + 1];
			fs_uuid_v7(times[t], r1, r2, id);
			CHECK_CTX("fs_uuid_v7(%" PRId64 ", %d)", times[t], (int)i);
			uuid_t u;
			CHECK(uuid_parse(id, u) == 0);
			CHECK(fs_uuid_canon(id, canon) && strcmp(canon, id) == 0);
			CHECK(uuid_type(u) == 7);
			CHECK(uuid_variant(u) == UUID_VARIANT_DCE);
			int64_t ms = 0;
			for (int k = 0; k < 6; k++)
				ms = ms << 8 | u[k];
			CHECK(ms == times[t]);
			CHECK((((unsigned)u[6] & 0x0f) << 8 | u[7]) == (r1 & 0x0fff));
			uint64_t lo = 0;
			for (int k = 8; k < 16; k++)
				lo = lo << 8 | u[k];
			CHECK((lo & 0x3fffffffffffffffULL) == (r2 & 0x3fffffffffffffffULL));
			CHECK(fs_uuid_v7_ms(id) == times[t]);
		}
	}
	/* Not a version-7 id of the RFC variant, or not canonical: no time. */
	static const char *const untimed[] = {
		"0190a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b", /* version 4 */
		"0190a3b4-c5d6-7e7f-ca9b-0c1d2e3f4a5b", /* version 7, another variant */
		"0190A3B4-C5D6-7E7F-8A9B-0C1D2E3F4A5B", /* not canonical (upper case) */
		"0190a3b4-c5d6-7e7f-8a9b-0c1d2e3f4a5",	/* short */
		"",
	};
	for (size_t i = 0; i < sizeof untimed / sizeof untimed[0]; i++) {
		CHECK_CTX("fs_uuid_v7_ms(\"%s\")", untimed[i]);
		CHECK(fs_uuid_v7_ms(untimed[i]) == -1);
	}
	CHECK_CTX("%s", "v7 time");
	CHECK(fs_uuid_v7_ms("0190a3b4-c5d6-7e7f-8a9b-0c1d2e3f4a5b") == 0x0190a3b4c5d6LL);
	char a[FS_UUID_LEN + 1], b[FS_UUID_LEN + 1];
	for (int64_t ms = 1796062752598; ms < 1796062752598 + 1000; ms++) {
		fs_uuid_v7(ms, ~0ULL, ~0ULL, a);
		fs_uuid_v7(ms + 1, 0, 0, b);
		CHECK_CTX("v7 ids of %" PRId64 " and %" PRId64 " ms", ms, ms + 1);
		CHECK(strcmp(a, b) < 0);
	}
	CHECK_CTX("%s", "");
}

/* Records of every kind in the shapes a web tier sends: the seeds of the differential test. */
static const char *const flat_seeds[] = {
	BUY(",\"qty\":1"),
	BUY(",\"qty\":3,\"token\":\"tok-123\""),
	"{ \"v\" : 1 , \"type\" : \"buy\" , \"intent_id\" : \"" U1_UPPER "\" , \"sku\" : \"sku-1\""
	", \"buyer_id\" : \"b\" , \"qty\" : 2 , \"token\" : null }\n",
	"{\"v\":1,\"type\":\"confirm\",\"intent_id\":\"" U1 "\"}",
	"{\"v\":1,\"type\":\"cancel\",\"intent_id\":\"" U1 "\",\"sku\":\"sku-1\"}",
	OPEN(",\"stock\":500,\"per_buyer_limit\":2,\"max_qty\":2,\"hold_seconds\":60,"
	     "\"opens_at\":0,\"closes_at\":9000000000000"),
	"{\"v\":1,\"type\":\"restock\",\"sku\":\"sku-1\",\"add\":10}",
	"{\"v\":1,\"type\":\"close\",\"sku\":\"sku-1\"}",
	"{\"v\":1,\"type\":\"tick\"}",
	"{}",
};

/* The flat-object scanner (record.c) and jansson must read every payload the same way: the
 * scanner either hands it to jansson or gives the very record jansson's tree gives. Seeds of
 * every kind, then 400,000 mutations of them (bytes replaced, inserted, deleted, the tail cut,
 * a member doubled) from bytes that matter to JSON, each parsed both ways and compared whole.
 * Also: every seed takes the scanner's path (it is the common case it is there for). */
static void test_flat_vs_jansson(void)
{
	static const char alphabet[] =
		"\"\\{}[],:0123456789-+.eE nulltrfasx\t\n\r\x01\x7f\x80\xc3\xff";
	const struct fs_record_limits ref = {.jansson_only = true};
	char buf[512];
	uint64_t x = 0x853c49e6748fea9bULL;
	size_t nseeds = sizeof flat_seeds / sizeof flat_seeds[0];
	int flat = 0;
	for (size_t i = 0; i < nseeds; i++) {
		CHECK_CTX("seed %s", flat_seeds[i]);
		CHECK(fs_record_is_flat(flat_seeds[i], strlen(flat_seeds[i])));
	}
	for (int round = 0; round < 400000; round++) {
		check_xorshift(&x);
		const char *seed = flat_seeds[x % nseeds];
		size_t len = strlen(seed);
		memcpy(buf, seed, len);
		for (int k = 0; k < 1 + (int)((x >> 8) % 3); k++) {
			uint64_t y =
				(x >> (12 + 13 * k)) ^ ((uint64_t)round * 0x9e3779b97f4a7c15ULL);
			size_t at = len ? (y >> 3) % len : 0;
			char c = alphabet[(y >> 24) % (sizeof alphabet - 1)];
			switch (y % 5) {
			case 0: /* replace */
				if (len)
					buf[at] = c;
				break;
			case 1: /* insert */
				if (len + 1 < sizeof buf) {
					memmove(buf + at + 1, buf + at, len - at);
					buf[at] = c;
					len++;
				}
				break;
			case 2: /* delete */
				if (len) {
					memmove(buf + at, buf + at + 1, len - at - 1);
					len--;
				}
				break;
			case 3: /* cut the tail */
				len = at;
				break;
			default: { /* double a member: ,"name":value copied before the last '}' */
				const char *comma = memchr(buf + 1, ',', len ? len - 1 : 0);
				const char *end = comma ? memchr(comma + 1, ',',
								 len - (size_t)(comma + 1 - buf))
							: NULL;
				if (comma && end && len + (size_t)(end - comma) < sizeof buf) {
					size_t n = (size_t)(end - comma);
					char piece[512];
					memcpy(piece, comma, n);
					memmove(buf + len - 1 + n, buf + len - 1, 1);
					memcpy(buf + len - 1, piece, n);
					len += n;
				}
			}
			}
		}
		struct fs_record a, b;
		int ra = fs_record_parse(&no_limits, "sku-1", 5, buf, len, 1, 2, 3, &a);
		int rb = fs_record_parse(&ref, "sku-1", 5, buf, len, 1, 2, 3, &b);
		flat += fs_record_is_flat(buf, len);
		CHECK_CTX("round %d, payload '%.*s'", round, (int)len, buf);
		CHECK_INT(ra, rb);
		CHECK_INT(a.kind, b.kind);
		CHECK_STR(a.reject_reason ? a.reject_reason : "-",
			  b.reject_reason ? b.reject_reason : "-");
		CHECK(memcmp(&a, &b, sizeof a) == 0);
	}
	/* Most mutations stay flat: the comparison above is not only about jansson's path. */
	CHECK_CTX("%d of 400000 mutations flat", flat);
	CHECK(flat > 50000);
	/* Integers at the scanner's edge (18 digits) and past it, where jansson decides (and
	 * overflows), compared both ways. */
	static const char *const edges[] = {
		BUY(",\"qty\":999999999999999999"),
		BUY(",\"qty\":9999999999999999999"),
		BUY(",\"qty\":99999999999999999999"),
		BUY(",\"qty\":-999999999999999999"),
		BUY(",\"qty\":-9223372036854775808"),
		BUY(",\"qty\":9223372036854775807"),
		BUY(",\"qty\":9223372036854775808"),
		BUY(",\"qty\":-0"),
		BUY(",\"qty\":00"),
		BUY(",\"qty\":1,\"token\":\"\x7f\""),
		OPEN(",\"stock\":999999999999999999"),
	};
	for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
		struct fs_record a, b;
		size_t n = strlen(edges[i]);
		CHECK_CTX("edge %s", edges[i]);
		CHECK_INT(fs_record_parse(&no_limits, "sku-1", 5, edges[i], n, 1, 2, 3, &a),
			  fs_record_parse(&ref, "sku-1", 5, edges[i], n, 1, 2, 3, &b));
		CHECK(memcmp(&a, &b, sizeof a) == 0);
	}
	/* More members than the scanner keeps (16): jansson reads it, to the same record. */
	const char *wide = BUY(",\"qty\":1,\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,"
			       "\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"k\":11");
	struct fs_record a, b;
	CHECK_CTX("%s", wide);
	CHECK(!fs_record_is_flat(wide, strlen(wide)));
	CHECK_INT(fs_record_parse(&no_limits, "sku-1", 5, wide, strlen(wide), 1, 2, 3, &a), 0);
	CHECK_INT(fs_record_parse(&ref, "sku-1", 5, wide, strlen(wide), 1, 2, 3, &b), 0);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	CHECK_CTX("%s", "");
}

/* ---- the partitioning rule ------------------------------------------------------------- */

/* Kafka's own test vectors for Utils.murmur2 (clients/src/test/.../UtilsTest.java), as the
 * signed ints Java returns. */
static void test_murmur2_kafka_vectors(void)
{
	static const struct {
		const char *key;
		int32_t want;
	} v[] = {
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		CHECK_CTX("murmur2('%s')", v[i].key);
		CHECK_INT((int32_t)fs_murmur2(v[i].key, strlen(v[i].key)), v[i].want);
	}
	/* The example: SKU1 on 4 partitions is 3 (CRC32, librdkafka's default: 2). */
	CHECK_CTX("%s", "SKU1 on 4");
	CHECK_INT(fs_partition_of("SKU1", 4, 4), 3);
	CHECK_INT(fs_partition_of("", 0, 4), -1);
	CHECK_INT(fs_partition_of("SKU1", 4, 0), -1);
	CHECK_CTX("%s", "");
}

/* The rule against librdkafka's murmur2 partitioner (what partitioner=murmur2_random runs
 * for a non-empty key), over random keys and partition counts. */
static void test_partition_vs_librdkafka(uint64_t seed)
{
	uint64_t x = seed | 1;
	static const int32_t counts[] = {1, 2, 3, 4, 7, 8, 12, 16, 100, 1024};
	unsigned char key[96];
	for (int round = 0; round < 200000; round++) {
		check_xorshift(&x);
		size_t len = 1 + x % sizeof key;
		for (size_t i = 0; i < len; i++)
			key[i] = (unsigned char)(x >> (i % 56));
		if (round % 2)
			for (size_t i = 0; i < len; i++)
				key[i] = (unsigned char)("SKU-0123456789abcXYZ:._"[(x >> (i % 56)) %
										   23]);
		int32_t n = counts[(x >> 40) % (sizeof counts / sizeof counts[0])];
		int32_t want = rd_kafka_msg_partitioner_murmur2(NULL, key, len, n, NULL, NULL);
		if (fs_partition_of(key, len, n) != want) {
			CHECK_CTX("seed %llu round %d len %zu partitions %d",
				  (unsigned long long)seed, round, len, n);
			CHECK_INT(fs_partition_of(key, len, n), want);
			break;
		}
	}
	CHECK(1);
	CHECK_CTX("%s", "");
}

/* What the parser does with the rule: the right partition decides, a wrong one forwards
 * (the record parsed all the same) or, in reject mode, rejects wrong_partition; records
 * without a key are not checked. */
static void test_routing(void)
{
	static const char buy[] = "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"" U1
				  "\",\"sku\":\"SKU1\",\"buyer_id\":\"b\",\"qty\":1}";
	struct fs_record_limits lim = {.partitions = 4};
	struct fs_record r;
	CHECK_INT(fs_record_parse(&lim, "SKU1", 4, buy, strlen(buy), 3, 7, 1, &r), 0);
	CHECK_INT(r.route, 3);
	CHECK(!r.misrouted);
	CHECK_INT(r.kind, FS_KIND_BUY);

	CHECK_INT(fs_record_parse(&lim, "SKU1", 4, buy, strlen(buy), 2, 7, 1, &r), 0);
	CHECK_INT(r.route, 3);
	CHECK(r.misrouted);
	CHECK_INT(r.kind, FS_KIND_BUY);
	CHECK_STR(r.intent_id, U1);

	/* Bad content on the wrong partition: still forwarded (the right one rejects it). */
	CHECK_INT(fs_record_parse(&lim, "SKU1", 4, "{oops", 5, 2, 8, 1, &r), -EINVAL);
	CHECK(r.misrouted);
	CHECK_INT(r.kind, FS_KIND_INVALID);

	/* No key (a tick) or no count: not checked. */
	static const char tick[] = "{\"v\":1,\"type\":\"tick\"}";
	CHECK_INT(fs_record_parse(&lim, NULL, 0, tick, strlen(tick), 2, 9, 1, &r), 0);
	CHECK_INT(r.route, -1);
	CHECK(!r.misrouted);
	struct fs_record_limits off = {0};
	CHECK_INT(fs_record_parse(&off, "SKU1", 4, buy, strlen(buy), 2, 7, 1, &r), 0);
	CHECK_INT(r.route, -1);
	CHECK(!r.misrouted);

	lim.misrouted_reject = true;
	CHECK_INT(fs_record_parse(&lim, "SKU1", 4, buy, strlen(buy), 2, 7, 1, &r), -EINVAL);
	CHECK_INT(r.kind, FS_KIND_INVALID);
	CHECK_STR(r.reject_reason, "wrong_partition");
	CHECK(!r.misrouted);
	CHECK_INT(r.route, 3);
	CHECK(r.has_intent); /* answered on the intent id: the buyer's waiter sees why */
	CHECK_STR(r.intent_id, U1);
	CHECK_INT(fs_record_parse(&lim, "SKU1", 4, buy, strlen(buy), 3, 7, 1, &r), 0);
}

int main(int argc, char **argv)
{
	test_carts();
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_record");
	}
	test_followup_key_nul();
	test_followup_hostile_key();
	test_reject_table();
	test_every_reason_covered();
	test_size_and_empty();
	test_nul_bytes();
	test_deep_nesting();
	test_valid_buy();
	test_uuid();
	test_valid_sale_and_followups();
	test_body_hash();
	test_validators();
	test_fast_bad_json();
	test_uuid_vs_libuuid();
	test_uuid_v7();
	test_flat_vs_jansson();
	test_murmur2_kafka_vectors();
	uint64_t seed = check_seed(&a);
	printf("test_record: seed %llu\n", (unsigned long long)seed);
	test_partition_vs_librdkafka(seed);
	test_routing();
	return check_done("test_record");
}
