/* secret.c: secrets read from files (see secret.h). */
#include "io/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

enum { SECRET_FILE_BYTES_MAX = 4096 };

int fs_secret_stat_check(const struct stat *st, const char *what, const char *path, char *err,
			 size_t err_len)
{
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, err_len, "%s %s: not a regular file", what, path);
		return -EINVAL;
	}
	if (st->st_mode & 077) {
		snprintf(err, err_len,
			 "%s %s: readable or writable by group or others (mode %03o): chmod 600 it",
			 what, path, (unsigned)(st->st_mode & 0777));
		return -EINVAL;
	}
	/* Another user's file, even 0600, is one that user can change under us. */
	if (st->st_uid != geteuid()) {
		snprintf(err, err_len,
			 "%s %s: owned by uid %u, not by this process's user (uid %u)", what, path,
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -EINVAL;
	}
	return 0;
}

/* Reads fd whole (at most cap - 1 bytes) into buf; its length, or -errno / -EFBIG. */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	while (len < cap - 1) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n == 0)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		len += (size_t)n;
	}
	if (len == cap - 1) {
		char more;
		if (read(fd, &more, 1) > 0)
			return -EFBIG;
	}
	buf[len] = '\0';
	return (ssize_t)len;
}

/* One line, its end of line dropped: 0, or -EINVAL with why. */
static int one_line(char *buf, size_t len, const char **why)
{
	if (strlen(buf) != len) {
		*why = "a NUL byte in the file";
		return -EINVAL;
	}
	if (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	if (len > 0 && buf[len - 1] == '\r')
		buf[--len] = '\0';
	if (strpbrk(buf, "\r\n")) {
		*why = "more than one line (the secret is the file's one line)";
		return -EINVAL;
	}
	if (len == 0) {
		*why = "empty";
		return -EINVAL;
	}
	return 0;
}

int fs_secret_file_read(const char *path, const char *what, char *out, size_t cap, char *err,
			size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		snprintf(err, err_len, "%s %s: %s", what, path,
			 e == ELOOP ? "a symbolic link (name the file itself)" : strerror(e));
		return -e;
	}
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc < 0)
		snprintf(err, err_len, "%s %s: %s", what, path, strerror(-rc));
	else
		rc = fs_secret_stat_check(&st, what, path, err, err_len);
	char buf[SECRET_FILE_BYTES_MAX];
	ssize_t len = rc < 0 ? 0 : read_all(fd, buf, sizeof buf < cap + 2 ? sizeof buf : cap + 2);
	close(fd);
	const char *why = NULL;
	if (rc == 0 && len < 0) {
		rc = len == -EFBIG ? -EINVAL : (int)len;
		why = len == -EFBIG ? "too long" : strerror((int)-len);
	} else if (rc == 0) {
		rc = one_line(buf, (size_t)len, &why);
	}
	if (rc == 0 && strlen(buf) >= cap) {
		rc = -EINVAL;
		why = "too long";
	}
	if (why)
		snprintf(err, err_len, "%s %s: %s", what, path, why);
	if (rc == 0)
		memcpy(out, buf, strlen(buf) + 1);
	OPENSSL_cleanse(buf, sizeof buf);
	return rc;
}

const char *fs_secret_weak(const char *s)
{
	bool seen[128] = {false};
	size_t len = 0;
	int distinct = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++, len++) {
		if (*p <= ' ' || *p > '~')
			return "only printable ASCII characters, no spaces";
		if (!seen[*p]) {
			seen[*p] = true;
			distinct++;
		}
	}
	if (len < FS_SECRET_LEN_MIN)
		return "shorter than 32 characters (128 bits as 32 hex digits: openssl rand -hex "
		       "16)";
	if (distinct < FS_SECRET_DISTINCT_MIN)
		return "fewer than 8 different characters (not a random value)";
	return NULL;
}
