/* sim_proc.h: a simulated flashsale-worker process that runs the real protocol code.
 *
 * The files of src/worker/ that the worker's own build calls the protocol (loop, partition,
 * pipeline, committer, publisher, rebuild) are linked here unchanged. What they call outside
 * themselves, the edges of src/worker/io.h and the store of src/io/store.h, is implemented
 * by sim_proc.c over the simulated world: the intents log and the group coordinator of sim.c,
 * the tables of sim_store.c, the world's clock and its PRNG.
 *
 * One thread at a time. The process's loop and its committer threads (commit.overlap) are
 * coroutines (ucontext), and only one of all the processes' coroutines runs at once. Every
 * edge call that talks to the outside world (a poll, a produce, a store statement, a lock, a
 * wait, a sleep, a crash point) hands control back to the scheduler, which picks what runs
 * next from the seed's PRNG: the same coroutine, another of the process, another process,
 * the web tier, the broker, or a crash. So the schedule is a function of the seed, and a
 * crash lands between any two edge calls of any thread. A crash frees the process's state
 * as teardown would, without any I/O, and never resumes its coroutines (kill -9). */
#ifndef FS_SIM_PROC_H
#define FS_SIM_PROC_H

#include "sim.h"
#include "worker/context.h"
#include "worker/io.h"

#include <ucontext.h>

enum {
	SIM_CO_MAX = 1 + SLOTS_MAX, /* the loop, then committer thread k as coroutine 1 + k */
};

/* Why a coroutine is not running. */
enum co_block {
	CO_READY = 0, /* runnable */
	CO_WAIT,      /* wio_wait: until a broadcast */
	CO_LOCK,      /* wio_lock: until the lock is free */
	CO_SLEEP,     /* wio_sleep_ms: until the clock reaches `until` */
	CO_POLL,      /* wio_poll: until a record or an event, a wake, or `until` */
	CO_FLUSH,     /* wio_flush: until the producer's queue is empty, or `until` */
	CO_JOIN,      /* wio_thread_join: until coroutine `join` is done */
	CO_DONE,      /* returned */
};

struct sim_co {
	bool used;
	ucontext_t ctx;
	char *stack;
	enum co_block block;
	int64_t until;
	int join;
	const char *at; /* the edge call it is suspended in (a crash there is counted by it) */
	void *(*fn)(void *);
	void *arg;
};

/* A message the producer accepted and the broker has not yet taken. */
struct sim_msg {
	enum fs_topic topic;
	int32_t partition;
	char *key;
	size_t key_len;
	char *val;
	size_t len;
	struct inflight *tag;
	struct sim_result r; /* results: the record it answers; forwards: the original */
	bool tick;
	bool cart; /* a cart's protocol message (issue 31): appended where it is sent */
};

/* A delivery report not yet served (wio_serve, wio_flush). */
struct sim_report {
	struct inflight *tag;
	bool failed;
};

struct wio {
	struct sim_proc *P;
};

struct sim_proc {
	int id;
	bool up;
	struct sim_world *W;
	struct wio io;
	struct worker *w;
	struct sim_co co[SIM_CO_MAX];
	int cur;	  /* the coroutine running, or -1 */
	ucontext_t sched; /* the scheduler, to go back to */
	const char *last_at;
	int lock_owner; /* wio_lock's: a coroutine, or -1 */
	bool woken;	/* wio_wake: the next poll returns at once */
	bool in_hand;	/* a polled record not released yet (on_message runs) */

	/* The group's events for this member, served by its next poll (the rebalance callback
	 * runs inside it, as in librdkafka). */
	bool pending_revoke, pending_assign;
	uint32_t assign_parts;
	bool kicked;	      /* out of the group (paused past its session): still running */
	int64_t paused_until; /* the step up to which it is paused (not scheduled) */

	/* The consumer: fetching partition i from fetch[i] while consuming[i]. */
	bool assigned[SIM_PARTS_MAX], consuming[SIM_PARTS_MAX];
	int64_t fetch[SIM_PARTS_MAX];

	/* The producer. */
	VEC(struct sim_msg) queue;
	VEC(struct sim_report) reports;
};

void proc_init(struct sim_world *W, struct sim_proc *P, int id);
/* Starts the process: a fresh worker with the seed's configuration; its loop starts at the
 * first step. */
void proc_start(struct sim_world *W, struct sim_proc *P);
/* kill -9: the memory is gone; messages already handed to the broker land or not (seeded). */
void proc_crash(struct sim_world *W, struct sim_proc *P);
/* Frees everything (the seed's end). */
void proc_free(struct sim_world *W, struct sim_proc *P);
/* Whether one of its coroutines can run now; one step: one of them runs to its next edge
 * call. */
bool proc_runnable(const struct sim_world *W, const struct sim_proc *P);
void proc_step(struct sim_world *W, struct sim_proc *P);
/* The earliest clock at which a coroutine blocked on the clock can run (INT64_MAX: none). */
int64_t proc_next_wake(const struct sim_proc *P);
/* The broker takes the i-th queued message: it lands (or fails, or lands twice: seeded), and
 * its delivery report waits to be served. */
void proc_deliver(struct sim_world *W, struct sim_proc *P, size_t i);
/* Nothing to do and nothing in flight; a description of the process for INV-7's message. */
bool proc_idle(const struct sim_world *W, const struct sim_proc *P);
int proc_describe(const struct sim_proc *P, char *buf, size_t n);
/* The coroutine suspended at an edge call named `at`, if any (the scheduler aims crashes). */
bool proc_at(const struct sim_proc *P, const char *at);

#endif
