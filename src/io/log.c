/* log.c: stderr logging (see log.h). */
#include "io/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static enum fs_log_level level = FS_LOG_INFO;
static char prefix[64] = "flashsale";
static fs_log_sink sink;

void fs_log_set_sink(fs_log_sink fn)
{
	sink = fn;
}

void fs_log_set_level(const char *name)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (strcmp(names[i], name) == 0)
			level = (enum fs_log_level)i;
}

void fs_log_set_prefix(const char *p)
{
	snprintf(prefix, sizeof prefix, "%s", p);
}

void fs_log(enum fs_log_level l, const char *fmt, ...)
{
	static const char *const tags[] = {"error", "warn", "info", "debug"};
	if (l > level)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (sink) {
		sink(l, msg);
		return;
	}
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
		(long)(tv.tv_usec / 1000), prefix, tags[l], msg);
}
