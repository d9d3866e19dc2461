/* token.c: admission tokens and the key ring (see token.h). */
#include "core/token.h"

#include "core/buf.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

enum {
	DIGEST_B64 = 22, /* 16 bytes */
	MAC_B64 = 43,	 /* 32 bytes */
	NUM_DIGITS_MAX = 15,
};

static bool key_id_ok(const char *s, size_t n)
{
	if (n == 0 || n > FS_KEY_ID_LEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

static int find_key(const struct fs_keyring *kr, const char *id, size_t n)
{
	for (uint32_t i = 0; i < kr->n; i++)
		if (strlen(kr->keys[i].id) == n && memcmp(kr->keys[i].id, id, n) == 0)
			return (int)i;
	return -1;
}

static int ring_err(char *err, size_t err_len, int line, const char *what)
{
	snprintf(err, err_len, "key ring line %d: %s", line, what);
	return -EINVAL;
}

/* The next whitespace-separated word of [*p, end): its start and length (0 at the end). */
static size_t word(const char **p, const char *end, const char **w)
{
	while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
		(*p)++;
	*w = *p;
	while (*p < end && **p != ' ' && **p != '\t' && **p != '\r')
		(*p)++;
	return (size_t)(*p - *w);
}

int fs_keyring_parse(const char *text, struct fs_keyring *kr, char *err, size_t err_len)
{
	memset(kr, 0, sizeof *kr);
	kr->sign = -1;
	const char *sign_id = NULL;
	size_t sign_len = 0;
	int sign_line = 0, line = 0;
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		if (!end)
			end = p + strlen(p);
		line++;
		const char *a, *b, *c;
		size_t na = word(&p, end, &a), nb = word(&p, end, &b), nc = word(&p, end, &c);
		p = *end ? end + 1 : end;
		if (na == 0 || a[0] == '#')
			continue;
		if (nc)
			return ring_err(err, err_len, line, "more than two words");
		if (na == 4 && memcmp(a, "sign", 4) == 0) {
			if (!key_id_ok(b, nb))
				return ring_err(err, err_len, line, "sign: not a key id");
			sign_id = b;
			sign_len = nb;
			sign_line = line;
			continue;
		}
		if (!key_id_ok(a, na))
			return ring_err(err, err_len, line,
					"the key id must be 1 to 16 of [A-Za-z0-9_-]");
		if (find_key(kr, a, na) >= 0)
			return ring_err(err, err_len, line, "a key id listed twice");
		if (nb % 2 || nb < 2 * FS_KEY_BYTES_MIN || nb > 2 * FS_KEY_BYTES_MAX)
			return ring_err(err, err_len, line,
					"the secret must be 64 to 128 hex digits (32 to 64 bytes)");
		if (kr->n == FS_KEYS_MAX)
			return ring_err(err, err_len, line, "more than 32 keys");
		struct fs_key *k = &kr->keys[kr->n];
		memcpy(k->id, a, na);
		k->id[na] = '\0';
		for (size_t i = 0; i < nb; i += 2) {
			int hi = fs_hexval(b[i]), lo = fs_hexval(b[i + 1]);
			if (hi < 0 || lo < 0) {
				fs_keyring_wipe(kr);
				return ring_err(err, err_len, line, "the secret is not hex");
			}
			k->secret[i / 2] = (unsigned char)(hi << 4 | lo);
		}
		k->len = nb / 2;
		kr->n++;
	}
	if (kr->n == 0) {
		snprintf(err, err_len, "key ring: no key");
		return -EINVAL;
	}
	kr->sign = (int32_t)kr->n - 1;
	if (sign_id) {
		kr->sign = find_key(kr, sign_id, sign_len);
		if (kr->sign < 0) {
			fs_keyring_wipe(kr);
			return ring_err(err, err_len, sign_line, "sign: no such key");
		}
	}
	return 0;
}

static void cache_drop(void);

void fs_keyring_wipe(struct fs_keyring *kr)
{
	cache_drop(); /* this thread's copies of the keys, in its contexts */
	OPENSSL_cleanse(kr, sizeof *kr);
	kr->n = 0;
	kr->sign = -1;
}

/* base64url without padding of n bytes into out (4 * ceil(n / 3) + 1 bytes of room). */
static size_t b64url(const unsigned char *in, size_t n, char *out)
{
	int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
	while (len > 0 && out[len - 1] == '=')
		len--;
	out[len] = '\0';
	for (int i = 0; i < len; i++)
		out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
	return (size_t)len;
}

/* ---- HMAC-SHA256 and SHA-256, libcrypto's, without its per-call set-up ---------------------
 *
 * OpenSSL 3's one-shot HMAC() and SHA256() look their algorithm up by name and build a context
 * on every call: 2.7 us and 0.65 us here, most of a token's verification (a buy behind a room
 * pays it on the worker's main thread) and of a join's rank. The algorithms are fetched once;
 * each thread keeps a few HMAC contexts set up with their key (the key ring's keys, a draw's
 * seed) and starts a keyed one again for 0.35 us (bench/room_micro.c measures both). A thread's
 * contexts are freed, their keys wiped, when it ends or wipes a key ring. When anything here
 * fails (no memory), the one-shot functions answer: the same bytes, slower. */
enum { MAC_SLOTS = 8, MAC_KEY_MAX = 128 };

struct mac_slot {
	EVP_MAC_CTX *ctx;
	size_t len;
	unsigned char key[MAC_KEY_MAX];
};

struct mac_cache {
	struct mac_slot slot[MAC_SLOTS];
	unsigned next; /* the slot a new key takes (round robin) */
};

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;
static bool cache_key_ok;
static EVP_MAC *hmac_alg;
static EVP_MD *sha256_alg;

static void cache_free(void *p)
{
	struct mac_cache *c = p;
	for (int i = 0; i < MAC_SLOTS; i++)
		EVP_MAC_CTX_free(c->slot[i].ctx);
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

static void crypto_init(void)
{
	hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
	sha256_alg = EVP_MD_fetch(NULL, "SHA256", NULL);
	cache_key_ok = pthread_key_create(&cache_key, cache_free) == 0;
}

/* This thread's contexts freed and their keys wiped (fs_keyring_wipe: another thread's stay
 * until it ends or wipes a ring itself). */
static void cache_drop(void)
{
	pthread_once(&crypto_once, crypto_init);
	struct mac_cache *c = cache_key_ok ? pthread_getspecific(cache_key) : NULL;
	if (c) {
		pthread_setspecific(cache_key, NULL);
		cache_free(c);
	}
}

/* This thread's context set up with key, or NULL. */
static EVP_MAC_CTX *keyed_ctx(const void *key, size_t len)
{
	pthread_once(&crypto_once, crypto_init);
	if (!hmac_alg || !cache_key_ok || len > MAC_KEY_MAX)
		return NULL;
	struct mac_cache *c = pthread_getspecific(cache_key);
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c || pthread_setspecific(cache_key, c) != 0) {
			free(c);
			return NULL;
		}
	}
	for (int i = 0; i < MAC_SLOTS; i++) {
		struct mac_slot *s = &c->slot[i];
		if (s->ctx && s->len == len && memcmp(s->key, key, len) == 0)
			return EVP_MAC_init(s->ctx, NULL, 0, NULL) ? s->ctx : NULL;
	}
	struct mac_slot *s = &c->slot[c->next++ % MAC_SLOTS];
	if (!s->ctx && !(s->ctx = EVP_MAC_CTX_new(hmac_alg)))
		return NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	s->len = 0;
	if (!EVP_MAC_init(s->ctx, key, len, params))
		return NULL;
	memcpy(s->key, key, len);
	s->len = len;
	return s->ctx;
}

/* HMAC-SHA256(key, msg) into out. */
static void hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n,
			unsigned char out[SHA256_DIGEST_LENGTH])
{
	EVP_MAC_CTX *ctx = keyed_ctx(key, key_len);
	size_t len = 0;
	if (ctx && EVP_MAC_update(ctx, msg, n) &&
	    EVP_MAC_final(ctx, out, &len, SHA256_DIGEST_LENGTH) && len == SHA256_DIGEST_LENGTH)
		return;
	unsigned int l = 0;
	HMAC(EVP_sha256(), key, (int)key_len, msg, n, out, &l);
}

static void sha256(const void *msg, size_t n, unsigned char out[SHA256_DIGEST_LENGTH])
{
	pthread_once(&crypto_once, crypto_init);
	if (!sha256_alg || !EVP_Digest(msg, n, out, NULL, sha256_alg, NULL))
		SHA256(msg, n, out);
}

static void buyer_digest(const char *buyer_id, char out[DIGEST_B64 + 3])
{
	unsigned char d[SHA256_DIGEST_LENGTH];
	sha256(buyer_id, strlen(buyer_id), d);
	b64url(d, 16, out);
}

/* The MAC of the claims, base64url, into out (MAC_B64 + 3 bytes). */
static void claims_mac(const struct fs_key *k, const char *sku, const char *digest, int64_t nbf,
		       int64_t exp, char *out)
{
	char msg[256];
	int n = snprintf(msg, sizeof msg, "fs-token-v1\n%s\n%s\n%s\n%" PRId64 "\n%" PRId64, k->id,
			 sku, digest, nbf, exp);
	unsigned char mac[SHA256_DIGEST_LENGTH];
	hmac_sha256(k->secret, k->len, msg, (size_t)n, mac);
	b64url(mac, sizeof mac, out);
	OPENSSL_cleanse(mac, sizeof mac);
}

int fs_token_mint(const struct fs_keyring *kr, const char *sku, const char *buyer_id,
		  int64_t nbf_ms, int64_t exp_ms, char *out)
{
	out[0] = '\0';
	if (kr->sign < 0 || (uint32_t)kr->sign >= kr->n || nbf_ms < 0 || exp_ms < nbf_ms)
		return -EINVAL;
	const struct fs_key *k = &kr->keys[kr->sign];
	char digest[DIGEST_B64 + 3], mac[MAC_B64 + 3];
	buyer_digest(buyer_id, digest);
	claims_mac(k, sku, digest, nbf_ms, exp_ms, mac);
	int n = snprintf(out, FS_TOKEN_TEXT_MAX + 1, "v1.%s.%" PRId64 ".%" PRId64 ".%s.%s", k->id,
			 nbf_ms, exp_ms, digest, mac);
	return n > 0 && n <= FS_TOKEN_TEXT_MAX ? 0 : -EINVAL;
}

const char *fs_token_reason(enum fs_token_verdict v)
{
	switch (v) {
	case FS_TOKEN_NONE:
		return "no_token";
	case FS_TOKEN_BAD:
		return "bad_token";
	case FS_TOKEN_EXPIRED:
		return "token_expired";
	case FS_TOKEN_NOT_YET:
		return "token_not_yet_valid";
	case FS_TOKEN_OTHER_BUYER:
		return "token_other_buyer";
	default:
		return NULL;
	}
}

/* A decimal field of at most NUM_DIGITS_MAX digits, no sign, no leading zero but "0". */
static bool number(const char *s, size_t n, int64_t *v)
{
	if (n == 0 || n > NUM_DIGITS_MAX || (n > 1 && s[0] == '0'))
		return false;
	int64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (s[i] - '0');
	}
	*v = x;
	return true;
}

enum fs_token_verdict fs_token_verify(const struct fs_keyring *kr, const char *token,
				      const char *sku, const char *buyer_id, int64_t now_ms)
{
	if (!token || !*token)
		return FS_TOKEN_NONE;
	/* v1 . KID . NBF . EXP . BUYER . MAC */
	const char *f[6];
	size_t len[6];
	const char *p = token;
	for (int i = 0; i < 6; i++) {
		const char *dot = i < 5 ? strchr(p, '.') : p + strlen(p);
		if (!dot)
			return FS_TOKEN_BAD;
		f[i] = p;
		len[i] = (size_t)(dot - p);
		p = dot + (i < 5);
	}
	int64_t nbf, exp;
	if (len[0] != 2 || memcmp(f[0], "v1", 2) != 0 || !key_id_ok(f[1], len[1]) ||
	    !number(f[2], len[2], &nbf) || !number(f[3], len[3], &exp) || len[4] != DIGEST_B64 ||
	    len[5] != MAC_B64)
		return FS_TOKEN_BAD;
	int ki = find_key(kr, f[1], len[1]);
	if (ki < 0)
		return FS_TOKEN_BAD;
	char digest[DIGEST_B64 + 3], mac[MAC_B64 + 3];
	memcpy(digest, f[4], DIGEST_B64);
	digest[DIGEST_B64] = '\0';
	claims_mac(&kr->keys[ki], sku, digest, nbf, exp, mac);
	if (CRYPTO_memcmp(mac, f[5], MAC_B64) != 0)
		return FS_TOKEN_BAD;
	char mine[DIGEST_B64 + 3];
	buyer_digest(buyer_id, mine);
	if (memcmp(mine, digest, DIGEST_B64) != 0)
		return FS_TOKEN_OTHER_BUYER;
	if (now_ms < nbf)
		return FS_TOKEN_NOT_YET;
	if (now_ms >= exp)
		return FS_TOKEN_EXPIRED;
	return FS_TOKEN_OK;
}

bool fs_token_key_id(const char *token, char *out)
{
	out[0] = '\0';
	if (!token || strncmp(token, "v1.", 3) != 0)
		return false;
	const char *kid = token + 3, *dot = strchr(kid, '.');
	if (!dot || !key_id_ok(kid, (size_t)(dot - kid)))
		return false;
	memcpy(out, kid, (size_t)(dot - kid));
	out[dot - kid] = '\0';
	return true;
}

bool fs_keyring_has(const struct fs_keyring *kr, const char *id)
{
	return kr && find_key(kr, id, strlen(id)) >= 0;
}

uint64_t fs_draw_rank(const char *seed, const char *buyer_id)
{
	unsigned char mac[SHA256_DIGEST_LENGTH];
	hmac_sha256(seed, strlen(seed), buyer_id, strlen(buyer_id), mac);
	uint64_t r = 0;
	for (int i = 0; i < 8; i++)
		r = r << 8 | mac[i];
	return r;
}

void fs_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n,
		    unsigned char out[32])
{
	hmac_sha256(key, key_len, msg, n, out);
}
