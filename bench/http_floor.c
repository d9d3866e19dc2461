/* http_floor.c: the HTTP floor of scripts/bench (S8, S9): libmicrohttpd, set up as
 * flashsale-gateway sets it up (one epoll thread, suspend/resume allowed, the answer queued on
 * the handler's second call, the same limits), answering every POST with a constant 202 and
 * every GET with a constant decision, deciding and storing nothing: what the HTTP part alone
 * costs on this machine.
 *
 *   flashsale-http-floor --port PORT        (127.0.0.1; SIGTERM or SIGINT stops it)
 *
 * Prints "listening on 127.0.0.1:PORT" once it accepts. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char ACCEPTED[] = "{\"intent_id\":\"00000000-0000-4000-8000-000000000000\","
			       "\"status\":\"queued\"}";
static const char DECIDED[] =
	"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"00000000-0000-4000-8000-000000000000\","
	"\"sku\":\"SKU1\",\"outcome\":\"held\",\"qty\":1,\"status\":\"decided\"}";

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)cls, (void)url, (void)version, (void)upload;
	static int first;
	if (!*con_cls) { /* the first call only announces the request */
		*con_cls = &first;
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0;
		return MHD_YES;
	}
	bool post = strcmp(method, "POST") == 0;
	const char *body = post ? ACCEPTED : DECIDED;
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	if (post)
		MHD_add_response_header(r, "Location",
					"/v1/intents/00000000-0000-4000-8000-000000000000");
	enum MHD_Result rc = MHD_queue_response(c, post ? 202 : 200, r);
	MHD_destroy_response(r);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--port") != 0) {
		fprintf(stderr, "usage: flashsale-http-floor --port PORT\n");
		return 2;
	}
	int port = atoi(argv[2]);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGTERM);
	sigaddset(&s, SIGINT);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			MHD_USE_ITC,
		(uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
		MHD_OPTION_CONNECTION_LIMIT, 16064U, MHD_OPTION_CONNECTION_TIMEOUT, 30U,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384, MHD_OPTION_LISTEN_BACKLOG_SIZE,
		4096U, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "flashsale-http-floor: cannot listen on 127.0.0.1:%d\n", port);
		return 1;
	}
	printf("listening on 127.0.0.1:%d\n", port);
	fflush(stdout);
	int sig;
	sigwait(&s, &sig);
	MHD_stop_daemon(d);
	return 0;
}
