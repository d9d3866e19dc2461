/* secretfile.c: a secret's file, read and its mode checked (see secretfile.h). The same checks
 * as the waiting room's key ring (keyring.c), for any configuration key that names a secret's
 * file. */
#include "io/secretfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Why the opened file is refused (a message in err), or 0. */
static int check_file(int fd, const char *what, const char *path, size_t max, char *err,
		      size_t err_len)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, err_len, "%s %s: %s", what, path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, err_len, "%s %s: not a regular file", what, path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		snprintf(err, err_len,
			 "%s %s: readable or writable by group or others (mode %03o): chmod 600 it",
			 what, path, (unsigned)(st.st_mode & 0777));
		return -EINVAL;
	}
	if ((size_t)st.st_size >= max) {
		snprintf(err, err_len, "%s %s: larger than %zu bytes", what, path, max - 1);
		return -EINVAL;
	}
	return 0;
}

int fs_secret_file_read(const char *what, const char *path, char *buf, size_t max, char *err,
			size_t err_len)
{
	buf[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int e = errno;
		snprintf(err, err_len, "%s %s: %s", what, path,
			 e == ELOOP ? "a symbolic link (name the file itself)" : strerror(e));
		return -e;
	}
	int rc = check_file(fd, what, path, max, err, err_len);
	size_t len = 0;
	while (rc == 0 && len < max - 1) {
		ssize_t n = read(fd, buf + len, max - 1 - len);
		if (n == 0)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, err_len, "%s %s: %s", what, path, strerror(-rc));
			break;
		}
		len += (size_t)n;
	}
	char more;
	if (rc == 0 && len == max - 1 && read(fd, &more, 1) == 1) { /* it grew since fstat */
		rc = -EINVAL;
		snprintf(err, err_len, "%s %s: larger than %zu bytes", what, path, max - 1);
	}
	close(fd);
	buf[len] = '\0';
	if (rc == 0 && strlen(buf) != len) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s %s: a NUL byte in the file", what, path);
	}
	return rc;
}
