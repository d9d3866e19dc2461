/* log.h: one-line log messages on stderr, with a level and a wall-clock timestamp (the
 * clock is for operators only; decisions never read it). Thread-safe (one fprintf each). */
#ifndef FS_LOG_H
#define FS_LOG_H

enum fs_log_level { FS_LOG_ERROR = 0, FS_LOG_WARN = 1, FS_LOG_INFO = 2, FS_LOG_DEBUG = 3 };

void fs_log_set_level(const char *name);
void fs_log_set_prefix(const char *prefix);
/* Tests: fn receives every line that passes the level (without the time and prefix) instead of
 * stderr; NULL restores stderr. */
typedef void (*fs_log_sink)(enum fs_log_level level, const char *msg);
void fs_log_set_sink(fs_log_sink fn);
void fs_log(enum fs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define fs_error(...) fs_log(FS_LOG_ERROR, __VA_ARGS__)
#define fs_warn(...) fs_log(FS_LOG_WARN, __VA_ARGS__)
#define fs_info(...) fs_log(FS_LOG_INFO, __VA_ARGS__)
#define fs_debug(...) fs_log(FS_LOG_DEBUG, __VA_ARGS__)

#endif
