/* secretfile.h: reading a secret from its file (issue 48: a secret lives in a file its owner
 * alone may read, never on a command line). Thread: any. */
#ifndef FS_SECRETFILE_H
#define FS_SECRETFILE_H

#include <stddef.h>

/* Reads the file at path into buf (NUL-terminated, at most max - 1 bytes). The file must be a
 * regular file (not a symbolic link), of at most max - 1 bytes, with no NUL byte, that neither
 * group nor others may read or write (chmod 600): a secret shared with the machine's other
 * users is no secret. 0, or -EINVAL / -errno with a message in err that starts with what (the
 * configuration key) and names the file, never its content. The caller wipes buf
 * (OPENSSL_cleanse) once it has parsed it. */
int fs_secret_file_read(const char *what, const char *path, char *buf, size_t max, char *err,
			size_t err_len);

#endif
