/* skutable.c: the latest stock record per SKU (see skutable.h). */
#include "cli/skutable.h"

#include "core/record.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SKUTABLE_SEED = 0x70ed }; /* this table's hashes, apart from other maps' */

void skutable_init(struct skutable *t)
{
	memset(t, 0, sizeof *t);
}

void skutable_free(struct skutable *t)
{
	free(t->rows);
	fs_map_free(&t->index);
	memset(t, 0, sizeof *t);
}

static bool row_is(const void *ctx, uint32_t value, const void *key)
{
	const struct skutable *t = ctx;
	return strcmp(t->rows[value].sku, key) == 0;
}

static uint64_t sku_hash(const char *sku)
{
	return fs_hash_bytes(sku, strlen(sku), SKUTABLE_SEED);
}

const struct sku_row *skutable_get(const struct skutable *t, const char *sku)
{
	uint32_t i = fs_map_get(&t->index, sku_hash(sku), row_is, t, sku);
	return i == FS_MAP_NONE ? NULL : &t->rows[i];
}

/* A stock record's fields into r; false unless it is an object whose sku is `sku`, with a
 * status and integer counters. */
static bool parse_row(const char *sku, const void *payload, size_t len, struct sku_row *r)
{
	json_t *o = json_loadb(payload, len, JSON_REJECT_DUPLICATES, NULL);
	bool ok = json_is_object(o);
	const char *s = ok ? json_string_value(json_object_get(o, "sku")) : NULL;
	const char *st = ok ? json_string_value(json_object_get(o, "status")) : NULL;
	ok = s && st && strcmp(s, sku) == 0 && strlen(st) < sizeof r->status;
	const char *names[] = {"supply", "available", "held", "sold", "offset", "partition"};
	int64_t v[6] = {0};
	for (int i = 0; ok && i < 6; i++) {
		json_t *n = json_object_get(o, names[i]);
		ok = json_is_integer(n);
		v[i] = ok ? json_integer_value(n) : 0;
	}
	if (ok) {
		snprintf(r->sku, sizeof r->sku, "%s", sku);
		snprintf(r->status, sizeof r->status, "%s", st);
		r->supply = v[0], r->available = v[1], r->held = v[2], r->sold = v[3];
		r->offset = v[4];
		ok = v[5] >= 0 && v[5] <= INT32_MAX;
		r->partition = (int32_t)v[5];
	}
	json_decref(o);
	return ok;
}

/* A row for a SKU not seen before; -ENOSPC past the bound, -ENOMEM. */
static int add_row(struct skutable *t, const struct sku_row *r)
{
	if (t->n == SKUTABLE_MAX)
		return -ENOSPC;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 64;
		if (cap > SKUTABLE_MAX)
			cap = SKUTABLE_MAX;
		struct sku_row *rows = realloc(t->rows, cap * sizeof *rows);
		if (!rows)
			return -ENOMEM;
		t->rows = rows;
		t->cap = cap;
	}
	if (fs_map_put(&t->index, sku_hash(r->sku), t->n) < 0)
		return -ENOMEM;
	t->rows[t->n++] = *r;
	return 1;
}

int skutable_apply(struct skutable *t, const void *key, size_t key_len, const void *payload,
		   size_t len)
{
	char sku[SKUTABLE_SKU_MAX];
	struct sku_row r;
	bool ok = key && key_len > 0 && key_len < sizeof sku && !memchr(key, '\0', key_len) &&
		  payload;
	if (ok) {
		memcpy(sku, key, key_len);
		sku[key_len] = '\0';
		ok = fs_sku_valid(sku) && parse_row(sku, payload, len, &r);
	}
	if (!ok) {
		t->bad++;
		return -EINVAL;
	}
	uint32_t i = fs_map_get(&t->index, sku_hash(sku), row_is, t, sku);
	if (i != FS_MAP_NONE && t->rows[i].partition == r.partition &&
	    r.offset < t->rows[i].offset) {
		t->older++;
		return 0;
	}
	r.changed = ++t->kept;
	if (i != FS_MAP_NONE) {
		t->rows[i] = r;
		return 1;
	}
	int rc = add_row(t, &r);
	if (rc == -ENOSPC)
		t->untracked++;
	return rc;
}

/* ---- picking the rows to show --------------------------------------------------------------- */

/* out[0..n) is a min-heap on `changed`: the oldest of the rows kept so far on top. */
static void heap_down(const struct sku_row **h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && h[l]->changed < h[m]->changed)
			m = l;
		if (r < n && h[r]->changed < h[m]->changed)
			m = r;
		if (m == i)
			return;
		const struct sku_row *x = h[i];
		h[i] = h[m];
		h[m] = x;
		i = m;
	}
}

static int newest_first(const void *a, const void *b)
{
	const struct sku_row *x = *(const struct sku_row *const *)a,
			     *y = *(const struct sku_row *const *)b;
	return x->changed < y->changed ? 1 : x->changed > y->changed ? -1 : 0;
}

/* The max most recently changed rows, newest first. */
static int pick_newest(const struct skutable *t, int max, const struct sku_row **out)
{
	int n = 0;
	for (uint32_t i = 0; i < t->n && max > 0; i++) {
		const struct sku_row *r = &t->rows[i];
		if (n < max) {
			out[n++] = r;
			if (n == max) /* heapify once full */
				for (int k = n / 2 - 1; k >= 0; k--)
					heap_down(out, n, k);
		} else if (r->changed > out[0]->changed) {
			out[0] = r;
			heap_down(out, n, 0);
		}
	}
	qsort(out, (size_t)n, sizeof *out, newest_first);
	return n;
}

static int pick_named(const struct skutable *t, const char *const *names, int n_names, int max,
		      const struct sku_row **out)
{
	int n = 0;
	for (int k = 0; k < n_names && n < max; k++) {
		const struct sku_row *r = skutable_get(t, names[k]);
		bool twice = false;
		for (int j = 0; r && j < n; j++)
			twice = twice || out[j] == r;
		if (r && !twice)
			out[n++] = r;
	}
	return n;
}

static void rest_add(struct sku_rest *s, const struct sku_row *r, int sign)
{
	s->skus += sign;
	s->supply += sign * r->supply;
	s->available += sign * r->available;
	s->held += sign * r->held;
	s->sold += sign * r->sold;
	s->sold_out += sign * (strcmp(r->status, "sold_out") == 0);
	s->closed += sign * (strcmp(r->status, "closed") == 0);
}

int skutable_pick(const struct skutable *t, const char *const *names, int n_names, int max,
		  const struct sku_row **out, struct sku_rest *rest)
{
	int n = n_names > 0 ? pick_named(t, names, n_names, max, out) : pick_newest(t, max, out);
	memset(rest, 0, sizeof *rest);
	for (uint32_t i = 0; i < t->n; i++)
		rest_add(rest, &t->rows[i], 1);
	for (int k = 0; k < n; k++)
		rest_add(rest, out[k], -1);
	return n;
}
