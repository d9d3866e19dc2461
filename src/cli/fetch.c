/* fetch.c: bounded GETs of several URLs at once on libcurl (see fetch.h). */
#include "cli/fetch.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct transfer {
	char *url;
	CURL *easy;
	char *buf; /* grows to FETCH_BODY_MAX + 1 at most */
	size_t len, cap;
	bool too_large;
	struct fetch_result res;
};

struct fetcher {
	CURLM *multi;
	int n, timeout_ms;
	struct transfer *t;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct transfer *t = ctx;
	size_t n = size * nmemb;
	if (n > FETCH_BODY_MAX - t->len) {
		t->too_large = true;
		return 0; /* libcurl ends the transfer: CURLE_WRITE_ERROR */
	}
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 16384;
		while (cap < t->len + n + 1)
			cap *= 2;
		char *b = realloc(t->buf, cap);
		if (!b)
			return 0;
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, data, n);
	t->len += n;
	return n;
}

static bool setup(struct transfer *t, int timeout_ms)
{
	t->easy = curl_easy_init();
	if (!t->easy)
		return false;
	CURL *e = t->easy;
	bool ok = curl_easy_setopt(e, CURLOPT_URL, t->url) == CURLE_OK;
	/* No signals (libcurl's resolver timeout would use SIGALRM); no file:// or others. */
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(timeout_ms < FETCH_CONNECT_MS ? timeout_ms : FETCH_CONNECT_MS));
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "flashsale-top");
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(e, CURLOPT_PRIVATE, t);
	return ok;
}

struct fetcher *fetcher_new(const char *const *urls, int n, int timeout_ms)
{
	struct fetcher *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->n = n;
	f->timeout_ms = timeout_ms;
	f->multi = curl_multi_init();
	f->t = calloc((size_t)(n > 0 ? n : 1), sizeof *f->t);
	bool ok = f->multi && f->t;
	for (int i = 0; ok && i < n; i++) {
		f->t[i].url = strdup(urls[i]);
		ok = f->t[i].url && setup(&f->t[i], timeout_ms);
	}
	if (!ok) {
		fetcher_free(f);
		return NULL;
	}
	return f;
}

void fetcher_free(struct fetcher *f)
{
	if (!f)
		return;
	for (int i = 0; f->t && i < f->n; i++) {
		if (f->t[i].easy) {
			curl_multi_remove_handle(f->multi, f->t[i].easy);
			curl_easy_cleanup(f->t[i].easy);
		}
		free(f->t[i].url);
		free(f->t[i].buf);
	}
	free(f->t);
	if (f->multi)
		curl_multi_cleanup(f->multi);
	free(f);
}

/* How transfer t ended, into its result. */
static void finish(struct transfer *t, CURLcode rc)
{
	struct fetch_result *r = &t->res;
	long status = 0;
	curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
	r->ok = false;
	if (t->too_large)
		snprintf(r->error, sizeof r->error, "answer larger than %d bytes", FETCH_BODY_MAX);
	else if (rc != CURLE_OK)
		snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(rc));
	else if (status != 200)
		snprintf(r->error, sizeof r->error, "HTTP status %ld", status);
	else
		r->ok = true;
	if (t->buf)
		t->buf[t->len] = '\0';
	r->body = t->buf ? t->buf : "";
	r->len = t->len;
}

static void start(struct fetcher *f)
{
	for (int i = 0; i < f->n; i++) {
		struct transfer *t = &f->t[i];
		t->len = 0;
		t->too_large = false;
		t->res = (struct fetch_result){.body = ""};
		snprintf(t->res.error, sizeof t->res.error, "%s", "no answer yet");
		curl_multi_add_handle(f->multi, t->easy);
	}
}

/* Takes the results of the transfers that ended. */
static void collect(struct fetcher *f)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(f->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct transfer *t = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
		CURLcode rc = m->data.result;
		curl_multi_remove_handle(f->multi, m->easy_handle); /* m is freed here */
		if (t)
			finish(t, rc);
	}
}

int fetcher_round(struct fetcher *f, int (*idle)(void *ctx), void *ctx)
{
	start(f);
	int running = f->n, stop = 0;
	while (running > 0) {
		if (curl_multi_perform(f->multi, &running) != CURLM_OK)
			break;
		collect(f);
		if (running == 0)
			break;
		if (idle && (stop = idle(ctx)) != 0)
			break;
		curl_multi_poll(f->multi, NULL, 0, FETCH_STEP_MS, NULL);
	}
	/* Whatever did not end (abandoned, or the multi handle failed) is taken out, so that the
	 * next round starts it again; its result says it did not answer. */
	for (int i = 0; i < f->n; i++)
		curl_multi_remove_handle(f->multi, f->t[i].easy);
	return stop ? 1 : 0;
}

const struct fetch_result *fetcher_result(const struct fetcher *f, int i)
{
	return &f->t[i].res;
}
