/* fs_buf.h: a growable byte buffer, reused across batches (cleared, not freed), and the
 * Postgres array-literal writers the batch statements use. Allocation failure is sticky:
 * fs_buf_ok() tells whether everything appended so far fits. Thread: one owner. */
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
 * 1,026 instructions, docs/PERFORMANCE.md item 30). */
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

/* Array literals: call fs_arr_begin, then one fs_arr_* per element, then fs_arr_end. */
void fs_arr_begin(struct fs_buf *b);
void fs_arr_int(struct fs_buf *b, int64_t v);
void fs_arr_text(struct fs_buf *b, const char *s); /* NULL writes NULL */
void fs_arr_end(struct fs_buf *b);

#endif
