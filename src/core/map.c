/* map.c: open-addressing hash index (see map.h). */
#include "core/map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAP_CAP_MIN = 16 };

/* The process's key (fs_hash_key); until it is set, a fixed one. */
static uint64_t hash_k0 = 0x0706050403020100ULL, hash_k1 = 0x0f0e0d0c0b0a0908ULL;

void fs_hash_key(uint64_t k0, uint64_t k1)
{
	hash_k0 = k0;
	hash_k1 = k1;
}

static inline uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static inline void sipround(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = rotl(v[1], 13) ^ v[0];
	v[0] = rotl(v[0], 32);
	v[2] += v[3];
	v[3] = rotl(v[3], 16) ^ v[2];
	v[0] += v[3];
	v[3] = rotl(v[3], 21) ^ v[0];
	v[2] += v[1];
	v[1] = rotl(v[1], 17) ^ v[2];
	v[2] = rotl(v[2], 32);
}

/* n <= 8 bytes as a little-endian word. */
static inline uint64_t le64(const unsigned char *p, size_t n)
{
	uint64_t w = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (n)
		memcpy(&w, p, n);
#else
	for (size_t i = 0; i < n; i++)
		w |= (uint64_t)p[i] << (8 * i);
#endif
	return w;
}

static inline uint64_t siphash(uint64_t k0, uint64_t k1, int c, int d, const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t v[4] = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
			 k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
	uint64_t last = (uint64_t)n << 56;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t m = le64(p, 8);
		v[3] ^= m;
		for (int i = 0; i < c; i++)
			sipround(v);
		v[0] ^= m;
	}
	last |= le64(p, n);
	v[3] ^= last;
	for (int i = 0; i < c; i++)
		sipround(v);
	v[0] ^= last;
	v[2] ^= 0xff;
	for (int i = 0; i < d; i++)
		sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t fs_siphash(uint64_t k0, uint64_t k1, int c, int d, const void *data, size_t n)
{
	return siphash(k0, k1, c, d, data, n);
}

uint64_t fs_hash_bytes(const void *data, size_t n, uint64_t seed)
{
	/* The seed tells the maps apart: folded into the key's first word, mixed so that
	 * nearby seeds give unrelated keys. */
	uint64_t s = (seed + 1) * 0x9e3779b97f4a7c15ULL;
	return siphash(hash_k0 ^ (s ^ (s >> 31)), hash_k1, 1, 3, data, n);
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
