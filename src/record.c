/* record.c: parse and validate one intents-topic record with jansson. */
#include "fs_record.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <uuid/uuid.h>

enum {
	HOLD_SECONDS_MAX = 7 * 24 * 3600,
	HOLD_SECONDS_DEFAULT = 600,
};

static const struct {
	const char *name;
	enum fs_kind kind;
} kinds[] = {
	{"buy", FS_KIND_BUY},	{"confirm", FS_KIND_CONFIRM}, {"cancel", FS_KIND_CANCEL},
	{"open", FS_KIND_OPEN}, {"restock", FS_KIND_RESTOCK}, {"close", FS_KIND_CLOSE},
	{"tick", FS_KIND_TICK},
};

const char *fs_kind_name(enum fs_kind kind)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (kinds[i].kind == kind)
			return kinds[i].name;
	return "invalid";
}

/* SKUs travel as Kafka keys, SQL values and file names in tests: keep them to a safe set. */
bool fs_sku_valid(const char *sku)
{
	size_t n = strlen(sku);
	if (n == 0 || n > FS_SKU_LEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)sku[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == ':';
		if (!ok)
			return false;
	}
	return true;
}

/* Buyer ids come from the web tier: any printable ASCII, no controls, bounded. */
bool fs_buyer_valid(const char *buyer)
{
	size_t n = strlen(buyer);
	if (n == 0 || n > FS_BUYER_LEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buyer[i];
		if (c < 0x21 || c > 0x7e)
			return false;
	}
	return true;
}

bool fs_uuid_canon(const char *in, char out[FS_UUID_LEN + 1])
{
	uuid_t u;
	if (strlen(in) != FS_UUID_LEN || uuid_parse(in, u) != 0)
		return false;
	uuid_unparse_lower(u, out);
	return true;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static int64_t body_hash(const struct fs_record *r, const char *token)
{
	uint64_t h = 14695981039346656037ULL;
	/* Field separators keep ("ab","c") and ("a","bc") apart. */
	unsigned char k = (unsigned char)r->kind;
	h = fnv1a(h, &k, 1);
	h = fnv1a(h, r->sku, strlen(r->sku) + 1);
	h = fnv1a(h, r->buyer_id, strlen(r->buyer_id) + 1);
	int64_t q = r->qty;
	h = fnv1a(h, &q, sizeof q);
	if (token)
		h = fnv1a(h, token, strlen(token) + 1);
	return (int64_t)(h & 0x7fffffffffffffffULL);
}

static int reject(struct fs_record *r, const char *reason)
{
	r->kind = FS_KIND_INVALID;
	r->reject_reason = reason;
	r->body_hash = 0;
	return -EINVAL;
}

/* Reads an optional string member. Returns 1 if present and a string, 0 if absent, -1 if
 * present with another type. */
static int get_str(json_t *obj, const char *name, const char **out)
{
	json_t *v = json_object_get(obj, name);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return -1;
	*out = json_string_value(v);
	return 1;
}

/* Integers only: 1.0, 1e3 and "1" are rejected (jansson parses them as real or string). */
static int get_int(json_t *obj, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
	json_t *v = json_object_get(obj, name);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return -1;
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return -1;
	*out = (int64_t)x;
	return 1;
}

static int parse_sku(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	const char *sku = NULL;
	int rc = get_str(root, "sku", &sku);
	if (rc == 0)
		return reject(r, "missing_sku");
	if (rc < 0 || !fs_sku_valid(sku))
		return reject(r, "bad_sku");
	strcpy(r->sku, sku);
	/* The key decides the partition; a key that is not the SKU would put the SKU's records on
	 * two partitions and break the serial order the whole design relies on. */
	if (!key || key_len != strlen(sku) || memcmp(key, sku, key_len) != 0)
		return reject(r, "key_mismatch");
	return 0;
}

static int parse_intent(json_t *root, struct fs_record *r)
{
	const char *id = NULL;
	int rc = get_str(root, "intent_id", &id);
	if (rc == 0)
		return reject(r, "missing_intent_id");
	if (rc < 0 || !fs_uuid_canon(id, r->intent_id))
		return reject(r, "bad_intent_id");
	r->has_intent = true;
	return 0;
}

static int parse_buy(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_intent(root, r) < 0 || parse_sku(root, key, key_len, r) < 0)
		return -EINVAL;
	const char *buyer = NULL;
	int rc = get_str(root, "buyer_id", &buyer);
	if (rc == 0)
		return reject(r, "missing_buyer_id");
	if (rc < 0 || !fs_buyer_valid(buyer))
		return reject(r, "bad_buyer_id");
	strcpy(r->buyer_id, buyer);
	rc = get_int(root, "qty", 1, FS_QTY_MAX, &r->qty);
	if (rc == 0)
		return reject(r, "missing_qty");
	if (rc < 0)
		return reject(r, "bad_qty");
	const char *token = NULL;
	rc = get_str(root, "token", &token);
	if (rc < 0 || (rc > 0 && strlen(token) > FS_TOKEN_LEN_MAX))
		return reject(r, "bad_token");
	r->body_hash = body_hash(r, token);
	return 0;
}

/* confirm / cancel name the buy by its intent id; the key is the SKU (it picks the partition). */
static int parse_followup(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_intent(root, r) < 0)
		return -EINVAL;
	/* The key is raw bytes: check it (length, no NUL, SKU charset) before keeping it, so that
	 * a rejected record never carries a hostile key into its reply. */
	char sku_key[FS_SKU_LEN_MAX + 1];
	if (!key || key_len == 0 || key_len > FS_SKU_LEN_MAX || memchr(key, '\0', key_len))
		return reject(r, "key_mismatch");
	memcpy(sku_key, key, key_len);
	sku_key[key_len] = '\0';
	if (!fs_sku_valid(sku_key))
		return reject(r, "key_mismatch");
	strcpy(r->sku, sku_key);
	const char *sku = NULL;
	int rc = get_str(root, "sku", &sku);
	if (rc < 0 || (rc > 0 && strcmp(sku, r->sku) != 0))
		return reject(r, "key_mismatch");
	r->body_hash = body_hash(r, NULL);
	return 0;
}

static int parse_open(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_sku(root, key, key_len, r) < 0)
		return -EINVAL;
	int rc = get_int(root, "stock", 0, FS_STOCK_MAX, &r->qty);
	if (rc <= 0)
		return reject(r, "bad_stock");
	r->per_buyer_limit = 1;
	if (get_int(root, "per_buyer_limit", 1, FS_QTY_MAX, &r->per_buyer_limit) < 0)
		return reject(r, "bad_limit");
	r->max_qty = r->per_buyer_limit;
	if (get_int(root, "max_qty", 1, FS_QTY_MAX, &r->max_qty) < 0)
		return reject(r, "bad_limit");
	int64_t hold_s = HOLD_SECONDS_DEFAULT;
	if (get_int(root, "hold_seconds", 1, HOLD_SECONDS_MAX, &hold_s) < 0)
		return reject(r, "bad_hold");
	r->hold_ms = hold_s * 1000;
	if (get_int(root, "opens_at", 0, INT64_MAX / 2, &r->opens_at_ms) < 0 ||
	    get_int(root, "closes_at", 0, INT64_MAX / 2, &r->closes_at_ms) < 0 ||
	    (r->closes_at_ms && r->closes_at_ms <= r->opens_at_ms))
		return reject(r, "bad_window");
	return 0;
}

static int parse_restock(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_sku(root, key, key_len, r) < 0)
		return -EINVAL;
	if (get_int(root, "add", 1, FS_STOCK_MAX, &r->qty) <= 0)
		return reject(r, "bad_stock");
	return 0;
}

static int parse_object(json_t *root, const void *key, size_t key_len, struct fs_record *r)
{
	int64_t v = 0;
	if (get_int(root, "v", 1, 1, &v) <= 0)
		return reject(r, "bad_version");
	const char *type = NULL;
	if (get_str(root, "type", &type) <= 0)
		return reject(r, "bad_type");
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(kinds[i].name, type) == 0)
			r->kind = kinds[i].kind;
	switch (r->kind) {
	case FS_KIND_BUY:
		return parse_buy(root, key, key_len, r);
	case FS_KIND_CONFIRM:
	case FS_KIND_CANCEL:
		return parse_followup(root, key, key_len, r);
	case FS_KIND_OPEN:
		return parse_open(root, key, key_len, r);
	case FS_KIND_RESTOCK:
		return parse_restock(root, key, key_len, r);
	case FS_KIND_CLOSE:
		return parse_sku(root, key, key_len, r);
	case FS_KIND_TICK:
		return 0;
	case FS_KIND_INVALID:
		break;
	}
	return reject(r, "bad_type");
}

int fs_record_parse(const struct fs_record_limits *limits, const void *key, size_t key_len,
		    const void *payload, size_t payload_len, int32_t partition, int64_t offset,
		    int64_t ts_ms, struct fs_record *out)
{
	memset(out, 0, sizeof *out);
	out->partition = partition;
	out->offset = offset;
	out->ts_ms = ts_ms;
	size_t cap = limits->bytes_max ? limits->bytes_max : FS_RECORD_BYTES_MAX;
	if (cap > FS_RECORD_BYTES_MAX)
		cap = FS_RECORD_BYTES_MAX;
	if (payload_len > cap)
		return reject(out, "too_large");
	if (!payload || payload_len == 0)
		return reject(out, "empty");

	/* Without JSON_DECODE_ANY jansson takes only an object or an array at the top: anything
	 * else is bad_json before a parser is set up (the cheap path of a garbage flood). */
	const char *c = payload, *e = c + payload_len;
	while (c < e && (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r'))
		c++;
	if (c == e || (*c != '{' && *c != '['))
		return reject(out, "bad_json");

	json_error_t err;
	/* JSON_REJECT_DUPLICATES: jansson keeps the last of duplicate keys by default, which would
	 * let a body say two things at once. NUL bytes inside strings are refused by default. */
	json_t *root = json_loadb(payload, payload_len, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return reject(out, json_error_code(&err) == json_error_duplicate_key
					   ? "duplicate_key"
					   : "bad_json");
	int rc = json_is_object(root) ? parse_object(root, key, key_len, out)
				      : reject(out, "not_object");
	json_decref(root);
	return rc;
}
