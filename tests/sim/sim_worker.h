/* sim_worker.h: a simulated flashsale-worker: the protocol of src/worker/main.c (main loop,
 * on_message, process_due, part_process, part_fenced, part_answer_again, publish, replied
 * offsets, ticks, the rebalance callback) as a state machine, one step per store call or
 * message, so that the scheduler can crash it, or let another worker run, between any two
 * steps. Decisions come from the real pure code (fs_record_parse, fs_batch_*, fs_core_*); the
 * store is sim_store.c; results go to a producer queue that the scheduler delivers, drops or
 * doubles. Keep it in step with src/worker/main.c. */
#ifndef FS_SIM_WORKER_H
#define FS_SIM_WORKER_H

#include "sim.h"

/* Results of one batch on their way to the broker (struct inflight in worker.c). */
struct sw_inflight {
	int64_t end_offset;
	int pending;
	bool failed;
	bool orphan;
	struct sw_inflight *next;
};

struct sw_msg {
	struct sw_inflight *f; /* its delivery report goes here */
	struct sim_result r;
};

struct sw_part {
	bool init; /* core and batches allocated (part_get) */
	bool assigned, loaded;
	int32_t id;
	struct fs_part_meta meta;
	struct fs_core core;
	struct fs_batch batch, again;
	struct fs_seen seen;  /* decisions committed here: repeats answered without a lookup */
	int64_t batch_costly; /* records of the batch that are not invalid */
	bool need_lookup;     /* the last commit found an id decided elsewhere: look them up */
	int64_t last_record_ms, last_tick_ms;
	bool tick_pending;
	int64_t replied;
	struct sw_inflight *head, *tail;
	/* The consumer: fetching this partition (rd_kafka_assign) from `fetch`. */
	bool consuming;
	int64_t fetch;
};

enum sw_act {
	ACT_NONE = 0,
	ACT_ASSIGN,  /* the rebalance callback's assign: part_load each partition */
	ACT_PROCESS, /* part_process */
	ACT_AGAIN,   /* part_answer_again */
};

/* Where the worker is: also the crash points the sweep counts (sim_stats.crash_at). */
enum sw_where {
	AT_POLL = 0,	  /* in the main loop, about to poll */
	AT_DUE,		  /* in process_due, between partitions */
	AT_ASSIGN_LOAD,	  /* loading an assigned partition */
	AT_LOOKUP,	  /* part_process: before the lookup */
	AT_DECIDE,	  /* after the lookup (crash point after_lookup) */
	AT_COMMIT,	  /* decided, before COMMIT */
	AT_RESOLVE,	  /* commit outcome unknown: reading the offset back */
	AT_RELOAD,	  /* not committed: reloading to redo */
	AT_FENCED_LOAD,	  /* fenced: reloading before the seek */
	AT_PUBLISH,	  /* committed, nothing published yet (after_commit) */
	AT_AGAIN_LOOKUP,  /* part_answer_again: before the lookup */
	AT_AGAIN_EXPIRED, /* answered again, expiries not yet */
	AT_WHERE_COUNT,
};

enum { PS_LOOKUP, PS_DECIDE, PS_COMMIT, PS_RESOLVE, PS_RELOAD, PS_FENCED, PS_PUBLISH };
enum { AG_LOOKUP, AG_EXPIRED };
enum { LP_POLL, LP_DUE };

struct sw_worker {
	int id;
	bool up;
	struct sw_part parts[SIM_PARTS_MAX];
	VEC(struct sw_msg) queue; /* the producer's queue: published, not yet delivered */
	struct sw_inflight *orphans;

	/* The main loop: poll, then process_due over the partitions. */
	int loop;
	bool due_all;
	int due_part, due_sub;

	/* The activity in progress; the real worker runs it to its end before it polls again. */
	enum sw_act act;
	int act_part;
	int state;     /* PS_* or AG_* */
	int load_step; /* part_load in progress: its next step (ss_load_step), or -1 */
	int64_t expected, next;
	uint64_t token; /* the commit token of the store's last attempt (fs_store's s->token) */
	/* on_message found its batch full and ran it first: the message still in hand. */
	bool inhand, inhand_again;
	bool inhand_fenced; /* the activity it waits for was fenced: it is read again */
	struct fs_record inhand_rec;
	uint32_t assign_set;
	int assign_i;

	/* The group's events for this member, served by its next poll. */
	bool pending_revoke, pending_assign;
	uint32_t assign_parts;
	bool kicked; /* out of the group (paused past its session): still running */
};

void sw_init(struct sw_worker *w, int id);
/* kill -9: every piece of memory is gone; queued results land or not (seeded). */
void sw_crash(struct sim_world *W, struct sw_worker *w);
void sw_free(struct sw_worker *w);
/* One step of the worker's loop or of its activity. */
void sw_step(struct sim_world *W, struct sw_worker *w);
/* Delivers (or drops, or doubles: seeded) the i-th queued result; runs its delivery report. */
void sw_deliver(struct sim_world *W, struct sw_worker *w, size_t i);
enum sw_where sw_where(const struct sw_worker *w);
/* True when the worker has nothing to do and nothing in flight. */
bool sw_idle(const struct sim_world *W, const struct sw_worker *w);
/* True when maybe_tick() would append a tick to the partition now. */
bool sw_tick_due(const struct sim_world *W, const struct sw_part *p);

#endif
