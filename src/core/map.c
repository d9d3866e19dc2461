/* map.c: open-addressing hash index (see map.h). */
#include "core/map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAP_CAP_MIN = 16 };

/* murmur3's 64-bit finaliser: a bijection whose every output bit depends on every input bit. */
static uint64_t fmix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

uint64_t fs_hash_bytes(const void *data, size_t n, uint64_t seed)
{
	/* Eight bytes a step, one multiply each, then the finaliser so that similar keys spread
	 * over the slots. The seed goes through the finaliser first, so that it cannot cancel
	 * against the key's first bytes (hash(k, 0) == hash(k ^ 1, 1) when it is merely xored
	 * in); the length is mixed in so that trailing NUL bytes count. Byte by byte (FNV-1a)
	 * it was 5% of the worker's instructions: every record hashes its 36-byte intent id three
	 * times (callgrind). */
	const unsigned char *p = data;
	uint64_t h = fmix64(seed ^ 14695981039346656037ULL) ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	if (n > 0) {
		uint64_t w = 0;
		memcpy(&w, p, n);
		h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
	}
	return fmix64(h);
}

static uint64_t slot_hash(uint64_t h)
{
	return h ? h : 1; /* 0 is the empty marker */
}

uint32_t fs_map_get(const struct fs_map *m, uint64_t hash, fs_map_eq_fn eq, const void *ctx,
		    const void *key)
{
	if (m->cap == 0)
		return FS_MAP_NONE;
	hash = slot_hash(hash);
	uint32_t mask = m->cap - 1;
	for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
		if (m->hashes[i] == 0)
			return FS_MAP_NONE;
		if (m->hashes[i] == hash && eq(ctx, m->values[i], key))
			return m->values[i];
	}
}

static void insert_slot(uint64_t *hashes, uint32_t *values, uint32_t cap, uint64_t hash,
			uint32_t value)
{
	uint32_t mask = cap - 1;
	uint32_t i = (uint32_t)hash & mask;
	while (hashes[i] != 0)
		i = (i + 1) & mask;
	hashes[i] = hash;
	values[i] = value;
}

static int grow(struct fs_map *m)
{
	uint32_t cap = m->cap ? m->cap * 2 : MAP_CAP_MIN;
	if (cap < m->cap)
		return -ENOMEM;
	uint64_t *hashes = calloc(cap, sizeof *hashes);
	uint32_t *values = calloc(cap, sizeof *values);
	if (!hashes || !values) {
		free(hashes);
		free(values);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->cap; i++)
		if (m->hashes[i])
			insert_slot(hashes, values, cap, m->hashes[i], m->values[i]);
	free(m->hashes);
	free(m->values);
	m->hashes = hashes;
	m->values = values;
	m->cap = cap;
	return 0;
}

int fs_map_put(struct fs_map *m, uint64_t hash, uint32_t value)
{
	if ((uint64_t)(m->len + 1) * 2 > m->cap) {
		int rc = grow(m);
		if (rc < 0)
			return rc;
	}
	insert_slot(m->hashes, m->values, m->cap, slot_hash(hash), value);
	m->len++;
	return 0;
}

void fs_map_clear(struct fs_map *m)
{
	if (m->cap)
		memset(m->hashes, 0, (size_t)m->cap * sizeof *m->hashes);
	m->len = 0;
}

void fs_map_free(struct fs_map *m)
{
	free(m->hashes);
	free(m->values);
	memset(m, 0, sizeof *m);
}
