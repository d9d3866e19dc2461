/* auth.h: buyers are proven (issue 48, item 2). A buyer is whoever a verified JSON Web Token
 * (RFC 7519, JWS compact form, RFC 7515) names in its `sub`: `Authorization: Bearer <JWT>`.
 * Verified with OpenSSL's libcrypto alone (docs/DESIGN-NOTES.md "Libraries"):
 *   - HS256 (HMAC-SHA256) under a key of the key ring's format (`KID HEX-SECRET` lines,
 *     src/core/token.h's parser): the shop and the gateway share the secret;
 *   - ES256 (ECDSA P-256 + SHA-256, the JOSE r||s signature) and EdDSA (Ed25519) under a
 *     public key: the shop keeps its signing key, the gateway holds only the public half.
 * The token's `kid` picks the key and the key fixes the one `alg` it takes: `none`, an HS256
 * token naming a public key (the classic confusion: the public key's bytes as an HMAC secret),
 * or an ES256 token naming an Ed25519 key are refused before any signature is checked. `exp` is
 * required, `nbf` and `iat` honoured when present, `aud` checked when an audience is set, all
 * with a stated leeway. MACs are compared in constant time (CRYPTO_memcmp). Pure: the clock is
 * an argument; no I/O (the files are read by authfile.c). Thread: verify is safe from any
 * thread on a loaded key set. */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include "core/record.h"
#include "core/token.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gw_jwt_alg { GW_JWT_HS256 = 0, GW_JWT_ES256, GW_JWT_EDDSA };

enum {
	GW_JWT_KEYS_MAX = 64,
	GW_JWT_TOKEN_MAX = 4096, /* a longer Authorization header is refused unread */
	GW_JWT_LEEWAY_S_DEFAULT = 30,
	GW_JWT_AUD_MAX = 256,
};

struct gw_jwt_key {
	char kid[FS_KEY_ID_LEN_MAX + 1];
	enum gw_jwt_alg alg;
	unsigned char secret[FS_KEY_BYTES_MAX]; /* HS256 */
	size_t secret_len;
	void *pub; /* ES256, EdDSA: an EVP_PKEY */
};

struct gw_jwt_keys {
	struct gw_jwt_key k[GW_JWT_KEYS_MAX];
	size_t n;
	char audience[GW_JWT_AUD_MAX]; /* "": aud not checked */
	int64_t leeway_s;
};

enum gw_jwt_verdict {
	GW_JWT_OK = 0,
	GW_JWT_MISSING,	      /* no Authorization, or not a Bearer one */
	GW_JWT_MALFORMED,     /* not three base64url parts of JSON objects, too long, ... */
	GW_JWT_UNKNOWN_KID,   /* no kid, or a kid no key has */
	GW_JWT_BAD_ALG,	      /* alg absent, none, or not the one its key allows; crit */
	GW_JWT_BAD_SIGNATURE, /* the signature does not verify */
	GW_JWT_EXPIRED,	      /* now >= exp + leeway */
	GW_JWT_NOT_YET,	      /* now + leeway < nbf, or iat in the future */
	GW_JWT_BAD_AUDIENCE,  /* aud set and the token's aud does not name it */
	GW_JWT_BAD_CLAIMS,    /* no exp, no sub, a sub that is no buyer id, a claim of a bad type */
	GW_JWT_VERDICTS,      /* their count (the metrics' reasons; OK's slot counts 403s) */
};

/* A stable reason (docs/reference/http.md): "missing_token", "malformed_token", ... */
const char *gw_jwt_reason(enum gw_jwt_verdict v);

/* Adds the key ring's keys (fs_keyring_parse's) as HS256 keys. 0, or -EINVAL with err. */
int gw_jwt_add_ring(struct gw_jwt_keys *ks, const struct fs_keyring *kr, char *err, size_t err_len);
/* Adds the public keys of a public key file's text: blocks of a `kid KID` line followed by a
 * PEM `-----BEGIN PUBLIC KEY-----` ... `-----END PUBLIC KEY-----` (SubjectPublicKeyInfo, as
 * `openssl pkey -pubout` writes it); `#` lines and blank lines between blocks are comments.
 * A P-256 key takes ES256, an Ed25519 key EdDSA; any other key is refused. A kid already in
 * ks is refused (one kid, one key, one alg). 0, or -EINVAL with err (naming the line). */
int gw_jwt_add_pem(struct gw_jwt_keys *ks, const char *text, char *err, size_t err_len);
/* Frees the public keys and wipes the secrets. */
void gw_jwt_keys_free(struct gw_jwt_keys *ks);

/* The verdict on an Authorization header's value (NULL: none) at now_s (Unix seconds); on
 * GW_JWT_OK the token's `sub` (a valid buyer id, core/record.h) is copied into sub. */
enum gw_jwt_verdict gw_jwt_verify(const struct gw_jwt_keys *ks, const char *authorization,
				  int64_t now_s, char sub[FS_BUYER_LEN_MAX + 1]);
/* The same on a bare token of len bytes (the fuzzers' and unit tests' door). */
enum gw_jwt_verdict gw_jwt_verify_token(const struct gw_jwt_keys *ks, const char *token, size_t len,
					int64_t now_s, char sub[FS_BUYER_LEN_MAX + 1]);

/* base64url without padding (RFC 7515, section 2) of n bytes into out (4 * n / 3 + 4 bytes);
 * its length. Decoding: strict (no padding, no other character, no stray bits); the decoded
 * length, or -1. */
size_t gw_b64url_encode(const unsigned char *in, size_t n, char *out);
long gw_b64url_decode(const char *in, size_t n, unsigned char *out, size_t cap);

#endif
