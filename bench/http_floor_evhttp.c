/* http_floor_evhttp.c: the HTTP floor on libevent 2.1's evhttp, answering as
 * flashsale-http-floor does (POST: a constant 202, GET: a constant decision), one event loop:
 * one of the libraries measured against libmicrohttpd for the gateway (docs/DESIGN-NOTES.md
 * "Libraries").
 *
 *   flashsale-http-floor-evhttp --port PORT        (127.0.0.1) */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_req(struct evhttp_request *req, void *arg)
{
	(void)arg;
	int post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;
	struct evbuffer *b = evbuffer_new();
	evbuffer_add_printf(b, "%s",
			    post ? "{\"intent_id\":\"00000000-0000-4000-8000-000000000000\","
				   "\"status\":\"queued\"}"
				 : "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"00000000-0000-4000-"
				   "8000-000000000000\",\"sku\":\"SKU1\",\"outcome\":\"held\","
				   "\"qty\":1,\"status\":\"decided\"}");
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply(req, post ? 202 : 200, post ? "Accepted" : "OK", b);
	evbuffer_free(b);
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--port") != 0) {
		fprintf(stderr, "usage: flashsale-http-floor-evhttp --port PORT\n");
		return 2;
	}
	struct event_base *base = event_base_new();
	struct evhttp *http = evhttp_new(base);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
	evhttp_set_gencb(http, on_req, NULL);
	if (evhttp_bind_socket(http, "127.0.0.1", (unsigned short)atoi(argv[2])) != 0) {
		fprintf(stderr, "flashsale-http-floor-evhttp: cannot listen on 127.0.0.1:%s\n",
			argv[2]);
		return 1;
	}
	printf("listening on 127.0.0.1:%s\n", argv[2]);
	fflush(stdout);
	event_base_dispatch(base);
	return 0;
}
