/* cli.h: shared pieces of the flashsale CLI's commands. */
#ifndef FS_CLI_H
#define FS_CLI_H

#include "flashsale.h"

#include <stdbool.h>
#include <stdint.h>

/* Every command: argc/argv start at the command name; returns the exit status. */
int cli_load(flashsale_t *fs, int argc, char **argv);
int cli_audit(flashsale_t *fs, int argc, char **argv);

/* Prints "flashsale: <msg>" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a non-negative integer in [lo, hi]; false on anything else. */
bool cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Log end offsets of every partition of a topic (index = partition). Returns the number of
 * partitions, or -1 with a message printed. *ends is malloc'd. */
int cli_topic_ends(flashsale_t *fs, const char *topic, int64_t **ends);

#endif
