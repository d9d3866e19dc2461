/* main.c: flashsale-worker, the order worker daemon: its options, start-up and shutdown.
 *
 * A consumer-group member of the intents topic; per partition, records are gathered into a
 * batch, decided by the pure core, committed to Postgres in one transaction, and only then
 * answered on the results topic (DESIGN.md section 4). The loop is loop.c; the edges it runs
 * on (librdkafka, pthreads, the clock) are io.c. */
#include "io/config.h"
#include "io/entropy.h"
#include "io/keyring.h"
#include "io/log.h"
#include "io/store.h"
#include "worker/committer.h"
#include "worker/context.h"
#include "worker/io.h"
#include "worker/loop.h"
#include "worker/partition.h"
#include "worker/rebuild.h"
#include "worker/trace.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashsale-worker [-c FILE] [--set KEY=VALUE]... [--replay] [--help]\n"
		"                        [--help-config]\n"
		"\n"
		"The flashsale order worker: consumes the intents topic as a member of a consumer\n"
		"group, decides every record in memory, commits each batch of decisions to\n"
		"PostgreSQL in one transaction, then publishes one result per record.\n"
		"\n"
		"  -c, --config FILE   configuration file (key = value; see "
		"config/flashsale.conf)\n"
		"  -s, --set K=V       set one configuration key (after the file)\n"
		"      --replay        rebuild: decide the intents topic into the database from "
		"the\n"
		"                      stored offsets (the beginning, for an empty database) to "
		"the\n"
		"                      log end, publishing nothing, with a progress bar; then "
		"exit\n"
		"      --help-config   list every configuration key\n"
		"  -h, --help          this text\n"
		"\n"
		"Environment: FLASHSALE_KAFKA (bootstrap servers) and FLASHSALE_PG (libpq "
		"conninfo)\n"
		"override the file. FLASHSALE_CRASH=point[:n] is a test hook (see docs).\n"
		"SIGTERM or SIGINT: finish the batches already read, deliver results, exit 0.\n");
}

/* Records this worker's rule for the topic if it has none yet; what is recorded in *rec. */
static int store_rule(struct worker *w, int32_t n, struct fs_topic_rule *rec)
{
	struct fs_topic_rule mine = {.partitions = n, .record_max_bytes = w->cfg.record_max_bytes};
	snprintf(mine.misrouted, sizeof mine.misrouted, "%s", w->cfg.misrouted);
	return fs_store_topic_rule(w->store, w->cfg.topic_intents, &mine, rec);
}

/* What this database recorded for the topic, against the broker's partition count and this
 * configuration: 0 when they agree, else -EPERM after one line naming both. */
static int rule_agrees(const struct worker *w, int32_t n, const struct fs_topic_rule *rec)
{
	if (rec->partitions != n) {
		fs_error("topic %s has %" PRId32 " partitions, but this database recorded "
			 "%" PRId32 " at its first start: the partitioning rule (murmur2 %% "
			 "partitions) would move SKUs away from their state; use a topic of "
			 "%" PRId32 " partitions, or move the sale (docs/reference/"
			 "operations.md: Growing the intents topic)",
			 w->cfg.topic_intents, n, rec->partitions, rec->partitions);
		return -EPERM;
	}
	if (strcmp(rec->misrouted, w->cfg.misrouted) != 0) {
		fs_error("misrouted = %s, but this database decided topic %s with "
			 "misrouted = %s (a replay must decide alike): set misrouted = %s, "
			 "or start a new database",
			 w->cfg.misrouted, w->cfg.topic_intents, rec->misrouted, rec->misrouted);
		return -EPERM;
	}
	if (rec->record_max_bytes != w->cfg.record_max_bytes) {
		fs_error("record.max.bytes = %" PRId64 ", but this database decided topic %s with "
			 "record.max.bytes = %" PRId64 " (a larger record is rejected too_large; a "
			 "replay must decide alike): set record.max.bytes = %" PRId64 ", or start "
			 "a new database",
			 w->cfg.record_max_bytes, w->cfg.topic_intents, rec->record_max_bytes,
			 rec->record_max_bytes);
		return -EPERM;
	}
	return 0;
}

/* The log clock and the partitioning rule's inputs (docs/reference/records.md): the intents
 * topic's timestamps must be the broker's (LogAppendTime); its partition count, what is done
 * with a misrouted record and the record size cap are recorded for it at the first start. A
 * CreateTime topic would let a producer's clock expire holds, a topic grown since would move SKUs
 * away from their state, and another mode or cap would decide the log otherwise than a replay:
 * refuse to start. Waits while the broker or Postgres cannot be reached (they may come up
 * after us). */
static int rule_check(struct worker *w)
{
	int64_t backoff = 0;
	while (!wio_stopping(w->io)) {
		int32_t n = 0;
		struct fs_topic_rule rec;
		int transient = 0;
		const char *clock_why = NULL;
		if (wio_partitions(w->io, METADATA_TIMEOUT_MS, &n) < 0) {
			fs_warn("no partition count for topic %s from the broker yet (will retry)",
				w->cfg.topic_intents);
		} else if ((clock_why = wio_log_clock(w->io, METADATA_TIMEOUT_MS, &transient)) &&
			   transient) {
			fs_warn("%s (will retry)", clock_why);
		} else if (clock_why) {
			fs_error("%s", clock_why);
			return -EPERM;
		} else if (fs_store_ensure(w->store) < 0 || store_rule(w, n, &rec) < 0) {
			fs_warn("%s (will retry)", fs_store_error(w->store));
		} else if (rule_agrees(w, n, &rec) < 0) {
			return -EPERM;
		} else {
			w->limits.partitions = n;
			w->limits.misrouted_reject = strcmp(rec.misrouted, "reject") == 0;
			w->limits.carts = true; /* a cart's coordinator needs the count */
			fs_info("topic %s: %" PRId32 " partitions, partitioner %s, misrouted "
				"records: %s, record.max.bytes %" PRId64,
				w->cfg.topic_intents, n, FS_PARTITIONER_NAME, rec.misrouted,
				rec.record_max_bytes);
			return 0;
		}
		wio_sleep_ms(w->io, backoff = backoff_next(w, backoff));
	}
	return -EINTR;
}

static int setup(struct worker *w)
{
	fs_log_set_level(w->cfg.log_level);
	/* Intent ids and SKUs come from web tiers: the maps' hash gets a key nobody outside
	 * knows, so that no crafted ids share a slot (core/map.h). */
	if (fs_hash_key_random() < 0)
		fs_warn("no randomness for the maps' hash key: crafted keys could collide");
	w->limits.bytes_max = (size_t)w->cfg.record_max_bytes;
	int rc = wio_open(w, &w->io);
	if (rc < 0)
		return rc;
	rc = fs_store_open(w->cfg.pg, &w->store);
	if (rc < 0) {
		/* Postgres may come up after us: the loop retries; only report it. */
		fs_warn("%s (will retry)", fs_store_error(w->store));
	}
	wio_store_hook(w->io, w->store);
	rc = trace_open(w);
	if (rc < 0)
		return rc;
	if (w->cfg.admission_keys[0]) {
		char err[512];
		if (fs_keyring_load(w->cfg.admission_keys, &w->keys, err, sizeof err) < 0) {
			fs_error("%s", err);
			return -EINVAL;
		}
		w->has_keys = true;
		fs_info("admission.keys: %" PRIu32 " key(s), signing with %s", w->keys.n,
			w->keys.keys[w->keys.sign].id);
	}
	committers_start(w);
	rc = rule_check(w);
	if (rc < 0)
		return rc;
	if (w->replay)
		return replay_assign(w);
	return wio_subscribe(w->io);
}

static void teardown(struct worker *w)
{
	if (w->io) {
		commit_wait(w);
		/* Before the consumer's queue goes: a committer wakes the poll through it. */
		committers_stop(w);
		wio_close(w->io);
	}
	loop_free(w);
	trace_close(w);
	fs_keyring_wipe(&w->keys);
}

/* The options, the file, the environment and the --set keys, in that order of precedence
 * (last wins). -1: go on; otherwise the exit status (2: a usage error). */
static int parse_args(struct worker *w, int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},	  {"help-config", no_argument, NULL, 'H'},
		{"replay", no_argument, NULL, 'R'},	  {NULL, 0, NULL, 0},
	};
	char err[FS_CONF_ERR_MAX];
	const char *sets[64];
	int nsets = 0, c;
	while ((c = getopt_long(argc, argv, "c:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (fs_config_load_file(&w->cfg, optarg, err) < 0) {
				fprintf(stderr, "flashsale-worker: %s\n", err);
				return 2;
			}
			break;
		case 's':
			if (nsets == 64) {
				fprintf(stderr, "flashsale-worker: too many --set options\n");
				return 2;
			}
			sets[nsets++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'H':
			fs_config_describe(stdout);
			return 0;
		case 'R':
			w->replay = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flashsale-worker: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (fs_config_apply_env(&w->cfg, err) < 0) {
		fprintf(stderr, "flashsale-worker: %s\n", err);
		return 2;
	}
	for (int i = 0; i < nsets; i++) {
		if (fs_config_set_kv(&w->cfg, sets[i], err) < 0) {
			fprintf(stderr, "flashsale-worker: %s\n", err);
			return 2;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	static struct worker w; /* large: keep it off the stack */
	fs_config_defaults(&w.cfg);
	fs_log_set_prefix("flashsale-worker");
	int status = parse_args(&w, argc, argv);
	if (status >= 0)
		return status;
	wio_init();

	int rc = setup(&w);
	if (rc == -EINVAL) {
		/* A configuration librdkafka refused: a usage error, like a bad file. */
		teardown(&w);
		return 2;
	}
	if (rc == 0) {
		fs_info("started: brokers %s, group %s, topic %s, batch.max %" PRId64,
			w.cfg.brokers, w.cfg.group, w.cfg.topic_intents, w.cfg.batch_max);
		rc = loop_run(&w);
		if (w.replay && rc == 0 && !wio_stopping(w.io)) {
			replay_progress(&w, true);
			fs_info("replay: done");
		}
	}
	teardown(&w);
	log_stats(&w, "exit");
	if (rc == -EINTR)
		rc = 0; /* stopped while waiting for the services at start */
	if (rc == 0 && wio_failed(w.io))
		rc = -EIO;
	wio_free(w.io);
	return rc == 0 ? 0 : rc == -ERANGE ? 3 : 1;
}
