/* move.c: `flashsale move`, a sale moved to an intents topic of another partition count,
 * by replay (docs/reference/operations.md, "Growing the intents topic").
 *
 * The partition count is part of the partitioning rule, so a topic cannot grow in place. With
 * the web tier stopped and every record decided, this copies every record of the intents log
 * that was decided where it lies into a new intents topic (another configuration: new topics,
 * a new database), in an order that keeps each partition's order and each record's partition
 * clock: a merge of the partitions by their clocks (the records' timestamps made monotonic),
 * each record stamped with its partition's clock. The new topic is created with CreateTime so
 * that the copies keep those stamps, and set to LogAppendTime once they are in. A replay of
 * the new topic (`flashsale -c FILE replay`) then decides every buy, confirm and cancel as the
 * old log did: a SKU's records, its clock at each of them and its holds' expiries before each
 * are the same. What differs is bookkeeping: partitions and offsets, and when an expiry is
 * recorded (the worker's ticks are not copied; the new workers tick their own partitions). */
#include "cli/cli.h"

#include "io/config.h"
#include "core/record.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	MOVE_POLL_MS = 200,
	MOVE_IDLE_POLLS_MAX = 300, /* 60 s without a record while some are still expected */
	MOVE_FLUSH_MS = 120000,
	MOVE_ADMIN_MS = 30000,
};

/* One record of the old log, its bytes copied. */
struct mrec {
	int64_t off, ts;
	char *key, *val;
	size_t key_len, val_len;
};

struct mpart {
	struct mrec *v;
	size_t len, cap;
	int64_t end;   /* the log end when the move started */
	size_t next;   /* the merge's position */
	int64_t clock; /* the partition clock at the last record merged */
};

static const char usage_move[] =
	"usage: flashsale move --to FILE --partitions N\n"
	"\n"
	"Moves the sale to an intents topic of N partitions, by replay: the partition count is\n"
	"part of the partitioning rule (murmur2 % partitions), so a topic cannot grow in place.\n"
	"FILE is the new configuration: other topic names and a new, empty database (sql/*.sql\n"
	"applied), the same brokers. First stop the web tier and let the workers decide every\n"
	"record (flashsale wait); the move refuses while a record is undecided. It creates FILE's\n"
	"topics with N partitions and copies every record that was decided where it lies (not the\n"
	"ticks, not the records forwarded or rejected wrong_partition) in the log's order, with\n"
	"its partition's clock as its timestamp. Then rebuild the state with\n"
	"`flashsale -c FILE replay`, start the workers with -c FILE, and point the web tier at\n"
	"FILE's topics. The old topics and database are left as they were. A sale with carts\n"
	"is refused (their records between partitions name the old partitions). Exit 1 on any\n"
	"error\n"
	"(if the new topics were created by then, delete them with `flashsale -c FILE topics\n"
	"delete` before moving again).\n";

static int mpart_push(struct mpart *p, const rd_kafka_message_t *m, int64_t ts)
{
	if (p->len == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 1024;
		struct mrec *v = realloc(p->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		p->v = v;
		p->cap = cap;
	}
	struct mrec *r = &p->v[p->len];
	r->off = m->offset;
	r->ts = ts;
	r->key_len = m->key ? m->key_len : 0;
	r->val_len = m->len;
	r->key = r->key_len ? malloc(r->key_len) : NULL;
	r->val = malloc(r->val_len ? r->val_len : 1);
	if ((r->key_len && !r->key) || !r->val) {
		free(r->key);
		free(r->val);
		return -ENOMEM;
	}
	if (r->key_len)
		memcpy(r->key, m->key, r->key_len);
	if (r->val_len)
		memcpy(r->val, m->payload, r->val_len);
	p->len++;
	return 0;
}

/* Reads every partition up to its end (p[i].end) into memory. 0, or 1 (said). */
static int read_log(flashsale_t *fs, const char *topic, struct mpart *p, int n)
{
	int64_t *lo = calloc((size_t)n, sizeof *lo);
	rd_kafka_t *rk = lo ? cli_topic_reader(fs, topic, n, "flashsale-move", lo) : NULL;
	if (!rk) {
		free(lo);
		return 1;
	}
	int rc = 0, idle = 0;
	for (int i = 0; i < n && rc == 0; i++)
		if (lo[i] > 0) {
			cli_err("move: %s partition %d starts at offset %" PRId64 ": records below "
				"it are gone, they cannot be moved",
				topic, i, lo[i]);
			rc = 1;
		}
	for (;;) {
		bool all = true;
		for (int i = 0; i < n; i++)
			all = all && (int64_t)p[i].len >= p[i].end;
		if (all || rc || idle > MOVE_IDLE_POLLS_MAX)
			break;
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, MOVE_POLL_MS);
		if (!m) {
			idle++;
			continue;
		}
		idle = 0;
		if (!m->err && m->partition >= 0 && m->partition < n) {
			struct mpart *q = &p[m->partition];
			if (m->offset == (int64_t)q->len && m->offset < q->end) {
				rd_kafka_timestamp_type_t type;
				int64_t ts = rd_kafka_message_timestamp(m, &type);
				if (mpart_push(q, m, ts < 0 ? 0 : ts) < 0) {
					cli_err("move: out of memory reading the log");
					rc = 1;
				}
			}
		}
		rd_kafka_message_destroy(m);
	}
	for (int i = 0; i < n && rc == 0; i++)
		if ((int64_t)p[i].len < p[i].end) {
			cli_err("move: %s partition %d could not be read up to offset %" PRId64,
				topic, i, p[i].end);
			rc = 1;
		}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	free(lo);
	return rc;
}

/* What the new topic gets: what was decided where it lies. Ticks are the worker's own (the
 * new workers append theirs); a record off the rule's partition was forwarded (its copy is in
 * the log) or rejected wrong_partition (it never took effect). */
static bool moved(const struct fs_record_limits *lim, const struct mrec *r, int32_t part)
{
	struct fs_record rec;
	fs_record_parse(lim, r->key, r->key_len, r->val, r->val_len, part, r->off, r->ts, &rec);
	return rec.kind != FS_KIND_TICK && !fs_record_off_route(&rec);
}

/* The next record of the merge: the partition whose next record's clock is the lowest (ties:
 * the lowest partition), so each partition's order and clock are kept. -1 when done. */
static int merge_next(const struct mpart *p, int n, int64_t *clock)
{
	int best = -1;
	int64_t best_clock = 0;
	for (int i = 0; i < n; i++) {
		if (p[i].next >= p[i].len)
			continue;
		int64_t ts = p[i].v[p[i].next].ts;
		int64_t c = ts > p[i].clock ? ts : p[i].clock;
		if (best < 0 || c < best_clock) {
			best = i;
			best_clock = c;
		}
	}
	*clock = best_clock;
	return best;
}

/* Produces the kept records, merged, to the new intents topic (by the rule, with the new
 * count; a record without a key to partition 0, where it is rejected again as before). */
static int copy_log(flashsale_t *to, const struct fs_record_limits *lim, struct mpart *p, int n,
		    int64_t *copied)
{
	rd_kafka_t *rk = flashsale_producer(to);
	if (!rk) {
		cli_err("move: %s", flashsale_error(to));
		return 1;
	}
	const char *topic = flashsale_config(to)->topic_intents;
	int64_t clock;
	for (int i; (i = merge_next(p, n, &clock)) >= 0;) {
		struct mrec *r = &p[i].v[p[i].next++];
		p[i].clock = clock;
		if (!moved(lim, r, i))
			continue;
		for (;;) {
			rd_kafka_resp_err_t e = rd_kafka_producev(
				rk, RD_KAFKA_V_TOPIC(topic),
				RD_KAFKA_V_PARTITION(r->key_len ? RD_KAFKA_PARTITION_UA : 0),
				RD_KAFKA_V_KEY(r->key, r->key_len),
				RD_KAFKA_V_VALUE(r->val, r->val_len), RD_KAFKA_V_TIMESTAMP(clock),
				RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
			if (!e)
				break;
			if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
				cli_err("move: produce to %s: %s", topic, rd_kafka_err2str(e));
				return 1;
			}
			rd_kafka_poll(rk, 50); /* queue full: serve delivery reports */
		}
		(*copied)++;
	}
	if (flashsale_flush(to, MOVE_FLUSH_MS) < 0) {
		cli_err("move: %s", flashsale_error(to));
		return 1;
	}
	return 0;
}

/* The new intents topic from here on stamps what it appends (LogAppendTime), with unlimited
 * retention again (AlterConfigs replaces the topic's whole configuration). */
static int set_log_append_time(flashsale_t *to)
{
	rd_kafka_t *rk = flashsale_producer(to);
	const char *topic = flashsale_config(to)->topic_intents;
	rd_kafka_ConfigResource_t *res =
		rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
	rd_kafka_ConfigResource_set_config(res, "message.timestamp.type", "LogAppendTime");
	rd_kafka_ConfigResource_set_config(res, "retention.ms", "-1");
	rd_kafka_ConfigResource_set_config(res, "retention.bytes", "-1");
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_AlterConfigs(rk, &res, 1, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, MOVE_ADMIN_MS);
	int rc = 0;
	if (!ev || rd_kafka_event_error(ev)) {
		cli_err("move: %s: %s", topic, ev ? rd_kafka_event_error_string(ev) : "timed out");
		rc = 1;
	} else {
		size_t n = 0;
		const rd_kafka_ConfigResource_t **r = rd_kafka_AlterConfigs_result_resources(
			rd_kafka_event_AlterConfigs_result(ev), &n);
		for (size_t i = 0; i < n; i++)
			if (rd_kafka_ConfigResource_error(r[i])) {
				cli_err("move: %s: %s", topic,
					rd_kafka_ConfigResource_error_string(r[i]));
				rc = 1;
			}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	rd_kafka_ConfigResource_destroy(res);
	return rc;
}

/* The new configuration must be new: its intents topic absent, its database never decided
 * anything for it. */
static int check_target(flashsale_t *from, flashsale_t *to)
{
	const struct fs_config *a = flashsale_config(from), *b = flashsale_config(to);
	if (strcmp(a->topic_intents, b->topic_intents) == 0 || strcmp(a->pg, b->pg) == 0) {
		cli_err("move: %s must name other topics and another database", "--to");
		return 1;
	}
	rd_kafka_t *rk = flashsale_producer(to);
	PGconn *pg = flashsale_pg(to);
	if (!rk || !pg) {
		cli_err("move: %s", flashsale_error(to));
		return 1;
	}
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, b->topic_intents, NULL);
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, MOVE_ADMIN_MS);
	rd_kafka_topic_destroy(t);
	bool exists = !e && md->topic_cnt == 1 && !md->topics[0].err;
	if (md)
		rd_kafka_metadata_destroy(md);
	if (exists) {
		cli_err("move: topic %s exists already; the move creates it", b->topic_intents);
		return 1;
	}
	const char *q[] = {b->topic_intents};
	PGresult *r =
		PQexecParams(pg,
			     "SELECT (SELECT count(*) FROM partitions WHERE topic = $1) + "
			     "(SELECT count(*) FROM topics WHERE topic = $1) + (SELECT count(*) "
			     "FROM decisions)",
			     1, NULL, q, NULL, NULL, 0);
	int rc = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		cli_err("move: the new database: %s", PQerrorMessage(pg));
		rc = 1;
	} else if (strcmp(PQgetvalue(r, 0, 0), "0") != 0) {
		cli_err("move: the database of %s has decided records already: give it an empty "
			"one",
			"--to");
		rc = 1;
	}
	PQclear(r);
	return rc;
}

/* The old log is at rest: every record decided, the web tier stopped. Fills each end. */
static int check_source(flashsale_t *from, struct mpart **parts, int *nparts,
			struct fs_record_limits *lim)
{
	const struct fs_config *a = flashsale_config(from);
	PGconn *pg = flashsale_pg(from);
	if (!pg) {
		cli_err("move: %s", flashsale_error(from));
		return 1;
	}
	if (cli_topic_rule(pg, a->topic_intents, lim) < 0)
		return 1;
	int64_t *ends = NULL;
	int n = cli_topic_ends(from, a->topic_intents, &ends);
	if (n < 0)
		return 1;
	int64_t left = cli_undecided(from, ends, n);
	if (left != 0) {
		if (left > 0)
			cli_err("move: %" PRId64 " records of %s are not decided yet: stop the web "
				"tier and run flashsale wait first",
				left, a->topic_intents);
		else
			cli_err("move: postgres: %s", flashsale_error(from));
		free(ends);
		return 1;
	}
	*parts = calloc((size_t)n, sizeof **parts);
	if (!*parts) {
		free(ends);
		return 1;
	}
	for (int i = 0; i < n; i++)
		(*parts)[i].end = ends[i];
	*nparts = n;
	free(ends);
	return 0;
}

static void free_parts(struct mpart *p, int n)
{
	for (int i = 0; p && i < n; i++) {
		for (size_t k = 0; k < p[i].len; k++) {
			free(p[i].v[k].key);
			free(p[i].v[k].val);
		}
		free(p[i].v);
	}
	free(p);
}

/* The configuration of FILE, as main reads -c (the environment does not override it: it names
 * another database). */
static flashsale_t *open_target(const char *file)
{
	static struct fs_config cfg;
	char err[FS_CONF_ERR_MAX];
	fs_config_defaults(&cfg);
	if (fs_config_load_file(&cfg, file, err) < 0) {
		cli_err("move: %s", err);
		return NULL;
	}
	flashsale_t *to = flashsale_new(&cfg, err, sizeof err);
	if (!to)
		cli_err("move: %s", err);
	return to;
}

/* Carts (issue 31) are decided by protocol records between partitions whose numbers are the
 * old topic's: a move would copy them onto partitions that mean other ones. Until a move can
 * carry carts, a sale with any is refused. 0: none; 1: refused (said why). */
static int refuse_carts(flashsale_t *fs)
{
	PGconn *pg = flashsale_pg(fs);
	if (!pg) {
		cli_err("move: %s", flashsale_error(fs));
		return 1;
	}
	PGresult *r = PQexec(pg, "SELECT EXISTS (SELECT 1 FROM carts)");
	int rc = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		cli_err("move: postgres: %s", PQerrorMessage(pg));
		rc = 1;
	} else if (PQgetvalue(r, 0, 0)[0] == 't') {
		cli_err("move: %s has carts: a sale with carts cannot be moved yet (their records "
			"between partitions name the old topic's partitions; issue 31)",
			flashsale_config(fs)->topic_intents);
		rc = 1;
	}
	PQclear(r);
	return rc;
}

int cli_move(flashsale_t *fs, int argc, char **argv)
{
	const char *file = NULL;
	int64_t n_new = 0;
	const struct cli_opt spec[] = {
		{"to", CLI_STR, &file, 0, 0},
		{"partitions", CLI_INT, &n_new, 1, 1024},
		{NULL, 0, NULL, 0, 0},
	};
	int rc = cli_parse(argc, argv, usage_move, spec, 0, 0);
	if (rc >= 0)
		return rc;
	if (!file || n_new < 1)
		return cli_usage(usage_move);
	if (refuse_carts(fs))
		return 1;
	flashsale_t *to = open_target(file);
	if (!to)
		return 1;
	struct fs_record_limits lim = {.bytes_max = (size_t)flashsale_config(fs)->record_max_bytes};
	struct mpart *p = NULL;
	int n = 0;
	int64_t copied = 0, records = 0;
	rc = check_target(fs, to) || check_source(fs, &p, &n, &lim);
	if (rc == 0 && (int64_t)lim.bytes_max != flashsale_config(to)->record_max_bytes) {
		/* The new database's worker decides with its own cap: the same, or it differs. */
		cli_err("move: %s sets record.max.bytes = %" PRId64 ", but %s was decided with %zu "
			"(a replay must decide alike): set it to %zu there",
			file, flashsale_config(to)->record_max_bytes,
			flashsale_config(fs)->topic_intents, lim.bytes_max, lim.bytes_max);
		rc = 1;
	}
	if (rc == 0)
		rc = read_log(fs, flashsale_config(fs)->topic_intents, p, n);
	if (rc == 0)
		rc = cli_topics_create(to, (int)n_new, 1, "CreateTime");
	bool created = rc == 0;
	if (rc == 0)
		rc = copy_log(to, &lim, p, n, &copied);
	if (rc == 0)
		rc = set_log_append_time(to);
	for (int i = 0; i < n; i++)
		records += (int64_t)p[i].len;
	if (rc == 0) {
		printf("moved %" PRId64 " of %" PRId64
		       " records of %s (%d partitions) to %s (%" PRId64
		       " partitions); next: flashsale -c %s replay, then the workers with -c %s\n",
		       copied, records, flashsale_config(fs)->topic_intents, n,
		       flashsale_config(to)->topic_intents, n_new, file, file);
	} else if (created) {
		cli_err("move: not completed; delete %s's topics (flashsale -c %s topics delete) "
			"and move again",
			file, file);
	}
	free_parts(p, n);
	flashsale_destroy(to);
	return rc ? 1 : 0;
}
