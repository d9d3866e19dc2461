/* test_gateway.c: the gateway's pure parts: routes, request bodies, the wait syntax, the
 * records it publishes, event ids, the bearer check, the listen address, and the cache
 * (decisions, events in log order, eviction that spares what is in use, stock records that
 * never go back). */
#include "check.h"

#include "gateway/api.h"
#include "gateway/cache.h"
#include "gateway/clients.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>

static void test_routes(void)
{
	struct {
		const char *method, *url;
		enum gw_route want;
		const char *param, *allow;
	} rows[] = {
		{"GET", "/healthz", GW_HEALTHZ, "", NULL},
		{"POST", "/healthz", GW_BAD_METHOD, "", "GET, HEAD"},
		{"GET", "/readyz", GW_READYZ, "", NULL},
		{"POST", "/v1/skus/HOT/buys", GW_BUY, "HOT", NULL},
		{"GET", "/v1/skus/HOT/buys", GW_BAD_METHOD, "HOT", "POST"},
		{"GET", "/v1/skus/HOT", GW_SKU, "HOT", NULL},
		{"HEAD", "/v1/skus/HOT", GW_SKU, "HOT", NULL},
		{"DELETE", "/v1/skus/HOT", GW_BAD_METHOD, "HOT", "GET, HEAD"},
		{"GET", "/v1/skus/HOT/events", GW_SKU_EVENTS, "HOT", NULL},
		{"POST", "/v1/skus/HOT/open", GW_ADMIN_OPEN, "HOT", NULL},
		{"POST", "/v1/skus/HOT/restock", GW_ADMIN_RESTOCK, "HOT", NULL},
		{"POST", "/v1/skus/HOT/close", GW_ADMIN_CLOSE, "HOT", NULL},
		{"GET", "/v1/intents/abc", GW_INTENT, "abc", NULL},
		{"GET", "/v1/intents/abc/events", GW_INTENT_EVENTS, "abc", NULL},
		{"POST", "/v1/intents/abc/confirm", GW_CONFIRM, "abc", NULL},
		{"POST", "/v1/intents/abc/cancel", GW_CANCEL, "abc", NULL},
		{"GET", "/v1/intents/abc/confirm", GW_CONFIRM_GET, "abc", NULL},
		{"GET", "/v1/intents/abc/cancel", GW_CANCEL_GET, "abc", NULL},
		{"PUT", "/v1/intents/abc/cancel", GW_BAD_METHOD, "abc", "GET, HEAD, POST"},
		{"GET", "/", GW_NOT_FOUND, "", NULL},
		{"GET", "/v1/skus/", GW_NOT_FOUND, "", NULL},
		{"GET", "/v1/skus//buys", GW_NOT_FOUND, "", NULL},
		{"POST", "/v1/skus/HOT/buys/x", GW_NOT_FOUND, "HOT", NULL},
		{"GET", "/v1/intents/abc/other", GW_NOT_FOUND, "abc", NULL},
		{"GET", "/v2/skus/HOT", GW_NOT_FOUND, "", NULL},
		{"GET", "/sale/HOT", GW_PAGE, "HOT", NULL},
		{"HEAD", "/sale/HOT", GW_PAGE, "HOT", NULL},
		{"POST", "/sale/HOT", GW_BAD_METHOD, "HOT", "GET, HEAD"},
		{"GET", "/sale/", GW_NOT_FOUND, "", NULL},
		{"GET", "/sale/HOT/", GW_NOT_FOUND, "", NULL},
		{"GET", "/sale/HOT/buys", GW_NOT_FOUND, "", NULL},
		{"GET", "/sale", GW_NOT_FOUND, "", NULL},
		{"POST", "/v1/carts", GW_CART_POST, "", NULL},
		{"GET", "/v1/carts", GW_BAD_METHOD, "", "POST"},
		{"GET", "/v1/carts/abc", GW_CART, "abc", NULL},
		{"GET", "/v1/carts/abc/events", GW_CART_EVENTS, "abc", NULL},
		{"POST", "/v1/carts/abc/confirm", GW_CART_CONFIRM, "abc", NULL},
		{"POST", "/v1/carts/abc/cancel", GW_CART_CANCEL, "abc", NULL},
		{"GET", "/v1/carts/abc/confirm", GW_CART_CONFIRM_GET, "abc", NULL},
		{"GET", "/v1/carts/abc/cancel", GW_CART_CANCEL_GET, "abc", NULL},
		{"PUT", "/v1/carts/abc/cancel", GW_BAD_METHOD, "abc", "GET, HEAD, POST"},
		{"GET", "/v1/cartsx", GW_NOT_FOUND, "", NULL},
		{"GET", "/v1/carts/", GW_NOT_FOUND, "", NULL},
		{"GET", "/v1/carts/abc/other", GW_NOT_FOUND, "abc", NULL},
		{"GET", "/assets/sale.js", GW_ASSET, "sale.js", NULL},
		{"HEAD", "/assets/sale.css", GW_ASSET, "sale.css", NULL},
		{"DELETE", "/assets/sale.js", GW_BAD_METHOD, "sale.js", "GET, HEAD"},
		{"GET", "/assets/", GW_NOT_FOUND, "", NULL},
		{"GET", "/assets/../sale.js", GW_NOT_FOUND, "", NULL},
		{"POST", "/v1/skus/HOT/queue", GW_QUEUE_POST, "HOT", NULL},
		{"GET", "/v1/skus/HOT/queue", GW_BAD_METHOD, "HOT", "POST"},
		{"GET", "/v1/skus/HOT/queue/b1", GW_QUEUE, "HOT", NULL},
		{"HEAD", "/v1/skus/HOT/queue/b/1", GW_QUEUE, "HOT", NULL},
		{"POST", "/v1/skus/HOT/queue/b1", GW_BAD_METHOD, "HOT", "GET, HEAD"},
		{"GET", "/v1/skus/HOT/queue/", GW_NOT_FOUND, "HOT", NULL},
		{"GET", "/v1/skus/HOT/queuex", GW_NOT_FOUND, "HOT", NULL},
		{"GET", "/v1/skus/HOT/queue/b1/events", GW_QUEUE_EVENTS, "HOT", NULL},
		{"HEAD", "/v1/skus/HOT/queue/b/1/events", GW_QUEUE_EVENTS, "HOT", NULL},
		{"POST", "/v1/skus/HOT/queue/b1/events", GW_BAD_METHOD, "HOT", "GET, HEAD"},
		{"GET", "/v1/skus/HOT/queue/events", GW_QUEUE, "HOT", NULL},
		{"GET", "/v1/skus/HOT/queue//events", GW_QUEUE, "HOT", NULL}, /* buyer "/events" */
		{"GET", "/v1/skus/HOT/queue/b1/eventsx", GW_QUEUE, "HOT", NULL},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("%s %s", rows[i].method, rows[i].url);
		struct gw_path p;
		const char *allow;
		CHECK_INT(gw_route(rows[i].method, rows[i].url, &p, &allow), rows[i].want);
		if (rows[i].want != GW_NOT_FOUND)
			CHECK_STR(p.param, rows[i].param);
		if (rows[i].allow)
			CHECK(allow && strcmp(allow, rows[i].allow) == 0);
	}
	/* A parameter longer than any valid one is cut and flagged, never overflows. */
	char url[512];
	snprintf(url, sizeof url, "/v1/skus/%0300d/buys", 7);
	struct gw_path p;
	const char *allow;
	CHECK_CTX("long sku");
	CHECK_INT(gw_route("POST", url, &p, &allow), GW_BUY);
	CHECK(p.too_long);
	CHECK(strlen(p.param) < sizeof p.param);
	CHECK(gw_route_has_body(GW_BUY) && !gw_route_has_body(GW_INTENT));
	/* The queue's buyer: everything after "queue/", slashes included; cut and flagged when
	 * longer than any buyer id. */
	CHECK_CTX("queue buyer");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/b/1", &p, &allow), GW_QUEUE);
	CHECK_STR(p.param2, "b/1");
	CHECK(!p.too_long);
	snprintf(url, sizeof url, "/v1/skus/HOT/queue/%0200d", 7);
	CHECK_INT(gw_route("GET", url, &p, &allow), GW_QUEUE);
	CHECK(p.too_long && strlen(p.param2) < sizeof p.param2);
	CHECK(gw_route_has_body(GW_QUEUE_POST) && !gw_route_has_body(GW_QUEUE));
	CHECK_STR(gw_route_label_name(gw_route_label(GW_QUEUE)), "queue");
	/* Its stream: the buyer is what lies between "queue/" and the last "/events" (a buyer
	 * "b/events" is streamed at .../queue/b/events/events); the same bounds. */
	CHECK_CTX("queue stream buyer");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/b/1/events", &p, &allow), GW_QUEUE_EVENTS);
	CHECK_STR(p.param2, "b/1");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/b/events/events", &p, &allow),
		  GW_QUEUE_EVENTS);
	CHECK_STR(p.param2, "b/events");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/events", &p, &allow), GW_QUEUE);
	CHECK_STR(p.param2, "events");
	snprintf(url, sizeof url, "/v1/skus/HOT/queue/%0200d/events", 7);
	CHECK_INT(gw_route("GET", url, &p, &allow), GW_QUEUE_EVENTS);
	CHECK(p.too_long && strlen(p.param2) < sizeof p.param2);
	snprintf(url, sizeof url, "/v1/skus/HOT/queue/%064d/events", 7);
	CHECK_INT(gw_route("GET", url, &p, &allow), GW_QUEUE_EVENTS);
	CHECK(!p.too_long && strlen(p.param2) == 64);
	CHECK(!gw_route_has_body(GW_QUEUE_EVENTS));
	CHECK_STR(gw_route_label_name(gw_route_label(GW_QUEUE_EVENTS)), "queue");
}

/* The waiting room's answers: the admitted one from the worker's result, and the place a
 * `waiting` event is sent for (a change of as_of alone is no change). */
static void test_queue_bodies(void)
{
	CHECK_CTX("admission answer");
	char *a = gw_admission_answer(
		"{\"v\":1,\"type\":\"admission\",\"sku\":\"HOT\",\"buyer_id\":\"b\\\"1\","
		"\"token\":\"v1.k.1.2.x.y\",\"not_before\":1,\"expires_at\":2,"
		"\"outcome\":\"admitted\",\"decided_at\":1,\"partition\":0,\"offset\":9}");
	CHECK_STR(a ? a : "(null)",
		  "{\"sku\":\"HOT\",\"buyer_id\":\"b\\\"1\",\"token\":\"v1.k.1.2.x.y\","
		  "\"not_before\":1,\"expires_at\":2,\"decided_at\":1,\"status\":\"admitted\"}");
	free(a);
	CHECK(gw_admission_answer("[1]") == NULL);
	CHECK(gw_admission_answer("{") == NULL);
	CHECK(gw_admission_answer(NULL) == NULL);
	CHECK_CTX("queue place");
	const char *w1 = "{\"sku\":\"HOT\",\"buyer_id\":\"b\",\"status\":\"waiting\","
			 "\"drawn\":true,\"as_of\":100,\"position\":7,\"ahead\":6,"
			 "\"estimated_wait_s\":3}";
	const char *w2 = "{\"sku\":\"HOT\",\"buyer_id\":\"b\",\"status\":\"waiting\","
			 "\"drawn\":true,\"as_of\":600,\"position\":7,\"ahead\":6,"
			 "\"estimated_wait_s\":3}";
	const char *w3 = "{\"sku\":\"HOT\",\"buyer_id\":\"b\",\"status\":\"waiting\","
			 "\"drawn\":true,\"as_of\":1100,\"position\":7,\"ahead\":5,"
			 "\"estimated_wait_s\":2}";
	char *p1 = gw_queue_place(w1), *p2 = gw_queue_place(w2), *p3 = gw_queue_place(w3);
	if (CHECK(p1 && p2 && p3)) {
		CHECK_STR(p1, p2);
		CHECK(strcmp(p1, p3) != 0);
		CHECK(strstr(p1, "as_of") == NULL && strstr(p1, "\"ahead\":6") != NULL);
	}
	free(p1);
	free(p2);
	free(p3);
	CHECK(gw_queue_place("{\"status\":\"admitted\",\"token\":\"t\"}") == NULL);
	CHECK(gw_queue_place("{\"error\":\"not_joined\"}") == NULL);
	CHECK(gw_queue_place("nope") == NULL);
	CHECK(gw_queue_place(NULL) == NULL);
	CHECK_CTX("queue sse");
	struct fs_buf out = {0};
	gw_sse_event(&out, "waiting", -1, 0, "{\"position\":7}");
	CHECK_STR(fs_buf_cstr(&out), "event: waiting\ndata: {\"position\":7}\n\n");
	fs_buf_free(&out);
}

/* The sale page's files are compiled in, each with its type; nothing else is found. */
static void test_assets(void)
{
	struct {
		const char *name, *type, *starts;
	} rows[] = {
		{"sale.html", "text/html; charset=utf-8", "<!doctype html>"},
		{"sale.css", "text/css; charset=utf-8", NULL},
		{"sale.js", "text/javascript; charset=utf-8", NULL},
		{"icon.svg", "image/svg+xml", "<svg"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("asset %s", rows[i].name);
		const struct gw_asset *a = gw_asset_find(rows[i].name);
		if (!CHECK(a != NULL))
			continue;
		CHECK_STR(a->type, rows[i].type);
		CHECK(a->len > 0 && a->data[a->len] == '\0' &&
		      strlen((const char *)a->data) == a->len);
		if (rows[i].starts)
			CHECK(strncmp((const char *)a->data, rows[i].starts,
				      strlen(rows[i].starts)) == 0);
	}
	CHECK_CTX("assets");
	CHECK_INT((long long)gw_assets_len, 4);
	/* Counted in the metrics as route="page". */
	CHECK_INT(gw_route_label(GW_PAGE), GW_L_PAGE);
	CHECK_INT(gw_route_label(GW_ASSET), GW_L_PAGE);
	CHECK_STR(gw_route_label_name(GW_L_PAGE), "page");
	CHECK(gw_asset_find("nope.js") == NULL);
	CHECK(gw_asset_find("") == NULL);
	CHECK(gw_asset_find("sale.JS") == NULL);
	/* The page names its files by these paths (a rename would break it silently). */
	const struct gw_asset *html = gw_asset_find("sale.html");
	if (CHECK(html != NULL)) {
		const char *t = (const char *)html->data;
		CHECK(strstr(t, "src=\"/assets/sale.js\"") &&
		      strstr(t, "href=\"/assets/sale.css\"") &&
		      strstr(t, "href=\"/assets/icon.svg\""));
	}
}

static void test_content_type(void)
{
	CHECK_CTX("content type");
	CHECK(gw_content_type_json("application/json"));
	CHECK(gw_content_type_json("application/json; charset=utf-8"));
	CHECK(gw_content_type_json("Application/JSON"));
	CHECK(!gw_content_type_json("application/jsonx"));
	CHECK(!gw_content_type_json("text/plain"));
	CHECK(!gw_content_type_json(NULL));
}

static void test_buy_bodies(void)
{
	struct {
		const char *body;
		const char *why; /* NULL: valid */
	} rows[] = {
		{"{\"buyer_id\":\"b1\",\"qty\":1}", NULL},
		{"{\"buyer_id\":\"b1\",\"qty\":2,\"token\":\"t\",\"extra\":[1]}", NULL},
		{"{\"buyer_id\":\"b1\",\"qty\":1,\"token\":null}", NULL},
		{"", "bad_json"},
		{"{", "bad_json"},
		{"[1]", "not_object"},
		{"\"x\"", "not_object"},
		{"{\"buyer_id\":\"b1\",\"buyer_id\":\"b2\",\"qty\":1}", "duplicate_key"},
		{"{\"qty\":1}", "missing_buyer_id"},
		{"{\"buyer_id\":\"has space\",\"qty\":1}", "bad_buyer_id"},
		{"{\"buyer_id\":7,\"qty\":1}", "bad_buyer_id"},
		{"{\"buyer_id\":\"\",\"qty\":1}", "bad_buyer_id"},
		{"{\"buyer_id\":\"b1\"}", "missing_qty"},
		{"{\"buyer_id\":\"b1\",\"qty\":0}", "bad_qty"},
		{"{\"buyer_id\":\"b1\",\"qty\":1.0}", "bad_qty"},
		{"{\"buyer_id\":\"b1\",\"qty\":\"1\"}", "bad_qty"},
		{"{\"buyer_id\":\"b1\",\"qty\":1000001}", "bad_qty"},
		{"{\"buyer_id\":\"b1\",\"qty\":1,\"token\":5}", "bad_token"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("buy body %s", rows[i].body);
		struct gw_buy b;
		const char *why = NULL;
		int rc = gw_parse_buy(rows[i].body, strlen(rows[i].body), &b, &why);
		if (!rows[i].why) {
			CHECK_INT(rc, 0);
			CHECK_STR(b.buyer_id, "b1");
		} else {
			CHECK_INT(rc, -EINVAL);
			CHECK(why && strcmp(why, rows[i].why) == 0);
		}
	}
	/* A NUL inside the body is bad JSON, not a shorter string. */
	CHECK_CTX("nul");
	const char nul[] = "{\"buyer_id\":\"b\\u0000x\",\"qty\":1}";
	struct gw_buy b;
	const char *why = NULL;
	CHECK_INT(gw_parse_buy(nul, sizeof nul - 1, &b, &why), -EINVAL);
	char token[400];
	memset(token, 'a', sizeof token);
	char body[600];
	snprintf(body, sizeof body, "{\"buyer_id\":\"b\",\"qty\":1,\"token\":\"%.*s\"}", 257,
		 token);
	CHECK_CTX("long token");
	CHECK_INT(gw_parse_buy(body, strlen(body), &b, &why), -EINVAL);
	CHECK_STR(why, "bad_token");
}

static void test_sale_bodies(void)
{
	struct gw_sale s;
	const char *why = NULL;
	CHECK_CTX("open");
	const char *open = "{\"stock\":500,\"per_buyer_limit\":2,\"hold_seconds\":60}";
	CHECK_INT(gw_parse_sale(GW_ADMIN_OPEN, open, strlen(open), &s, &why), 0);
	CHECK_INT(s.stock, 500);
	CHECK_INT(s.per_buyer_limit, 2);
	CHECK_INT(s.hold_seconds, 60);
	CHECK_INT(gw_parse_sale(GW_ADMIN_OPEN, "{}", 2, &s, &why), -EINVAL);
	CHECK_STR(why, "missing_stock");
	CHECK_INT(gw_parse_sale(GW_ADMIN_OPEN, "", 0, &s, &why), -EINVAL);
	CHECK_INT(gw_parse_sale(GW_ADMIN_OPEN, "{\"stock\":-1}", 12, &s, &why), -EINVAL);
	CHECK_STR(why, "bad_stock");
	CHECK_CTX("restock");
	CHECK_INT(gw_parse_sale(GW_ADMIN_RESTOCK, "{\"add\":5}", 9, &s, &why), 0);
	CHECK_INT(s.add, 5);
	CHECK_INT(gw_parse_sale(GW_ADMIN_RESTOCK, "{\"add\":0}", 9, &s, &why), -EINVAL);
	CHECK_CTX("close, confirm: the body is optional");
	CHECK_INT(gw_parse_sale(GW_ADMIN_CLOSE, "", 0, &s, &why), 0);
	CHECK_INT(gw_parse_sale(GW_CONFIRM, "", 0, &s, &why), 0);
	CHECK_INT(gw_parse_sale(GW_CONFIRM, "{\"sku\":\"HOT\"}", 13, &s, &why), 0);
	CHECK_STR(s.sku, "HOT");
	CHECK_INT(gw_parse_sale(GW_CANCEL, "{\"sku\":\"a b\"}", 13, &s, &why), -EINVAL);
	CHECK_STR(why, "bad_sku");
}

static void test_wait(void)
{
	int64_t ms;
	CHECK_CTX("wait");
	CHECK_INT(gw_wait_ms(NULL, NULL, 60000, &ms), 0);
	CHECK_INT(ms, 0);
	CHECK_INT(gw_wait_ms("5", NULL, 60000, &ms), 0);
	CHECK_INT(ms, 5000);
	CHECK_INT(gw_wait_ms("0.25", NULL, 60000, &ms), 0);
	CHECK_INT(ms, 250);
	CHECK_INT(gw_wait_ms("600", NULL, 60000, &ms), 0);
	CHECK_INT(ms, 60000);
	CHECK_INT(gw_wait_ms("1e400", NULL, 60000, &ms), -EINVAL);
	CHECK_INT(gw_wait_ms("-1", NULL, 60000, &ms), -EINVAL);
	CHECK_INT(gw_wait_ms("x", NULL, 60000, &ms), -EINVAL);
	CHECK_INT(gw_wait_ms("nan", NULL, 60000, &ms), -EINVAL);
	CHECK_INT(gw_wait_ms(NULL, "respond-async, wait=10", 60000, &ms), 0);
	CHECK_INT(ms, 10000);
	CHECK_INT(gw_wait_ms(NULL, "wait=3", 60000, &ms), 0);
	CHECK_INT(ms, 3000);
	CHECK_INT(gw_wait_ms(NULL, "handling=lenient; wait = 2", 60000, &ms), 0);
	CHECK_INT(ms, 2000);
	CHECK_INT(gw_wait_ms(NULL, "nowait=3", 60000, &ms), 0);
	CHECK_INT(ms, 0);
	CHECK_INT(gw_wait_ms(NULL, "wait=abc", 60000, &ms), 0); /* ignored, as RFC 7240 says */
	CHECK_INT(ms, 0);
	CHECK_INT(gw_wait_ms("1", "wait=9", 60000, &ms), 0); /* the query wins */
	CHECK_INT(ms, 1000);
}

static void test_records(void)
{
	struct fs_buf out = {0};
	struct gw_buy b = {.qty = 2, .has_token = true};
	snprintf(b.buyer_id, sizeof b.buyer_id, "%s", "b\"q");
	snprintf(b.token, sizeof b.token, "%s", "tok");
	CHECK_CTX("buy record");
	CHECK_INT(gw_record_buy(&out, "0190e000-0000-7000-8000-000000000001", "HOT", &b), 0);
	/* What the worker reads: the record parses, its fields are the request's. */
	struct fs_record_limits lim = {.bytes_max = 4096};
	struct fs_record rec;
	CHECK_INT(fs_record_parse(&lim, "HOT", 3, out.data, out.len, 0, 0, 0, &rec), 0);
	CHECK_INT(rec.kind, FS_KIND_BUY);
	CHECK_STR(rec.buyer_id, "b\"q");
	CHECK_INT(rec.qty, 2);
	fs_buf_clear(&out);
	CHECK_CTX("confirm record");
	CHECK_INT(
		gw_record_followup(&out, "confirm", "0190e000-0000-7000-8000-000000000001", "HOT"),
		0);
	CHECK_INT(fs_record_parse(&lim, "HOT", 3, out.data, out.len, 0, 1, 0, &rec), 0);
	CHECK_INT(rec.kind, FS_KIND_CONFIRM);
	fs_buf_clear(&out);
	CHECK_CTX("open record");
	struct gw_sale s = {.stock = 10, .per_buyer_limit = 2, .hold_seconds = 30};
	CHECK_INT(gw_record_sale(&out, GW_ADMIN_OPEN, "HOT", &s), 0);
	CHECK_INT(fs_record_parse(&lim, "HOT", 3, out.data, out.len, 0, 2, 0, &rec), 0);
	CHECK_INT(rec.kind, FS_KIND_OPEN);
	CHECK_INT(rec.qty, 10);
	CHECK_INT(rec.per_buyer_limit, 2);
	CHECK_INT(rec.hold_ms, 30000);
	fs_buf_clear(&out);
	CHECK_CTX("join record");
	CHECK_INT(gw_record_join(&out, "HOT", "b\"q"), 0);
	CHECK_INT(fs_record_parse(&lim, "HOT", 3, out.data, out.len, 0, 3, 0, &rec), 0);
	CHECK_INT(rec.kind, FS_KIND_JOIN);
	CHECK_STR(rec.buyer_id, "b\"q");
	fs_buf_free(&out);
	CHECK_CTX("join bodies");
	char buyer[FS_BUYER_LEN_MAX + 1];
	const char *why = NULL;
	CHECK_INT(gw_parse_join("{\"buyer_id\":\"b1\"}", 17, buyer, &why), 0);
	CHECK_STR(buyer, "b1");
	static const struct {
		const char *body, *why;
	} bad[] = {{"{}", "missing_buyer_id"},
		   {"{\"buyer_id\":7}", "bad_buyer_id"},
		   {"{\"buyer_id\":\"a b\"}", "bad_buyer_id"},
		   {"[1]", "not_object"},
		   {"{", "bad_json"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("join body %s", bad[i].body);
		CHECK_INT(gw_parse_join(bad[i].body, strlen(bad[i].body), buyer, &why), -EINVAL);
		CHECK_STR(why, bad[i].why);
	}
	CHECK_CTX("fingerprint");
	CHECK(gw_fingerprint("buy", "HOT", "b1", 1) == gw_fingerprint("buy", "HOT", "b1", 1));
	CHECK(gw_fingerprint("buy", "HOT", "b1", 1) != gw_fingerprint("buy", "HOT", "b1", 2));
	CHECK(gw_fingerprint("buy", "HOT", "b1", 1) != gw_fingerprint("buy", "HOT", "b2", 1));
	CHECK(gw_fingerprint("buy", "HOT", "b1", 1) != gw_fingerprint("buy", "HOTX", "b1", 1));
}

static void test_events_and_auth(void)
{
	struct fs_buf out = {0};
	gw_sse_event(&out, "decided", 3, 42, "{\"a\":1}");
	CHECK_CTX("sse");
	CHECK_STR(fs_buf_cstr(&out), "event: decided\nid: 3:42\ndata: {\"a\":1}\n\n");
	fs_buf_free(&out);
	int32_t p;
	int64_t o;
	CHECK(gw_parse_event_id("3:42", &p, &o) && p == 3 && o == 42);
	CHECK(!gw_parse_event_id("3:", &p, &o));
	CHECK(!gw_parse_event_id(":4", &p, &o));
	CHECK(!gw_parse_event_id("3:4x", &p, &o));
	CHECK(!gw_parse_event_id("-3:4", &p, &o));
	CHECK(!gw_parse_event_id("99999999999:4", &p, &o));
	CHECK(!gw_parse_event_id(NULL, &p, &o));
	CHECK_CTX("bearer");
	CHECK(gw_bearer_ok("Bearer s3cret", "s3cret"));
	CHECK(!gw_bearer_ok("Bearer s3cre", "s3cret"));
	CHECK(!gw_bearer_ok("Bearer s3cretx", "s3cret"));
	CHECK(!gw_bearer_ok("Bearer s3creT", "s3cret"));
	CHECK(!gw_bearer_ok("Basic s3cret", "s3cret"));
	CHECK(!gw_bearer_ok("Bearer ", ""));
	CHECK(!gw_bearer_ok(NULL, "s3cret"));
}

static void id_of(int i, char out[FS_UUID_LEN + 1])
{
	snprintf(out, FS_UUID_LEN + 1, "0190e000-0000-7000-8000-%012d", i);
}

/* Issue 47: the answers the cache keeps (items 2, 6, 7 and 10). */
static void test_cache_issue47(struct gw_cache *c)
{
	char id[FS_UUID_LEN + 1];
	id_of(900, id);
	CHECK_CTX("item 2: unknown_intent on the wrong SKU's partition gives way to the right one");
	struct gw_entry *f = gw_cache_put(c, id, GW_K_CONFIRM);
	CHECK(gw_entry_decide(f, "{\"u\":1}", "WRONG", 1, 6, true));
	CHECK(!gw_entry_decide(f, "{\"u\":2}", "HOT", 0, 3, true)); /* still no hold: stays */
	CHECK(gw_entry_decide(f, "{\"c\":1}", "HOT", 0, 3, false));
	CHECK(!f->provisional && f->part == 0 && f->off == 3);
	CHECK_STR(f->sku, "HOT");
	CHECK(!gw_entry_decide(f, "{\"u\":3}", "WRONG", 1, 9, true)); /* final now */

	CHECK_CTX("item 7: one id on two partitions");
	struct gw_entry *b = gw_cache_put(c, id, GW_K_BUY);
	b->fp = gw_fingerprint("buy", "HOT", "alice", 1);
	snprintf(b->sku, sizeof b->sku, "HOT");
	b->state = GW_S_QUEUED;
	/* the other buyer's buy of another SKU, decided first on its partition */
	CHECK(!gw_entry_decide(b, "{\"o\":\"bob\"}", "COLD", 1, 2, false));
	CHECK(gw_entry_event(b, "cancelled", 1, 7, "{}")); /* undecided yet: kept for now */
	CHECK(gw_entry_decide(b, "{\"o\":\"alice\"}", "HOT", 0, 5, false));
	CHECK_INT(b->n_ev, 0); /* bob's cancel was dropped with the decision */
	CHECK(!gw_entry_event(b, "cancelled", 1, 8, "{}"));
	CHECK(gw_entry_event(b, "decided", 0, 5, "{}"));
	CHECK(gw_entry_event(b, "expired", 0, 9, "{}"));
	CHECK(!gw_entry_event(b, "confirmed", 1, 6, "{}"));
	CHECK_INT(b->n_ev, 2);
	CHECK_STR(b->ev[1].name, "expired");

	CHECK_CTX("item 6: a decision's own record");
	const char *held = "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"x\",\"sku\":\"HOT\","
			   "\"outcome\":\"held\",\"qty\":2,\"partition\":0,\"offset\":5}";
	CHECK_INT(gw_decision_matches(held, "HOT", 2), 1);
	CHECK_INT(gw_decision_matches(held, "HOT", 1), 0);
	CHECK_INT(gw_decision_matches(held, "COLD", 2), 0);
	CHECK_INT(gw_decision_matches("{\"type\":\"invalid\",\"outcome\":\"rejected\"}", "HOT", 2),
		  -1);
	CHECK_INT(gw_decision_matches("not json", "HOT", 2), -1);
	CHECK_INT(gw_decision_matches(NULL, "HOT", 2), -1);

	CHECK_CTX("item 10: a queued entry asks Postgres again");
	id_of(901, id);
	struct gw_entry *q = gw_cache_put(c, id, GW_K_BUY);
	CHECK(!gw_entry_stale(q, 1000000)); /* a stub: its lookup is get_intent's */
	q->state = GW_S_QUEUED;
	q->asked_ms = 1000000;
	CHECK(!gw_entry_stale(q, 1000000 + GW_RECHECK_MS - 1));
	CHECK(gw_entry_stale(q, 1000000 + GW_RECHECK_MS));
	CHECK(gw_entry_decide(q, "{}", "HOT", 0, 1, false));
	CHECK(!gw_entry_stale(q, 1000000 + 10 * GW_RECHECK_MS)); /* decided */
	CHECK(gw_entry_stale(f, 0) == false);			 /* final */
	struct gw_entry *u = gw_cache_put(c, id, GW_K_CANCEL);
	CHECK(gw_entry_decide(u, "{}", "HOT", 0, 2, true));
	CHECK(gw_entry_stale(u, GW_RECHECK_MS)); /* provisional: may be decided elsewhere */
}

static void test_cache(void)
{
	struct gw_cache c;
	CHECK_CTX("cache");
	CHECK_INT(gw_cache_init(&c, 1000, 10), 0);
	char id[FS_UUID_LEN + 1];
	id_of(1, id);
	struct gw_entry *e = gw_cache_put(&c, id, GW_K_BUY);
	CHECK(e && e->state == GW_S_STUB);
	CHECK(gw_cache_put(&c, id, GW_K_BUY) == e);
	CHECK(gw_cache_get(&c, id, GW_K_CONFIRM) == NULL);
	CHECK(gw_entry_decide(e, "{\"o\":1}", "HOT", 0, 5, false));
	CHECK(!gw_entry_decide(e, "{\"o\":2}", "HOT", 0, 9, false)); /* the first one stays */
	CHECK_STR(e->decision, "{\"o\":1}");
	CHECK_CTX("provisional");
	struct gw_entry *f = gw_cache_put(&c, id, GW_K_CONFIRM);
	CHECK(gw_entry_decide(f, "{\"u\":1}", "HOT", 0, 6, true));
	CHECK(!gw_entry_decide(f, "{\"u\":0}", "HOT", 0, 4, false)); /* older: not taken */
	CHECK(gw_entry_decide(f, "{\"c\":1}", "HOT", 0, 8, false));
	CHECK_STR(f->decision, "{\"c\":1}");
	CHECK(!gw_entry_decide(f, "{\"c\":2}", "HOT", 0, 10, false));
	CHECK_CTX("events in log order, once each");
	CHECK(gw_entry_event(e, "confirmed", 0, 8, "{}"));
	CHECK(gw_entry_event(e, "decided", 0, 5, "{}"));
	CHECK(!gw_entry_event(e, "decided", 0, 5, "{}"));
	CHECK_INT(e->n_ev, 2);
	CHECK_STR(e->ev[0].name, "decided");
	CHECK_STR(e->ev[1].name, "confirmed");

	test_cache_issue47(&c);

	CHECK_CTX("eviction spares entries in use");
	e->pins = 1;
	struct gw_waiter w;
	struct gw_entry *waited = NULL;
	for (int i = 2; i <= 3000; i++) {
		id_of(i, id);
		struct gw_entry *x = gw_cache_put(&c, id, GW_K_BUY);
		if (!CHECK(x != NULL))
			break;
		if (i == 2) {
			waited = x;
			gw_waiter_add(&x->waiters, &w, NULL);
		}
	}
	CHECK(c.len <= 1000);
	CHECK(c.evicted >= 2000);
	id_of(1, id);
	CHECK(gw_cache_get(&c, id, GW_K_BUY) == e);
	id_of(2, id);
	CHECK(gw_cache_get(&c, id, GW_K_BUY) == waited);
	id_of(3, id);
	CHECK(gw_cache_get(&c, id, GW_K_BUY) == NULL);
	id_of(3000, id);
	CHECK(gw_cache_get(&c, id, GW_K_BUY) != NULL);
	gw_waiter_remove(&w);
	CHECK(!gw_waiter_linked(&w));

	CHECK_CTX("full of entries in use");
	struct gw_cache small;
	CHECK_INT(gw_cache_init(&small, 2, 1), 0);
	id_of(1, id);
	gw_cache_put(&small, id, GW_K_BUY)->pins = 1;
	id_of(2, id);
	gw_cache_put(&small, id, GW_K_BUY)->state = GW_S_PUBLISHING;
	id_of(3, id);
	CHECK(gw_cache_put(&small, id, GW_K_BUY) == NULL);
	CHECK_INT(small.refused, 1); /* /readyz: intent_cache_full */

	CHECK_CTX("stock never goes back");
	struct gw_stock *s = gw_stock_put(&small, "HOT");
	CHECK(s && !s->json);
	CHECK(gw_stock_put(&small, "OTHER") == NULL); /* full */
	CHECK_INT(small.srefused, 1);
	CHECK(gw_stock_put(&small, "HOT") == s); /* a SKU held is found, full or not */
	CHECK_INT(small.slen, 1);
	CHECK(gw_stock_update(s, "{\"a\":5}", "open", 1, 10));
	CHECK(!gw_stock_update(s, "{\"a\":6}", "open", 1, 9));
	CHECK(gw_stock_update(s, "{\"a\":0}", "sold_out", 1, 11));
	CHECK_STR(s->status, "sold_out");
	CHECK_INT(s->version, 2);
	/* Another partition (the SKU's topic was recreated): taken. */
	CHECK(gw_stock_update(s, "{\"a\":1}", "open", 2, 0));
	gw_cache_free(&small);
	gw_cache_free(&c);
}

/* The bucket of lookups for ids never seen (issue 48, item 5): one second's worth at once,
 * then rate a second; a clock that goes back refills nothing; Retry-After at least 1 s. */
static void test_bucket(void)
{
	CHECK_CTX("the unknown-lookup bucket");
	struct gw_bucket b;
	gw_bucket_init(&b, 10, 10, 1000);
	int taken = 0;
	for (int i = 0; i < 100; i++)
		taken += gw_bucket_take(&b, 1000);
	CHECK_INT(taken, 10); /* the burst, then nothing at the same instant */
	CHECK_INT(gw_bucket_retry_s(&b), 1);
	CHECK(!gw_bucket_take(&b, 1050)); /* half a token */
	CHECK(gw_bucket_take(&b, 1100));  /* one */
	CHECK(!gw_bucket_take(&b, 1100));
	CHECK(!gw_bucket_take(&b, 500)); /* the clock went back: nothing refilled */
	CHECK_INT(b.last_ms, 1100);
	/* A long quiet time refills the burst, no more. */
	taken = 0;
	for (int i = 0; i < 100; i++)
		taken += gw_bucket_take(&b, 1000000);
	CHECK_INT(taken, 10);
	/* Over 10 s at 10 a second: the burst plus 100, whatever the number asked. */
	taken = 0;
	for (int64_t t = 1000000; t <= 1010000; t += 5)
		for (int i = 0; i < 3; i++)
			taken += gw_bucket_take(&b, t);
	CHECK_INT(taken, 100);
	/* A slow bucket: Retry-After in whole seconds. */
	gw_bucket_init(&b, 0.25, 1, 0);
	CHECK(gw_bucket_take(&b, 0));
	CHECK(!gw_bucket_take(&b, 0));
	CHECK_INT(gw_bucket_retry_s(&b), 4);
}

/* The cache of waiting rooms' admission rule (issue 48, item 5): a room no stock record named
 * never takes a slot, however many are read; a named one takes the oldest; a held one is
 * found, named or not. */
static void test_room_slots(void)
{
	CHECK_CTX("the rooms' cache admission");
	struct gw_room_key k[4] = {{"", 0}};
	CHECK_INT(gw_room_slot(k, 4, "JUNK", false), -1);
	int i = gw_room_slot(k, 4, "REAL", true);
	CHECK(i >= 0);
	snprintf(k[i].sku, sizeof k[i].sku, "REAL");
	k[i].read_ms = 100;
	/* 1,000 junk rooms read after it: none takes a slot, REAL stays found. */
	for (int j = 0; j < 1000; j++) {
		char junk[32];
		snprintf(junk, sizeof junk, "JUNK-%d", j);
		CHECK_INT(gw_room_slot(k, 4, junk, false), -1);
	}
	CHECK_INT(gw_room_slot(k, 4, "REAL", false), i);
	CHECK_INT(gw_room_slot(k, 4, "REAL", true), i);
	/* Named rooms fill the empty slots first, then replace the one read longest ago. */
	for (int j = 0; j < 4; j++) {
		char sku[32];
		snprintf(sku, sizeof sku, "R%d", j);
		int s = gw_room_slot(k, 4, sku, true);
		CHECK(s >= 0);
		/* the empty slots first; then REAL, read at 100, the one read longest ago */
		CHECK(j < 3 ? s != i : s == i);
		snprintf(k[s].sku, sizeof k[s].sku, "%s", sku);
		k[s].read_ms = 200 + j;
	}
	/* REAL is out now: named, it would take R0's slot (read at 200); not named, none. */
	int r0 = gw_room_slot(k, 4, "R0", false);
	CHECK(r0 >= 0 && k[r0].read_ms == 200);
	CHECK_INT(gw_room_slot(k, 4, "REAL", true), r0);
	CHECK_INT(gw_room_slot(k, 4, "REAL", false), -1);
	CHECK_INT(gw_room_slot(k, 0, "X", true), -1);
}

/* A cart's body becomes the cart record the worker reads (its own parser judges it), with the
 * worker's body hash as fingerprint. */
static void test_cart_bodies(void)
{
	const char *id = "01a24302-25bb-77ac-a75e-94659905c1ab";
	struct fs_buf rec = {0};
	uint64_t fp = 0, fp2 = 0;
	const char *why = NULL;
	const char *ok = "{\"buyer_id\":\"al\\\"ice\",\"lines\":[{\"sku\":\"A\",\"qty\":2},"
			 "{\"sku\":\"B\",\"qty\":1}],\"extra\":1}";
	CHECK_INT(gw_parse_cart(ok, strlen(ok), id, &rec, &fp, &why), 0);
	struct fs_record_limits lim = {.carts = true};
	struct fs_record r;
	static struct fs_record_ext x;
	CHECK_INT(fs_record_parse_ext(&lim, id, strlen(id), rec.data, rec.len, 0, 0, 0, &r, &x), 0);
	CHECK_INT(r.kind, FS_KIND_CART);
	CHECK_STR(x.cart.buyer_id, "al\"ice");
	CHECK_INT(x.cart.nlines, 2);
	CHECK_INT((int64_t)fp, r.body_hash);
	CHECK(strstr(rec.data, "extra") == NULL);
	fs_buf_clear(&rec);
	const char *other = "{\"buyer_id\":\"al\\\"ice\",\"lines\":[{\"sku\":\"A\",\"qty\":1},"
			    "{\"sku\":\"B\",\"qty\":1}]}";
	CHECK_INT(gw_parse_cart(other, strlen(other), id, &rec, &fp2, &why), 0);
	CHECK(fp2 != fp);
	static const struct {
		const char *body, *why;
	} bad[] = {
		{"[]", "not_object"},
		{"{", "bad_json"},
		{"{\"lines\":[{\"sku\":\"A\",\"qty\":1}]}", "missing_buyer_id"},
		{"{\"buyer_id\":\"b\"}", "missing_lines"},
		{"{\"buyer_id\":\"b\",\"lines\":[]}", "no_lines"},
		{"{\"buyer_id\":\"b\",\"lines\":[{\"sku\":\"A\",\"qty\":1},{\"sku\":\"A\","
		 "\"qty\":1}]}",
		 "duplicate_sku"},
		{"{\"buyer_id\":\"b\",\"lines\":[{\"sku\":\"A\",\"qty\":0}]}", "bad_qty"},
		{"{\"buyer_id\":\"b\",\"lines\":[{\"sku\":\"A B\",\"qty\":1}]}", "bad_line"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("cart body %zu: %s", i, bad[i].body);
		fs_buf_clear(&rec);
		why = NULL;
		CHECK_INT(gw_parse_cart(bad[i].body, strlen(bad[i].body), id, &rec, &fp, &why),
			  -EINVAL);
		CHECK_STR(why ? why : "(none)", bad[i].why);
	}
	CHECK_CTX("%s", "");
	fs_buf_clear(&rec);
	CHECK_INT(gw_record_cart_followup(&rec, "confirm", id), 0);
	CHECK_INT(fs_record_parse(&lim, id, strlen(id), rec.data, rec.len, 0, 0, 0, &r), 0);
	CHECK_INT(r.kind, FS_KIND_CART_CONFIRM);
	fs_buf_free(&rec);
}

/* Issue 48, item 5: routes match the path as sent. A percent-escape never becomes part of a
 * route ("/%63onfirm" is not "/confirm"), %00 and bad escapes are refused (GW_BAD_PATH), the
 * query is left out, and only the queue's buyer is decoded (an encoded '/' stays in it). */
static void test_raw_paths(void)
{
	const char *id = "/v1/intents/0191d9d0-8b6b-7c1e-9a5e-0123456789ab";
	struct {
		const char *tail;
		enum gw_route want;
	} rows[] = {
		{"/confirm", GW_CONFIRM},
		{"/confirm?x=1", GW_CONFIRM},
		{"/%63onfirm", GW_NOT_FOUND},
		{"/c%6Fnfirm", GW_NOT_FOUND},
		{"/confirm%00.css", GW_BAD_PATH},
		{"/confirm%00", GW_BAD_PATH},
		{"/confirm%2500", GW_NOT_FOUND},
		{"/confirm%", GW_BAD_PATH},
		{"/confirm%4", GW_BAD_PATH},
		{"/confirm%zz", GW_BAD_PATH},
		{"/confirm/", GW_NOT_FOUND},
		{"/confirm\t", GW_BAD_PATH},
		{"/confirm\x80", GW_BAD_PATH},
		{"%2Fconfirm", GW_BAD_METHOD}, /* one parameter "{id}%2Fconfirm": a read of it */
	};
	struct gw_path p;
	const char *allow;
	char url[256];
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		snprintf(url, sizeof url, "%s%s", id, rows[i].tail);
		CHECK_CTX("POST %s", url);
		CHECK_INT(gw_route("POST", url, &p, &allow), rows[i].want);
	}
	CHECK_CTX("raw paths");
	/* A SKU as sent: an escape in it is a bad SKU (400), not a decoded one. */
	CHECK_INT(gw_route("POST", "/v1/skus/%48OT/buys", &p, &allow), GW_BUY);
	CHECK_STR(p.param, "%48OT");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT%2Fbuys", &p, &allow), GW_SKU);
	CHECK_INT(gw_route("GET", "/%68ealthz", &p, &allow), GW_NOT_FOUND);
	CHECK_INT(gw_route("GET", "", &p, &allow), GW_BAD_PATH);
	CHECK_INT(gw_route("GET", "healthz", &p, &allow), GW_BAD_PATH);
	/* The queue's buyer is decoded; an encoded '/' and "/events" stay in it. */
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/e%2F8", &p, &allow), GW_QUEUE);
	CHECK_STR(p.param2, "e/8");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/b%2Fevents", &p, &allow), GW_QUEUE);
	CHECK_STR(p.param2, "b/events");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/b%2Fevents/events", &p, &allow),
		  GW_QUEUE_EVENTS);
	CHECK_STR(p.param2, "b/events");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/a%20b?wait=1", &p, &allow), GW_QUEUE);
	CHECK_STR(p.param2, "a b");
	CHECK_INT(gw_route("GET", "/v1/skus/HOT/queue/a%00b", &p, &allow), GW_BAD_PATH);
	/* 64 buyer bytes sent as 192 escapes: decoded, then measured. */
	char q[512] = "/v1/skus/HOT/queue/";
	for (int i = 0; i < 64; i++)
		strcat(q, "%41");
	CHECK_INT(gw_route("GET", q, &p, &allow), GW_QUEUE);
	CHECK(!p.too_long && strlen(p.param2) == 64);
	/* A path too long for any route. */
	char big[GW_PATH_MAX + 16];
	memset(big, 'a', sizeof big - 1);
	big[0] = '/';
	big[sizeof big - 1] = '\0';
	CHECK_INT(gw_route("GET", big, &p, &allow), GW_NOT_FOUND);
	char d[] = "a%41%2f%zz%00%";
	CHECK_INT(gw_pct_decode(d), 10);
	CHECK_STR(d, "aA/%zz%00%");
}

/* Issue 48, item 5: framing headers that disagree are refused (request smuggling). */
static void test_framing(void)
{
	const char *five[] = {"5"}, *two[] = {"5", "5"}, *diff[] = {"5", "6"}, *list[] = {"5, 5"},
		   *neg[] = {"-1"}, *plus[] = {"+5"}, *huge[] = {"9999999999999999999"},
		   *chunked[] = {"chunked"}, *upper[] = {"Chunked"}, *gzip[] = {"gzip, chunked"},
		   *two_te[] = {"chunked", "identity"}, *many[] = {"1", "1", "1", "1"};
	CHECK_CTX("framing");
	CHECK(gw_framing_check(NULL, 0, NULL, 0) == NULL);
	CHECK(gw_framing_check(five, 1, NULL, 0) == NULL);
	CHECK(gw_framing_check(two, 2, NULL, 0) == NULL);
	CHECK(gw_framing_check(chunked, 0, chunked, 1) == NULL);
	CHECK(gw_framing_check(NULL, 0, upper, 1) == NULL);
	CHECK(gw_framing_check(diff, 2, NULL, 0) != NULL);
	CHECK(gw_framing_check(list, 1, NULL, 0) != NULL);
	CHECK(gw_framing_check(neg, 1, NULL, 0) != NULL);
	CHECK(gw_framing_check(plus, 1, NULL, 0) != NULL);
	CHECK(gw_framing_check(huge, 1, NULL, 0) != NULL);
	CHECK(gw_framing_check(five, 1, chunked, 1) != NULL);
	CHECK(gw_framing_check(NULL, 0, gzip, 1) != NULL);
	CHECK(gw_framing_check(NULL, 0, two_te, 2) != NULL);
	CHECK(gw_framing_check(many, 4, NULL, 0) == NULL);
	CHECK(gw_framing_check(many, 5, NULL, 0) != NULL); /* more than were looked at */
}

/* Issue 48, item 5: the per-address bounds: a token bucket, a cap on waits, keys, the sweep. */
static void test_clients(void)
{
	struct gw_clients c;
	CHECK_CTX("clients");
	if (!CHECK_INT(gw_clients_init(&c, 2, 10.0, 3.0, 2), 0))
		return;
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	inet_pton(AF_INET, "192.0.2.7", &a4.sin_addr);
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6}, b6 = a6, m6 = a6;
	inet_pton(AF_INET6, "2001:db8:1:2::1", &a6.sin6_addr);
	inet_pton(AF_INET6, "2001:db8:1:2:ffff::9", &b6.sin6_addr);
	inet_pton(AF_INET6, "::ffff:192.0.2.7", &m6.sin6_addr);
	uint8_t k4[GW_CLIENT_KEY], k6[GW_CLIENT_KEY], kb[GW_CLIENT_KEY], km[GW_CLIENT_KEY];
	gw_client_key((struct sockaddr *)&a4, k4);
	gw_client_key((struct sockaddr *)&a6, k6);
	gw_client_key((struct sockaddr *)&b6, kb);
	gw_client_key((struct sockaddr *)&m6, km);
	CHECK(memcmp(k4, km, GW_CLIENT_KEY) == 0); /* v4, and v4 on a dual-stack listener */
	CHECK(memcmp(k6, kb, GW_CLIENT_KEY) == 0); /* one /64 */
	CHECK(memcmp(k4, k6, GW_CLIENT_KEY) != 0);
	struct gw_client *e = gw_client_get(&c, k4, 1000);
	CHECK(e == gw_client_get(&c, km, 1000));
	/* A burst of 3, then one every 100 ms; Retry-After rounds up to a second. */
	CHECK_INT(gw_client_take(&c, e, 1000), 0);
	CHECK_INT(gw_client_take(&c, e, 1000), 0);
	CHECK_INT(gw_client_take(&c, e, 1000), 0);
	CHECK_INT(gw_client_take(&c, e, 1000), 1);
	CHECK_INT(gw_client_take(&c, e, 1050), 1);
	CHECK_INT(gw_client_take(&c, e, 1100), 0);
	CHECK_INT(gw_client_take(&c, e, 1100), 1);
	CHECK_INT(gw_client_take(&c, e, 60000), 0); /* refilled, to the burst only */
	CHECK_INT(gw_client_take(&c, e, 60000), 0);
	CHECK_INT(gw_client_take(&c, e, 60000), 0);
	CHECK_INT(gw_client_take(&c, e, 60000), 1);
	/* Two waits, then 429; one ends, one more. */
	CHECK(gw_client_wait_begin(&c, e));
	CHECK(gw_client_wait_begin(&c, e));
	CHECK(!gw_client_wait_begin(&c, e));
	gw_client_wait_end(e);
	CHECK(gw_client_wait_begin(&c, e));
	/* Full (max 2): a third address shares the overflow entry. */
	struct gw_client *f = gw_client_get(&c, k6, 60000);
	CHECK(f != e && f != &c.overflow);
	uint8_t k3[GW_CLIENT_KEY] = {1};
	CHECK(gw_client_get(&c, k3, 60000) == &c.overflow);
	CHECK_INT(c.len, 2);
	/* The sweep forgets who holds nothing (f, full bucket), never who waits (e). */
	gw_clients_sweep(&c, 120000);
	CHECK_INT(c.len, 1);
	CHECK(gw_client_get(&c, k4, 120000) == e);
	gw_client_wait_end(e);
	gw_client_wait_end(e);
	gw_clients_sweep(&c, 120000);
	CHECK_INT(c.len, 0);
	gw_clients_free(&c);
	/* Without a rate, no request is refused. */
	if (CHECK_INT(gw_clients_init(&c, 4, 0.0, 1.0, 0), 0)) {
		e = gw_client_get(&c, k4, 0);
		for (int i = 0; i < 1000; i++)
			CHECK_INT(gw_client_take(&c, e, 0), 0);
		CHECK(gw_client_wait_begin(&c, e)); /* no cap */
		gw_clients_free(&c);
	}
}

int main(int argc, char **argv)
{
	test_cart_bodies();
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_gateway");
	}
	test_routes();
	test_raw_paths();
	test_framing();
	test_clients();
	test_queue_bodies();
	test_assets();
	test_content_type();
	test_buy_bodies();
	test_sale_bodies();
	test_wait();
	test_records();
	test_events_and_auth();
	test_cache();
	test_bucket();
	test_room_slots();
	return check_done("test_gateway");
}
