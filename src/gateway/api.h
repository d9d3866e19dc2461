/* api.h: the gateway's HTTP API as data: routes, request bodies, the records it publishes,
 * the long-poll and event-stream syntax. Pure (no I/O, no clock, no locks): the unit suite
 * tests it (tests/unit/test_gateway_api.c). The API is in docs/reference/http.md. */
#ifndef GW_API_H
#define GW_API_H

#include "core/buf.h"
#include "core/record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gw_route {
	GW_NOT_FOUND = 0, /* no such path: 404 */
	GW_BAD_METHOD,	  /* the path exists, the method does not: 405 with Allow */
	GW_HEALTHZ,
	GW_READYZ,
	GW_BUY,		  /* POST /v1/skus/{sku}/buys */
	GW_SKU,		  /* GET /v1/skus/{sku} */
	GW_SKU_EVENTS,	  /* GET /v1/skus/{sku}/events */
	GW_ADMIN_OPEN,	  /* POST /v1/skus/{sku}/open */
	GW_ADMIN_RESTOCK, /* POST /v1/skus/{sku}/restock */
	GW_ADMIN_CLOSE,	  /* POST /v1/skus/{sku}/close */
	GW_INTENT,	  /* GET /v1/intents/{id} */
	GW_INTENT_EVENTS, /* GET /v1/intents/{id}/events */
	GW_CONFIRM,	  /* POST /v1/intents/{id}/confirm */
	GW_CANCEL,	  /* POST /v1/intents/{id}/cancel */
	GW_CONFIRM_GET,	  /* GET /v1/intents/{id}/confirm: the confirm's decision */
	GW_CANCEL_GET,	  /* GET /v1/intents/{id}/cancel */
	GW_PAGE,	  /* GET /sale/{sku}: the sale page (src/gateway/web) */
	GW_ASSET,	  /* GET /assets/{name}: the page's files */
	/* carts (issue 31) */
	GW_CART_POST,	     /* POST /v1/carts */
	GW_CART,	     /* GET /v1/carts/{id} */
	GW_CART_EVENTS,	     /* GET /v1/carts/{id}/events */
	GW_CART_CONFIRM,     /* POST /v1/carts/{id}/confirm */
	GW_CART_CANCEL,	     /* POST /v1/carts/{id}/cancel */
	GW_CART_CONFIRM_GET, /* GET /v1/carts/{id}/confirm */
	GW_CART_CANCEL_GET,  /* GET /v1/carts/{id}/cancel */
	/* the waiting room (issue 33) */
	GW_QUEUE_POST,	 /* POST /v1/skus/{sku}/queue: join */
	GW_QUEUE,	 /* GET /v1/skus/{sku}/queue/{buyer_id}: where the buyer stands */
	GW_QUEUE_EVENTS, /* GET /v1/skus/{sku}/queue/{buyer_id}/events: its stream */
	/* a path that is not one as sent (issue 48, item 5): a byte outside printable ASCII, a
	 * '%' not followed by two hex digits, or %00: 400 bad_path */
	GW_BAD_PATH,
};

/* The metrics' route label of a route (flashsale_gateway_requests_total{route}): a fixed,
 * small set (docs/reference/metrics.md). */
enum gw_route_label {
	GW_L_BUY = 0,
	GW_L_INTENT, /* GET /v1/intents/{id}, and the confirm's and cancel's decisions */
	GW_L_INTENT_EVENTS,
	GW_L_CONFIRM,
	GW_L_CANCEL,
	GW_L_SKU,
	GW_L_SKU_EVENTS,
	GW_L_ADMIN,
	GW_L_PAGE,
	GW_L_HEALTH,
	GW_L_OTHER, /* an unknown path or method */
	GW_L_CART,  /* POST /v1/carts (a cart's reads and follow-ups count as an intent's) */
	GW_L_QUEUE, /* the waiting room's POST, GET and stream */
	GW_L_COUNT,
};
enum gw_route_label gw_route_label(enum gw_route r);
const char *gw_route_label_name(enum gw_route_label l);

/* The path's parameter, as given (not validated: the handler answers 400 for a bad one, so
 * that a bad SKU is told apart from an unknown path). Longer than any valid one: cut, and
 * flagged too_long. */
struct gw_path {
	char param[80];
	bool too_long;
	/* GW_QUEUE: the buyer id, everything after ".../queue/" (a buyer id may hold a '/');
	 * GW_QUEUE_EVENTS: everything between ".../queue/" and the last "/events" */
	char param2[80];
};

/* Routes method + the request target as sent (before any percent-decoding; a query after '?'
 * is left out). Routes match the path byte for byte: "/%63onfirm" is not "/confirm", and
 * nothing is cut at a %00 (GW_BAD_PATH); only the queue's buyer id is percent-decoded, into
 * param2. A path of GW_PATH_MAX bytes or more is GW_NOT_FOUND. For GW_BAD_METHOD, *allow is
 * the Allow header's value (static). */
enum { GW_PATH_MAX = 1024 };
enum gw_route gw_route(const char *method, const char *raw, struct gw_path *out,
		       const char **allow);
/* The first n bytes of a raw path are one: it starts with '/', every byte is printable ASCII
 * other than space, and every '%' starts an escape of two hex digits other than %00. */
bool gw_path_ok(const char *path, size_t n);
/* Percent-decodes s in place (a '%' without two hex digits after it, or %00, stays as is);
 * the new length. */
size_t gw_pct_decode(char *s);

/* A request's framing headers (the values of every Content-Length and Transfer-Encoding it
 * carries, in order): NULL when they agree, else why not (static text). Refused: two
 * Transfer-Encodings; Content-Length with Transfer-Encoding; a Transfer-Encoding other than
 * `chunked`; a Content-Length that is not one number; two different Content-Lengths (two
 * equal ones are one, as RFC 9112 allows). Request smuggling behind a proxy is made of
 * these: libmicrohttpd accepts them (issue 48, item 5). At most GW_FRAMING_SEEN of each
 * are looked at (more Content-Lengths are refused). */
enum { GW_FRAMING_SEEN = 4 };
const char *gw_framing_check(const char *const *cl, size_t n_cl, const char *const *te,
			     size_t n_te);

/* True if a request's route carries a JSON body (POST). */
bool gw_route_has_body(enum gw_route r);

/* A Content-Type that is application/json (parameters such as charset allowed). */
bool gw_content_type_json(const char *ct);

struct gw_buy {
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	int64_t qty;
	char token[FS_TOKEN_LEN_MAX + 1];
	bool has_token;
};

struct gw_sale {
	int64_t stock;		      /* open */
	int64_t per_buyer_limit;      /* open, 0: absent */
	int64_t max_qty;	      /* open, 0: absent */
	int64_t hold_seconds;	      /* open, 0: absent */
	int64_t opens_at, closes_at;  /* open, 0: absent */
	int64_t add;		      /* restock */
	char sku[FS_SKU_LEN_MAX + 1]; /* confirm/cancel: optional "sku" */
};

/* Parses a request body; 0, or -EINVAL with *why a stable error code (static: bad_json,
 * not_object, missing_buyer_id, bad_buyer_id, missing_qty, bad_qty, bad_token, ...). An
 * empty body is allowed only where every field is optional (confirm, cancel, close). */
int gw_parse_buy(const char *body, size_t len, struct gw_buy *out, const char **why);
/* A cart's body, {"buyer_id", "lines": [{"sku", "qty"}...], "token"?}, into the cart record
 * for the cart id `id` (appended to rec), checked by the worker's own parser (so that the
 * gateway refuses what the worker would reject, with its reason) and its fingerprint (the
 * worker's body hash). 0, or -EINVAL with *why. */
int gw_parse_cart(const char *body, size_t len, const char *id, struct fs_buf *rec, uint64_t *fp,
		  const char **why);
/* A join's body, {"buyer_id"}, and its record (issue 33). */
int gw_parse_join(const char *body, size_t len, char buyer_id[FS_BUYER_LEN_MAX + 1],
		  const char **why);
int gw_record_join(struct fs_buf *out, const char *sku, const char *buyer_id);
/* The cache's key of a buyer's admission in a SKU's room (kind GW_K_QUEUE): "q" and 128 bits
 * of two keyed hashes of "SKU/BUYER" (SipHash under the process's key: nobody outside can make
 * two buyers share one). */
void gw_queue_id(const char *sku, const char *buyer_id, char out[FS_UUID_LEN + 1]);
/* The record of a cart's confirm or cancel. */
int gw_record_cart_followup(struct fs_buf *out, const char *type, const char *id);
int gw_parse_sale(enum gw_route r, const char *body, size_t len, struct gw_sale *out,
		  const char **why);

/* The long-poll's wait from ?wait=SECONDS (decimal, may have a fraction) or, if that is
 * absent, from a Prefer header's wait=N (RFC 7240, seconds), cut to max_ms. 0 when neither
 * asks; -EINVAL when ?wait is not a number >= 0 (a bad Prefer is ignored, as the RFC says). */
int gw_wait_ms(const char *query_wait, const char *prefer, int64_t max_ms, int64_t *out);

/* A fingerprint of what defines an intent (as the worker's body hash: the SKU, the buyer,
 * the qty; not the token): the same key with another fingerprint is a 422. */
uint64_t gw_fingerprint(const char *kind, const char *sku, const char *buyer_id, int64_t qty);
/* Whether a buy's decision (a result's JSON, which names no buyer) is of a buy of this SKU and
 * qty: 1 yes, 0 no, -1 it does not say (not a buy's result, or without them). A POST of an
 * intent decided through another door is checked against it (issue 47, item 6). */
int gw_decision_matches(const char *decision, const char *sku, int64_t qty);

/* The records published to the intents topic (DESIGN.md section 2), appended to out. 0, or
 * -ENOMEM. */
int gw_record_buy(struct fs_buf *out, const char *id, const char *sku, const struct gw_buy *b);
int gw_record_followup(struct fs_buf *out, const char *type, const char *id, const char *sku);
int gw_record_sale(struct fs_buf *out, enum gw_route r, const char *sku, const struct gw_sale *s);

/* One Server-Sent Event: "event: NAME\nid: PART:OFF\ndata: DATA\n\n" (DATA is one line of
 * JSON: it holds no newline). A part < 0 writes no id line (an event that has no place on the
 * log: the waiting room's, which a reconnect gets afresh). */
void gw_sse_event(struct fs_buf *out, const char *name, int32_t part, int64_t off,
		  const char *data);
/* The waiting room's answers (GET /v1/skus/{sku}/queue/{buyer} and its stream), malloc'd JSON
 * or NULL. gw_admission_answer: the admitted answer from the worker's admission result (or a
 * join admitted at once), as the results topic carries it: its members but the record's own
 * (v, type, outcome, duplicate, partition, offset), with "status": "admitted"; NULL when it is
 * not a JSON object. gw_queue_place: what a `waiting` answer says of the buyer's place, its
 * as_of aside (the log clock moves on every read): the stream sends a `waiting` event when this
 * changes; NULL for any other answer. */
char *gw_admission_answer(const char *result);
char *gw_queue_place(const char *answer);

/* A Last-Event-ID as gw_sse_event writes it: true and its parts, or false. */
bool gw_parse_event_id(const char *s, int32_t *part, int64_t *off);

/* Compares a presented Authorization header with "Bearer TOKEN" in time that depends only
 * on the lengths of the two (never on where they differ). False when token is empty. */
bool gw_bearer_ok(const char *authorization, const char *token);

/* A file of the sale page, embedded at build time (src/gateway/web/embed.py writes the
 * table gw_assets of gw_assets_len entries, sorted by name). */
struct gw_asset {
	const char *name; /* as in /assets/{name} */
	const char *type; /* its Content-Type */
	const unsigned char *data;
	size_t len;
};
extern const struct gw_asset gw_assets[];
extern const size_t gw_assets_len;

/* The embedded file of that name, or NULL. */
const struct gw_asset *gw_asset_find(const char *name);

#endif
