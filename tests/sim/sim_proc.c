/* sim_proc.c: a simulated flashsale-worker process (see sim_proc.h): the coroutines, the edges
 * of src/worker/io.h and the store of src/io/store.h over the simulated world. */
#include "sim_proc.h"

#include "core/buf.h"
#include "io/log.h"
#include "io/store.h"
#include "sim_store.h"
#include "worker/committer.h"
#include "worker/loop.h"
#include "worker/partition.h"
#include "worker/publisher.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A coroutine's stack, with a guard page below it: an overflow faults instead of corrupting
 * the heap. 128 KiB holds the deepest path (a redo's reload inside a fence inside a revoke,
 * under the sanitizers too); ASan clears the shadow of the whole stack at every switch, so
 * it is kept small. */
enum { CO_STACK = 128 * 1024, CO_GUARD = 4096 };

/* The process whose coroutine runs now (the store's calls find their world through it). */
static struct sim_proc *running;

/* ---- coroutines ---------------------------------------------------------------------------- */

/* Hands control back to the scheduler; returns when the scheduler picks this coroutine
 * again. */
static void yield(struct sim_proc *P, const char *at)
{
	struct sim_co *c = &P->co[P->cur];
	c->at = at;
	P->last_at = at;
	if (swapcontext(&c->ctx, &P->sched) < 0)
		abort();
}

static void boot(struct sim_proc *P);

static void co_entry(void)
{
	struct sim_proc *P = running;
	struct sim_co *c = &P->co[P->cur];
	if (P->cur == 0)
		boot(P);
	else
		c->fn(c->arg);
	c->block = CO_DONE;
	/* returns to P->sched (uc_link) */
}

static void co_make(struct sim_proc *P, int k, void *(*fn)(void *), void *arg)
{
	struct sim_co *c = &P->co[k];
	if (!c->stack) {
		char *m = mmap(NULL, CO_GUARD + CO_STACK, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED || mprotect(m, CO_GUARD, PROT_NONE) < 0)
			abort();
		c->stack = m + CO_GUARD;
	}
	if (getcontext(&c->ctx) < 0)
		abort();
	c->ctx.uc_stack.ss_sp = c->stack;
	c->ctx.uc_stack.ss_size = CO_STACK;
	c->ctx.uc_link = &P->sched;
	makecontext(&c->ctx, co_entry, 0);
	c->used = true;
	c->block = CO_READY;
	c->at = "start";
	c->fn = fn;
	c->arg = arg;
}

static bool records_waiting(const struct sim_world *W, const struct sim_proc *P)
{
	for (int i = 0; i < W->n_parts; i++)
		if (P->consuming[i] && P->fetch[i] < (int64_t)W->log[i].recs.len)
			return true;
	return false;
}

static bool co_runnable(const struct sim_world *W, const struct sim_proc *P, int k)
{
	const struct sim_co *c = &P->co[k];
	if (!c->used)
		return false;
	switch (c->block) {
	case CO_READY:
		return true;
	case CO_LOCK:
		return P->lock_owner < 0;
	case CO_SLEEP:
		return W->now_ms >= c->until;
	case CO_POLL:
		return W->now_ms >= c->until || P->woken || P->pending_revoke ||
		       P->pending_assign || records_waiting(W, P);
	case CO_FLUSH:
		return W->now_ms >= c->until || P->queue.len == 0;
	case CO_JOIN:
		return P->co[c->join].block == CO_DONE;
	default:
		return false;
	}
}

bool proc_runnable(const struct sim_world *W, const struct sim_proc *P)
{
	if (W->step < P->paused_until)
		return false;
	for (int k = 0; P->up && k < SIM_CO_MAX; k++)
		if (co_runnable(W, P, k))
			return true;
	return false;
}

int64_t proc_next_wake(const struct sim_proc *P)
{
	int64_t t = INT64_MAX;
	for (int k = 0; P->up && k < SIM_CO_MAX; k++) {
		const struct sim_co *c = &P->co[k];
		if (c->used &&
		    (c->block == CO_SLEEP || c->block == CO_POLL || c->block == CO_FLUSH) &&
		    c->until < t)
			t = c->until;
	}
	return t;
}

void proc_step(struct sim_world *W, struct sim_proc *P)
{
	int c[SIM_CO_MAX], n = 0;
	for (int k = 0; k < SIM_CO_MAX; k++)
		if (co_runnable(W, P, k))
			c[n++] = k;
	if (n == 0)
		return;
	int k = c[rng_below(&W->rng, (uint32_t)n)];
	P->co[k].block = CO_READY;
	running = P;
	P->cur = k;
	if (swapcontext(&P->sched, &P->co[k].ctx) < 0)
		abort();
	running = NULL;
	P->cur = -1;
	if (k == 0 && P->co[0].block == CO_DONE)
		sim_fail(W, "sim", "worker %d: its loop returned", P->id);
}

/* ---- the process --------------------------------------------------------------------------- */

static void log_sink(enum fs_log_level level, const char *msg)
{
	static const char *const tags[] = {"error", "warn", "info", "debug"};
	struct sim_proc *P = running;
	if (P && P->W->trace)
		sim_trace(P->W, "w%d %s: %s", P->id, tags[level], msg);
	/* What the worker tells an operator must be true: a fence names the offset the batch
	 * expected and the one stored, which differ (or it would not be a fence). */
	const char *f = strstr(msg, "fenced (expected offset ");
	long long expected, stored;
	if (P && f &&
	    sscanf(f, "fenced (expected offset %lld, stored %lld", &expected, &stored) == 2 &&
	    expected == stored)
		sim_fail(P->W, "log", "worker %d logged a fence at the stored offset itself: %s",
			 P->id, msg);
}

void proc_init(struct sim_world *W, struct sim_proc *P, int id)
{
	memset(P, 0, sizeof *P);
	P->id = id;
	P->W = W;
	P->io.P = P;
	P->cur = -1;
	P->lock_owner = -1;
	P->last_at = "start";
	fs_log_set_sink(log_sink);
	fs_log_set_level(W->trace ? "debug" : "warn"); /* warnings: log_sink checks them */
}

void proc_start(struct sim_world *W, struct sim_proc *P)
{
	struct worker *w = calloc(1, sizeof *w);
	if (!w)
		abort();
	fs_config_defaults(&w->cfg);
	w->cfg.batch_max = W->batch_max;
	w->cfg.batch_max_behind = W->batch_max_behind;
	w->cfg.batch_wait_ms = W->batch_wait_ms;
	w->cfg.commit_overlap = W->overlap;
	w->cfg.dedupe_cache_max = W->dedupe_cache_max;
	w->cfg.tick_interval_ms = SIM_TICK_INTERVAL_MS;
	w->cfg.retry_backoff_max_ms = 400;
	w->cfg.flush_timeout_ms = 2000;
	w->cfg.stats_interval_ms = 0;
	w->limits = W->limits;
	/* The key ring (issue 33), as main() loads admission.keys: both keys verify; with the
	 * seed's rotation a start signs with either (a restart, or the next owner, then verifies
	 * tokens another key signed). */
	w->keys = W->ring;
	if (W->rotate)
		w->keys.sign = (int32_t)rng_below(&W->rrng, 2);
	W->stats->signers_rotated += W->rooms && w->keys.sign != W->last_sign;
	W->last_sign = w->keys.sign;
	w->has_keys = true;
	P->w = w;
	P->up = true;
	P->kicked = false;
	P->paused_until = 0;
	P->pending_revoke = P->pending_assign = false;
	P->woken = P->in_hand = false;
	P->lock_owner = -1;
	P->last_at = "start";
	memset(P->assigned, 0, sizeof P->assigned);
	memset(P->consuming, 0, sizeof P->consuming);
	for (int k = 0; k < SIM_CO_MAX; k++)
		P->co[k].used = false;
	co_make(P, 0, NULL, NULL);
}

/* The worker's main(): setup (the partitioning rule is the seed's), then the loop. */
static void boot(struct sim_proc *P)
{
	struct worker *w = P->w;
	w->io = &P->io;
	if (fs_store_open("sim", &w->store) < 0)
		abort();
	committers_start(w);
	loop_run(w);
}

/* The worker's memory, freed as teardown frees it but without the I/O (kill -9); its counters
 * go to the sweep's. */
static void worker_free(struct sim_proc *P)
{
	struct worker *w = P->w;
	if (!w)
		return;
	P->W->stats->fenced += w->n.fenced;
	P->W->stats->redo += w->n.redo;
	P->W->stats->retries += w->n.retries;
	P->W->stats->skipped_stale += w->n.skipped_stale;
	P->W->stats->stacked += w->n.stacked;
	P->W->stats->stacked_redone += w->n.stacked_redone;
	P->W->stats->unknown_committed += w->n.unknown_committed;
	loop_free(w);
	free(w);
	P->w = NULL;
}

static void msg_free(struct sim_msg *m)
{
	free(m->key);
	free(m->val);
	free(m->r.json);
	m->key = m->val = m->r.json = NULL;
}

static void land(struct sim_world *W, struct sim_msg *m);

void proc_crash(struct sim_world *W, struct sim_proc *P)
{
	W->stats->crashes++;
	W->stats->crash_at[sim_point(P->last_at)]++;
	TRACE(W, "w%d CRASH at %s (%zu messages queued)", P->id, P->last_at, P->queue.len);
	/* Messages already handed to the broker may land; the process learns nothing more. */
	for (size_t i = 0; i < P->queue.len; i++) {
		if (rng_chance(&W->rng, 500))
			land(W, &P->queue.v[i]);
		msg_free(&P->queue.v[i]);
	}
	P->queue.len = 0;
	P->reports.len = 0;
	worker_free(P);
	for (int k = 0; k < SIM_CO_MAX; k++)
		P->co[k].used = false;
	P->up = false;
}

void proc_free(struct sim_world *W, struct sim_proc *P)
{
	(void)W;
	for (size_t i = 0; i < P->queue.len; i++)
		msg_free(&P->queue.v[i]);
	free(P->queue.v);
	free(P->reports.v);
	worker_free(P);
	for (int k = 0; k < SIM_CO_MAX; k++)
		if (P->co[k].stack)
			munmap(P->co[k].stack - CO_GUARD, CO_GUARD + CO_STACK);
	memset(P, 0, sizeof *P);
}

bool proc_at(const struct sim_proc *P, const char *at)
{
	for (int k = 0; P->up && k < SIM_CO_MAX; k++)
		if (P->co[k].used && P->co[k].block != CO_DONE && strcmp(P->co[k].at, at) == 0)
			return true;
	return false;
}

/* maybe_tick() would append a tick to the partition now. */
static bool tick_due(const struct sim_world *W, const struct worker *w, const struct part *p)
{
	return part_tick_due(w, p, W->now_ms, W->now_ms); /* the worker's own rule */
}

bool proc_idle(const struct sim_world *W, const struct sim_proc *P)
{
	const struct worker *w = P->w;
	if (!P->up || !w || P->pending_revoke || P->pending_assign || P->queue.len ||
	    P->reports.len || w->n_fly || records_waiting(W, P) || P->co[0].block != CO_POLL)
		return false;
	for (int k = 1; k < SIM_CO_MAX; k++)
		if (P->co[k].used && P->co[k].block != CO_WAIT)
			return false;
	for (int j = 0; j < w->n_parts; j++) {
		const struct part *p = w->parts[w->part_ids[j]];
		if (p->assigned && (p->batch.len || p->again.len || tick_due(W, w, p)))
			return false;
	}
	return true;
}

int proc_describe(const struct sim_proc *P, char *buf, size_t n)
{
	int k = snprintf(buf, n,
			 " w%d(up %d kicked %d revoke %d assign %d queue %zu fly %d:", P->id, P->up,
			 P->kicked, P->pending_revoke, P->pending_assign, P->queue.len,
			 P->w ? P->w->n_fly : -1);
	for (int i = 0; i < SIM_CO_MAX && k > 0 && (size_t)k < n; i++)
		if (P->co[i].used)
			k += snprintf(buf + k, n - (size_t)k, " %s/%d", P->co[i].at,
				      (int)P->co[i].block);
	if (k > 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ")");
	return k;
}

/* ---- the clock, stopping, crash points ------------------------------------------------------ */

int64_t wio_now_ms(struct wio *io)
{
	return io->P->W->now_ms;
}

int64_t wio_now_us(struct wio *io)
{
	return io->P->W->now_ms * 1000;
}

int64_t wio_wall_ms(struct wio *io)
{
	return io->P->W->now_ms;
}

void wio_sleep_ms(struct wio *io, int64_t ms)
{
	struct sim_proc *P = io->P;
	P->co[P->cur].until = P->W->now_ms + ms;
	P->co[P->cur].block = CO_SLEEP;
	yield(P, "sleep");
}

bool wio_stopping(struct wio *io)
{
	(void)io;
	return false; /* shutdown is not modelled */
}

bool wio_failed(struct wio *io)
{
	(void)io;
	return false;
}

const char *wio_error(const struct wio *io)
{
	(void)io;
	return "simulated";
}

bool wio_crash_at(struct wio *io, const char *point)
{
	yield(io->P, point); /* the scheduler may crash the process here */
	return false;
}

void wio_store_hook(struct wio *io, struct fs_store *s)
{
	(void)io;
	(void)s; /* the store's own yields are its crash points */
}

/* ---- the consumer -------------------------------------------------------------------------- */

/* The rebalance callback's revoke, inside the poll. */
static void revoke(struct sim_proc *P)
{
	struct sim_world *W = P->W;
	P->pending_revoke = false;
	int32_t ids[SIM_PARTS_MAX];
	int n = 0;
	for (int i = 0; i < W->n_parts; i++)
		if (P->assigned[i])
			ids[n++] = i;
	TRACE(W, "w%d revoke (%d partitions)", P->id, n);
	loop_revoked(P->w, ids, n);
	for (int i = 0; i < W->n_parts; i++)
		P->assigned[i] = P->consuming[i] = false;
}

static void assign(struct sim_proc *P)
{
	struct sim_world *W = P->W;
	P->pending_assign = false;
	int32_t ids[SIM_PARTS_MAX];
	int64_t offsets[SIM_PARTS_MAX];
	int n = 0;
	for (int i = 0; i < W->n_parts; i++)
		if (P->assign_parts & (1u << i)) {
			offsets[n] = -1001; /* RD_KAFKA_OFFSET_INVALID: the callback sets it */
			ids[n++] = i;
		}
	TRACE(W, "w%d assign 0x%x", P->id, P->assign_parts);
	loop_assigned(P->w, ids, offsets, n);
	for (int i = 0; i < n; i++) {
		int32_t id = ids[i];
		int64_t len = (int64_t)W->log[id].recs.len;
		P->assigned[id] = true;
		P->consuming[id] = offsets[i] != FS_OFFSET_END && offsets[i] != -1001;
		P->fetch[id] = offsets[i] == FS_OFFSET_BEGINNING ? 0
			       : offsets[i] < 0			 ? len
								 : offsets[i];
		TRACE(W, "w%d p%d from %" PRId64, P->id, (int)id, P->fetch[id]);
	}
}

int wio_poll(struct wio *io, int64_t timeout_ms, struct fs_msg *m)
{
	struct sim_proc *P = io->P;
	struct sim_world *W = P->W;
	P->co[P->cur].until = W->now_ms + timeout_ms;
	P->co[P->cur].block = CO_POLL;
	yield(P, "poll");
	P->woken = false;
	/* The rebalance callbacks run inside the poll. A member that was kicked out may still
	 * return records it had fetched before it learns that. */
	bool stale_fetch = P->kicked && rng_chance(&W->rng, 500);
	if (P->pending_revoke && !stale_fetch) {
		revoke(P);
		return 2;
	}
	if (P->pending_assign && !P->pending_revoke) {
		assign(P);
		return 2;
	}
	int cand[SIM_PARTS_MAX], n = 0;
	for (int i = 0; i < W->n_parts; i++)
		if (P->consuming[i] && P->fetch[i] < (int64_t)W->log[i].recs.len)
			cand[n++] = i;
	/* Not every poll gets a record (a fetch in flight): batches take random sizes. */
	if (n == 0 || !rng_chance(&W->rng, 850))
		return 0;
	int part = cand[rng_below(&W->rng, (uint32_t)n)];
	int64_t off = P->fetch[part]++;
	const struct sim_rec *r = &W->log[part].recs.v[off];
	*m = (struct fs_msg){
		.partition = part,
		.offset = off,
		.key = r->key,
		.key_len = r->key_len,
		.payload = r->val,
		.len = r->val_len,
		.ts_ms = r->ts,
	};
	W->stats->records++;
	P->in_hand = true;
	yield(P, "after_poll");
	return 1;
}

void wio_release(struct wio *io)
{
	io->P->in_hand = false;
}

size_t wio_backlog(struct wio *io)
{
	struct sim_proc *P = io->P;
	size_t n = 0;
	for (int i = 0; i < P->W->n_parts; i++)
		if (P->consuming[i])
			n += (size_t)((int64_t)P->W->log[i].recs.len - P->fetch[i]);
	return n;
}

void wio_seek(struct wio *io, int32_t partition, int64_t offset)
{
	struct sim_proc *P = io->P;
	P->fetch[partition] = offset < 0 ? 0 : offset;
	if (P->in_hand)
		P->W->stats->inhand_after_fence++;
	TRACE(P->W, "w%d p%d seek %" PRId64 "%s", P->id, (int)partition, P->fetch[partition],
	      P->in_hand ? " (a record in hand)" : "");
}

void wio_commit_offset(struct wio *io, int32_t partition, int64_t next)
{
	(void)io; /* advisory: never read back */
	(void)partition;
	(void)next;
}

/* The rebuild (--replay) is not modelled. */
int wio_partitions(struct wio *io, int64_t timeout_ms, int32_t *n)
{
	(void)timeout_ms;
	*n = io->P->W->n_parts;
	return 0;
}

/* The simulated log's clock is its own (the broker's): nothing to refuse. */
const char *wio_log_clock(struct wio *io, int64_t timeout_ms, int *transient)
{
	(void)io;
	(void)timeout_ms;
	*transient = 0;
	return NULL;
}

int wio_watermarks(struct wio *io, int32_t partition, int64_t *lo, int64_t *hi)
{
	*lo = 0;
	*hi = (int64_t)io->P->W->log[partition].recs.len;
	return 0;
}

int64_t wio_log_end(struct wio *io, int32_t partition)
{
	return (int64_t)io->P->W->log[partition].recs.len;
}

int64_t wio_position(struct wio *io, int32_t partition)
{
	(void)io;
	(void)partition;
	return -1; /* the simulator's worker serves no metrics */
}

int wio_assign(struct wio *io, const int64_t *offsets, int n)
{
	(void)io;
	(void)offsets;
	(void)n;
	return -EIO;
}

/* ---- the producer -------------------------------------------------------------------------- */

/* The batch b of the worker's that holds pointer x inside its items (or its kept bytes). */
static const struct fs_batch *batch_of(const struct worker *w, const void *x, bool fwd,
				       const struct part **pp)
{
	for (int j = 0; j < w->n_parts; j++) {
		const struct part *p = w->parts[w->part_ids[j]];
		const struct fs_batch *c[2 + SLOTS_MAX] = {&p->batch, &p->again};
		int n = 2;
		for (int k = 0; k < SLOTS_MAX; k++)
			if (w->slots[k].p == p)
				c[n++] = &w->slots[k].batch;
		for (int i = 0; i < n; i++) {
			const char *lo = fwd ? c[i]->fwd.data : (const char *)c[i]->items;
			const char *hi =
				lo + (fwd ? c[i]->fwd.len : c[i]->len * sizeof *c[i]->items);
			/* (<= for the kept bytes: an empty payload ends them) */
			if (lo && (const char *)x >= lo &&
			    ((const char *)x < hi || (fwd && x == hi))) {
				*pp = p;
				return c[i];
			}
		}
	}
	return NULL;
}

/* What a result answers: an expiry says where the hold ended; any other result was rendered
 * from a batch item, whose intent id or SKU is its key. */
static void result_meta(struct sim_proc *P, const void *key, const char *val, size_t len,
			struct sim_msg *m)
{
	struct sim_world *W = P->W;
	m->r.forward_to = -1;
	m->r.json = sim_strndup(val, len);
	static const char expire[] = "{\"v\":1,\"type\":\"expire\",";
	static const char cart[] = "{\"v\":1,\"type\":\"cart";
	bool is_cart = strncmp(m->r.json, cart, sizeof cart - 1) == 0;
	if (is_cart || strncmp(m->r.json, expire, sizeof expire - 1) == 0) {
		const char *pa = strstr(m->r.json, ",\"partition\":");
		const char *of = strstr(m->r.json, ",\"offset\":");
		m->r.expire = !is_cart;
		m->r.cart = is_cart;
		m->r.part = pa ? (int32_t)strtol(pa + 13, NULL, 10) : -1;
		m->r.off = of ? strtoll(of + 10, NULL, 10) : -1;
		if (is_cart)
			W->stats->cart_results++;
		else
			W->stats->expired_replies++;
		return;
	}
	/* The waiting room's (issue 33): a join's answer and an admission name their record;
	 * an admission rendered in the worker's one-off buffer is one answered again. */
	static const char join[] = "{\"v\":1,\"type\":\"join\",";
	static const char admission[] = "{\"v\":1,\"type\":\"admission\",";
	bool is_join = strncmp(m->r.json, join, sizeof join - 1) == 0;
	if (is_join || strncmp(m->r.json, admission, sizeof admission - 1) == 0) {
		const char *pa = strstr(m->r.json, ",\"partition\":");
		const char *of = strstr(m->r.json, ",\"offset\":");
		m->r.room = is_join ? 1 : 2;
		m->r.part = pa ? (int32_t)strtol(pa + 13, NULL, 10) : -1;
		m->r.off = of ? strtoll(of + 10, NULL, 10) : -1;
		W->stats->joins += is_join;
		W->stats->admissions += !is_join;
		W->stats->admissions_again += !is_join && val == P->w->out.data;
		return;
	}
	const struct part *p = NULL;
	const struct fs_batch *b = batch_of(P->w, key, false, &p);
	if (!b) {
		sim_fail(W, "sim", "worker %d produced a result of no batch: %s", P->id, m->r.json);
		m->r.part = -1;
		return;
	}
	const struct fs_item *it =
		&b->items[((const char *)key - (const char *)b->items) / sizeof *b->items];
	m->r.part = it->rec.partition;
	m->r.off = it->rec.offset;
	/* A buy won with a token of the key this worker does not sign with (issue 33): a
	 * rotation's old key, or the new one after a restart to the old, still verifies. */
	const char *t = it->rec.kind == FS_KIND_BUY && it->dec.outcome == FS_OUT_HELD &&
					it->rec.u.token.present
				? it->rec.u.token.text
				: "";
	if (strncmp(t, "v1.k", 4) == 0 && (t[4] == '1' || t[4] == '2') && t[5] == '.')
		W->stats->held_other_key += t[4] - '1' != P->w->keys.sign;
	if (b == &p->again) {
		W->stats->again_answered++;
		W->stats->again_conflicts += it->dec.outcome == FS_OUT_CONFLICT;
		W->stats->again_invalid += it->cls == FS_ITEM_INVALID;
	}
}

/* A forward: the misrouted record its bytes were kept for. false: the no-reforward mutation
 * drops it (a record read again below the stored offset). */
static bool forward_meta(struct sim_proc *P, const void *val, struct sim_msg *m)
{
	struct sim_world *W = P->W;
	const struct part *p = NULL;
	const struct fs_batch *b = batch_of(P->w, val, true, &p);
	const struct fs_item *it = NULL;
	for (uint32_t i = 0; b && i < b->len && !it; i++)
		if (b->items[i].cls == FS_ITEM_FORWARD &&
		    fs_item_fwd_payload(b, &b->items[i]) == val)
			it = &b->items[i];
	if (!it) {
		sim_fail(W, "sim", "worker %d forwarded bytes of no batch item", P->id);
		return true;
	}
	m->r.part = it->rec.partition;
	m->r.off = it->rec.offset;
	m->r.forward_to = m->partition;
	W->stats->forwards_queued++;
	if (b == &p->again) {
		W->stats->forwards_again++;
		if (W->mutation == MUT_NO_REFORWARD)
			return false;
	}
	return true;
}

static void queue_msg(struct sim_proc *P, enum fs_topic topic, int32_t partition, const void *key,
		      size_t key_len, const void *value, size_t len, struct inflight *tag)
{
	static const char cart_msg[] = "{\"v\":1,\"type\":\"cart_";
	struct sim_msg m = {.topic = topic, .partition = partition, .tag = tag};
	m.r.forward_to = -1;
	if (topic == FS_TOPIC_RESULTS) {
		result_meta(P, key, value, len, &m);
	} else if (topic == FS_TOPIC_INTENTS && !key) {
		m.tick = true;
	} else if (topic == FS_TOPIC_INTENTS && len > sizeof cart_msg - 1 &&
		   memcmp(value, cart_msg, sizeof cart_msg - 1) == 0) {
		m.cart = true; /* the carts' protocol, from the outbox */
		P->W->stats->cart_messages++;
	} else if (topic == FS_TOPIC_INTENTS && !forward_meta(P, value, &m)) {
		/* Not tracked: reported delivered, never landed. */
		*VEC_PUSH(P->reports) = (struct sim_report){.tag = tag};
		return;
	}
	m.key = key ? sim_strndup(key, key_len) : NULL;
	m.key_len = key ? key_len : 0;
	m.val = sim_strndup(value, len);
	m.len = len;
	*VEC_PUSH(P->queue) = m;
}

int wio_produce(struct wio *io, enum fs_topic topic, int32_t partition, const void *key,
		size_t key_len, const void *value, size_t len, struct inflight *tag)
{
	struct sim_proc *P = io->P;
	yield(P, "produce");
	queue_msg(P, topic, partition, key, key_len, value, len, tag);
	return 0;
}

int wio_produce_results(struct wio *io, uint32_t n, struct inflight *tag)
{
	struct sim_proc *P = io->P;
	struct worker *w = P->w;
	yield(P, "produce");
	for (uint32_t i = 0; i < n; i++)
		queue_msg(P, FS_TOPIC_RESULTS, FS_PARTITION_ANY, w->outs[i].key, w->outs[i].key_len,
			  w->results.data + w->outs[i].at, w->outs[i].len, tag);
	return (int)n;
}

int wio_append_tick(struct wio *io, int32_t partition)
{
	static const char tick[] = "{\"v\":1,\"type\":\"tick\"}";
	struct sim_proc *P = io->P;
	queue_msg(P, FS_TOPIC_INTENTS, partition, NULL, 0, tick, sizeof tick - 1, NULL);
	P->W->stats->ticks_appended++;
	TRACE(P->W, "w%d p%d tick queued", P->id, (int)partition);
	return 0;
}

void wio_serve(struct wio *io)
{
	struct sim_proc *P = io->P;
	/* publisher_delivered may log; the reports are taken first. */
	for (size_t i = 0; i < P->reports.len; i++)
		publisher_delivered(P->w, P->reports.v[i].tag,
				    P->reports.v[i].failed ? "simulated delivery failure" : NULL,
				    0);
	P->reports.len = 0;
}

int wio_flush(struct wio *io, int64_t timeout_ms)
{
	struct sim_proc *P = io->P;
	P->co[P->cur].until = P->W->now_ms + timeout_ms;
	P->co[P->cur].block = CO_FLUSH;
	yield(P, "flush");
	wio_serve(io);
	return P->queue.len ? -ETIMEDOUT : 0;
}

/* What the broker does with a message it accepted: a result joins the results log, a forward
 * or a tick is appended to the intents partition it names (the broker stamps it). */
static void land(struct sim_world *W, struct sim_msg *m)
{
	if (m->topic == FS_TOPIC_STOCK)
		return;
	if (m->topic == FS_TOPIC_RESULTS) {
		struct sim_result *r = VEC_PUSH(W->results);
		*r = m->r;
		r->json = sim_strndup(m->r.json, strlen(m->r.json));
		return;
	}
	if (!m->tick && !m->cart) {
		W->stats->forwards_landed++;
		VEC(uint8_t) *l = (void *)&W->landed[m->r.part];
		while ((int64_t)l->len <= m->r.off)
			*VEC_PUSH(*l) = 0;
		l->v[m->r.off] = 1;
	}
	sim_log_append(W, m->partition, m->key, m->key_len, m->val, m->len);
}

void proc_deliver(struct sim_world *W, struct sim_proc *P, size_t i)
{
	struct sim_msg m = P->queue.v[i];
	memmove(&P->queue.v[i], &P->queue.v[i + 1], (P->queue.len - i - 1) * sizeof m);
	P->queue.len--;
	bool fail = !W->healing && rng_chance(&W->rng, W->f.deliver_fail);
	bool twice = !W->healing && !fail && rng_chance(&W->rng, W->f.deliver_double);
	if (fail) {
		W->stats->deliver_failed++;
	} else {
		W->stats->delivered++;
		if (twice) {
			W->stats->deliver_doubled++;
			land(W, &m);
		}
		land(W, &m);
	}
	*VEC_PUSH(P->reports) = (struct sim_report){.tag = m.tag, .failed = fail};
	msg_free(&m);
}

/* ---- the committer threads ------------------------------------------------------------------ */

int wio_thread_start(struct wio *io, int k, void *(*fn)(void *), void *arg)
{
	co_make(io->P, 1 + k, fn, arg);
	return 0;
}

void wio_thread_join(struct wio *io, int k)
{
	struct sim_proc *P = io->P;
	P->co[P->cur].join = 1 + k;
	P->co[P->cur].block = CO_JOIN;
	yield(P, "join");
}

void wio_lock(struct wio *io)
{
	struct sim_proc *P = io->P;
	if (P->lock_owner == P->cur)
		sim_fail(P->W, "sim", "worker %d: coroutine %d takes the lock it holds", P->id,
			 P->cur);
	do {
		P->co[P->cur].block = CO_LOCK;
		yield(P, "lock");
	} while (P->lock_owner >= 0);
	P->lock_owner = P->cur;
}

void wio_unlock(struct wio *io)
{
	struct sim_proc *P = io->P;
	if (P->lock_owner != P->cur)
		sim_fail(P->W, "sim", "worker %d: coroutine %d releases a lock it does not hold",
			 P->id, P->cur);
	P->lock_owner = -1;
}

void wio_wait(struct wio *io)
{
	struct sim_proc *P = io->P;
	wio_unlock(io);
	P->co[P->cur].block = CO_WAIT;
	yield(P, "wait");
	while (P->lock_owner >= 0) {
		P->co[P->cur].block = CO_LOCK;
		yield(P, "lock");
	}
	P->lock_owner = P->cur;
}

void wio_broadcast(struct wio *io)
{
	struct sim_proc *P = io->P;
	for (int k = 0; k < SIM_CO_MAX; k++)
		if (P->co[k].used && P->co[k].block == CO_WAIT)
			P->co[k].block = CO_READY;
}

void wio_wake(struct wio *io)
{
	io->P->woken = true;
}

/* ---- the store (src/io/store.h) over sim_store.c ------------------------------------------ */

struct fs_store {
	struct sim_proc *P;
	bool broken; /* the connection died: calls fail until fs_store_ensure */
	char err[160];
	char token[FS_STORE_TOKEN_SIZE];
	uint64_t token_n;
	int64_t att_next; /* the last attempt's batch end */
	struct ss_tx tx;
	bool refused; /* the last commit was refused for good */
	bool sending; /* a commit is on its way on this connection (a committer's) */
};

/* A store is one connection: a call on it while a committer's commit is on its way would
 * interleave two conversations on one socket (the real one hangs or mixes replies). */
static void store_exclusive(struct fs_store *s, const char *what)
{
	if (s->sending)
		sim_fail(s->P->W, "sim",
			 "worker %d: %s on a store whose connection is sending a commit (one "
			 "connection, two threads)",
			 s->P->id, what);
}

/* A transient fault (connection lost, server restarting): the call does nothing. */
static bool store_fails(struct fs_store *s, const char *what)
{
	struct sim_world *W = s->P->W;
	if (s->broken || (!W->healing && rng_chance(&W->rng, W->f.store_err))) {
		if (!s->broken)
			W->stats->store_errors++;
		s->broken = true;
		snprintf(s->err, sizeof s->err, "%s: simulated connection loss", what);
		return true;
	}
	return false;
}

int fs_store_open(const char *conninfo, struct fs_store **out)
{
	(void)conninfo;
	struct fs_store *s = calloc(1, sizeof *s);
	if (!s)
		abort();
	s->P = running;
	*out = s;
	return 0;
}

void fs_store_close(struct fs_store *s)
{
	if (!s)
		return;
	ss_tx_free(&s->tx);
	free(s);
}

int fs_store_refused_at(struct fs_store *s, int32_t partition, int64_t offset)
{
	store_exclusive(s, "a reject lookup");
	if (store_fails(s, "refused_at"))
		return -EIO;
	const struct sim_store *st = s->P->W->store;
	for (size_t i = 0; i < st->rejects.len; i++)
		if (st->rejects.v[i].part == partition && st->rejects.v[i].off == offset)
			return strcmp(st->rejects.v[i].reason, "store_refused") == 0;
	return 0;
}

/* Its faults pass; only SIM_REFUSED_BUYER's decisions are refused for good. */
bool fs_store_refused(const struct fs_store *s)
{
	return s->refused;
}

bool fs_store_sql_error(const struct fs_store *s)
{
	(void)s;
	return false; /* the simulated store's rollbacks are its guards' */
}

const char *fs_store_error(const struct fs_store *s)
{
	return s ? s->err : "no store";
}

int64_t fs_store_stalled_broken(const struct fs_store *s)
{
	(void)s;
	return 0;
}

int fs_store_ensure(struct fs_store *s)
{
	if (!s->broken)
		return 0;
	yield(s->P, "connect");
	struct sim_world *W = s->P->W;
	if (!W->healing && rng_chance(&W->rng, W->f.store_err)) {
		snprintf(s->err, sizeof s->err, "connect: simulated refusal");
		return -EIO;
	}
	s->broken = false;
	return 0;
}

void fs_store_set_crash_hook(struct fs_store *s, fs_crash_fn fn)
{
	(void)s;
	(void)fn;
}

/* The qty of the store's confirmed reservations of a partition, of one SKU or one buyer. */
static int64_t confirmed_units(const struct sim_world *W, int32_t part, const char *sku,
			       const char *buyer)
{
	int64_t units = 0;
	for (size_t i = 0; i < W->store->resv.len; i++) {
		const struct ss_resv *r = &W->store->resv.v[i];
		if (r->part == part && strcmp(r->status, "confirmed") == 0 &&
		    strcmp(r->sku, sku) == 0 && (!buyer || strcmp(r->buyer, buyer) == 0))
			units += r->qty;
	}
	return units;
}

/* The units the loaded cart groups hold (pending or held) or sold of SKU k, of one buyer or all
 * (carts, issue 31: their lines count as holds do). */
static int64_t group_units(const struct fs_core *c, uint32_t k, const char *buyer, bool sold)
{
	int64_t units = 0;
	for (uint32_t i = 0; c->carts && i < c->carts->groups_len; i++) {
		const struct fs_group *g = &c->carts->groups[i];
		bool counts = sold ? g->state == FS_GROUP_SOLD
				   : g->state == FS_GROUP_PENDING || g->state == FS_GROUP_HELD;
		if (!counts || (buyer && strcmp(g->buyer_id, buyer) != 0))
			continue;
		for (uint32_t l = 0; l < g->nlines; l++)
			if (g->lines[l].sku_index == k)
				units += g->lines[l].qty;
	}
	return units;
}

/* A state loaded from one snapshot of the store is consistent with itself: per SKU, held is
 * its loaded holds' (the live ones only: issue 28, item 12) and sold the store's confirmed
 * reservations'; per buyer, units are its held holds' and confirmed reservations'. */
static void check_loaded(struct sim_world *W, const struct fs_core *c, int32_t part)
{
	for (uint32_t k = 0; k < c->skus_len; k++) {
		int64_t held = group_units(c, k, NULL, false),
			sold = confirmed_units(W, part, c->skus[k].sku, NULL) +
			       group_units(c, k, NULL, true);
		for (uint32_t i = 0; i < c->holds_len; i++) {
			const struct fs_hold *h = &c->holds[i];
			if (h->sku_index == k && h->status == FS_HOLD_HELD)
				held += h->qty;
			if (h->status != FS_HOLD_HELD)
				sim_fail(W, "INV-1", "partition %d loaded hold %s, which ended",
					 (int)part, h->intent_id);
		}
		if (held != c->skus[k].held || sold != c->skus[k].sold)
			sim_fail(W, "INV-1",
				 "partition %d loaded sku %s with held %lld sold %lld, but its "
				 "holds say %lld and %lld (a torn snapshot)",
				 (int)part, c->skus[k].sku, (long long)c->skus[k].held,
				 (long long)c->skus[k].sold, (long long)held, (long long)sold);
	}
	for (uint32_t b = 0; b < c->buyers_len; b++) {
		const struct fs_buyer *u = &c->buyers[b];
		int64_t units = confirmed_units(W, part, c->skus[u->sku_index].sku, u->buyer_id) +
				group_units(c, u->sku_index, u->buyer_id, false) +
				group_units(c, u->sku_index, u->buyer_id, true);
		for (uint32_t i = 0; i < c->holds_len; i++) {
			const struct fs_hold *h = &c->holds[i];
			if (h->buyer_index == b && h->status == FS_HOLD_HELD)
				units += h->qty;
		}
		if (units != c->buyers[b].units)
			sim_fail(W, "INV-1",
				 "partition %d loaded buyer %s with %lld units, but its holds say "
				 "%lld (a torn snapshot)",
				 (int)part, c->buyers[b].buyer_id, (long long)c->buyers[b].units,
				 (long long)units);
	}
}

int fs_store_load(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		  struct fs_core *core, struct fs_part_meta *meta)
{
	(void)grp;
	(void)topic;
	struct sim_world *W = s->P->W;
	store_exclusive(s, "a load");
	for (int step = 0; step < SS_LOAD_STEPS; step++) {
		yield(s->P, step == 0 ? "load" : "load_snapshot");
		if (store_fails(s, "load"))
			return -EIO;
		int rc = ss_load_step(W->store, step, partition, core, meta);
		if (rc < 0) {
			/* One snapshot of a consistent store loads: part_load would retry forever.
			 */
			sim_fail(W, "INV-7",
				 "worker %d partition %d: loading one snapshot fails (%d): the "
				 "stored state does not load",
				 s->P->id, (int)partition, rc);
			snprintf(s->err, sizeof s->err, "load: %d", rc);
			return rc;
		}
	}
	check_loaded(W, core, partition);
	return 0;
}

/* trace.batches is never set in the simulator. */
int64_t fs_store_phase_us(const struct fs_store *s)
{
	(void)s;
	return 0;
}

const char *fs_store_token(const struct fs_store *s)
{
	return s->token;
}

int fs_store_read_next(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
		       const char *token, int64_t *next_offset, bool *mine)
{
	(void)grp;
	(void)topic;
	struct sim_world *W = s->P->W;
	yield(s->P, "read_next");
	if (store_fails(s, "read_next"))
		return -EIO;
	uint64_t stored_token;
	if (ss_read_next(W->store, partition, next_offset, &stored_token) < 0) {
		snprintf(s->err, sizeof s->err, "read_next: no partition row");
		return -EIO;
	}
	uint64_t t = strncmp(token, "sim-", 4) == 0 ? strtoull(token + 4, NULL, 10) : 0;
	*mine = t && stored_token == t;
	if (*next_offset == s->att_next && !*mine)
		W->stats->unknown_same_range++;
	TRACE(W, "w%d p%d read back: stored %" PRId64 " (token %" PRIu64 ", %s)", s->P->id,
	      (int)partition, *next_offset, stored_token, *mine ? "mine" : "not mine");
	return 0;
}

int fs_store_topic_rule(struct fs_store *s, const char *topic, const struct fs_topic_rule *mine,
			struct fs_topic_rule *rec)
{
	(void)s;
	(void)topic;
	*rec = *mine;
	return 0;
}

int fs_store_save_replied(struct fs_store *s, const char *grp, const char *topic, int32_t partition,
			  int64_t next_offset, int64_t replied_offset)
{
	(void)grp;
	(void)topic;
	yield(s->P, "save_replied");
	if (store_fails(s, "save_replied"))
		return -EIO;
	return ss_save_replied(s->P->W->store, partition, next_offset, replied_offset);
}

struct expired_rows {
	VEC(struct ss_resv) v;
};

static void collect_expired(void *ctx, const struct ss_resv *r)
{
	struct expired_rows *e = ctx;
	*VEC_PUSH(e->v) = *r;
}

int fs_store_expired(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		     fs_expired_fn fn, void *ctx)
{
	yield(s->P, "expired");
	if (store_fails(s, "expired"))
		return -EIO;
	/* The rows are copied first: fn produces (a yield), and other commits may move the
	 * tables meanwhile. */
	struct expired_rows e = {0};
	ss_expired(s->P->W->store, partition, from, to, collect_expired, &e);
	for (size_t i = 0; i < e.v.len; i++) {
		const struct ss_resv *r = &e.v.v[i];
		fn(ctx, r->intent_id, r->sku, r->qty, r->ended_at_ms, r->ended_off);
	}
	free(e.v.v);
	return 0;
}

struct out_rows {
	VEC(struct ss_out) v;
};

static void collect_out(void *ctx, const struct ss_out *o)
{
	struct out_rows *e = ctx;
	*VEC_PUSH(e->v) = *o;
}

int fs_store_cart_out(struct fs_store *s, int32_t partition, int64_t from, int64_t to,
		      fs_cart_out_fn fn, void *ctx)
{
	yield(s->P, "cart_out");
	if (store_fails(s, "cart_out"))
		return -EIO;
	/* Copied first, as the expiries: fn produces (a yield). */
	struct out_rows e = {0};
	if (s->P->W->mutation != MUT_NO_CART_RESEND)
		ss_cart_out(s->P->W->store, partition, from, to, collect_out, &e);
	for (size_t i = 0; i < e.v.len; i++) {
		const struct ss_out *o = &e.v.v[i];
		fn(ctx, o->intents, o->to, o->key, o->payload, strlen(o->payload));
	}
	free(e.v.v);
	return 0;
}

int fs_store_lookup(struct fs_store *s, struct fs_batch *b)
{
	struct sim_world *W = s->P->W;
	store_exclusive(s, "a lookup");
	yield(s->P, "lookup");
	if (store_fails(s, "lookup"))
		return -EIO;
	int rc = ss_lookup(W->store, b);
	if (rc < 0) {
		/* -ENOBUFS fails the same way every time: the real loops would retry forever. */
		sim_fail(W, "INV-7",
			 "worker %d: the lookup returns more stored decisions than the batch of %u "
			 "items holds (%d)",
			 s->P->id, b->len, rc);
		snprintf(s->err, sizeof s->err, "lookup: %d", rc);
	}
	return rc;
}

int fs_store_lookup_holds(struct fs_store *s, const struct fs_batch *b, struct fs_core *core)
{
	store_exclusive(s, "a lookup of holds");
	yield(s->P, "lookup");
	if (store_fails(s, "lookup"))
		return -EIO;
	return ss_lookup_holds(s->P->W->store, b, core);
}

int fs_store_commit_prepare(struct fs_store *s, const char *grp, const char *topic,
			    const struct fs_part_meta *meta, int64_t next_offset,
			    int64_t replied_offset, const struct fs_batch *b,
			    const struct fs_core *core, bool careful, const char *after)
{
	(void)grp;
	(void)topic;
	struct sim_world *W = s->P->W;
	ss_tx_build(&s->tx, meta, next_offset, replied_offset, b, core, careful);
	s->tx.stacked = after != NULL;
	s->tx.pred_token =
		after && strncmp(after, "sim-", 4) == 0 ? strtoull(after + 4, NULL, 10) : 0;
	/* A token per attempt (the store's random id and a counter in add_cas). */
	s->token_n = ++W->commit_tokens;
	snprintf(s->token, sizeof s->token, "sim-%" PRIu64, s->token_n);
	s->att_next = next_offset;
	return 0;
}

int fs_store_commit_send(struct fs_store *s, fs_cas_fn cas, void *ctx)
{
	struct sim_world *W = s->P->W;
	const struct ss_tx *t = &s->tx;
	const struct fs_tx_cas *c = &t->built.cas;
	int32_t part = c->partition;
	/* BEGIN and the rows on their way (after: the COPYs before the compare-and-set), COMMIT
	 * not yet: nothing is committed whichever of the real store's crash points this is. */
	static const char *const sent[] = {"after_cas_sent", "idle_in_tx", "in_copy",
					   "before_commit"};
	store_exclusive(s, "a commit");
	s->sending = true;
	yield(s->P, sent[rng_below(&W->rng, 4)]);
	if (store_fails(s, "commit")) {
		if (cas)
			cas(ctx, false);
		s->sending = false;
		return FS_COMMIT_RETRY; /* nothing reached COMMIT */
	}
	if (t->stacked && cas)
		cas(ctx, true); /* its compare-and-set waits for the one before */
	/* A cut commit that is going to be fenced reads back another worker's offset, maybe its
	 * own batch's end (the same range committed by another): aim at it. */
	enum ss_fault fault = SS_FAULT_NONE;
	bool stale = W->store->parts[part].next_offset != c->expected;
	if (!W->healing && rng_chance(&W->rng, W->f.commit_unknown * (stale ? 3 : 1)))
		fault = rng_below(&W->rng, 2) ? SS_FAULT_CUT_APPLIED : SS_FAULT_CUT_LOST;
	int64_t before;
	bool applied;
	int rc = ss_tx_apply(W->store, t, s->token_n, fault, &before, &applied);
	s->refused = rc == FS_COMMIT_REDO && W->store->refused;
	W->stats->commits++;
	TRACE(W,
	      "w%d p%d commit [%" PRId64 "..%" PRId64 ") expected %" PRId64 " stored %" PRId64
	      "%s -> %d%s (repeats %" PRId64 " conflicts %" PRId64 ")",
	      s->P->id, (int)part, c->first_off, c->next, c->expected, before,
	      t->stacked ? " (stacked)" : "", rc, applied ? " applied" : "", c->counts.repeats,
	      c->counts.conflicts);
	if (applied)
		sim_observe_commit(W, part, before, c->next, t->offsets.v, t->offsets.len);
	if (fault != SS_FAULT_NONE) {
		if (applied)
			W->stats->unknown_applied++;
		else
			W->stats->unknown_lost++;
		s->broken = true;
		snprintf(s->err, sizeof s->err, "commit: simulated connection loss after COMMIT");
	} else if (rc == FS_COMMIT_REDO) {
		snprintf(s->err, sizeof s->err, "commit: %s failed",
			 W->store->failed_stmt ? W->store->failed_stmt : "a statement");
	} else if (rc == FS_COMMIT_FENCED) {
		snprintf(s->err, sizeof s->err, "commit: fenced");
	}
	if (W->store->check_failed[0])
		sim_fail(W, strncmp(W->store->check_failed, "partitions", 10) ? "INV-1" : "INV-5",
			 "the store refused a row: %s (partition %d)", W->store->check_failed,
			 (int)part);
	if (cas)
		cas(ctx, false);
	yield(s->P, "commit_sent"); /* committed or not, and nobody told yet */
	s->sending = false;
	return rc;
}

int fs_store_commit(struct fs_store *s, const char *grp, const char *topic,
		    const struct fs_part_meta *meta, int64_t next_offset, int64_t replied_offset,
		    const struct fs_batch *b, const struct fs_core *core, bool careful)
{
	fs_store_commit_prepare(s, grp, topic, meta, next_offset, replied_offset, b, core, careful,
				NULL);
	return fs_store_commit_send(s, NULL, NULL);
}
