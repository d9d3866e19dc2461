/* metrics.c: the metrics endpoint on libmicrohttpd (see metrics.h). */
#include "io/metrics.h"

#include "io/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A scrape is a handful of connections at most: Prometheus keeps one per target, and a
 * person with curl or `flashsale top` another. Idle ones go after the timeout. */
enum { CONNECTIONS_MAX = 32, TIMEOUT_S = 10, MEMORY_LIMIT = 16384 };

struct fs_metrics {
	struct MHD_Daemon *daemon;
	fs_metrics_render_fn render;
	fs_metrics_health_fn health;
	void *ctx;
	struct fs_buf out; /* the endpoint's thread's */
};

int fs_listen_parse(const char *listen, struct sockaddr_storage *sa, bool *ipv6, char *err,
		    size_t err_len)
{
	char addr[64];
	const char *colon;
	*ipv6 = listen[0] == '[';
	if (*ipv6) {
		const char *close = strchr(listen, ']');
		colon = close && close[1] == ':' ? close + 1 : NULL;
		size_t n = close ? (size_t)(close - listen - 1) : 0;
		if (!colon || n == 0 || n >= sizeof addr)
			goto bad;
		memcpy(addr, listen + 1, n);
		addr[n] = '\0';
	} else {
		colon = strrchr(listen, ':');
		if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof addr)
			goto bad;
		memcpy(addr, listen, (size_t)(colon - listen));
		addr[colon - listen] = '\0';
	}
	char *end = NULL;
	long port = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || port < 0 || port > 65535)
		goto bad;
	memset(sa, 0, sizeof *sa);
	if (*ipv6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1)
			return 0;
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1)
			return 0;
	}
	snprintf(err, err_len, "'%s' is not an IP address", addr);
	return -EINVAL;
bad:
	snprintf(err, err_len, "'%s' is not ADDR:PORT", listen);
	return -EINVAL;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type,
			      const struct fs_buf *body, const char *allow)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		body->len, body->len ? body->data : (void *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (allow)
		MHD_add_response_header(resp, "Allow", allow);
	enum MHD_Result rc = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	(void)upload;
	struct fs_metrics *m = cls;
	/* The first call only announces the request: answering on it costs the keep-alive
	 * (PITFALLS.md); a body, if any, is skipped unread. */
	if (!*con_cls) {
		*con_cls = m;
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0;
		return MHD_YES;
	}
	fs_buf_clear(&m->out);
	bool metrics = strcmp(url, "/metrics") == 0, healthz = strcmp(url, "/healthz") == 0;
	if (!metrics && !healthz) {
		fs_buf_str(&m->out, "{\"error\":\"not_found\"}");
		return answer(conn, MHD_HTTP_NOT_FOUND, "application/json", &m->out, NULL);
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		fs_buf_str(&m->out, "{\"error\":\"method_not_allowed\"}");
		return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", &m->out,
			      "GET, HEAD");
	}
	if (metrics) {
		bool ready = m->render(m->ctx, &m->out);
		if (!fs_buf_ok(&m->out))
			return MHD_NO; /* out of memory: the connection is closed */
		if (!ready) {
			fs_buf_clear(&m->out);
			fs_buf_str(&m->out, "{\"error\":\"starting\"}");
			return answer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json",
				      &m->out, NULL);
		}
		return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
			      &m->out, NULL);
	}
	bool ok = m->health ? m->health(m->ctx, &m->out) : true;
	if (m->out.len == 0)
		fs_buf_str(&m->out, ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}");
	return answer(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, "application/json",
		      &m->out, NULL);
}

void fs_mhd_log(void *cls, const char *fmt, va_list ap)
{
	const char *prefix = cls;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	/* A client gone, or cut at the gateway's request deadline (issue 48: an attacker's
	 * connections must not flood the log). */
	if (strncmp(msg, "Failed to send", 14) == 0 || strstr(msg, "closed by remote") ||
	    strstr(msg, "closed when reading request"))
		fs_debug("%s: %s", prefix, msg);
	else
		fs_warn("%s: %s", prefix, msg);
}

int fs_metrics_start(const char *listen, fs_metrics_render_fn render, fs_metrics_health_fn health,
		     void *ctx, struct fs_metrics **out, int *port, char *err, size_t err_len)
{
	struct sockaddr_storage sa;
	bool v6;
	*out = NULL;
	if (fs_listen_parse(listen, &sa, &v6, err, err_len) < 0)
		return -EINVAL;
	struct fs_metrics *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	m->render = render;
	m->health = health;
	m->ctx = ctx;
	uint16_t want = ntohs(v6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
				 : ((struct sockaddr_in *)&sa)->sin_port);
	m->daemon = MHD_start_daemon(
		/* poll(), not select(): select() refuses descriptors past FD_SETSIZE (1024), and
		 * the gateway holds a descriptor per buyer connected. */
		MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0), want,
		NULL, NULL, on_request, m, MHD_OPTION_EXTERNAL_LOGGER, fs_mhd_log, "metrics",
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TIMEOUT_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MEMORY_LIMIT, MHD_OPTION_END);
	if (!m->daemon) {
		snprintf(err, err_len, "cannot listen on %s: %s", listen, strerror(errno));
		free(m);
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *info =
		MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : want;
	*out = m;
	return 0;
}

void fs_metrics_stop(struct fs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->daemon);
	fs_buf_free(&m->out);
	free(m);
}
