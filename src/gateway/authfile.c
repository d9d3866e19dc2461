/* authfile.c: the buyers' token keys read at start (issue 48, item 2; auth.h has the rules),
 * and auth.mode = off refused unless the gateway listens on loopback. */
#include "gateway/gateway.h"

#include "io/keyring.h"
#include "io/log.h"
#include "io/secret.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

enum { PUB_BYTES_MAX = 65536 };

/* Whether listen (ADDR:PORT, [IPv6]:PORT) is a loopback address: 127.0.0.0/8 or ::1. */
bool gw_listen_loopback(const char *listen)
{
	char host[64];
	const char *colon = strrchr(listen, ':');
	if (listen[0] == '[') {
		const char *rb = strchr(listen, ']');
		if (!rb || (size_t)(rb - listen - 1) >= sizeof host)
			return false;
		snprintf(host, sizeof host, "%.*s", (int)(rb - listen - 1), listen + 1);
		struct in6_addr a6;
		return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
	}
	if (!colon || (size_t)(colon - listen) >= sizeof host)
		return false;
	snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
	struct in_addr a4;
	return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* The public keys' file: regular, not a symlink, not writable by group or others (whoever may
 * replace it may mint any buyer's token); readable by others is fine (they are public). */
static int load_pubkeys(struct gw *g, const char *path, char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		snprintf(err, err_len, "auth.jwt.pubkeys %s: %s", path, strerror(e));
		return -e;
	}
	const char *bad = !S_ISREG(st.st_mode)	       ? "not a regular file"
			  : (st.st_mode & 022)	       ? "writable by group or others: chmod 644 it"
			  : st.st_size > PUB_BYTES_MAX ? "larger than 64 KiB"
						       : NULL;
	static char text[PUB_BYTES_MAX + 1];
	ssize_t n = bad ? 0 : read(fd, text, PUB_BYTES_MAX);
	close(fd);
	if (!bad && n < 0)
		bad = strerror(errno);
	if (bad) {
		snprintf(err, err_len, "auth.jwt.pubkeys %s: %s", path, bad);
		return -EINVAL;
	}
	text[n] = '\0';
	char why[256];
	if (gw_jwt_add_pem(&g->jwt, text, why, sizeof why) < 0) {
		snprintf(err, err_len, "auth.jwt.pubkeys %s: %s", path, why);
		return -EINVAL;
	}
	return 0;
}

static int load_ring(struct gw *g, const char *path, char *err, size_t err_len)
{
	struct fs_keyring kr;
	int rc = fs_keyring_load_named("auth.jwt.keys", path, &kr, err, err_len);
	char why[160];
	if (rc == 0 && gw_jwt_add_ring(&g->jwt, &kr, why, sizeof why) < 0) {
		snprintf(err, err_len, "auth.jwt.keys %s: %s", path, why);
		rc = -EINVAL;
	}
	fs_keyring_wipe(&kr);
	return rc;
}

int gw_auth_start(struct gw *g, char *err, size_t err_len)
{
	const struct fs_config *c = &g->cfg;
	if (strcmp(c->auth_mode, "off") == 0) {
		if (!gw_listen_loopback(c->listen)) {
			snprintf(err, err_len,
				 "auth.mode = off: only on a loopback listener (127.0.0.0/8 or "
				 "[::1]), and listen is %s: anyone could buy as anyone",
				 c->listen);
			return -EINVAL;
		}
		g->auth_off = true;
		fs_warn("auth.mode = off: a buyer is whoever the request names (a demo's or a "
			"test's setting, listening on loopback only): never in front of the "
			"public");
		return 0;
	}
	g->jwt.leeway_s = c->auth_jwt_leeway_s;
	snprintf(g->jwt.audience, sizeof g->jwt.audience, "%s", c->auth_jwt_audience);
	if (!c->auth_jwt_keys[0] && !c->auth_jwt_pubkeys[0]) {
		snprintf(err, err_len,
			 "auth.mode = jwt needs the buyers' token keys: set auth.jwt.keys (HS256) "
			 "and/or auth.jwt.pubkeys (ES256, EdDSA); or auth.mode = off on loopback "
			 "(docs/reference/security.md)");
		return -EINVAL;
	}
	int rc = c->auth_jwt_keys[0] ? load_ring(g, c->auth_jwt_keys, err, err_len) : 0;
	if (rc == 0 && c->auth_jwt_pubkeys[0])
		rc = load_pubkeys(g, c->auth_jwt_pubkeys, err, err_len);
	if (rc == 0)
		fs_info("auth.mode = jwt: %zu key(s), leeway %llds, audience %s", g->jwt.n,
			(long long)g->jwt.leeway_s, g->jwt.audience[0] ? g->jwt.audience : "(any)");
	return rc < 0 ? -EINVAL : 0;
}
