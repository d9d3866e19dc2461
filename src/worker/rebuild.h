/* rebuild.h: flashsale-worker --replay: every partition of the intents topic assigned from its
 * stored offset (the beginning, for an empty database) and decided into the database up to
 * the log end it had at the start, as the live worker would, publishing nothing. */
#ifndef FS_WORKER_REBUILD_H
#define FS_WORKER_REBUILD_H

#include "worker/context.h"

#include <stdbool.h>

int replay_assign(struct worker *w);
/* A progress bar with the rate on stderr; true once every partition reached its end. */
bool replay_progress(struct worker *w, bool final);

#endif
