/* secret.h: secrets read from files (issue 48, item 6): the admin token, Kafka's password, the
 * waiting room's key ring. A secret's file must be a regular file (not a symlink), owned by the
 * user the process runs as (its effective uid), that neither group nor others may read, write
 * or run (mode 0600 or stricter): a secret other users can read, or another user can replace,
 * is no secret. Errors name the file and the rule, never the secret. Thread: any. */
#ifndef FS_SECRET_H
#define FS_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

enum {
	/* The shortest admin token or draw seed: 32 characters, e.g. 32 hex digits = 128 bits. */
	FS_SECRET_LEN_MIN = 32,
	/* ... of at least this many different characters (a run of one character is no key). */
	FS_SECRET_DISTINCT_MIN = 8,
};

/* 0 when st (of path, opened as what) is a private file as above; else -EINVAL and err says
 * why ("WHAT PATH: readable by group or others (mode 644): chmod 600 it"). */
int fs_secret_stat_check(const struct stat *st, const char *what, const char *path, char *err,
			 size_t err_len);

/* Reads the private file at path (see above) into out: one line, its end of line dropped, no
 * NUL, no other line, not empty, shorter than cap. 0, or -EINVAL / -errno with err set. */
int fs_secret_file_read(const char *path, const char *what, char *out, size_t cap, char *err,
			size_t err_len);

/* Whether s is strong enough for an admin token or a draw seed: at least FS_SECRET_LEN_MIN
 * characters, each printable ASCII other than space, at least FS_SECRET_DISTINCT_MIN of them
 * different. NULL when it is, else why not (a constant string, not naming s). */
const char *fs_secret_weak(const char *s);

#endif
