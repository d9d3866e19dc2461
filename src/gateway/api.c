/* api.c: routes, bodies, records and stream syntax of the gateway's API (see api.h). */
#include "gateway/api.h"

#include "core/map.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Copies the segment [s, e) into the path's parameter; false if it is empty. */
static bool take(struct gw_path *out, const char *s, const char *e)
{
	size_t n = (size_t)(e - s);
	if (n == 0)
		return false;
	out->too_long = n >= sizeof out->param;
	if (out->too_long)
		n = sizeof out->param - 1;
	memcpy(out->param, s, n);
	out->param[n] = '\0';
	return true;
}

static enum gw_route pick(const char *method, const char *want, enum gw_route r, const char *allow,
			  const char **allow_out)
{
	if (strcmp(method, want) == 0)
		return r;
	/* HEAD is GET without the body: libmicrohttpd drops the body itself. */
	if (strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)
		return r;
	*allow_out = allow;
	return GW_BAD_METHOD;
}

/* /sale/{sku} and /assets/{name}: one segment after the prefix, else not found. */
static enum gw_route page_route(const char *url, struct gw_path *out)
{
	static const struct {
		const char *prefix;
		enum gw_route route;
	} pages[] = {{"/sale/", GW_PAGE}, {"/assets/", GW_ASSET}};
	for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
		size_t n = strlen(pages[i].prefix);
		if (strncmp(url, pages[i].prefix, n) != 0)
			continue;
		const char *rest = url + n;
		if (strchr(rest, '/') || !take(out, rest, rest + strlen(rest)))
			return GW_NOT_FOUND;
		return pages[i].route;
	}
	return GW_NOT_FOUND;
}

/* "{param}[/tail]": the parameter into out, *tail after its slash (NULL: none). */
static bool param_and_tail(const char *rest, struct gw_path *out, const char **tail)
{
	const char *slash = strchr(rest, '/');
	const char *end = slash ? slash : rest + strlen(rest);
	*tail = slash ? slash + 1 : NULL;
	return take(out, rest, end);
}

/* .../confirm and .../cancel of an intent or a cart: POST publishes, GET reads its decision.
 * `first` is the POST confirm route; the cancel, GET confirm and GET cancel ones follow it in
 * that order (enum gw_route: CONFIRM, CANCEL, CONFIRM_GET, CANCEL_GET for both). */
_Static_assert(GW_CANCEL == GW_CONFIRM + 1 && GW_CONFIRM_GET == GW_CONFIRM + 2 &&
		       GW_CANCEL_GET == GW_CONFIRM + 3 && GW_CART_CANCEL == GW_CART_CONFIRM + 1 &&
		       GW_CART_CONFIRM_GET == GW_CART_CONFIRM + 2 &&
		       GW_CART_CANCEL_GET == GW_CART_CONFIRM + 3,
	       "followup_route counts on the routes' order");

static enum gw_route followup_route(const char *method, const char *tail, enum gw_route first,
				    const char **allow)
{
	bool confirm = strcmp(tail, "confirm") == 0;
	if (!confirm && strcmp(tail, "cancel") != 0)
		return GW_NOT_FOUND;
	int k = confirm ? 0 : 1;
	if (strcmp(method, "POST") == 0)
		return (enum gw_route)(first + k);
	if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
		return (enum gw_route)(first + 2 + k);
	*allow = "GET, HEAD, POST";
	return GW_BAD_METHOD;
}

/* /v1/carts, /v1/carts/{id}[/events|/confirm|/cancel] (rest: after "/v1/carts"). */
static enum gw_route cart_route(const char *method, const char *rest, struct gw_path *out,
				const char **allow)
{
	if (*rest == '\0')
		return pick(method, "POST", GW_CART_POST, "POST", allow);
	if (*rest != '/')
		return GW_NOT_FOUND;
	rest++;
	const char *tail;
	if (!param_and_tail(rest, out, &tail))
		return GW_NOT_FOUND;
	if (!tail)
		return pick(method, "GET", GW_CART, "GET, HEAD", allow);
	if (strcmp(tail, "events") == 0)
		return pick(method, "GET", GW_CART_EVENTS, "GET, HEAD", allow);
	return followup_route(method, tail, GW_CART_CONFIRM, allow);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)(c | 0x20);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool gw_path_ok(const char *path, size_t n)
{
	if (n == 0 || path[0] != '/')
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)path[i];
		if (c <= 0x20 || c >= 0x7f)
			return false;
		if (c != '%')
			continue;
		if (i + 2 >= n)
			return false;
		int hi = hex_digit(path[i + 1]), lo = hex_digit(path[i + 2]);
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
			return false;
		i += 2;
	}
	return true;
}

size_t gw_pct_decode(char *s)
{
	size_t o = 0;
	for (size_t i = 0; s[i]; i++) {
		int hi = s[i] == '%' ? hex_digit(s[i + 1]) : -1;
		int lo = hi >= 0 ? hex_digit(s[i + 2]) : -1;
		if (lo >= 0 && (hi | lo) != 0) {
			s[o++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			s[o++] = s[i];
		}
	}
	s[o] = '\0';
	return o;
}

/* The queue's buyer, raw in [s, s + n): percent-decoded into out->param2 (cut and flagged when
 * longer than any buyer id). */
static void take_buyer(struct gw_path *out, const char *s, size_t n)
{
	char raw[GW_PATH_MAX];
	memcpy(raw, s, n);
	raw[n] = '\0';
	n = gw_pct_decode(raw);
	if (n >= sizeof out->param2) {
		out->too_long = true;
		n = sizeof out->param2 - 1;
	}
	memcpy(out->param2, raw, n);
	out->param2[n] = '\0';
}

enum gw_route gw_route(const char *method, const char *raw, struct gw_path *out, const char **allow)
{
	memset(out, 0, sizeof *out);
	*allow = NULL;
	/* The path as sent, up to its query: routed byte for byte (issue 48, item 5). */
	size_t n = strcspn(raw, "?");
	if (n >= GW_PATH_MAX)
		return GW_NOT_FOUND;
	if (!gw_path_ok(raw, n))
		return GW_BAD_PATH;
	char url[GW_PATH_MAX];
	memcpy(url, raw, n);
	url[n] = '\0';
	if (strcmp(url, "/healthz") == 0)
		return pick(method, "GET", GW_HEALTHZ, "GET, HEAD", allow);
	if (strcmp(url, "/readyz") == 0)
		return pick(method, "GET", GW_READYZ, "GET, HEAD", allow);
	enum gw_route page = page_route(url, out);
	if (page != GW_NOT_FOUND)
		return pick(method, "GET", page, "GET, HEAD", allow);
	const char *rest;
	bool skus;
	if (strncmp(url, "/v1/carts", 9) == 0)
		return cart_route(method, url + 9, out, allow);
	if (strncmp(url, "/v1/skus/", 9) == 0) {
		rest = url + 9;
		skus = true;
	} else if (strncmp(url, "/v1/intents/", 12) == 0) {
		rest = url + 12;
		skus = false;
	} else {
		return GW_NOT_FOUND;
	}
	const char *tail;
	if (!param_and_tail(rest, out, &tail))
		return GW_NOT_FOUND;
	if (!tail)
		return skus ? pick(method, "GET", GW_SKU, "GET, HEAD", allow)
			    : pick(method, "GET", GW_INTENT, "GET, HEAD", allow);
	if (strcmp(tail, "events") == 0)
		return pick(method, "GET", skus ? GW_SKU_EVENTS : GW_INTENT_EVENTS, "GET, HEAD",
			    allow);
	if (skus) {
		if (strcmp(tail, "buys") == 0)
			return pick(method, "POST", GW_BUY, "POST", allow);
		if (strcmp(tail, "open") == 0)
			return pick(method, "POST", GW_ADMIN_OPEN, "POST", allow);
		if (strcmp(tail, "restock") == 0)
			return pick(method, "POST", GW_ADMIN_RESTOCK, "POST", allow);
		if (strcmp(tail, "close") == 0)
			return pick(method, "POST", GW_ADMIN_CLOSE, "POST", allow);
		if (strcmp(tail, "queue") == 0)
			return pick(method, "POST", GW_QUEUE_POST, "POST", allow);
		if (strncmp(tail, "queue/", 6) == 0) {
			/* The buyer is percent-encoded (it may hold a '/', sent as %2F or as is): a
			 * path ending in "/events" as sent after a buyer is that buyer's stream,
			 * and the buyer alone is decoded (never the route). */
			size_t bn = strlen(tail + 6), ev = sizeof "/events" - 1;
			bool events = bn > ev && strcmp(tail + 6 + bn - ev, "/events") == 0;
			if (events)
				bn -= ev;
			if (bn == 0)
				return GW_NOT_FOUND;
			take_buyer(out, tail + 6, bn);
			return pick(method, "GET", events ? GW_QUEUE_EVENTS : GW_QUEUE, "GET, HEAD",
				    allow);
		}
		return GW_NOT_FOUND;
	}
	return followup_route(method, tail, GW_CONFIRM, allow);
}

/* A Content-Length value: digits only (one number, not a list), at most 18 of them. */
static bool length_value(const char *v, unsigned long long *out)
{
	size_t n = strspn(v, "0123456789");
	if (n == 0 || n > 18 || v[n] != '\0')
		return false;
	*out = strtoull(v, NULL, 10);
	return true;
}

const char *gw_framing_check(const char *const *cl, size_t n_cl, const char *const *te, size_t n_te)
{
	if (n_te > 1)
		return "more than one Transfer-Encoding header";
	if (n_te == 1 && n_cl > 0)
		return "Content-Length together with Transfer-Encoding";
	if (n_te == 1 && strcasecmp(te[0], "chunked") != 0)
		return "a Transfer-Encoding other than chunked";
	unsigned long long first = 0, v;
	for (size_t i = 0; i < n_cl; i++) {
		if (i >= GW_FRAMING_SEEN || !length_value(cl[i], &v))
			return "a Content-Length that is not one number";
		if (i > 0 && v != first)
			return "two different Content-Lengths";
		first = v;
	}
	return NULL;
}

enum gw_route_label gw_route_label(enum gw_route r)
{
	switch (r) {
	case GW_BUY:
		return GW_L_BUY;
	case GW_INTENT:
	case GW_CONFIRM_GET:
	case GW_CANCEL_GET:
	case GW_CART:
	case GW_CART_CONFIRM_GET:
	case GW_CART_CANCEL_GET:
		return GW_L_INTENT;
	case GW_INTENT_EVENTS:
	case GW_CART_EVENTS:
		return GW_L_INTENT_EVENTS;
	case GW_CONFIRM:
	case GW_CART_CONFIRM:
		return GW_L_CONFIRM;
	case GW_CANCEL:
	case GW_CART_CANCEL:
		return GW_L_CANCEL;
	case GW_CART_POST:
		return GW_L_CART;
	case GW_SKU:
		return GW_L_SKU;
	case GW_SKU_EVENTS:
		return GW_L_SKU_EVENTS;
	case GW_ADMIN_OPEN:
	case GW_ADMIN_RESTOCK:
	case GW_ADMIN_CLOSE:
		return GW_L_ADMIN;
	case GW_HEALTHZ:
	case GW_READYZ:
		return GW_L_HEALTH;
	case GW_PAGE:
	case GW_ASSET:
		return GW_L_PAGE;
	case GW_QUEUE_POST:
	case GW_QUEUE:
	case GW_QUEUE_EVENTS:
		return GW_L_QUEUE;
	default:
		return GW_L_OTHER;
	}
}

const char *gw_route_label_name(enum gw_route_label l)
{
	static const char *const names[GW_L_COUNT] = {
		"buy",	 "intent", "intent_events", "confirm", "cancel", "sku",	 "sku_events",
		"admin", "page",   "health",	    "other",   "cart",	 "queue"};
	return l < GW_L_COUNT ? names[l] : "other";
}

bool gw_route_has_body(enum gw_route r)
{
	return r == GW_BUY || r == GW_ADMIN_OPEN || r == GW_ADMIN_RESTOCK || r == GW_ADMIN_CLOSE ||
	       r == GW_CONFIRM || r == GW_CANCEL || r == GW_CART_POST || r == GW_CART_CONFIRM ||
	       r == GW_CART_CANCEL || r == GW_QUEUE_POST;
}

bool gw_content_type_json(const char *ct)
{
	if (!ct)
		return false;
	while (*ct == ' ')
		ct++;
	if (strncasecmp(ct, "application/json", 16) != 0)
		return false;
	ct += 16;
	while (*ct == ' ')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* The body as a JSON object (NULL and *why otherwise); the caller decrefs. */
static json_t *object_of(const char *body, size_t len, const char **why)
{
	json_error_t e;
	json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
	if (!o) {
		*why = strstr(e.text, "duplicate") ? "duplicate_key" : "bad_json";
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		*why = "not_object";
		return NULL;
	}
	return o;
}

/* An integer member in [lo, hi]: 1 found, 0 absent (or null), -1 present and bad. */
static int int_member(json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
	json_t *v = json_object_get(o, name);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return -1;
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return -1;
	*out = x;
	return 1;
}

int gw_parse_buy(const char *body, size_t len, struct gw_buy *out, const char **why)
{
	memset(out, 0, sizeof *out);
	json_t *o = object_of(body, len, why);
	if (!o)
		return -EINVAL;
	int rc = -EINVAL;
	json_t *b = json_object_get(o, "buyer_id");
	json_t *t = json_object_get(o, "token");
	int q = int_member(o, "qty", 1, FS_QTY_MAX, &out->qty);
	if (!b)
		*why = "missing_buyer_id";
	else if (!json_is_string(b) || !fs_buyer_valid(json_string_value(b)))
		*why = "bad_buyer_id";
	else if (q == 0)
		*why = "missing_qty";
	else if (q < 0)
		*why = "bad_qty";
	else if (t && !json_is_null(t) &&
		 (!json_is_string(t) || json_string_length(t) > FS_TOKEN_LEN_MAX ||
		  strlen(json_string_value(t)) != json_string_length(t)))
		*why = "bad_token";
	else
		rc = 0;
	if (rc == 0) {
		snprintf(out->buyer_id, sizeof out->buyer_id, "%s", json_string_value(b));
		if (t && json_is_string(t)) {
			snprintf(out->token, sizeof out->token, "%s", json_string_value(t));
			out->has_token = true;
		}
	}
	json_decref(o);
	return rc;
}

int gw_parse_join(const char *body, size_t len, char buyer_id[FS_BUYER_LEN_MAX + 1],
		  const char **why)
{
	buyer_id[0] = '\0';
	json_t *o = object_of(body, len, why);
	if (!o)
		return -EINVAL;
	json_t *b = json_object_get(o, "buyer_id");
	int rc = -EINVAL;
	if (!b)
		*why = "missing_buyer_id";
	else if (!json_is_string(b) || !fs_buyer_valid(json_string_value(b)))
		*why = "bad_buyer_id";
	else
		rc = 0;
	if (rc == 0)
		snprintf(buyer_id, FS_BUYER_LEN_MAX + 1, "%s", json_string_value(b));
	json_decref(o);
	return rc;
}

int gw_parse_sale(enum gw_route r, const char *body, size_t len, struct gw_sale *out,
		  const char **why)
{
	memset(out, 0, sizeof *out);
	bool optional = r == GW_CONFIRM || r == GW_CANCEL || r == GW_ADMIN_CLOSE;
	if (len == 0) {
		if (optional)
			return 0;
		*why = "missing_body";
		return -EINVAL;
	}
	json_t *o = object_of(body, len, why);
	if (!o)
		return -EINVAL;
	int rc = 0;
	if (r == GW_ADMIN_OPEN) {
		int s = int_member(o, "stock", 0, FS_STOCK_MAX, &out->stock);
		if (s <= 0) {
			*why = s == 0 ? "missing_stock" : "bad_stock";
			rc = -EINVAL;
		} else if (int_member(o, "per_buyer_limit", 1, FS_QTY_MAX, &out->per_buyer_limit) <
				   0 ||
			   int_member(o, "max_qty", 1, FS_QTY_MAX, &out->max_qty) < 0) {
			*why = "bad_limit";
			rc = -EINVAL;
		} else if (int_member(o, "hold_seconds", 1, 86400 * 30, &out->hold_seconds) < 0) {
			*why = "bad_hold";
			rc = -EINVAL;
		} else if (int_member(o, "opens_at", 1, INT64_MAX / 2, &out->opens_at) < 0 ||
			   int_member(o, "closes_at", 1, INT64_MAX / 2, &out->closes_at) < 0) {
			*why = "bad_window";
			rc = -EINVAL;
		}
	} else if (r == GW_ADMIN_RESTOCK) {
		int a = int_member(o, "add", 1, FS_STOCK_MAX, &out->add);
		if (a <= 0) {
			*why = a == 0 ? "missing_add" : "bad_add";
			rc = -EINVAL;
		}
	} else if (r == GW_CONFIRM || r == GW_CANCEL) {
		json_t *s = json_object_get(o, "sku");
		if (s && !json_is_null(s)) {
			if (!json_is_string(s) || !fs_sku_valid(json_string_value(s))) {
				*why = "bad_sku";
				rc = -EINVAL;
			} else {
				snprintf(out->sku, sizeof out->sku, "%s", json_string_value(s));
			}
		}
	}
	json_decref(o);
	return rc;
}

int gw_wait_ms(const char *query_wait, const char *prefer, int64_t max_ms, int64_t *out)
{
	*out = 0;
	double secs = 0;
	if (query_wait) {
		char *end = NULL;
		secs = strtod(query_wait, &end);
		if (end == query_wait || *end != '\0' || !isfinite(secs) || secs < 0 ||
		    !isdigit((unsigned char)query_wait[0]))
			return -EINVAL;
	} else if (prefer) {
		/* Prefer: respond-async, wait=10 (tokens separated by commas or semicolons). */
		for (const char *p = prefer; (p = strcasestr(p, "wait")) != NULL; p += 4) {
			bool start = p == prefer || p[-1] == ' ' || p[-1] == ',' || p[-1] == ';';
			const char *v = p + 4;
			while (*v == ' ')
				v++;
			if (!start || *v != '=')
				continue;
			v++;
			while (*v == ' ')
				v++;
			if (!isdigit((unsigned char)*v))
				return 0;
			secs = strtod(v, NULL);
			break;
		}
	}
	double ms = secs * 1000.0;
	*out = ms >= (double)max_ms ? max_ms : (int64_t)ms;
	return 0;
}

uint64_t gw_fingerprint(const char *kind, const char *sku, const char *buyer_id, int64_t qty)
{
	char text[256];
	int n = snprintf(text, sizeof text, "%s\n%s\n%s\n%" PRId64, kind, sku,
			 buyer_id ? buyer_id : "", qty);
	return fs_hash_bytes(text, (size_t)n, 0x6777);
}

int gw_decision_matches(const char *decision, const char *sku, int64_t qty)
{
	json_error_t err;
	json_t *o = decision ? json_loads(decision, 0, &err) : NULL;
	const char *type = json_string_value(json_object_get(o, "type"));
	const char *s = json_string_value(json_object_get(o, "sku"));
	json_t *q = json_object_get(o, "qty");
	int rc = -1;
	if (type && strcmp(type, "buy") == 0 && s && json_is_integer(q))
		rc = strcmp(s, sku) == 0 && json_integer_value(q) == qty;
	json_decref(o);
	return rc;
}

/* Appends a JSON object's compact text. */
static int append_json(struct fs_buf *out, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s)
		return -ENOMEM;
	fs_buf_str(out, s);
	free(s);
	return fs_buf_ok(out) ? 0 : -ENOMEM;
}

int gw_record_buy(struct fs_buf *out, const char *id, const char *sku, const struct gw_buy *b)
{
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:I}", "v", 1, "type", "buy", "intent_id",
			      id, "sku", sku, "buyer_id", b->buyer_id, "qty", (json_int_t)b->qty);
	if (o && b->has_token)
		json_object_set_new(o, "token", json_string(b->token));
	return append_json(out, o);
}

int gw_record_join(struct fs_buf *out, const char *sku, const char *buyer_id)
{
	return append_json(out, json_pack("{s:i, s:s, s:s, s:s}", "v", 1, "type", "join", "sku",
					  sku, "buyer_id", buyer_id));
}

void gw_queue_id(const char *sku, const char *buyer_id, char out[FS_UUID_LEN + 1])
{
	char key[FS_SKU_LEN_MAX + FS_BUYER_LEN_MAX + 2];
	int n = snprintf(key, sizeof key, "%s/%s", sku, buyer_id);
	size_t len = n > 0 && (size_t)n < sizeof key ? (size_t)n : strlen(key);
	snprintf(out, FS_UUID_LEN + 1, "q%016" PRIx64 "%016" PRIx64,
		 fs_hash_bytes(key, len, 0x71756575), fs_hash_bytes(key, len, 0x61646d69));
}

int gw_record_followup(struct fs_buf *out, const char *type, const char *id, const char *sku)
{
	return append_json(out, json_pack("{s:i, s:s, s:s, s:s}", "v", 1, "type", type, "intent_id",
					  id, "sku", sku));
}

int gw_record_sale(struct fs_buf *out, enum gw_route r, const char *sku, const struct gw_sale *s)
{
	json_t *o = NULL;
	if (r == GW_ADMIN_OPEN) {
		o = json_pack("{s:i, s:s, s:s, s:I}", "v", 1, "type", "open", "sku", sku, "stock",
			      (json_int_t)s->stock);
		const char *names[] = {"per_buyer_limit", "max_qty", "hold_seconds", "opens_at",
				       "closes_at"};
		const int64_t vals[] = {s->per_buyer_limit, s->max_qty, s->hold_seconds,
					s->opens_at, s->closes_at};
		for (int i = 0; o && i < 5; i++)
			if (vals[i] > 0)
				json_object_set_new(o, names[i], json_integer(vals[i]));
	} else if (r == GW_ADMIN_RESTOCK) {
		o = json_pack("{s:i, s:s, s:s, s:I}", "v", 1, "type", "restock", "sku", sku, "add",
			      (json_int_t)s->add);
	} else {
		o = json_pack("{s:i, s:s, s:s}", "v", 1, "type", "close", "sku", sku);
	}
	return append_json(out, o);
}

void gw_sse_event(struct fs_buf *out, const char *name, int32_t part, int64_t off, const char *data)
{
	if (part < 0)
		fs_buf_printf(out, "event: %s\ndata: %s\n\n", name, data);
	else
		fs_buf_printf(out, "event: %s\nid: %" PRId32 ":%" PRId64 "\ndata: %s\n\n", name,
			      part, off, data);
}

char *gw_admission_answer(const char *result)
{
	json_error_t err;
	json_t *o = result ? json_loads(result, 0, &err) : NULL;
	if (!json_is_object(o)) {
		json_decref(o);
		return NULL;
	}
	static const char *const drop[] = {"v",		"type",	     "outcome",
					   "duplicate", "partition", "offset"};
	for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
		json_object_del(o, drop[i]);
	json_object_set_new(o, "status", json_string("admitted"));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

char *gw_queue_place(const char *answer)
{
	json_error_t err;
	json_t *o = answer ? json_loads(answer, 0, &err) : NULL;
	const char *status = json_string_value(json_object_get(o, "status"));
	char *s = NULL;
	if (json_is_object(o) && status && strcmp(status, "waiting") == 0) {
		json_object_del(o, "as_of");
		s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	}
	json_decref(o);
	return s;
}

bool gw_parse_event_id(const char *s, int32_t *part, int64_t *off)
{
	if (!s || !isdigit((unsigned char)*s))
		return false;
	char *end = NULL;
	errno = 0;
	long p = strtol(s, &end, 10);
	if (errno || *end != ':' || p > INT32_MAX || !isdigit((unsigned char)end[1]))
		return false;
	const char *o = end + 1;
	long long v = strtoll(o, &end, 10);
	if (errno || *end != '\0')
		return false;
	*part = (int32_t)p;
	*off = v;
	return true;
}

bool gw_bearer_ok(const char *authorization, const char *token)
{
	if (!authorization || !token || !*token)
		return false;
	if (strncmp(authorization, "Bearer ", 7) != 0)
		return false;
	const unsigned char *a = (const unsigned char *)authorization + 7;
	const unsigned char *t = (const unsigned char *)token;
	size_t la = strlen((const char *)a), lt = strlen((const char *)t);
	/* Every byte of the token is compared (a shorter presented value reads as zeros past
	 * its end), and the lengths too: the time says nothing about where they differ. */
	unsigned diff = la != lt;
	for (size_t i = 0; i < lt; i++)
		diff |= (unsigned)(t[i] ^ (i < la ? a[i] : 0));
	return diff == 0;
}

const struct gw_asset *gw_asset_find(const char *name)
{
	/* A handful of files: a linear search is as fast as anything else. */
	for (size_t i = 0; i < gw_assets_len; i++)
		if (strcmp(gw_assets[i].name, name) == 0)
			return &gw_assets[i];
	return NULL;
}

int gw_parse_cart(const char *body, size_t len, const char *id, struct fs_buf *rec, uint64_t *fp,
		  const char **why)
{
	json_t *o = object_of(body, len, why);
	if (!o)
		return -EINVAL;
	/* The record is built from the body's members, then read back by the worker's parser:
	 * one judge of what a cart is. Unknown members are left out, as the worker ignores
	 * them. */
	json_t *r = json_pack("{s:i, s:s, s:s}", "v", 1, "type", "cart", "cart_id", id);
	static const char *const members[] = {"buyer_id", "lines", "token"};
	for (size_t i = 0; r && i < sizeof members / sizeof members[0]; i++) {
		json_t *v = json_object_get(o, members[i]);
		if (v)
			json_object_set(r, members[i], v);
	}
	char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
	json_decref(r);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	struct fs_record_limits lim = {.carts = true};
	struct fs_record rd;
	int rc = fs_record_parse(&lim, id, strlen(id), s, strlen(s), 0, 0, 0, &rd);
	if (rc < 0) {
		*why = rd.reject_reason;
		free(s);
		return -EINVAL;
	}
	fs_buf_str(rec, s);
	free(s);
	*fp = (uint64_t)rd.body_hash;
	return fs_buf_ok(rec) ? 0 : -ENOMEM;
}

int gw_record_cart_followup(struct fs_buf *out, const char *type, const char *id)
{
	fs_buf_printf(out, "{\"v\":1,\"type\":\"%s\",\"cart_id\":\"%s\"}", type, id);
	return fs_buf_ok(out) ? 0 : -ENOMEM;
}
