/* roomread.c: a waiting room read back from Postgres (see roomread.h). */
#include "io/roomread.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t num(const PGresult *r, int row, int col)
{
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static int read_in_tx(PGconn *c, const char *group, const char *topic, const char *sku,
		      struct fs_room_read *out, char *err, size_t err_len)
{
	const char *p[] = {sku, group, topic};
	PGresult *r =
		PQexecParams(c,
			     "SELECT k.admit_rate, k.token_ms, coalesce(k.draw, ''), "
			     "coalesce(k.draw_seed, ''), k.opens_at_ms, k.part, "
			     "coalesce(p.clock_ms, 0) FROM skus k LEFT JOIN partitions p ON "
			     "p.grp = $2 AND p.topic = $3 AND p.part = k.part WHERE k.sku = $1",
			     3, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		snprintf(err, err_len, "postgres: %s", PQerrorMessage(c));
		PQclear(r);
		return -EIO;
	}
	if (PQntuples(r) != 1 || num(r, 0, 0) < 1) {
		PQclear(r);
		return -ENOENT;
	}
	struct fs_admission adm = {.rate_per_s = num(r, 0, 0), .token_ms = num(r, 0, 1)};
	adm.draw = strcmp(PQgetvalue(r, 0, 2), "fifo") == 0 ? FS_DRAW_FIFO : FS_DRAW_RANDOM;
	snprintf(adm.seed, sizeof adm.seed, "%s", PQgetvalue(r, 0, 3));
	int64_t opens_at = num(r, 0, 4);
	out->partition = (int32_t)num(r, 0, 5);
	out->clock_ms = num(r, 0, 6);
	out->token_ms = adm.token_ms;
	PQclear(r);
	if (fs_room_init(&out->room, &adm, opens_at) < 0) {
		snprintf(err, err_len, "the sale's admission in Postgres is not valid");
		return -EIO;
	}
	const char *q[] = {sku};
	r = PQexecParams(
		c, "SELECT " FS_ROOM_ENTRY_COLUMNS " FROM room_joins WHERE sku = $1 ORDER BY off",
		1, NULL, q, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		snprintf(err, err_len, "postgres: %s", PQerrorMessage(c));
		PQclear(r);
		fs_room_free(&out->room);
		return -EIO;
	}
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
		struct fs_room_entry e;
		fs_room_entry_of_row(r, i, 0, &e);
		rc = fs_room_load(&out->room, &e);
	}
	PQclear(r);
	if (rc == 0)
		rc = fs_room_load_done(&out->room, out->clock_ms);
	if (rc < 0) {
		snprintf(err, err_len, "%s",
			 rc == -ENOMEM ? "out of memory"
				       : "the room's rows are not a log's "
					 "(a damaged table?)");
		fs_room_free(&out->room);
		return -EIO;
	}
	return 0;
}

int fs_room_read(PGconn *c, const char *group, const char *topic, const char *sku,
		 struct fs_room_read *out, char *err, size_t err_len)
{
	memset(out, 0, sizeof *out);
	/* One snapshot for the clock and the rows: a batch committed while they are read is in
	 * both or in neither (the draw is decided by the clock the rows were made at). */
	PGresult *r = PQexec(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	if (!ok) {
		snprintf(err, err_len, "postgres: %s", PQerrorMessage(c));
		return -EIO;
	}
	int rc = read_in_tx(c, group, topic, sku, out, err, err_len);
	PQclear(PQexec(c, "COMMIT"));
	return rc;
}

void fs_room_entry_of_row(const PGresult *r, int row, int col, struct fs_room_entry *e)
{
	memset(e, 0, sizeof *e);
	snprintf(e->buyer_id, sizeof e->buyer_id, "%s", PQgetvalue(r, row, col));
	e->offset = num(r, row, col + 1);
	e->joined_ms = num(r, row, col + 2);
	e->early = PQgetvalue(r, row, col + 3)[0] == 't';
	e->admitted_ms = num(r, row, col + 4);
	e->decided_ms = num(r, row, col + 5);
	e->decided_off = num(r, row, col + 6);
	e->minted_ms = num(r, row, col + 7);
	e->minted_off = num(r, row, col + 8);
}

void fs_room_read_free(struct fs_room_read *r)
{
	fs_room_free(&r->room);
}
