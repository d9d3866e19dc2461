/* buf.h: a growable byte buffer, reused across batches (cleared, not freed), and the
 * Postgres array-literal and COPY binary writers the batch statements use. Allocation failure is
 * sticky: fs_buf_ok() tells whether everything appended so far fits. Thread: one owner. */
#ifndef FS_BUF_H
#define FS_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fs_buf {
	char *data; /* always NUL-terminated when cap > 0 */
	size_t len, cap;
	bool failed;
};

void fs_buf_clear(struct fs_buf *b);
void fs_buf_free(struct fs_buf *b);
bool fs_buf_ok(const struct fs_buf *b);
/* Makes room for need more bytes (and the NUL); false once an allocation has failed. */
bool fs_buf_grow(struct fs_buf *b, size_t need);

/* Inline: every field of every reply and COPY row is an append, most of them of a string
 * literal, whose strlen the compiler then folds (callgrind: a reply went from 1,969 to
 * 1,026 instructions). */
static inline void fs_buf_add(struct fs_buf *b, const void *data, size_t n)
{
	if ((b->failed || b->len + n + 1 > b->cap) && !fs_buf_grow(b, n))
		return;
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static inline void fs_buf_str(struct fs_buf *b, const char *s)
{
	fs_buf_add(b, s, strlen(s));
}

void fs_buf_int(struct fs_buf *b, int64_t v); /* decimal, no printf */
void fs_buf_printf(struct fs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *fs_buf_cstr(struct fs_buf *b);

/* A JSON string: s quoted, with " and \ escaped and control bytes as \u00XX (NULL writes
 * null). */
void fs_buf_json_str(struct fs_buf *b, const char *s);
/* A member after the first of a JSON object: ,"name":v */
void fs_buf_json_int(struct fs_buf *b, const char *name, int64_t v);

/* Array literals: call fs_arr_begin, then one fs_arr_* per element, then fs_arr_end. */
void fs_arr_begin(struct fs_buf *b);
void fs_arr_int(struct fs_buf *b, int64_t v);
void fs_arr_text(struct fs_buf *b, const char *s); /* NULL writes NULL */
void fs_arr_end(struct fs_buf *b);

/* A hex digit's value (either case), or -1. */
int fs_hexval(char c);

/* COPY binary format (the Postgres manual, "COPY", section "Binary Format"): fs_copy_begin,
 * then per row fs_copy_row with its field count and one fs_copy_* per field, in the column
 * order of the COPY and with each column's exact type (int2, int4, int8, bool, text, uuid:
 * the server reads the bytes as that type), then fs_copy_end. The server skips parsing the
 * fields' text: a fifth less COPY time for decision rows. */
void fs_copy_begin(struct fs_buf *b);
void fs_copy_row(struct fs_buf *b, int nfields);
void fs_copy_null(struct fs_buf *b);
void fs_copy_int2(struct fs_buf *b, int16_t v);
void fs_copy_int4(struct fs_buf *b, int32_t v);
void fs_copy_int8(struct fs_buf *b, int64_t v);
void fs_copy_bool(struct fs_buf *b, bool v);
void fs_copy_text(struct fs_buf *b, const char *s); /* NULL writes NULL */
/* canon: the 36-character form (8-4-4-4-12 hex digits, as fs_uuid_canon writes it). False,
 * and nothing written, if it is not. */
bool fs_copy_uuid(struct fs_buf *b, const char *canon);
/* As fs_copy_uuid, NULL when canon is not canonical: the COPY's not-null violation then names
 * the column in its error (the ids are canonical: record.c validates every one). */
void fs_copy_id(struct fs_buf *b, const char *canon);
void fs_copy_end(struct fs_buf *b);
/* A field whose bytes are appended after it opens (a JSON text, say): fs_copy_open returns
 * where its length goes, fs_copy_close writes it there once the bytes are in. */
size_t fs_copy_open(struct fs_buf *b);
void fs_copy_close(struct fs_buf *b, size_t at);

#endif
