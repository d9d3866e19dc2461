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

uint64_t fs_hash_bytes(const void *data, size_t n, uint64_t seed);

/* Returns the value for key, or FS_MAP_NONE. */
uint32_t fs_map_get(const struct fs_map *m, uint64_t hash, fs_map_eq_fn eq, const void *ctx,
		    const void *key);
/* Adds hash -> value; the key must be absent. Returns 0 or -ENOMEM. */
int fs_map_put(struct fs_map *m, uint64_t hash, uint32_t value);
void fs_map_clear(struct fs_map *m);
void fs_map_free(struct fs_map *m);

#endif
