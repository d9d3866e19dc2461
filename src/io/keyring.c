/* keyring.c: the key ring file (see keyring.h). */
#include "io/keyring.h"

#include "io/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

enum { RING_BYTES_MAX = 65536 };

int fs_keyring_load(const char *path, struct fs_keyring *kr, char *err, size_t err_len)
{
	return fs_keyring_load_named("admission.keys", path, kr, err, err_len);
}

int fs_keyring_load_named(const char *what, const char *path, struct fs_keyring *kr, char *err,
			  size_t err_len)
{
	memset(kr, 0, sizeof *kr);
	kr->sign = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int e = errno;
		snprintf(err, err_len, "%s %s: %s", what, path, strerror(e));
		return -e;
	}
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, err_len, "%s %s: %s", what, path, strerror(-rc));
	} else {
		rc = fs_secret_stat_check(&st, what, path, err, err_len);
	}
	if (rc == 0 && st.st_size > RING_BYTES_MAX) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s %s: larger than 64 KiB", what, path);
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	static char text[RING_BYTES_MAX + 1];
	size_t len = 0;
	ssize_t n;
	while (len < RING_BYTES_MAX && (n = read(fd, text + len, RING_BYTES_MAX - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, err_len, "%s %s: %s", what, path, strerror(-rc));
			break;
		}
		len += (size_t)n;
	}
	close(fd);
	text[len] = '\0';
	if (rc == 0 && strlen(text) != len) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s %s: a NUL byte in the file", what, path);
	}
	if (rc == 0) {
		char why[160];
		rc = fs_keyring_parse(text, kr, why, sizeof why);
		if (rc < 0)
			snprintf(err, err_len, "%s %s: %s", what, path, why);
	}
	OPENSSL_cleanse(text, sizeof text);
	return rc;
}
