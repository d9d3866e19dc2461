/* top.c: `flashsale top`, a live view of a running sale (see top.h).
 *
 * Two sources, read by one thread: the compacted stock topic (every partition from its
 * beginning, no group, no commits; the latest record of each SKU kept by skutable.c) and the
 * metrics endpoints of the workers and gateways (scraped at once every interval by fetch.c,
 * parsed by promtext.c, the rates and merges of scrape.c). The loop never waits longer than
 * FETCH_STEP_MS without looking at the keyboard and the signal flags, but for a request to
 * the broker for the stock topic's partitions and ends (TOP_METADATA_MS at most, tried at most
 * once a second while no broker answers). */
#include "cli/cli.h"
#include "cli/fetch.h"
#include "cli/top.h"

#include "core/record.h"
#include "io/kafka.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

enum {
	TOP_HTTP_TIMEOUT_MS = 2000, /* a scrape; an endpoint slower than this is shown down */
	TOP_METADATA_MS = 2000,	    /* the stock topic's partition count */
	TOP_STOCK_WAIT_MS = 15000,  /* --once: reading the stock topic to its end */
	TOP_STOCK_BATCH = 10000,    /* records taken in one go before looking at the keys */
	TOP_INTERVAL_MS_MIN = 100,
	TOP_INTERVAL_MS_MAX = 60000,
};

static const char usage_top[] =
	"usage: flashsale top [--metrics URL[,URL...]] [--interval MS] [--once] [--json]\n"
	"                     [SKU...]\n"
	"\n"
	"A live view of a running sale, refreshed every --interval ms (default 1000):\n"
	"  per SKU, its status, supply, available, held and sold, from the compacted stock\n"
	"    topic (the latest record of each); without SKU arguments every SKU on the topic,\n"
	"    the most recently changed first, as many as fit, the rest summed in one line;\n"
	"  per partition of the intents topic, its lag, decisions per second and records, and\n"
	"    the worker that has it;\n"
	"  the batches committed over the last interval, their mean and p99 commit time (p99\n"
	"    estimated from the histogram's buckets, as Prometheus's histogram_quantile), and\n"
	"    the decisions by outcome;\n"
	"  with a gateway's endpoint, its requests per second, edge answers and waiting requests.\n"
	"Partitions, commits and the gateway come from the metrics endpoints (metrics.listen of\n"
	"each worker and gateway): --metrics, else the top.metrics key. A URL without a scheme\n"
	"gets http://, one without a path /metrics. An endpoint that does not answer in 2 s is\n"
	"shown down, and the rest still shown.\n"
	"\n"
	"  --metrics URL,...   metrics endpoints, at most 16 (e.g. 127.0.0.1:9464,127.0.0.1:9465)\n"
	"  --interval MS       between refreshes, 100..60000 (default 1000)\n"
	"  --once              one snapshot and exit: two scrapes --interval apart (for the\n"
	"                      rates), the stock topic read to its end\n"
	"  --json              JSON instead of the screen, one object per refresh and line\n"
	"                      (README: its members)\n"
	"\n"
	"On a terminal: q or Ctrl-C quits and the terminal is restored (also on SIGTERM).\n"
	"Exit status: 0, also with endpoints down (they are reported); 1 when the stock topic\n"
	"could not be read (--once: to its end within 15 s) or on an interrupted --once; 2 "
	"usage.\n";

/* ---- options ---------------------------------------------------------------------------- */

/* One endpoint of a --metrics list: "http://" when no scheme, "/metrics" when no path. */
static int add_url(struct top *t, const char *item, size_t n)
{
	while (n && (*item == ' ' || *item == '\t')) {
		item++;
		n--;
	}
	while (n && (item[n - 1] == ' ' || item[n - 1] == '\t'))
		n--;
	if (n == 0)
		return 0;
	if (t->n_urls == SCRAPE_ENDPOINTS_MAX) {
		cli_err("top: more than %d metrics endpoints", SCRAPE_ENDPOINTS_MAX);
		return -1;
	}
	char in[TOP_URL_MAX];
	snprintf(in, sizeof in, "%.*s", (int)n, item);
	const char *scheme = strstr(in, "://") ? "" : "http://";
	const char *host = strstr(in, "://") ? strstr(in, "://") + 3 : in;
	const char *path = strchr(host, '/') ? "" : "/metrics";
	char *out = t->urls[t->n_urls];
	if (n >= sizeof in ||
	    snprintf(out, TOP_URL_MAX, "%s%s%s", scheme, in, path) >= (int)TOP_URL_MAX) {
		cli_err("top: metrics URL longer than %d bytes", TOP_URL_MAX - 1);
		return -1;
	}
	t->n_urls++;
	return 0;
}

static int add_urls(struct top *t, const char *list)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		if (add_url(t, p, n) < 0)
			return -1;
		p += n + (p[n] == ',');
	}
	return 0;
}

/* ---- the stock topic -------------------------------------------------------------------- */

struct stock {
	rd_kafka_t *rk;
	/* By partition: where its records ended when it was assigned (INT64_MAX: not known,
	 * its first end-of-partition event counts), -1 once read that far. */
	int64_t *end;
	int64_t retry_ms; /* when to ask for the topic's partitions again (monotonic) */
};

static int64_t mono_ms(void);

static rd_kafka_t *stock_consumer(flashsale_t *fs, char *err, size_t err_len)
{
	/* No group membership (partitions assigned), no commits; reaching the end of a
	 * partition is an event. */
	static const char *const defaults[] = {"enable.auto.commit",
					       "false",
					       "enable.partition.eof",
					       "true",
					       "fetch.wait.max.ms",
					       "100",
					       NULL,
					       NULL};
	rd_kafka_conf_t *conf =
		fs_kafka_conf(flashsale_config(fs), RD_KAFKA_CONSUMER, defaults, err, err_len);
	char group[64], id[37];
	uuid_t u;
	uuid_generate_random(u);
	uuid_unparse_lower(u, id);
	snprintf(group, sizeof group, "flashsale-top-%s", id);
	if (!conf || rd_kafka_conf_set(conf, "group.id", group, err, err_len) != RD_KAFKA_CONF_OK) {
		if (conf)
			rd_kafka_conf_destroy(conf);
		return NULL;
	}
	/* librdkafka's log lines would land on the screen; its errors come as events. */
	rd_kafka_conf_set_log_cb(conf, NULL);
	rd_kafka_t *rk = fs_kafka_new(RD_KAFKA_CONSUMER, conf, err, err_len);
	if (rk)
		rd_kafka_poll_set_consumer(rk);
	return rk;
}

static void part_read(struct top *t, struct stock *st, int32_t p)
{
	if (p >= 0 && p < t->stock_parts && st->end[p] >= 0) {
		st->end[p] = -1;
		t->stock_read++;
	}
}

/* Where each partition's records end now: the first read to there is "read to its end" (a
 * busy partition may give no end-of-partition event for long). After one failure the rest
 * wait for their event, so that a broker gone quiet costs one timeout, not one each. */
static void stock_ends(struct top *t, struct stock *st)
{
	rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
	for (int i = 0; i < t->stock_parts; i++) {
		int64_t lo = 0, hi = INT64_MAX;
		if (!e)
			e = rd_kafka_query_watermark_offsets(st->rk, t->stock_topic, i, &lo, &hi,
							     TOP_METADATA_MS);
		st->end[i] = e ? INT64_MAX : hi;
		if (!e && hi <= lo)
			part_read(t, st, i); /* nothing to read */
	}
}

/* Learns the partitions of the stock topic and assigns them all from their beginning: 0, or
 * -1 with why in t->stock_error (tried again at the next refresh). */
static int stock_assign(struct top *t, struct stock *st)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *topic = rd_kafka_topic_new(st->rk, t->stock_topic, NULL);
	rd_kafka_resp_err_t e = rd_kafka_metadata(st->rk, 0, topic, &md, TOP_METADATA_MS);
	rd_kafka_topic_destroy(topic);
	if (!e && md->topic_cnt != 1)
		e = RD_KAFKA_RESP_ERR_UNKNOWN;
	else if (!e && (md->topics[0].err || !md->topics[0].partition_cnt))
		e = md->topics[0].err ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
	int n = e ? 0 : md->topics[0].partition_cnt;
	if (md)
		rd_kafka_metadata_destroy(md);
	free(st->end);
	st->end = n ? calloc((size_t)n, sizeof *st->end) : NULL;
	rd_kafka_topic_partition_list_t *l = st->end ? rd_kafka_topic_partition_list_new(n) : NULL;
	for (int i = 0; l && i < n; i++)
		rd_kafka_topic_partition_list_add(l, t->stock_topic, i)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	if (!e && l)
		e = rd_kafka_assign(st->rk, l);
	if (l)
		rd_kafka_topic_partition_list_destroy(l);
	if (e || !l) {
		snprintf(t->stock_error, sizeof t->stock_error, "%s",
			 e ? rd_kafka_err2str(e) : "out of memory");
		return -1;
	}
	t->stock_parts = n;
	t->stock_error[0] = '\0';
	stock_ends(t, st);
	return 0;
}

static void stock_message(struct top *t, struct stock *st, const rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
		part_read(t, st, m->partition);
		return;
	}
	if (m->err) {
		snprintf(t->stock_error, sizeof t->stock_error, "%s", rd_kafka_message_errstr(m));
		return;
	}
	t->stock_records++;
	t->stock_error[0] = '\0';
	skutable_apply(&t->table, m->key, m->key_len, m->payload, m->len);
	if (m->partition >= 0 && m->partition < t->stock_parts && st->end[m->partition] >= 0 &&
	    m->offset + 1 >= st->end[m->partition])
		part_read(t, st, m->partition);
}

/* Reads what the stock topic has: waits up to wait_ms for a first record, then takes the
 * ones already fetched (at most TOP_STOCK_BATCH). */
static void stock_poll(struct top *t, struct stock *st, int wait_ms)
{
	if (!t->stock_parts) {
		/* Not known yet (no broker answered): asked again at most once a second, as
		 * each try may take TOP_METADATA_MS. */
		int64_t now = mono_ms();
		if (now < st->retry_ms || stock_assign(t, st) < 0) {
			st->retry_ms = now < st->retry_ms ? st->retry_ms : now + 1000;
			struct timespec ts = {0, (long)wait_ms * 1000000L};
			nanosleep(&ts, NULL);
			return;
		}
	}
	for (int i = 0; i < TOP_STOCK_BATCH; i++) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(st->rk, i == 0 ? wait_ms : 0);
		if (!m)
			return;
		stock_message(t, st, m);
		rd_kafka_message_destroy(m);
	}
}

static void stock_close(struct stock *st)
{
	if (st->rk) {
		rd_kafka_consumer_close(st->rk);
		rd_kafka_destroy(st->rk);
	}
	free(st->end);
}

/* ---- the terminal and the signals ------------------------------------------------------- */

#define SCREEN_ENTER "\033[?1049h\033[?25l" /* the alternate screen, the cursor hidden */
#define SCREEN_LEAVE "\033[?25h\033[?1049l"

static volatile sig_atomic_t top_quit, top_resized, term_raw, term_screen;
static struct termios term_saved, term_keys; /* as found; as set for the keys */

/* Async-signal-safe: tcsetattr and write only. */
static void term_restore(void)
{
	if (term_screen) {
		term_screen = 0;
		ssize_t n = write(STDOUT_FILENO, SCREEN_LEAVE, sizeof SCREEN_LEAVE - 1);
		(void)n;
	}
	if (term_raw) {
		term_raw = 0;
		tcsetattr(STDIN_FILENO, TCSANOW, &term_saved);
	}
}

static void on_signal(int sig)
{
	if (sig == SIGWINCH) {
		top_resized = 1;
		return;
	}
	/* The loop sees the flag within FETCH_STEP_MS; a second signal means now. */
	if (top_quit) {
		term_restore();
		_exit(128 + sig);
	}
	top_quit = 1;
}

static void on_stop(int sig);

static void signals_catch(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
	sa.sa_handler = on_stop;
	sigaction(SIGTSTP, &sa, NULL);
}

/* Ctrl-Z: the terminal as it was while stopped, the keys and the screen again once continued
 * (every call here is async-signal-safe). */
static void on_stop(int sig)
{
	int raw = term_raw, screen = term_screen, saved = errno;
	term_restore();
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig); /* stopped here until SIGCONT */
	signals_catch();
	if (raw && tcsetattr(STDIN_FILENO, TCSANOW, &term_keys) == 0)
		term_raw = 1;
	if (screen) {
		ssize_t n = write(STDOUT_FILENO, SCREEN_ENTER, sizeof SCREEN_ENTER - 1);
		(void)n;
		term_screen = 1;
	}
	top_resized = 1; /* drawn again */
	errno = saved;
}

/* Keys one at a time, no echo (signals kept: Ctrl-C is SIGINT), and the alternate screen. */
static void term_enter(bool raw, bool screen)
{
	atexit(term_restore); /* whatever path exit() takes */
	if (raw && tcgetattr(STDIN_FILENO, &term_saved) == 0) {
		term_keys = term_saved;
		term_keys.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		term_keys.c_cc[VMIN] = 0;
		term_keys.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSANOW, &term_keys) == 0)
			term_raw = 1;
	}
	if (screen) {
		fputs(SCREEN_ENTER, stdout);
		fflush(stdout);
		term_screen = 1;
	}
}

/* Reads the keys pressed; sets top_quit on q. */
static void keys(void)
{
	if (!term_raw)
		return;
	struct pollfd p = {STDIN_FILENO, POLLIN, 0};
	char buf[64];
	while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
		ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
		if (n <= 0)
			return;
		if (memchr(buf, 'q', (size_t)n) || memchr(buf, 'Q', (size_t)n))
			top_quit = 1;
	}
}

/* ---- a refresh -------------------------------------------------------------------------- */

struct idle_ctx {
	struct top *t;
	struct stock *st;
};

/* Between the steps of a scrape: the keys, and what the stock topic has without waiting. */
static int idle(void *ctx)
{
	struct idle_ctx *c = ctx;
	keys();
	if (!top_quit)
		stock_poll(c->t, c->st, 0);
	return top_quit;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Scrapes every endpoint into t->cur (the last scrape becomes t->prev) and makes the view. 0,
 * or 1 when interrupted. */
static int refresh(struct top *t, struct fetcher *f, struct idle_ctx *ic, int64_t *last_ms)
{
	struct scrape *older = t->prev;
	t->prev = t->cur;
	t->cur = older;
	int64_t started = mono_ms();
	if (t->n_urls && fetcher_round(f, idle, ic) != 0)
		return 1;
	for (int i = 0; i < t->n_urls; i++) {
		const struct fetch_result *r = fetcher_result(f, i);
		if (r->ok) {
			scrape_text(&t->cur[i], r->body, r->len);
		} else {
			scrape_reset(&t->cur[i]);
			snprintf(t->cur[i].error, sizeof t->cur[i].error, "%s", r->error);
		}
	}
	t->seconds = *last_ms >= 0 ? (double)(started - *last_ms) / 1000 : 0;
	t->have_prev = *last_ms >= 0;
	*last_ms = started;
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	t->time_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
	scrape_view(t->cur, t->have_prev ? t->prev : NULL, t->n_urls, t->seconds, t->group,
		    t->intents_topic, &t->view);
	return 0;
}

/* Waits until the monotonic deadline, reading the stock topic and the keys. With redraw, it
 * returns early (true) when the screen should be drawn again: resized, continued after a
 * stop, or the stock topic read to where it ended at the start. */
static bool wait_until(struct top *t, struct stock *st, int64_t deadline, bool redraw)
{
	for (int64_t now = mono_ms(); now < deadline && !top_quit; now = mono_ms()) {
		int64_t left = deadline - now;
		int read = t->stock_read;
		stock_poll(t, st, (int)(left < FETCH_STEP_MS ? left : FETCH_STEP_MS));
		keys();
		if (redraw &&
		    (top_resized || (read < t->stock_parts && t->stock_read == t->stock_parts)))
			return true;
	}
	return false;
}

/* ---- output ----------------------------------------------------------------------------- */

static void print_json(const struct top *t)
{
	json_t *o = top_json(t);
	char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	if (s)
		printf("%s\n", s);
	else
		cli_err("top: %s", "out of memory");
	free(s);
	json_decref(o);
	fflush(stdout);
}

static void print_screen(const struct top *t, bool ansi)
{
	struct winsize ws = {0};
	int width = 160, height = 500; /* not a terminal: everything, in wide lines */
	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col) {
		width = ws.ws_col;
		/* The last row stays empty: a newline there would scroll the screen. */
		height = ansi ? ws.ws_row - 1 : height;
	}
	struct fs_buf b = {0};
	top_screen(t, width, height > 4 ? height : 4, ansi, &b);
	if (!ansi)
		fs_buf_add(&b, "\n", 1);
	fwrite(fs_buf_cstr(&b), 1, b.len, stdout);
	fflush(stdout);
	fs_buf_free(&b);
}

static void show(const struct top *t, bool json, bool ansi)
{
	if (json)
		print_json(t);
	else
		print_screen(t, ansi);
}

/* ---- the loops -------------------------------------------------------------------------- */

/* --once: two scrapes an interval apart, the stock topic read to its end meanwhile. */
static int top_once(struct top *t, struct fetcher *f, struct stock *st, bool json)
{
	struct idle_ctx ic = {t, st};
	int64_t last = -1, start = mono_ms();
	if (refresh(t, f, &ic, &last) != 0)
		return 1;
	wait_until(t, st, start + t->interval_ms, false);
	if (top_quit || refresh(t, f, &ic, &last) != 0)
		return 1;
	int64_t deadline = start + TOP_STOCK_WAIT_MS;
	while (!top_quit && (!t->stock_parts || t->stock_read < t->stock_parts) &&
	       mono_ms() < deadline)
		wait_until(t, st, mono_ms() + FETCH_STEP_MS, false);
	if (top_quit)
		return 1;
	bool read = t->stock_parts && t->stock_read == t->stock_parts;
	if (!read && !t->stock_error[0])
		snprintf(t->stock_error, sizeof t->stock_error,
			 "not read to its end within %d s (%d of %d partitions)",
			 TOP_STOCK_WAIT_MS / 1000, t->stock_read, t->stock_parts);
	show(t, json, false);
	return read ? 0 : 1;
}

static int top_live(struct top *t, struct fetcher *f, struct stock *st, bool json, bool ansi)
{
	struct idle_ctx ic = {t, st};
	int64_t last = -1;
	while (!top_quit) {
		int64_t start = mono_ms();
		if (refresh(t, f, &ic, &last) != 0)
			break;
		show(t, json, ansi);
		while (wait_until(t, st, start + t->interval_ms, ansi) && !top_quit) {
			top_resized = 0;
			show(t, json, ansi);
		}
	}
	return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

static int top_args(struct top *t, const struct fs_config *cfg, const char *metrics, int argc,
		    char **argv)
{
	if (add_urls(t, metrics ? metrics : cfg->top_metrics) < 0)
		return 2;
	t->skus = (const char *const *)argv + optind;
	t->n_skus = argc - optind;
	for (int i = 0; i < t->n_skus; i++)
		if (!fs_sku_valid(t->skus[i])) {
			cli_err("top: '%s' is not a SKU (1 to %d of A-Z a-z 0-9 - _ . :)",
				t->skus[i], FS_SKU_LEN_MAX);
			return 2;
		}
	t->stock_topic = cfg->topic_stock;
	t->group = cfg->group;
	t->intents_topic = cfg->topic_intents;
	t->cur = calloc(SCRAPE_ENDPOINTS_MAX, sizeof *t->cur);
	t->prev = calloc(SCRAPE_ENDPOINTS_MAX, sizeof *t->prev);
	if (!t->cur || !t->prev) {
		cli_err("top: %s", "out of memory");
		return 1;
	}
	return -1;
}

static int top_run(flashsale_t *fs, struct top *t, bool once, bool json)
{
	char err[512];
	struct stock st = {stock_consumer(fs, err, sizeof err), NULL, 0};
	if (!st.rk) {
		cli_err("top: kafka: %s", err);
		return 1;
	}
	const char *urls[SCRAPE_ENDPOINTS_MAX];
	for (int i = 0; i < t->n_urls; i++)
		urls[i] = t->urls[i];
	struct fetcher *f = fetcher_new(urls, t->n_urls, TOP_HTTP_TIMEOUT_MS);
	int rc = 1;
	if (!f) {
		cli_err("top: %s", "out of memory");
	} else {
		signals_catch();
		bool ansi = !once && !json && isatty(STDOUT_FILENO);
		term_enter(!once && isatty(STDIN_FILENO), ansi);
		t->keys = term_raw;
		stock_poll(t, &st, 0);
		rc = once ? top_once(t, f, &st, json) : top_live(t, f, &st, json, ansi);
		term_restore();
	}
	fetcher_free(f);
	stock_close(&st);
	return rc;
}

int cli_top(flashsale_t *fs, int argc, char **argv)
{
	const char *metrics = NULL;
	bool once = false, json = false;
	static struct top t; /* the view's partitions and the scrapes: too large for a stack */
	t.interval_ms = 1000;
	const struct cli_opt spec[] = {
		{"metrics", CLI_STR, &metrics},
		{"interval", CLI_INT, &t.interval_ms, TOP_INTERVAL_MS_MIN, TOP_INTERVAL_MS_MAX},
		{"once", CLI_FLAG, &once},
		{"json", CLI_FLAG, &json},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_top, spec, 0, TOP_SKUS_ARGS_MAX);
	if (rc >= 0)
		return rc;
	rc = top_args(&t, flashsale_config(fs), metrics, argc, argv);
	if (rc < 0) {
		skutable_init(&t.table);
		curl_global_init(CURL_GLOBAL_DEFAULT);
		rc = top_run(fs, &t, once, json);
		curl_global_cleanup();
		skutable_free(&t.table);
	}
	free(t.cur);
	free(t.prev);
	return rc;
}
