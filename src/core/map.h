/* map.h: an open-addressing hash index from a 64-bit key hash to a uint32 value.
 *
 * The map stores only hashes and values; the caller keeps the keys (in its own arrays) and
 * passes an equality callback, so one map type serves SKUs and buyers without copying keys.
 * No deletion (state is dropped whole). Grows by doubling at half load. Iteration order is
 * never used by callers (determinism). Thread: one owner. */
#ifndef FS_MAP_H
#define FS_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FS_MAP_NONE UINT32_MAX

struct fs_map {
	uint64_t *hashes; /* 0 marks an empty slot */
	uint32_t *values;
	uint32_t cap; /* a power of two, or 0 */
	uint32_t len;
};

typedef bool (*fs_map_eq_fn)(const void *ctx, uint32_t value, const void *key);

/* The maps' hash: SipHash-1-3 (Aumasson and Bernstein's keyed hash, CPython's and Rust's for
 * their hash tables) of the bytes under the process's key, the seed telling apart maps that
 * hash alike keys. Keys come from the web tier: with a fixed public hash, ids crafted to
 * share a slot make every probe walk a long chain (issue 28's review measured 12 s of the
 * main thread for 150,000 such intent ids). The key is fixed until fs_hash_key sets one: the
 * programs set a random one at start (src/io/entropy.c), the tests keep the fixed one. Where a key
 * lands never decides anything (determinism: no caller iterates a map). */
uint64_t fs_hash_bytes(const void *data, size_t n, uint64_t seed);
void fs_hash_key(uint64_t k0, uint64_t k1);
/* SipHash-c-d of the bytes under (k0, k1), the reference algorithm (its words read little-
 * endian); fs_hash_bytes is c = 1, d = 3. For the tests: SipHash-2-4 has published vectors. */
uint64_t fs_siphash(uint64_t k0, uint64_t k1, int c, int d, const void *data, size_t n);

/* Returns the value for key, or FS_MAP_NONE. */
uint32_t fs_map_get(const struct fs_map *m, uint64_t hash, fs_map_eq_fn eq, const void *ctx,
		    const void *key);
/* Adds hash -> value; the key must be absent. Returns 0 or -ENOMEM. */
int fs_map_put(struct fs_map *m, uint64_t hash, uint32_t value);
void fs_map_clear(struct fs_map *m);
void fs_map_free(struct fs_map *m);

#endif
