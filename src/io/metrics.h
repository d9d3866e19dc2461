/* metrics.h: the metrics endpoint of flashsale-worker and flashsale-gateway (metrics.listen):
 * GET /metrics (the Prometheus text format, rendered by the program's callback) and
 * GET /healthz, on a libmicrohttpd daemon with one internal thread (poll(), not select(): a
 * gateway may hold thousands of descriptors), its connections bounded, any request body
 * ignored, every other path 404 and every other method 405. Also the
 * "ADDR:PORT" syntax of the listen keys (metrics.listen, the gateway's listen).
 *
 * Thread: render and health run on the endpoint's thread, one scrape at a time; what they read
 * is theirs to guard. */
#ifndef FS_METRICS_H
#define FS_METRICS_H

#include "core/buf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Parses "ADDR:PORT" (IPv4 a.b.c.d, or [IPv6]) into a socket address: 0, or -EINVAL with
 * why in err. */
int fs_listen_parse(const char *listen, struct sockaddr_storage *sa, bool *ipv6, char *err,
		    size_t err_len);

/* libmicrohttpd's messages into the log (MHD_OPTION_EXTERNAL_LOGGER, its cls a static prefix
 * such as "http"): a client gone in the middle of an answer is routine (debug), the rest warn. */
void fs_mhd_log(void *cls, const char *fmt, va_list ap);

/* Appends the /metrics text to out; false answers 503 (no text yet: the program is starting). */
typedef bool (*fs_metrics_render_fn)(void *ctx, struct fs_buf *out);
/* Appends /healthz's JSON to out; false answers 503. */
typedef bool (*fs_metrics_health_fn)(void *ctx, struct fs_buf *out);

struct fs_metrics;

/* Listens on `listen`: 0 and *out (its bound port in *port), or -EINVAL (a bad address) /
 * -EADDRINUSE (cannot listen), with why in err. */
int fs_metrics_start(const char *listen, fs_metrics_render_fn render, fs_metrics_health_fn health,
		     void *ctx, struct fs_metrics **out, int *port, char *err, size_t err_len);
/* Stops the endpoint (waits for a scrape in progress) and frees it; NULL is a no-op. */
void fs_metrics_stop(struct fs_metrics *m);

#endif
