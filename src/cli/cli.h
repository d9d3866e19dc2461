/* cli.h: shared pieces of the flashsale CLI's commands. */
#ifndef FS_CLI_H
#define FS_CLI_H

#include "flashsale.h"
#include "io/config.h"

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <getopt.h> /* optind: cli_parse leaves the positional arguments at argv[optind] */
#include <stdbool.h>
#include <stdint.h>

/* Every command: argc/argv start at the command name; returns the exit status. */
int cli_load(flashsale_t *fs, int argc, char **argv);
int cli_audit(flashsale_t *fs, int argc, char **argv);
int cli_replay(flashsale_t *fs, int argc, char **argv);
int cli_move(flashsale_t *fs, int argc, char **argv);
int cli_top(flashsale_t *fs, int argc, char **argv);
/* Replays the intents log through the pure core in memory and compares with Postgres (see
 * replay.c). Returns 0 when it all matches, 1 on a difference or an error (counted in diffs);
 * quiet: print no DIFF lines. */
int cli_replay_check(flashsale_t *fs, bool quiet, int64_t *records, int64_t *diffs);
/* Reads the partitioning rule and the record size cap recorded for the topic (the schema's
 * `topics`) into limits; leaves them as they are if no worker recorded one yet. 0, or -EIO
 * (said on stderr). */
struct fs_record_limits;
int cli_topic_rule(PGconn *pg, const char *topic, struct fs_record_limits *limits);

/* Records still to decide: the sum over the topic's partitions of log end - stored next
 * offset (ends from cli_topic_ends); -1 if Postgres cannot be read. */
int64_t cli_undecided(flashsale_t *fs, const int64_t *ends, int n);
/* Creates the configuration's three topics with `parts` partitions (the intents topic with
 * message.timestamp.type intents_time and unlimited retention). 0, or 1 (said on stderr). */
int cli_topics_create(flashsale_t *fs, int parts, int repl, const char *intents_time);

/* The global options as given (for commands that start another program with them). */
extern const char *cli_config_file;
extern const char *cli_sets[];
extern int cli_nsets;

/* Prints "flashsale: <msg>" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a non-negative integer in [lo, hi]; false on anything else. */
bool cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Prints a command's usage on stderr; returns 2, the exit status of a usage error. */
int cli_usage(const char *usage);

/* One option of a command, --NAME; what dest points to depends on the kind. */
enum cli_opt_kind {
	CLI_FLAG,    /* bool: set to true; takes no argument */
	CLI_STR,     /* const char *: the argument as given */
	CLI_INT,     /* int64_t in [lo, hi]; "is not an integer in [LO, HI]" */
	CLI_SECONDS, /* CLI_INT that also takes a trailing 's', as in 600s */
	CLI_TIMEOUT, /* int64_t seconds in [lo, hi]; "is not a number of seconds" */
	CLI_RATIO,   /* double in [0, 1]; "is not a number in [0, 1]" */
};

struct cli_opt {
	const char *name; /* NULL ends a command's list */
	enum cli_opt_kind kind;
	void *dest;
	int64_t lo, hi; /* CLI_INT, CLI_SECONDS, CLI_TIMEOUT */
};

/* Parses argv (argv[0] is the command name) against spec, in order; --help and -h print usage
 * on stdout. A bad value is one line "flashsale: CMD: --NAME: 'X' ...", an unknown option
 * getopt's message and the usage on stderr. Returns -1 to go on: the positional arguments
 * are argv[optind..argc-1], and there are pos_min to pos_max of them (pos_max < 0: no upper
 * bound). Otherwise the exit status to return: 0 after --help, 2 after a usage error (its
 * message printed). */
int cli_parse(int argc, char **argv, const char *usage, const struct cli_opt *spec, int pos_min,
	      int pos_max);

/* Where the records of every partition of a topic end (index = partition): the log end, or
 * below it where the log ends with offsets no consumer is given, a transaction's marker or an
 * aborted transaction's records (fs_kafka_readable_ends). Returns the number of partitions,
 * or -1 with a message printed. *ends is malloc'd. */
int cli_topic_ends(flashsale_t *fs, const char *topic, int64_t **ends);
/* A consumer (no group membership: partitions assigned, no offsets committed) reading every
 * partition of topic from its beginning; lo (if not NULL, nparts long) gets each partition's
 * first offset. NULL with a message printed. rd_kafka_consumer_poll() it, then close and
 * destroy it. */
rd_kafka_t *cli_topic_reader(flashsale_t *fs, const char *topic, int nparts, const char *group,
			     int64_t *lo);
int cli_timing(flashsale_t *fs, int argc, char **argv);

#endif
