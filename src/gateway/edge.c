/* edge.c: the gateway's bounds at the door (issue 48, item 5; docs/reference/http.md "Abuse
 * bounded at the door"): routes on the path as sent, framing headers that agree, a deadline
 * for a request's headers and body, waiting requests ended when their client leaves, and the
 * per-address caps (clients.h). libmicrohttpd 0.9.75 has none of these itself: it decodes the
 * path before the handler sees it, takes conflicting framing headers, and restarts its one
 * timeout (http.timeout.s) on every byte. */
#include "gateway/gateway.h"

#include "io/log.h"

#include <errno.h>
#include <poll.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int gw_edge_init(struct gw *g)
{
	pthread_mutex_init(&g->conns_mu, NULL);
	g->conns.prev = g->conns.next = &g->conns;
	g->per_client = g->cfg.http_client_rate > 0 || g->cfg.http_client_waits_max > 0;
	/* Addresses tracked one by one: four times as many as connections (an address that
	 * holds nothing is forgotten within GW_EDGE_SWEEP_MS of its bucket filling up). None
	 * when both bounds are off (the table is never asked). */
	size_t max = g->per_client ? (size_t)g->cfg.http_connections_max * 4 : 0;
	return gw_clients_init(&g->clients, max, (double)g->cfg.http_client_rate,
			       (double)g->cfg.http_client_burst, g->cfg.http_client_waits_max);
}

void gw_edge_free(struct gw *g)
{
	gw_clients_free(&g->clients);
}

static int64_t deadline_after(const struct gw *g, int64_t now_ms)
{
	return now_ms + g->cfg.http_request_deadline_s * 1000;
}

void *gw_edge_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct gw *g = cls;
	struct gw_req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->raw = strdup(uri);
	if (!r->raw) {
		free(r);
		return NULL;
	}
	r->g = g;
	r->conn = conn;
	r->last_part = -1;
	r->fd = -1;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	r->gconn = ci ? ci->socket_context : NULL;
	if (r->gconn)
		r->fd = r->gconn->fd;
	if (g->per_client) {
		ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		gw_client_key(ci ? ci->client_addr : NULL, r->ckey);
	}
	return r;
}

void gw_edge_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
			enum MHD_ConnectionNotificationCode code)
{
	struct gw *g = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		atomic_fetch_add(&g->connections, 1);
		struct gw_conn *c = calloc(1, sizeof *c);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!c || !ci) { /* no deadline for it (out of memory) */
			free(c);
			*socket_ctx = NULL;
			return;
		}
		c->fd = ci->connect_fd;
		atomic_store(&c->due_ms, deadline_after(g, gw_now_ms()));
		pthread_mutex_lock(&g->conns_mu);
		c->next = g->conns.next;
		c->prev = &g->conns;
		c->next->prev = c;
		g->conns.next = c;
		pthread_mutex_unlock(&g->conns_mu);
		*socket_ctx = c;
		return;
	}
	atomic_fetch_sub(&g->connections, 1);
	struct gw_conn *c = *socket_ctx;
	if (!c)
		return;
	/* Off the list before libmicrohttpd closes the descriptor (it notifies first): the
	 * timer never shuts down a descriptor number that is someone else's by then. */
	pthread_mutex_lock(&g->conns_mu);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	pthread_mutex_unlock(&g->conns_mu);
	free(c);
	*socket_ctx = NULL;
}

struct framing {
	const char *cl[GW_FRAMING_SEEN], *te[GW_FRAMING_SEEN];
	size_t n_cl, n_te;
};

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
				      const char *value)
{
	(void)kind;
	struct framing *f = cls;
	if (strcasecmp(key, "Content-Length") == 0) {
		if (f->n_cl < GW_FRAMING_SEEN)
			f->cl[f->n_cl] = value ? value : "";
		f->n_cl++;
	} else if (strcasecmp(key, "Transfer-Encoding") == 0) {
		if (f->n_te < GW_FRAMING_SEEN)
			f->te[f->n_te] = value ? value : "";
		f->n_te++;
	}
	return MHD_YES;
}

const char *gw_edge_framing(struct gw_req *r)
{
	struct framing f = {0};
	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, framing_header, &f);
	return gw_framing_check(f.cl, f.n_cl, f.te, f.n_te);
}

void gw_edge_request_in(struct gw_req *r)
{
	if (r->complete)
		return;
	r->complete = true;
	if (r->gconn)
		atomic_store(&r->gconn->due_ms, 0);
}

void gw_edge_request_done(struct gw *g, struct gw_req *r)
{
	if (r->client) {
		gw_client_wait_end(r->client);
		r->client = NULL;
	}
	if (r->gconn)
		atomic_store(&r->gconn->due_ms, deadline_after(g, gw_now_ms()));
}

int64_t gw_edge_rate(struct gw *g, struct gw_req *r)
{
	if (!g->per_client || r->route == GW_HEALTHZ || r->route == GW_READYZ)
		return 0;
	int64_t now = gw_now_ms();
	struct gw_client *e = gw_client_get(&g->clients, r->ckey, now);
	int64_t retry = gw_client_take(&g->clients, e, now);
	if (retry > 0)
		atomic_fetch_add(&g->stats.refused_rate, 1);
	return retry;
}

bool gw_edge_wait(struct gw *g, struct gw_req *r)
{
	if (!g->per_client || g->cfg.http_client_waits_max == 0 || r->client)
		return true;
	struct gw_client *e = gw_client_get(&g->clients, r->ckey, gw_now_ms());
	if (!gw_client_wait_begin(&g->clients, e)) {
		atomic_fetch_add(&g->stats.refused_waits, 1);
		return false;
	}
	r->client = e;
	return true;
}

void gw_edge_deadlines(struct gw *g, int64_t now_ms)
{
	pthread_mutex_lock(&g->conns_mu);
	for (struct gw_conn *c = g->conns.next; c != &g->conns; c = c->next) {
		int64_t due = atomic_load(&c->due_ms);
		if (due == 0 || due > now_ms)
			continue;
		/* libmicrohttpd's loop sees the end of the stream and closes the connection
		 * itself (no call into it from this thread). */
		atomic_store(&c->due_ms, 0);
		shutdown(c->fd, SHUT_RDWR);
		atomic_fetch_add(&g->stats.refused_deadline, 1);
	}
	pthread_mutex_unlock(&g->conns_mu);
}

/* The suspended requests of list whose descriptors to poll, appended to (pf, who). */
static size_t gone_collect(struct gw_waiter *list, struct pollfd **pf, struct gw_req ***who,
			   size_t n, size_t *cap)
{
	for (struct gw_waiter *x = list->next; x != list; x = x->next) {
		struct gw_req *r = x->owner;
		if (!r->suspended || r->fd < 0 || r->peer_gone)
			continue;
		if (n == *cap) {
			size_t c = *cap ? *cap * 2 : 256;
			struct pollfd *p = realloc(*pf, c * sizeof *p);
			if (p)
				*pf = p;
			struct gw_req **w = p ? realloc(*who, c * sizeof *w) : NULL;
			if (!w)
				return n; /* no memory: the rest waits for the next sweep */
			*who = w;
			*cap = c;
		}
		(*pf)[n] = (struct pollfd){.fd = r->fd, .events = POLLRDHUP};
		(*who)[n++] = r;
	}
	return n;
}

void gw_edge_gone(struct gw *g, struct gw_wakes *w, int64_t now_ms)
{
	/* A suspended connection is out of libmicrohttpd's poll set: that its client closed is
	 * seen only when it next writes (a heartbeat, 15 s), so the slot stayed taken. Its
	 * descriptor stays open while it is suspended: asked here, without waiting. The
	 * timer's own buffers (one timer thread). */
	static struct pollfd *pf;
	static struct gw_req **who;
	static size_t cap;
	size_t n = gone_collect(&g->polls, &pf, &who, 0, &cap);
	n = gone_collect(&g->streams, &pf, &who, n, &cap);
	if (n > 0 && poll(pf, n, 0) > 0)
		for (size_t i = 0; i < n; i++) {
			if (!(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
				continue;
			who[i]->peer_gone = true;
			atomic_fetch_add(&g->stats.peers_gone, 1);
			gw_wake_req(w, who[i]);
		}
	if (g->per_client)
		gw_clients_sweep(&g->clients, now_ms);
}
