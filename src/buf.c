/* buf.c: growable buffer and Postgres array literals (see fs_buf.h). */
#include "fs_buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(struct fs_buf *b, size_t need)
{
	if (b->failed)
		return false;
	if (b->len + need + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + need + 1)
		cap *= 2;
	char *d = realloc(b->data, cap);
	if (!d) {
		b->failed = true;
		return false;
	}
	b->data = d;
	b->data[b->len] = '\0'; /* a fresh buffer is an empty string, as promised */
	b->cap = cap;
	return true;
}

void fs_buf_clear(struct fs_buf *b)
{
	b->len = 0;
	b->failed = false;
	if (b->cap)
		b->data[0] = '\0';
}

void fs_buf_free(struct fs_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof *b);
}

bool fs_buf_ok(const struct fs_buf *b)
{
	return !b->failed;
}

void fs_buf_add(struct fs_buf *b, const void *data, size_t n)
{
	if (!grow(b, n))
		return;
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void fs_buf_str(struct fs_buf *b, const char *s)
{
	fs_buf_add(b, s, strlen(s));
}

void fs_buf_printf(struct fs_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void fs_buf_int(struct fs_buf *b, int64_t v)
{
	/* Hot path (every array element and reply field): no printf. */
	char tmp[24];
	char *e = tmp + sizeof tmp, *p = e;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	fs_buf_add(b, p, (size_t)(e - p));
}

const char *fs_buf_cstr(struct fs_buf *b)
{
	if (!grow(b, 0))
		return "";
	return b->data;
}

void fs_arr_begin(struct fs_buf *b)
{
	fs_buf_add(b, "{", 1);
}

static void comma(struct fs_buf *b)
{
	if (b->len > 0 && b->data[b->len - 1] != '{')
		fs_buf_add(b, ",", 1);
}

void fs_arr_int(struct fs_buf *b, int64_t v)
{
	comma(b);
	fs_buf_int(b, v);
}

void fs_arr_text(struct fs_buf *b, const char *s)
{
	comma(b);
	if (!s) {
		fs_buf_add(b, "NULL", 4);
		return;
	}
	/* Quoted element: only '"' and '\' need escaping inside quotes; the spans between
	 * them are copied whole. */
	fs_buf_add(b, "\"", 1);
	for (;;) {
		size_t n = strcspn(s, "\"\\");
		fs_buf_add(b, s, n);
		if (!s[n])
			break;
		fs_buf_add(b, "\\", 1);
		fs_buf_add(b, s + n, 1);
		s += n + 1;
	}
	fs_buf_add(b, "\"", 1);
}

void fs_arr_end(struct fs_buf *b)
{
	fs_buf_add(b, "}", 1);
}
