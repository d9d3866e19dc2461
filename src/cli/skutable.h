/* skutable.h: the latest state of each SKU as the stock topic says it, for `flashsale top`.
 *
 * The stock topic is compacted and keyed by SKU; each record carries the partition and
 * offset of the last intent it reflects (docs/reference/records.md). A record older than the
 * one kept for its SKU (the same partition, a lower offset: a late copy from a worker that
 * lost the partition) is dropped, as flashsale_stock_follow() does. A record whose key is not
 * a SKU (fs_sku_valid) or not its SKU, or that does not parse, is counted as bad and dropped.
 *
 * Bounded: SKUTABLE_MAX SKUs are kept; the records of SKUs past that are counted, not kept.
 * Pure: no I/O; one owner. */
#ifndef FS_CLI_SKUTABLE_H
#define FS_CLI_SKUTABLE_H

#include "core/map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	SKUTABLE_MAX = 100000, /* SKUs kept (about 160 bytes each) */
	SKUTABLE_SKU_MAX = 65, /* bytes of a SKU, its NUL counted (the records' bound) */
};

struct sku_row {
	char sku[SKUTABLE_SKU_MAX];
	char status[16]; /* open | sold_out | closed | not_open */
	int64_t supply, available, held, sold;
	int32_t partition;
	int64_t offset;
	uint64_t changed; /* the table's count of kept records when this one was: the order */
};

/* What the SKUs not shown add up to. */
struct sku_rest {
	int64_t skus, supply, available, held, sold;
	int64_t sold_out, closed; /* of those SKUs, in that state */
};

struct skutable {
	struct sku_row *rows;
	uint32_t n, cap;
	struct fs_map index;	       /* hash of the SKU -> row */
	uint64_t kept;		       /* records kept */
	int64_t older, bad, untracked; /* records dropped: older than kept, bad, past the bound */
};

void skutable_init(struct skutable *t);
void skutable_free(struct skutable *t);
/* One record of the stock topic: 1 kept, 0 dropped as older, -EINVAL bad, -ENOSPC a new SKU
 * past SKUTABLE_MAX, -ENOMEM (each counted but the last). */
int skutable_apply(struct skutable *t, const void *key, size_t key_len, const void *payload,
		   size_t len);
/* The SKU's row, or NULL when the topic has not named it. */
const struct sku_row *skutable_get(const struct skutable *t, const char *sku);
/* The rows to show, at most max of them, into out: the named SKUs in their order when
 * n_names > 0 (a name the topic has not named is left out), else the most recently changed
 * first. What the rows not shown add up to goes to rest. Returns the number of rows. */
int skutable_pick(const struct skutable *t, const char *const *names, int n_names, int max,
		  const struct sku_row **out, struct sku_rest *rest);

#endif
