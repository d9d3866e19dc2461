/* roomread.h: a waiting room read back from Postgres (issue 33), for the readers outside the
 * worker: `flashsale queue` (flashsale_queue_get) and the gateway's GET .../queue/{buyer}. The
 * rows are the worker's last commit; the room is rebuilt with the pure core (room.c), which
 * draws again from them and the sale's seed, so a reader's positions are the worker's.
 * Thread: the caller's connection. */
#ifndef FS_ROOMREAD_H
#define FS_ROOMREAD_H

#include "core/room.h"

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

struct fs_room_read {
	struct fs_room room; /* initialised by fs_room_read; free with fs_room_read_free */
	int64_t token_ms;
	int32_t partition;
	int64_t clock_ms; /* the partition's log clock at its last commit */
};

/* Reads SKU's room as consumer group `group` on topic `topic` committed it. 0; -ENOENT (no such
 * SKU, or a sale without a room); -EIO with a message in err (Postgres, or rows that cannot be
 * the log's). */
int fs_room_read(PGconn *c, const char *group, const char *topic, const char *sku,
		 struct fs_room_read *out, char *err, size_t err_len);
void fs_room_read_free(struct fs_room_read *r);

/* The columns every reader of room_joins selects, in this order (FS_ROOM_ENTRY_COLUMNS), and
 * an entry from them: row `row` of r, starting at column col. */
#define FS_ROOM_ENTRY_COLUMNS                                                                      \
	"buyer_id, off, joined_ms, early, coalesce(admitted_ms, -1), coalesce(decided_ms, -1), "   \
	"coalesce(decided_off, -1), coalesce(minted_ms, decided_ms, -1), "                         \
	"coalesce(minted_off, decided_off, -1)"
void fs_room_entry_of_row(const PGresult *r, int row, int col, struct fs_room_entry *e);

#endif
