/* buf.c: growable buffer and Postgres array literals (see buf.h). */
#include "core/buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool fs_buf_grow(struct fs_buf *b, size_t need)
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

void fs_buf_printf(struct fs_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !fs_buf_grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void fs_buf_int(struct fs_buf *b, int64_t v)
{
	/* Hot path (every array element, COPY field and reply number): no printf, and two
	 * digits a step, many numbers here being 13-digit millisecond times (callgrind: 152 ->
	 * 105 instructions a call on average). */
	static const char pairs[201] = "0001020304050607080910111213141516171819"
				       "2021222324252627282930313233343536373839"
				       "4041424344454647484950515253545556575859"
				       "6061626364656667686970717273747576777879"
				       "8081828384858687888990919293949596979899";
	char tmp[24];
	char *e = tmp + sizeof tmp, *p = e;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	while (u >= 100) {
		p -= 2;
		memcpy(p, pairs + (u % 100) * 2, 2);
		u /= 100;
	}
	if (u >= 10) {
		p -= 2;
		memcpy(p, pairs + u * 2, 2);
	} else {
		*--p = (char)('0' + u);
	}
	if (v < 0)
		*--p = '-';
	fs_buf_add(b, p, (size_t)(e - p));
}

const char *fs_buf_cstr(struct fs_buf *b)
{
	if (!fs_buf_grow(b, 0))
		return "";
	return b->data;
}

void fs_buf_json_str(struct fs_buf *b, const char *s)
{
	if (!s) {
		fs_buf_add(b, "null", 4);
		return;
	}
	fs_buf_add(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			fs_buf_add(b, "\\", 1);
			fs_buf_add(b, s, 1);
		} else if (c < 0x20) {
			static const char hex[] = "0123456789abcdef";
			char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			fs_buf_add(b, u, 6);
		} else {
			fs_buf_add(b, s, 1);
		}
	}
	fs_buf_add(b, "\"", 1);
}

void fs_buf_json_int(struct fs_buf *b, const char *name, int64_t v)
{
	fs_buf_str(b, ",\"");
	fs_buf_str(b, name);
	fs_buf_str(b, "\":");
	fs_buf_int(b, v);
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

/* ---- COPY binary format ---------------------------------------------------------------- */

static void be(struct fs_buf *b, uint64_t v, int bytes)
{
	unsigned char o[8];
	for (int i = bytes - 1; i >= 0; i--, v >>= 8)
		o[i] = (unsigned char)(v & 0xff);
	fs_buf_add(b, o, (size_t)bytes);
}

void fs_copy_begin(struct fs_buf *b)
{
	/* signature, flags (no OIDs), header extension length */
	static const char head[] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0";
	fs_buf_add(b, head, sizeof head - 1);
}

void fs_copy_row(struct fs_buf *b, int nfields)
{
	be(b, (uint16_t)nfields, 2);
}

void fs_copy_null(struct fs_buf *b)
{
	be(b, UINT32_MAX, 4); /* length -1 */
}

void fs_copy_int2(struct fs_buf *b, int16_t v)
{
	be(b, 2, 4);
	be(b, (uint16_t)v, 2);
}

void fs_copy_int4(struct fs_buf *b, int32_t v)
{
	be(b, 4, 4);
	be(b, (uint32_t)v, 4);
}

void fs_copy_int8(struct fs_buf *b, int64_t v)
{
	be(b, 8, 4);
	be(b, (uint64_t)v, 8);
}

void fs_copy_bool(struct fs_buf *b, bool v)
{
	be(b, 1, 4);
	fs_buf_add(b, v ? "\1" : "\0", 1);
}

size_t fs_copy_open(struct fs_buf *b)
{
	size_t at = b->len;
	be(b, 0, 4);
	return at;
}

void fs_copy_close(struct fs_buf *b, size_t at)
{
	if (b->failed || at + 4 > b->len)
		return;
	uint64_t n = b->len - at - 4;
	for (int i = 3; i >= 0; i--, n >>= 8)
		b->data[at + (size_t)i] = (char)(n & 0xff);
}

void fs_copy_text(struct fs_buf *b, const char *s)
{
	if (!s) {
		fs_copy_null(b);
		return;
	}
	size_t n = strlen(s);
	be(b, (uint32_t)n, 4);
	fs_buf_add(b, s, n);
}

int fs_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Not libuuid's uuid_parse: its strtoul per byte pair is what record.c's own check of the ids
 * was written to avoid (it was a visible part of parsing a record under callgrind), and here
 * the input is already canonical. */
bool fs_copy_uuid(struct fs_buf *b, const char *canon)
{
	unsigned char u[16];
	int n = 0;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (canon[i] != '-')
				return false;
			continue;
		}
		int hi = fs_hexval(canon[i]), lo = hi < 0 ? -1 : fs_hexval(canon[i + 1]);
		if (lo < 0)
			return false;
		u[n++] = (unsigned char)(hi << 4 | lo);
		i++;
	}
	if (canon[36] != '\0')
		return false;
	be(b, 16, 4);
	fs_buf_add(b, u, sizeof u);
	return true;
}

void fs_copy_id(struct fs_buf *b, const char *canon)
{
	if (!fs_copy_uuid(b, canon))
		fs_copy_null(b);
}

void fs_copy_end(struct fs_buf *b)
{
	be(b, UINT16_MAX, 2); /* field count -1: the trailer */
}
