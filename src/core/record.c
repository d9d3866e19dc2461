/* record.c: parse and validate one intents-topic record with jansson. */
#include "core/record.h"

#include "core/core.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

enum {
	HOLD_SECONDS_MAX = 7 * 24 * 3600,
	HOLD_SECONDS_DEFAULT = 600,
};

static const struct {
	const char *name;
	enum fs_kind kind;
} kinds[] = {
	{"buy", FS_KIND_BUY},
	{"confirm", FS_KIND_CONFIRM},
	{"cancel", FS_KIND_CANCEL},
	{"open", FS_KIND_OPEN},
	{"restock", FS_KIND_RESTOCK},
	{"close", FS_KIND_CLOSE},
	{"tick", FS_KIND_TICK},
	{"join", FS_KIND_JOIN},
	{"cart", FS_KIND_CART},
	{"cart_reserve", FS_KIND_CART_MSG},
	{"cart_answer", FS_KIND_CART_MSG},
	{"cart_end", FS_KIND_CART_MSG},
};

const char *fs_kind_name(enum fs_kind kind)
{
	if (kind == FS_KIND_CART_CONFIRM)
		return "cart_confirm";
	if (kind == FS_KIND_CART_CANCEL)
		return "cart_cancel";
	if (kind == FS_KIND_CART_MSG)
		return "cart_message";
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (kinds[i].kind == kind)
			return kinds[i].name;
	return "invalid";
}

/* SKUs travel as Kafka keys, SQL values and file names in tests: keep them to a safe set. */
static bool sku_valid_n(const char *sku, size_t n)
{
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

bool fs_sku_valid(const char *sku)
{
	return sku_valid_n(sku, strlen(sku));
}

/* Buyer ids come from the web tier: printable ASCII but the space (0x21-0x7e), bounded. */
static bool buyer_valid_n(const char *buyer, size_t n)
{
	if (n == 0 || n > FS_BUYER_LEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buyer[i];
		if (c < 0x21 || c > 0x7e)
			return false;
	}
	return true;
}

bool fs_buyer_valid(const char *buyer)
{
	return buyer_valid_n(buyer, strlen(buyer));
}

static int hex_lower(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c;
	c |= 0x20; /* 'A'-'F' -> 'a'-'f'; nothing else lands in 'a'-'f' */
	return c >= 'a' && c <= 'f' ? c : -1;
}

/* The text form libuuid's uuid_parse accepts (8-4-4-4-12 hex digits, any case), lower-cased:
 * what uuid_parse + uuid_unparse_lower gave, without its ten strtoul calls per id (a tenth of
 * the worker's own CPU in a sale, perf). tests/unit/test_record.c checks it against libuuid. */
static bool uuid_canon_n(const char *in, size_t n, char out[FS_UUID_LEN + 1])
{
	if (n != FS_UUID_LEN)
		return false;
	for (size_t i = 0; i < FS_UUID_LEN; i++) {
		unsigned char c = (unsigned char)in[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
			out[i] = '-';
			continue;
		}
		int h = hex_lower(c);
		if (h < 0)
			return false;
		out[i] = (char)h;
	}
	out[FS_UUID_LEN] = '\0';
	return true;
}

bool fs_uuid_canon(const char *in, char out[FS_UUID_LEN + 1])
{
	return uuid_canon_n(in, strlen(in), out);
}

/* A version-7 id (RFC 9562 section 5.7): the Unix time in ms in the first 48 bits, the
 * version, 12 bits of r1, the variant, 62 bits of r2. Ids minted this way sort by time, so the
 * decisions' primary key takes them near its right edge instead of on a random leaf: the batch
 * transactions took 6-35% less time. */
void fs_uuid_v7(int64_t unix_ms, uint64_t r1, uint64_t r2, char out[FS_UUID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	uint64_t hi = ((uint64_t)unix_ms << 16) | 0x7000 | (r1 & 0x0fff);
	uint64_t lo = (r2 & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
	unsigned char b[16];
	for (int i = 0; i < 8; i++) {
		b[i] = (unsigned char)(hi >> (56 - 8 * i));
		b[8 + i] = (unsigned char)(lo >> (56 - 8 * i));
	}
	char *o = out;
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*o++ = '-';
		*o++ = hex[b[i] >> 4];
		*o++ = hex[b[i] & 15];
	}
	*o = '\0';
}

int64_t fs_uuid_v7_ms(const char *canon)
{
	/* Version digit '7' at index 14, variant digit (8, 9, a or b) at 19; the time is the
	 * first 12 hex digits, around the dash at index 8. Lower case only: the canonical form. */
	if (strlen(canon) != FS_UUID_LEN || canon[14] != '7' || !memchr("89ab", canon[19], 4))
		return -1;
	int64_t ms = 0;
	for (int i = 0; i < 13; i++) {
		if (i == 8)
			continue;
		int h = hex_lower((unsigned char)canon[i]);
		if (h < 0 || h != (unsigned char)canon[i])
			return -1;
		ms = ms << 4 | (h <= '9' ? h - '0' : h - 'a' + 10);
	}
	return ms;
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

/* A member's value as the validators see it, whichever parser read it. Strings are not
 * NUL-terminated (s, len). */
enum val_type { V_ABSENT, V_NULL, V_STR, V_INT, V_OTHER };
struct val {
	enum val_type t;
	const char *s;
	size_t len;
	int64_t i;
};

enum { FLAT_MEMBERS_MAX = 16, FLAT_DIGITS_MAX = 18 };

/* The members of a flat object read by flat_scan, pointing into the payload. */
struct flat {
	int n;
	struct {
		const char *name;
		size_t name_len;
		struct val v;
	} m[FLAT_MEMBERS_MAX];
};

/* The parsed object: from flat_scan (f) or from jansson (j). */
struct obj {
	const struct flat *f;
	json_t *j;
};

static struct val member(const struct obj *o, const char *name)
{
	struct val v = {.t = V_ABSENT};
	if (o->f) {
		size_t n = strlen(name);
		for (int i = 0; i < o->f->n; i++)
			if (o->f->m[i].name_len == n && memcmp(o->f->m[i].name, name, n) == 0)
				return o->f->m[i].v;
		return v;
	}
	json_t *x = json_object_get(o->j, name);
	if (!x)
		return v;
	if (json_is_null(x)) {
		v.t = V_NULL;
	} else if (json_is_string(x)) {
		v.t = V_STR;
		v.s = json_string_value(x);
		v.len = json_string_length(x); /* no NUL inside: jansson refuses \u0000 */
	} else if (json_is_integer(x)) {
		v.t = V_INT;
		v.i = (int64_t)json_integer_value(x);
	} else {
		v.t = V_OTHER;
	}
	return v;
}

static bool val_eq(const struct val *v, const char *s)
{
	return v->len == strlen(s) && memcmp(v->s, s, v->len) == 0;
}

static void val_copy(char *dst, const struct val *v)
{
	memcpy(dst, v->s, v->len);
	dst[v->len] = '\0';
}

static bool json_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_ws(const char *p, const char *e)
{
	while (p < e && json_ws(*p))
		p++;
	return p;
}

/* A string with no escape, no control byte and no byte >= 0x80: its bytes are its value. */
static bool scan_str(const char **pp, const char *e, const char **s, size_t *len)
{
	const char *p = *pp + 1; /* past the opening quote */
	const char *start = p;
	while (p < e && *p != '"') {
		unsigned char c = (unsigned char)*p;
		if (c == '\\' || c < 0x20 || c >= 0x80)
			return false;
		p++;
	}
	if (p == e)
		return false;
	*s = start;
	*len = (size_t)(p - start);
	*pp = p + 1;
	return true;
}

/* -?(0|[1-9][0-9]*), at most 18 digits (no overflow); what follows is checked by the caller
 * (a '.', 'e' or another digit after a leading 0 is not a delimiter: jansson decides). */
static bool scan_int(const char **pp, const char *e, int64_t *out)
{
	const char *p = *pp;
	bool neg = p < e && *p == '-';
	if (neg)
		p++;
	const char *d = p;
	int64_t v = 0;
	if (p < e && *p == '0') {
		p++; /* "03": a digit after a leading 0 is no delimiter, the caller falls back */
	} else {
		while (p < e && *p >= '0' && *p <= '9' && p - d < FLAT_DIGITS_MAX)
			v = v * 10 + (*p++ - '0');
		if (p < e && *p >= '0' && *p <= '9')
			return false; /* a 19th digit: jansson decides (it may overflow) */
	}
	if (p == d)
		return false;
	*out = neg ? -v : v;
	*pp = p;
	return true;
}

/* The common shape of a record, read without building a tree: one object of at most 16
 * members whose values are plain strings, integers or null, no duplicate name, nothing but
 * JSON whitespace after it. Anything else (escapes, non-ASCII, reals, true/false, nesting,
 * malformed input) returns false and goes to jansson, which stays the judge of what is JSON.
 * For what it accepts it reads exactly what jansson would: tests/unit/test_record.c compares
 * the two on a corpus of mutated records. jansson's tree was a third of the worker's CPU per
 * record in a sale (callgrind, scripts/profile). */
static bool flat_scan(const char *p, const char *e, struct flat *f)
{
	f->n = 0;
	p = skip_ws(p, e);
	if (p == e || *p != '{')
		return false;
	p = skip_ws(p + 1, e);
	if (p < e && *p == '}')
		return skip_ws(p + 1, e) == e;
	for (;;) {
		if (p == e || *p != '"' || f->n == FLAT_MEMBERS_MAX)
			return false;
		const char *name;
		size_t name_len;
		if (!scan_str(&p, e, &name, &name_len))
			return false;
		p = skip_ws(p, e);
		if (p == e || *p != ':')
			return false;
		p = skip_ws(p + 1, e);
		struct val v = {0};
		if (p == e) {
			return false;
		} else if (*p == '"') {
			v.t = V_STR;
			if (!scan_str(&p, e, &v.s, &v.len))
				return false;
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			v.t = V_INT;
			if (!scan_int(&p, e, &v.i))
				return false;
		} else if (e - p >= 4 && memcmp(p, "null", 4) == 0) {
			v.t = V_NULL;
			p += 4;
		} else {
			return false;
		}
		for (int i = 0; i < f->n; i++)
			if (f->m[i].name_len == name_len &&
			    memcmp(f->m[i].name, name, name_len) == 0)
				return false; /* duplicate: jansson names the reason */
		f->m[f->n].name = name;
		f->m[f->n].name_len = name_len;
		f->m[f->n].v = v;
		f->n++;
		p = skip_ws(p, e);
		if (p == e)
			return false;
		if (*p == '}')
			return skip_ws(p + 1, e) == e;
		if (*p != ',')
			return false;
		p = skip_ws(p + 1, e);
	}
}

bool fs_record_is_flat(const void *payload, size_t payload_len)
{
	struct flat f;
	return payload && flat_scan(payload, (const char *)payload + payload_len, &f);
}

/* The token is not part of the body: it is not verified yet (admission tokens are a later
 * issue), and a web tier that refreshes it between two sends of one checkout attempt would
 * otherwise turn the retry into a conflict (found by the hardening review, issue 28). */
static int64_t body_hash(const struct fs_record *r)
{
	uint64_t h = 14695981039346656037ULL;
	/* Field separators keep ("ab","c") and ("a","bc") apart. */
	unsigned char k = (unsigned char)r->kind;
	h = fnv1a(h, &k, 1);
	h = fnv1a(h, r->sku, strlen(r->sku) + 1);
	h = fnv1a(h, r->buyer_id, strlen(r->buyer_id) + 1);
	int64_t q = r->qty;
	h = fnv1a(h, &q, sizeof q);
	return (int64_t)(h & 0x7fffffffffffffffULL);
}

uint32_t fs_murmur2(const void *key, size_t len)
{
	/* Kafka's Utils.murmur2, in unsigned arithmetic (Java's int wraps the same way; its >>>
	 * is the unsigned shift). */
	const unsigned char *d = key;
	const uint32_t m = 0x5bd1e995u;
	uint32_t h = 0x9747b28cu ^ (uint32_t)len;
	size_t n4 = len / 4;
	for (size_t i = 0; i < n4; i++) {
		const unsigned char *q = d + i * 4;
		uint32_t k = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
			     (uint32_t)q[3] << 24;
		k *= m;
		k ^= k >> 24;
		k *= m;
		h *= m;
		h ^= k;
	}
	const unsigned char *t = d + n4 * 4;
	switch (len % 4) {
	case 3:
		h ^= (uint32_t)t[2] << 16;
		/* fall through */
	case 2:
		h ^= (uint32_t)t[1] << 8;
		/* fall through */
	case 1:
		h ^= t[0];
		h *= m;
	}
	h ^= h >> 13;
	h *= m;
	h ^= h >> 15;
	return h;
}

int32_t fs_partition_of(const void *key, size_t len, int32_t partitions)
{
	if (!key || len == 0 || partitions < 1)
		return -1;
	/* Java's toPositive: the sign bit dropped, not the absolute value. */
	return (int32_t)((fs_murmur2(key, len) & 0x7fffffffu) % (uint32_t)partitions);
}

static int reject(struct fs_record *r, const char *reason)
{
	r->kind = FS_KIND_INVALID;
	r->reject_reason = reason;
	r->body_hash = 0;
	return -EINVAL;
}

/* Reads an optional string member. Returns 1 if present and a string, 0 if absent (or null),
 * -1 if present with another type. */
static int get_str(const struct obj *o, const char *name, struct val *out)
{
	*out = member(o, name);
	if (out->t == V_ABSENT || out->t == V_NULL)
		return 0;
	return out->t == V_STR ? 1 : -1;
}

/* Integers only: 1.0, 1e3 and "1" are rejected (jansson parses them as real or string). */
static int get_int(const struct obj *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
	struct val v = member(o, name);
	if (v.t == V_ABSENT || v.t == V_NULL)
		return 0;
	if (v.t != V_INT || v.i < lo || v.i > hi)
		return -1;
	*out = v.i;
	return 1;
}

static int parse_sku(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	struct val sku;
	int rc = get_str(o, "sku", &sku);
	if (rc == 0)
		return reject(r, "missing_sku");
	if (rc < 0 || !sku_valid_n(sku.s, sku.len))
		return reject(r, "bad_sku");
	val_copy(r->sku, &sku);
	/* The key decides the partition; a key that is not the SKU would put the SKU's records on
	 * two partitions and break the serial order the whole design relies on. */
	if (!key || key_len != sku.len || memcmp(key, sku.s, key_len) != 0)
		return reject(r, "key_mismatch");
	return 0;
}

static int parse_intent(const struct obj *o, struct fs_record *r)
{
	struct val id;
	int rc = get_str(o, "intent_id", &id);
	if (rc == 0)
		return reject(r, "missing_intent_id");
	if (rc < 0 || !uuid_canon_n(id.s, id.len, r->intent_id))
		return reject(r, "bad_intent_id");
	r->has_intent = true;
	return 0;
}

/* The buyer id of a buy or a cart. */
static int parse_buyer(const struct obj *o, struct fs_record *r)
{
	struct val buyer;
	int rc = get_str(o, "buyer_id", &buyer);
	if (rc == 0)
		return reject(r, "missing_buyer_id");
	if (rc < 0 || !buyer_valid_n(buyer.s, buyer.len))
		return reject(r, "bad_buyer_id");
	val_copy(r->buyer_id, &buyer);
	return 0;
}

static int parse_buy(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_intent(o, r) < 0 || parse_sku(o, key, key_len, r) < 0 || parse_buyer(o, r) < 0)
		return -EINVAL;
	int rc = get_int(o, "qty", 1, FS_QTY_MAX, &r->qty);
	if (rc == 0)
		return reject(r, "missing_qty");
	if (rc < 0)
		return reject(r, "bad_qty");
	struct val token;
	rc = get_str(o, "token", &token);
	if (rc < 0 || (rc > 0 && token.len > FS_TOKEN_LEN_MAX))
		return reject(r, "bad_token");
	if (rc > 0 && token.len > 0) {
		r->u.token.present = true;
		if (token.len <= FS_TOKEN_TEXT_MAX)
			val_copy(r->u.token.text, &token);
		else
			r->u.token.too_long = true;
	}
	r->body_hash = body_hash(r);
	return 0;
}

/* join: a buyer joins the SKU's waiting room (one entry per buyer: no intent id). */
static int parse_join(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_sku(o, key, key_len, r) < 0 || parse_buyer(o, r) < 0)
		return -EINVAL;
	r->body_hash = body_hash(r);
	return 0;
}

/* The open record's admission: {rate_per_s, token_seconds, draw: "random" | "fifo", seed}
 * (seed required for a random draw: [A-Za-z0-9._:-], 1 to 64). A nested object: only the
 * jansson path reads it (the flat scanner takes no objects). */
static int parse_admission(const struct obj *o, struct fs_record *r)
{
	struct val v = member(o, "admission");
	if (v.t == V_ABSENT || v.t == V_NULL)
		return 0;
	json_t *a = o->j ? json_object_get(o->j, "admission") : NULL;
	if (!a || !json_is_object(a))
		return reject(r, "bad_admission");
	struct obj sub = {.j = a};
	int64_t secs = 0;
	if (get_int(&sub, "rate_per_s", 1, FS_ADMIT_RATE_MAX, &r->u.admission.rate_per_s) <= 0 ||
	    get_int(&sub, "token_seconds", 1, FS_TOKEN_SECONDS_MAX, &secs) <= 0)
		return reject(r, "bad_admission");
	r->u.admission.token_ms = secs * 1000;
	struct val draw, seed;
	int rc = get_str(&sub, "draw", &draw);
	if (rc < 0)
		return reject(r, "bad_admission");
	r->u.admission.draw = FS_DRAW_RANDOM;
	if (rc > 0) {
		if (val_eq(&draw, "fifo"))
			r->u.admission.draw = FS_DRAW_FIFO;
		else if (!val_eq(&draw, "random"))
			return reject(r, "bad_admission");
	}
	rc = get_str(&sub, "seed", &seed);
	if (rc < 0 ||
	    (rc > 0 && (seed.len > FS_DRAW_SEED_LEN_MAX || !sku_valid_n(seed.s, seed.len))))
		return reject(r, "bad_admission");
	if (rc > 0)
		val_copy(r->u.admission.seed, &seed);
	else if (r->u.admission.draw == FS_DRAW_RANDOM)
		return reject(r, "bad_admission");
	return 0;
}

/* confirm / cancel name the buy by its intent id; the key is the SKU (it picks the partition). */
static int parse_followup(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_intent(o, r) < 0)
		return -EINVAL;
	/* The key is raw bytes: check it (length, no NUL, SKU charset) before keeping it, so that
	 * a rejected record never carries a hostile key into its reply. */
	if (!key || !sku_valid_n(key, key_len))
		return reject(r, "key_mismatch");
	memcpy(r->sku, key, key_len);
	r->sku[key_len] = '\0';
	struct val sku;
	int rc = get_str(o, "sku", &sku);
	if (rc < 0 || (rc > 0 && !val_eq(&sku, r->sku)))
		return reject(r, "key_mismatch");
	r->body_hash = body_hash(r);
	return 0;
}

static int parse_open(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_sku(o, key, key_len, r) < 0)
		return -EINVAL;
	int rc = get_int(o, "stock", 0, FS_STOCK_MAX, &r->qty);
	if (rc <= 0)
		return reject(r, "bad_stock");
	r->per_buyer_limit = 1;
	if (get_int(o, "per_buyer_limit", 1, FS_QTY_MAX, &r->per_buyer_limit) < 0)
		return reject(r, "bad_limit");
	r->max_qty = r->per_buyer_limit;
	if (get_int(o, "max_qty", 1, FS_QTY_MAX, &r->max_qty) < 0)
		return reject(r, "bad_limit");
	int64_t hold_s = HOLD_SECONDS_DEFAULT;
	if (get_int(o, "hold_seconds", 1, HOLD_SECONDS_MAX, &hold_s) < 0)
		return reject(r, "bad_hold");
	r->hold_ms = hold_s * 1000;
	if (get_int(o, "opens_at", 0, INT64_MAX / 2, &r->opens_at_ms) < 0 ||
	    get_int(o, "closes_at", 0, INT64_MAX / 2, &r->closes_at_ms) < 0 ||
	    (r->closes_at_ms && r->closes_at_ms <= r->opens_at_ms))
		return reject(r, "bad_window");
	return parse_admission(o, r);
}

static int parse_restock(const struct obj *o, const void *key, size_t key_len, struct fs_record *r)
{
	if (parse_sku(o, key, key_len, r) < 0)
		return -EINVAL;
	if (get_int(o, "add", 1, FS_STOCK_MAX, &r->qty) <= 0)
		return reject(r, "bad_stock");
	return 0;
}

/* ---- carts (issue 31) ------------------------------------------------------------------- */

/* A cart id: a UUID in its canonical lower-case form only, since the key it travels under
 * picks its coordinator and two spellings of one id would pick two. */
static int parse_cart_id(const struct obj *o, struct fs_record *r)
{
	struct val id;
	int rc = get_str(o, "cart_id", &id);
	if (rc == 0)
		return reject(r, "missing_cart_id");
	if (rc < 0 || !uuid_canon_n(id.s, id.len, r->intent_id) ||
	    memcmp(id.s, r->intent_id, FS_UUID_LEN) != 0) {
		r->intent_id[0] = '\0';
		return reject(r, "bad_cart_id");
	}
	r->has_intent = true;
	return 0;
}

/* The key of a cart and its confirm or cancel is the cart id (its coordinator's partition). */
static int cart_key(const void *key, size_t key_len, struct fs_record *r)
{
	if (!key || key_len != FS_UUID_LEN || memcmp(key, r->intent_id, FS_UUID_LEN) != 0)
		return reject(r, "key_mismatch");
	return 0;
}

/* A cart's or a reserve's lines: 1 to FS_CART_LINES_MAX objects {sku, qty} (a reserve's with
 * the cart's line number), each SKU once. */
struct line_out {
	char *sku;
	int64_t *qty;
	int32_t *line;
};

static int parse_lines(const struct obj *o, bool numbered, struct fs_record *r,
		       struct line_out (*at)(void *ctx, size_t i), void *ctx, uint32_t *nlines)
{
	json_t *a = o->j ? json_object_get(o->j, "lines") : NULL;
	if (!a && member(o, "lines").t == V_ABSENT)
		return reject(r, "missing_lines");
	if (!a || !json_is_array(a))
		return reject(r, "bad_lines");
	size_t n = json_array_size(a);
	if (n == 0)
		return reject(r, "no_lines");
	if (n > FS_CART_LINES_MAX)
		return reject(r, "too_many_lines");
	char skus[FS_CART_LINES_MAX][FS_SKU_LEN_MAX + 1];
	for (size_t i = 0; i < n; i++) {
		json_t *l = json_array_get(a, i);
		struct obj lo = {.j = l};
		struct val sku;
		int64_t qty = 0, line = 0;
		if (!json_is_object(l) || get_str(&lo, "sku", &sku) <= 0 ||
		    !sku_valid_n(sku.s, sku.len))
			return reject(r, "bad_line");
		if (get_int(&lo, "qty", 1, FS_QTY_MAX, &qty) <= 0)
			return reject(r, "bad_qty");
		if (numbered && get_int(&lo, "line", 0, FS_CART_LINES_MAX - 1, &line) <= 0)
			return reject(r, "bad_line");
		val_copy(skus[i], &sku);
		for (size_t j = 0; j < i; j++)
			if (strcmp(skus[j], skus[i]) == 0)
				return reject(r, "duplicate_sku");
		if (at) {
			struct line_out out = at(ctx, i);
			strcpy(out.sku, skus[i]);
			*out.qty = qty;
			if (out.line)
				*out.line = (int32_t)line;
		}
	}
	*nlines = (uint32_t)n;
	return 0;
}

static struct line_out cart_line_at(void *ctx, size_t i)
{
	struct fs_cart_req *c = ctx;
	return (struct line_out){c->lines[i].sku, &c->lines[i].qty, NULL};
}

static struct line_out msg_line_at(void *ctx, size_t i)
{
	struct fs_cart_msg *m = ctx;
	return (struct line_out){m->lines[i].sku, &m->lines[i].qty, &m->lines[i].line};
}

/* The body hash of a cart: its kind, buyer and lines, in order. */
static int64_t cart_hash(const struct fs_record *r, const struct fs_cart_req *c)
{
	uint64_t h = (uint64_t)body_hash(r);
	for (uint32_t i = 0; i < c->nlines; i++) {
		h = fnv1a(h, c->lines[i].sku, strlen(c->lines[i].sku) + 1);
		h = fnv1a(h, &c->lines[i].qty, sizeof c->lines[i].qty);
	}
	return (int64_t)(h & 0x7fffffffffffffffULL);
}

static int parse_cart(const struct obj *o, const void *key, size_t key_len, struct fs_record *r,
		      struct fs_record_ext *x)
{
	if (parse_cart_id(o, r) < 0 || cart_key(key, key_len, r) < 0 || parse_buyer(o, r) < 0)
		return -EINVAL;
	struct val token;
	int rc = get_str(o, "token", &token);
	if (rc < 0 || (rc > 0 && token.len > FS_TOKEN_LEN_MAX))
		return reject(r, "bad_token");
	struct fs_cart_req tmp, *c = x ? &x->cart : &tmp;
	memset(c, 0, sizeof *c);
	if (parse_lines(o, false, r, cart_line_at, c, &c->nlines) < 0)
		return -EINVAL;
	strcpy(c->cart_id, r->intent_id);
	strcpy(c->buyer_id, r->buyer_id);
	for (uint32_t i = 0; i < c->nlines; i++)
		r->qty += c->lines[i].qty;
	r->body_hash = cart_hash(r, c);
	c->body_hash = r->body_hash;
	return 0;
}

static int parse_cart_followup(const struct obj *o, const void *key, size_t key_len,
			       struct fs_record *r)
{
	r->kind = r->kind == FS_KIND_CONFIRM ? FS_KIND_CART_CONFIRM : FS_KIND_CART_CANCEL;
	if (parse_cart_id(o, r) < 0 || cart_key(key, key_len, r) < 0)
		return -EINVAL;
	r->body_hash = body_hash(r);
	return 0;
}

/* The reasons an answer may carry (static strings for the decisions it makes): those of a
 * group's refusal (fs_core_refuses); a line of a sale behind a waiting room is
 * admission_required (issue 33). */
static const char *const answer_reasons[] = {"qty_over_cap", "unknown_sku", "admission_required",
					     "store_refused"}; /* (issue 47, item 5) */

static int parse_answer(const struct obj *o, struct fs_record *r, struct fs_cart_msg *m)
{
	struct val out, why;
	enum fs_outcome oc;
	char name[32];
	if (get_str(o, "outcome", &out) <= 0 || out.len >= sizeof name)
		return reject(r, "bad_message");
	val_copy(name, &out);
	if (fs_outcome_parse(name, &oc) < 0 || oc > FS_OUT_REJECTED)
		return reject(r, "bad_message");
	m->held = oc == FS_OUT_HELD;
	m->outcome = m->held ? 0 : (int)oc;
	int64_t line = -1, hold_ms = 0;
	if (get_int(o, "line", -1, FS_CART_LINES_MAX - 1, &line) < 0 ||
	    get_int(o, "hold_ms", 0, INT64_MAX / 4, &hold_ms) < 0)
		return reject(r, "bad_message");
	m->line = (int32_t)line;
	m->hold_ms = hold_ms;
	int rc = get_str(o, "reason", &why);
	if (rc < 0)
		return reject(r, "bad_message");
	for (size_t i = 0; rc > 0 && i < sizeof answer_reasons / sizeof *answer_reasons; i++)
		if (val_eq(&why, answer_reasons[i]))
			m->reason = answer_reasons[i];
	if (rc > 0 && !m->reason)
		return reject(r, "bad_message");
	return 0;
}

/* A message of the protocol between partitions: cart_reserve, cart_answer or cart_end. */
static int parse_cart_msg(const struct obj *o, const void *key, size_t key_len,
			  const struct val *type, struct fs_record *r, struct fs_record_ext *x)
{
	struct fs_cart_msg tmp, *m = x ? &x->msg : &tmp;
	memset(m, 0, sizeof *m);
	m->kind = val_eq(type, "cart_reserve")	? FS_CART_RESERVE
		  : val_eq(type, "cart_answer") ? FS_CART_ANSWER
						: FS_CART_END;
	if (!key || key_len == 0 || key_len > FS_SKU_LEN_MAX || memchr(key, '\0', key_len))
		return reject(r, "key_mismatch");
	memcpy(m->key, key, key_len);
	if (parse_cart_id(o, r) < 0)
		return -EINVAL;
	strcpy(m->cart_id, r->intent_id);
	r->has_intent = false; /* not answered by id: the protocol's state dedupes it */
	int64_t round = 0, coord = 0, part = 0;
	if (get_int(o, "round", 1, INT32_MAX, &round) <= 0 ||
	    get_int(o, "coord", 0, INT32_MAX, &coord) <= 0 ||
	    get_int(o, "part", 0, INT32_MAX, &part) <= 0)
		return reject(r, "bad_message");
	m->round = (int32_t)round;
	m->coord = (int32_t)coord;
	m->part = (int32_t)part;
	m->line = -1;
	if (m->kind == FS_CART_ANSWER)
		return parse_answer(o, r, m);
	if (m->kind == FS_CART_END) {
		struct val act;
		if (get_str(o, "action", &act) <= 0)
			return reject(r, "bad_message");
		m->action = val_eq(&act, "commit")    ? FS_CART_COMMIT
			    : val_eq(&act, "release") ? FS_CART_RELEASE
			    : val_eq(&act, "confirm") ? FS_CART_CONFIRM
						      : 0;
		return m->action ? 0 : reject(r, "bad_message");
	}
	struct val buyer;
	if (get_str(o, "buyer_id", &buyer) <= 0 || !buyer_valid_n(buyer.s, buyer.len))
		return reject(r, "bad_message");
	val_copy(m->buyer_id, &buyer);
	return parse_lines(o, true, r, msg_line_at, m, &m->nlines);
}

static bool kind_is_followup(enum fs_kind k)
{
	return k == FS_KIND_CONFIRM || k == FS_KIND_CANCEL;
}

static int parse_object(const struct obj *o, const void *key, size_t key_len, struct fs_record *r,
			bool carts_on, struct fs_record_ext *x)
{
	int64_t v = 0;
	if (get_int(o, "v", 1, 1, &v) <= 0)
		return reject(r, "bad_version");
	struct val type;
	if (get_str(o, "type", &type) <= 0)
		return reject(r, "bad_type");
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (val_eq(&type, kinds[i].name))
			r->kind = kinds[i].kind;
	if (!carts_on && (r->kind == FS_KIND_CART || r->kind == FS_KIND_CART_MSG ||
			  (kind_is_followup(r->kind) && member(o, "cart_id").t != V_ABSENT)))
		r->kind = FS_KIND_INVALID;
	switch (r->kind) {
	case FS_KIND_BUY:
		return parse_buy(o, key, key_len, r);
	case FS_KIND_CONFIRM:
	case FS_KIND_CANCEL:
		if (member(o, "cart_id").t != V_ABSENT)
			return parse_cart_followup(o, key, key_len, r);
		return parse_followup(o, key, key_len, r);
	case FS_KIND_CART:
		return parse_cart(o, key, key_len, r, x);
	case FS_KIND_CART_MSG:
		return parse_cart_msg(o, key, key_len, &type, r, x);
	case FS_KIND_OPEN:
		return parse_open(o, key, key_len, r);
	case FS_KIND_RESTOCK:
		return parse_restock(o, key, key_len, r);
	case FS_KIND_CLOSE:
		return parse_sku(o, key, key_len, r);
	case FS_KIND_TICK:
		return 0;
	case FS_KIND_JOIN:
		return parse_join(o, key, key_len, r);
	case FS_KIND_INVALID:
	case FS_KIND_CART_CONFIRM: /* not a type of its own: a confirm that names a cart id */
	case FS_KIND_CART_CANCEL:
		break;
	}
	return reject(r, "bad_type");
}

static int parse_payload(const struct fs_record_limits *limits, const void *key, size_t key_len,
			 const void *payload, size_t payload_len, struct fs_record *out,
			 struct fs_record_ext *x)
{
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
	c = skip_ws(c, e);
	if (c == e || (*c != '{' && *c != '['))
		return reject(out, "bad_json");

	struct flat f;
	if (!limits->jansson_only && flat_scan(c, e, &f)) {
		struct obj o = {.f = &f};
		return parse_object(&o, key, key_len, out, limits->carts, x);
	}
	json_error_t err;
	/* JSON_REJECT_DUPLICATES: jansson keeps the last of duplicate keys by default, which would
	 * let a body say two things at once. NUL bytes inside strings are refused by default. */
	json_t *root = json_loadb(payload, payload_len, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return reject(out, json_error_code(&err) == json_error_duplicate_key
					   ? "duplicate_key"
					   : "bad_json");
	struct obj o = {.j = root};
	int rc = json_is_object(root) ? parse_object(&o, key, key_len, out, limits->carts, x)
				      : reject(out, "not_object");
	json_decref(root);
	return rc;
}

int fs_record_parse(const struct fs_record_limits *limits, const void *key, size_t key_len,
		    const void *payload, size_t payload_len, int32_t partition, int64_t offset,
		    int64_t ts_ms, struct fs_record *out)
{
	return fs_record_parse_ext(limits, key, key_len, payload, payload_len, partition, offset,
				   ts_ms, out, NULL);
}

int fs_record_parse_ext(const struct fs_record_limits *limits, const void *key, size_t key_len,
			const void *payload, size_t payload_len, int32_t partition, int64_t offset,
			int64_t ts_ms, struct fs_record *out, struct fs_record_ext *ext)
{
	memset(out, 0, sizeof *out);
	out->partition = partition;
	out->offset = offset;
	out->ts_ms = ts_ms;
	out->route =
		limits->partitions > 0 ? fs_partition_of(key, key_len, limits->partitions) : -1;
	int rc = parse_payload(limits, key, key_len, payload, payload_len, out, ext);
	if (!fs_record_off_route(out))
		return rc;
	/* The rule is checked before what the record says: a record on the wrong partition is
	 * not decided here whatever it holds (the right partition decides it, bad or good). The
	 * parse above still names its intent id for the stored row and the answer. */
	if (!limits->misrouted_reject) {
		out->misrouted = true;
		return rc;
	}
	reject(out, "wrong_partition");
	return -EINVAL;
}
