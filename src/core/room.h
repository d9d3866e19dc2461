/* room.h: the waiting room of one SKU (issue 33). Pure: joins in, in log order, and the
 * partition's log clock; the queue's order, positions and admissions out. No I/O, no wall
 * clock, no randomness, no hash-order iteration: a replay of the partition's log rebuilds the
 * same room, the same draw and the same admissions.
 *
 * A sale that needs admission names, in its open record, the rate, the tokens' life, the draw
 * ("random" or "fifo") and the draw's seed. Buyers join before or after the opening
 * (opens_at, on the log clock). When the clock first reaches opens_at the room draws: everyone
 * who joined before it is ordered by fs_draw_rank(seed, buyer) (ties, which need equal 64-bit
 * ranks, by join offset), or kept in join order for "fifo"; later joiners queue behind them
 * in join order. From opens_at the room admits the queue's front at the rate, on a schedule of
 * slots in log-clock microseconds: the first at opens_at, each next one step = ceil(10^6 /
 * rate) after the one before, and never before its buyer joined. A buyer is admitted once the
 * clock reaches its slot's millisecond, the admission stamped with the slot (the token's
 * not-before), not with the moment the clock got there: a clock that jumps (ticks come every
 * so often) admits the slots it passed at once, each at its own time, and a queue that ran
 * empty does not bank slots for a burst. A jump longer than FS_ROOM_CATCHUP_MS (an outage)
 * moves the schedule up instead of admitting every slot it passed. So any two admissions
 * i < j (in order, at a_i <= a_j ms) keep (j - i) * step <= (a_j - a_i) * 1000 + 999: never
 * faster than the rate, give or take the clock's millisecond; and while buyers wait, never
 * slower than the clock allows as long as it never jumps more than FS_ROOM_CATCHUP_MS.
 * Thread: one owner (the partition's). */
#ifndef FS_ROOM_H
#define FS_ROOM_H

#include "core/map.h"
#include "core/record.h"

#include <stdbool.h>
#include <stdint.h>

/* The open record's `admission`. */
struct fs_admission {
	int64_t rate_per_s; /* 1 .. FS_ADMIT_RATE_MAX */
	int64_t token_ms;   /* how long a token is valid from its admission */
	int draw;	    /* enum fs_draw */
	char seed[FS_DRAW_SEED_LEN_MAX + 1];
};

struct fs_room_entry {
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	uint64_t rank;	     /* the draw's (random draws, joined before it) */
	int64_t offset;	     /* the join record's */
	int64_t joined_ms;   /* the log clock at the join */
	int64_t admitted_ms; /* its slot's millisecond; -1 while waiting */
	int64_t decided_ms;  /* the log clock when the admission was decided (-1 while waiting) */
	int64_t decided_off; /* the record that moved the clock to it (-1 while waiting) */
	/* Its token's: the tick that minted the token it holds (the admission's, or a re-mint's
	 * after a gap: fs_room_remint) and its clock; the token ends at minted_ms + token_ms.
	 * -1 while waiting. */
	int64_t minted_ms, minted_off;
	bool early; /* joined before the draw */
	bool dirty;
	bool stored;
};

struct fs_room {
	struct fs_admission adm;
	int64_t opens_at_ms;
	bool drawn;
	/* every entry, in join order */
	struct fs_room_entry *v;
	uint32_t len, cap;
	struct fs_map index; /* buyer -> entry */
	/* the queue once drawn: entry indexes in admission order; order[next] is the front */
	uint32_t *order;
	uint32_t order_len, order_cap, next;
	uint32_t *pos;	   /* entry -> its index in order, once drawn */
	void *scratch;	   /* the draw's sort, sized with the entries: the draw never allocates */
	int64_t credit_us; /* the next slot, in log-clock microseconds */
	int64_t last_mint_ms; /* the latest minted_ms of its entries; -1 before any admission */
	/* changed since the last commit: entries (joined or admitted), admissions in order */
	uint32_t *dirty;
	uint32_t dirty_len, dirty_cap;
	uint32_t *admitted;
	uint32_t admitted_len, admitted_cap;
};

int fs_room_init(struct fs_room *r, const struct fs_admission *adm, int64_t opens_at_ms);
void fs_room_free(struct fs_room *r);

/* A join at the log clock now_ms (the clock already advanced, fs_room_advance, for this
 * record). Returns the entry's index (new or the buyer's earlier one: *repeat then), or
 * -ENOMEM with nothing changed. */
int fs_room_join(struct fs_room *r, const char *buyer_id, int64_t offset, int64_t now_ms,
		 bool *repeat);

/* How far a slot may lag the clock of the record that admits it (issue 47, item 4): after a
 * gap in the clock longer than this, the schedule moves forward to the clock minus this bound,
 * so that an outage (or an idle spell) does not admit every slot it passed at once. It exceeds
 * the jumps of a live room's clock (the worker's ticks, admission.tick.ms = 100 apart), which
 * would otherwise lose slots. */
#define FS_ROOM_CATCHUP_MS 1000

/* Draws once the log clock now_ms reaches opens_at (every record moves it: the draw is at the
 * first record stamped at or after the opening, whatever it is). Never allocates. */
void fs_room_draw_at(struct fs_room *r, int64_t now_ms);

/* Moves the room to the log clock now_ms (moved there by the record at offset): draws once it
 * reaches opens_at, then admits every buyer whose slot it reached, each appended to
 * r->admitted; the front's slot is first moved up to now_ms - FS_ROOM_CATCHUP_MS if it lags
 * more. The core calls it at the worker's tick records only (core.h). Returns the number
 * admitted. Never allocates. */
int fs_room_advance(struct fs_room *r, int64_t now_ms, int64_t offset);

/* The window of a re-mint (issue 47, item 4): a tick at least fs_room_remint_gap_ms after the
 * room's last token re-mints the admissions of the FS_ROOM_REMINT_WINDOW_MS before that token
 * (never re-minted yet). A live room (someone due) mints at least every step plus a tick
 * interval (under FS_ROOM_CATCHUP_MS): a longer gap while someone waits is an outage. The window
 * covers what a worker that stopped may have left decided but not delivered (the tick it
 * appended, the batch it had not committed). */
#define FS_ROOM_REMINT_WINDOW_MS 1000

/* The gap that makes a tick re-mint: step (in ms, rounded up) + FS_ROOM_CATCHUP_MS, or the
 * token's life if shorter (so that a token not re-minted still has life ahead). */
int64_t fs_room_remint_gap_ms(const struct fs_room *r);

/* At a tick record (offset) at the log clock now_ms, before fs_room_advance: when now_ms is at
 * least the gap after the room's last token (r->last_mint_ms) and the queue's front joined at
 * or before that token (someone was due all along: the gap is an outage, not an empty room),
 * every admission decided within
 * FS_ROOM_REMINT_WINDOW_MS before it, not re-minted before, gets a token minted now
 * (minted_ms, minted_off; its slot, not-before and decision unchanged: not a new admission,
 * INV-9 unchanged), is marked dirty and appended to r->admitted (a new admission result).
 * So the buyers of a tick decided late (a stale tick after an outage) receive a live token.
 * Returns the number re-minted. Never allocates. */
int fs_room_remint(struct fs_room *r, int64_t now_ms, int64_t offset);

/* The buyer's entry index, or -1 when not joined. */
int64_t fs_room_find(const struct fs_room *r, const char *buyer_id);
struct fs_room_place {
	bool joined, drawn, admitted;
	int64_t position;    /* 1-based place in the queue (its order), 0 before the draw */
	int64_t ahead;	     /* waiting buyers before it */
	int64_t admitted_ms; /* admitted only */
	int64_t eta_ms;	     /* waiting, drawn: when the credit reaches it at the rate */
};
/* Where a buyer stands, in constant time. */
void fs_room_place(const struct fs_room *r, const char *buyer_id, struct fs_room_place *p);
void fs_room_place_of(const struct fs_room *r, uint32_t entry, struct fs_room_place *p);

/* When the room next needs the clock to move on: its opening (not drawn yet, someone joined),
 * or the front's slot in ms (someone waits); -1 for neither. */
int64_t fs_room_next_due(const struct fs_room *r);

/* The room was stored: the dirty and admitted lists are cleared, entries become stored. */
void fs_room_commit(struct fs_room *r);

/* Loading (a restart, a redo): the entries in join order (offset ascending) as stored, then
 * fs_room_load_done at the partition's clock, which draws if the clock reached opens_at and
 * rebuilds the queue and the slots exactly as the log built them. -EINVAL when the rows
 * cannot be the log's (out of order, late joins before the draw, admissions that are not the
 * queue's front or not at their slots), -ENOMEM. */
int fs_room_load(struct fs_room *r, const struct fs_room_entry *e);
int fs_room_load_done(struct fs_room *r, int64_t clock_ms);

#endif
