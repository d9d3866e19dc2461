/* sim.h: the deterministic simulator's shared world (see sim.c for the model and how to replay
 * a seed; sim_proc.h for the workers, which run src/worker/'s code).
 *
 * Everything a seed touches lives in one struct sim_world: the PRNG, the intents log of every
 * partition, the results log, the simulated store, the workers, the group coordinator and the
 * fault profile. Nothing reads a clock, no two threads run at once (a worker's threads are
 * coroutines), nothing iterates a hash table: a seed replays bit for bit. */
#ifndef FS_SIM_H
#define FS_SIM_H

#include "core/batch.h"
#include "core/core.h"
#include "core/record.h"
#include "core/token.h"
#include "io/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	SIM_PARTS_MAX = 3,
	SIM_WORKERS_MAX = 3,
	SIM_SKUS_MAX = 5,
	SIM_RECORD_BYTES_MAX = 512, /* the workers' record size cap (record.max.bytes) */
	SIM_TICK_INTERVAL_MS = 1000,
	SIM_MSG_MAX = 600,
};

/* ---- PRNG: xoshiro256**, seeded with splitmix64 ------------------------------------------ */

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, n); n > 0. */
uint32_t rng_below(struct rng *r, uint32_t n);
/* True with probability per_mille / 1000. */
bool rng_chance(struct rng *r, uint32_t per_mille);

/* ---- growable arrays (abort on out-of-memory: this is a test) ------------------------------ */

void *sim_grow(void *data, size_t *cap, size_t need, size_t size);
#define VEC(T)                                                                                     \
	struct {                                                                                   \
		T *v;                                                                              \
		size_t len, cap;                                                                   \
	}
#define VEC_PUSH(vec)                                                                              \
	((vec).v = sim_grow((vec).v, &(vec).cap, (vec).len + 1, sizeof *(vec).v),                  \
	 &(vec).v[(vec).len++])
char *sim_strndup(const char *s, size_t n);

/* ---- the intents log ---------------------------------------------------------------------- */

struct sim_rec {
	char *key; /* NULL: no key */
	size_t key_len;
	char *val;
	size_t val_len;
	int64_t ts; /* LogAppendTime: the broker clock at append; never goes back */
	/* fs_record_parse() of these bytes, computed once at append, for the web tier and the
	 * checker (the workers and the oracle parse the bytes themselves). */
	struct fs_record parsed;
};

struct sim_log {
	VEC(struct sim_rec) recs;
};

/* ---- the results log ---------------------------------------------------------------------- */

struct sim_result {
	/* Simulator metadata, not part of the message: the record this result answers (for an
	 * expiry: the record whose arrival ended the hold). */
	int32_t part;
	int64_t off;
	bool expire;
	/* The waiting room (issue 33): 1 a join's answer (part/off: the join record), 2 an
	 * admission (part/off: the record that moved the clock to it). */
	int room;
	/* A cart's result (issue 31): part/off name the record whose step decided it. */
	bool cart;
	/* >= 0: not a result but the forward of misrouted record part/off to this partition of
	 * the intents log (its delivery appends the record's bytes there); json is NULL. */
	int32_t forward_to;
	char *json;
};

/* ---- knobs --------------------------------------------------------------------------------- */

enum sim_mutation {
	MUT_NONE = 0,
	MUT_NO_CAS = 1,	      /* the store's commit ignores the expected offset */
	MUT_NO_DEDUPE = 2,    /* the store forgets intent ids: lookup finds nothing, insert adds */
	MUT_NO_REFORWARD = 3, /* a restart does not forward again what it reads below the stored
			       * offset (as if the forward were not tracked with the results) */
	MUT_STACKED_OFFSET_ONLY = 4, /* a transaction decided on top of one of its partition
				      * still in flight (commit.overlap 2) checks only the offset
				      * at that one's end, not that one's commit token: another
				      * worker's commit of the same range lets it in (src/ before
				      * the simulator ran the real worker; seed 659) */
	MUT_NO_CART_RESEND = 5,	     /* a restart does not send again the carts' outbox rows of what
				      * it reads below the stored offset: protocol messages and cart
				      * results lost with a crash (issue 31) */
	MUT_ROOM_FORGET_ADMISSIONS = 6, /* the store loads the waiting rooms' entries without
					 * their admissions (issue 33): a restart admits again */
};

/* The edge calls a process can be suspended in, where a crash is counted (sim_proc.c names
 * them; the crash points of FLASHSALE_CRASH among them). */
extern const char *const sim_points[];
enum { SIM_POINTS = 28 };
int sim_point(const char *at);

/* Fault rates of one seed, in per mille per opportunity. */
struct sim_faults {
	uint32_t crash, kick, rebalance, redeliver;
	uint32_t store_err, commit_unknown, deliver_fail, deliver_double;
	uint32_t bad_input;
	uint32_t misroute; /* a keyed record appended to a partition the rule does not name */
};

/* Counters summed over a sweep: which fault paths really ran. */
struct sim_stats {
	int64_t seeds, records, steps, commits, batches_published;
	int64_t overlap_seeds[3]; /* seeds run with commit.overlap 0, 1, 2 */
	int64_t stacked, stacked_redone, unknown_committed; /* the workers' own counters */
	int64_t stacked_same_range;			    /* sim_store.h */
	int64_t crashes, crash_at[SIM_POINTS], kicks, rebalances, redeliveries, store_errors;
	int64_t unknown_applied, unknown_lost, fenced, redo, retries, again_answered;
	int64_t unknown_same_range; /* unknown outcome, stored == batch end, another's token */
	int64_t again_conflicts, again_invalid; /* answered again by part_answer_again */
	int64_t lookup_kinds_left;		/* sim_store.h: kinds_left, summed over the seeds */
	int64_t holds_looked_up;		/* sim_store.h: summed over the seeds */
	int64_t delivered, deliver_failed, deliver_doubled, ticks_appended, skipped_stale, gaps;
	int64_t expired_replies, inhand_after_fence, again_missing;
	int64_t cart_results, cart_messages; /* carts (issue 31): results and protocol messages */
	int64_t cart_cancels_in_round;	     /* cancels answered while their cart was reserving */
	int64_t misrouted_appended, forwards_queued, forwards_landed, forwards_again;
	int64_t reject_mode_seeds;
	int64_t refused; /* records the store refused for good, rejected store_refused */
	/* issue 47, item 5: cart_reserves among them (each answered refused), holds whose
	 * expiry the store refused (recorded against the hold), and waiting cart groups whose
	 * units it refused to take when another record woke them (the group refused) */
	int64_t reserves_refused, expiries_refused, groups_refused;
	/* The waiting room (issue 33). */
	int64_t room_seeds, room_draws[2]; /* seeds with rooms; rooms drawn random, fifo */
	int64_t joins, admissions, admissions_again, room_loads; /* results; entries loaded */
	int64_t verdicts[6];	   /* buys of a room's sale decided, by fs_token_verdict */
	int64_t held_by_key[2];	   /* held buys whose token key k1, k2 signed */
	int64_t signers_rotated;   /* worker starts that sign with the other key than before */
	int64_t held_other_key;	   /* held buys answered by a worker signing with the other key */
	int64_t known_bug_stepped; /* answers the checker let pass (known bug, meson.build) */
	/* Admissions whose slot moved up to the tick's clock after a gap (issue 47, item 4). */
	int64_t room_catchups;
	int64_t room_remints; /* tokens re-minted after a gap (issue 47 item 4) */
	/* buys refused for their token (kind 11) whose id a retry with a valid token then held
	 * (issue 47 item 1) */
	int64_t token_retries_held;
};

/* ---- the world of one seed ------------------------------------------------------------------ */

struct sim_store;
struct sim_proc;

struct sim_world {
	uint64_t seed;
	struct rng rng;
	enum sim_mutation mutation;
	bool known_bug; /* --known-bug join-again-unknown-sku: do not step around it */
	bool trace;
	int64_t step;
	bool healing; /* faults off: heal and reach quiescence */

	int n_parts, n_workers;
	/* The workers' configuration. */
	int batch_max, batch_max_behind, batch_wait_ms, overlap;
	int dedupe_cache_max;
	struct sim_faults f;
	struct fs_record_limits limits;
	/* The waiting room (issue 33): its own PRNG (seeds without rooms keep their schedule),
	 * the workers' key ring (k1 and k2; each worker start signs with one of them: with
	 * `rotate`, either, so that a restart verifies what another key signed). */
	struct rng rrng;
	bool rooms, rotate;
	struct fs_keyring ring;
	int32_t last_sign;

	int64_t now_ms; /* the broker clock */
	struct sim_log log[SIM_PARTS_MAX];
	VEC(struct sim_result) results;

	struct sim_store *store;
	struct sim_proc *procs[SIM_WORKERS_MAX];
	uint64_t commit_tokens; /* the last commit token handed out (each attempt gets its own) */

	/* The group coordinator (sim.c). */
	bool member[SIM_WORKERS_MAX];
	bool rebalancing;
	int64_t gen;

	/* Observers for the checker: every successful commit per partition. */
	VEC(uint8_t) decided[SIM_PARTS_MAX]; /* times each offset was committed */
	int64_t last_next[SIM_PARTS_MAX];    /* stored next offset after the last commit */
	VEC(uint8_t) landed[SIM_PARTS_MAX];  /* a forward of each offset reached the broker */

	struct sim_stats *stats;
	bool failed;
	char why[1024];
};

/* Records the first violation of the seed (later ones are dropped). Returns false. */
bool sim_fail(struct sim_world *W, const char *inv, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void sim_trace(struct sim_world *W, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TRACE(W, ...)                                                                              \
	do {                                                                                       \
		if ((W)->trace)                                                                    \
			sim_trace((W), __VA_ARGS__);                                               \
	} while (0)

/* Appends a record to a partition's log at the broker clock. */
void sim_log_append(struct sim_world *W, int32_t part, const char *key, size_t key_len,
		    const char *val, size_t val_len);

/* A successful commit of the records at offsets[0..n) moved the stored offset from `before` to
 * `next` (sim_check.c). */
void sim_observe_commit(struct sim_world *W, int32_t part, int64_t before, int64_t next,
			const int64_t *offsets, size_t n);

/* The checker: run once every worker is quiescent. Returns true if every invariant holds. */
bool sim_check(struct sim_world *W);

#endif
