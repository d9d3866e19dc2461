/* http_floor_h2o.c: the HTTP floor on libh2o-evloop (2.2, Debian 12), answering as
 * flashsale-http-floor does (POST: a constant 202, GET: a constant decision), one event loop:
 * one of the libraries measured against libmicrohttpd for the gateway (docs/DESIGN-NOTES.md
 * "Libraries").
 *
 *   flashsale-http-floor-h2o --port PORT        (127.0.0.1) */
#include <h2o.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static h2o_globalconf_t config;
static h2o_context_t ctx;
static h2o_accept_ctx_t accept_ctx;

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	(void)self;
	static h2o_generator_t gen = {NULL, NULL};
	int post = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
	h2o_iovec_t body =
		post ? h2o_iovec_init(
			       H2O_STRLIT("{\"intent_id\":\"00000000-0000-4000-8000-000000000000\","
					  "\"status\":\"queued\"}"))
		     : h2o_iovec_init(H2O_STRLIT(
			       "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"00000000-0000-4000-"
			       "8000-000000000000\",\"sku\":\"SKU1\",\"outcome\":\"held\","
			       "\"qty\":1,\"status\":\"decided\"}"));
	req->res.status = post ? 202 : 200;
	req->res.reason = post ? "Accepted" : "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
		       H2O_STRLIT("application/json"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
		       H2O_STRLIT("no-store"));
	h2o_start_response(req, &gen);
	h2o_send(req, &body, 1, H2O_SEND_STATE_FINAL);
	return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
	if (err)
		return;
	h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
	if (sock)
		h2o_accept(&accept_ctx, sock);
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--port") != 0) {
		fprintf(stderr, "usage: flashsale-http-floor-h2o --port PORT\n");
		return 2;
	}
	int port = atoi(argv[2]);
	h2o_config_init(&config);
	h2o_hostconf_t *hc =
		h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	h2o_pathconf_t *pc = h2o_config_register_path(hc, "/", 0);
	h2o_handler_t *h = h2o_create_handler(pc, sizeof *h);
	h->on_req = on_req;
	h2o_context_init(&ctx, h2o_evloop_create(), &config);
	accept_ctx.ctx = &ctx;
	accept_ctx.hosts = config.hosts;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 4096) != 0) {
		fprintf(stderr, "flashsale-http-floor-h2o: cannot listen on 127.0.0.1:%d\n", port);
		return 1;
	}
	h2o_socket_t *sock = h2o_evloop_socket_create(ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(sock, on_accept);
	printf("listening on 127.0.0.1:%d\n", port);
	fflush(stdout);
	while (h2o_evloop_run(ctx.loop, INT32_MAX) == 0)
		;
	return 0;
}
