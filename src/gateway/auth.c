/* auth.c: the buyers' JSON Web Tokens (see auth.h). */
#include "gateway/auth.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

/* A header or a claims set larger than this is no buyer's token: refused before parsing. */
enum { PART_MAX = 2048, SIG_MAX = 128 };

const char *gw_jwt_reason(enum gw_jwt_verdict v)
{
	switch (v) {
	case GW_JWT_OK:
		return "ok";
	case GW_JWT_MISSING:
		return "missing_token";
	case GW_JWT_MALFORMED:
		return "malformed_token";
	case GW_JWT_UNKNOWN_KID:
		return "unknown_key";
	case GW_JWT_BAD_ALG:
		return "bad_alg";
	case GW_JWT_BAD_SIGNATURE:
		return "bad_signature";
	case GW_JWT_EXPIRED:
		return "token_expired";
	case GW_JWT_NOT_YET:
		return "token_not_yet_valid";
	case GW_JWT_BAD_AUDIENCE:
		return "bad_audience";
	case GW_JWT_BAD_CLAIMS:
		return "bad_claims";
	case GW_JWT_VERDICTS:
		break;
	}
	return "invalid_token";
}

/* ---- base64url ------------------------------------------------------------------------------ */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t gw_b64url_encode(const unsigned char *in, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = b64[(v >> 18) & 63];
		out[o++] = b64[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = b64[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = b64[v & 63];
	}
	out[o] = '\0';
	return o;
}

static int b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

long gw_b64url_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
	if (n % 4 == 1 || n / 4 * 3 + 2 > cap)
		return -1;
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		int v = b64val((unsigned char)in[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
		}
	}
	/* The bits left over must be zero: one text, one token (no malleable encodings). */
	if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
		return -1;
	return (long)o;
}

/* ---- keys ----------------------------------------------------------------------------------- */

static struct gw_jwt_key *key_find(const struct gw_jwt_keys *ks, const char *kid)
{
	for (size_t i = 0; i < ks->n; i++)
		if (strcmp(ks->k[i].kid, kid) == 0)
			return (struct gw_jwt_key *)&ks->k[i];
	return NULL;
}

int gw_jwt_add_ring(struct gw_jwt_keys *ks, const struct fs_keyring *kr, char *err, size_t err_len)
{
	for (uint32_t i = 0; i < kr->n; i++) {
		if (key_find(ks, kr->keys[i].id) || ks->n >= GW_JWT_KEYS_MAX) {
			snprintf(err, err_len, "key %s: %s", kr->keys[i].id,
				 ks->n >= GW_JWT_KEYS_MAX ? "too many keys" : "a kid used twice");
			return -1;
		}
		struct gw_jwt_key *k = &ks->k[ks->n++];
		memset(k, 0, sizeof *k);
		snprintf(k->kid, sizeof k->kid, "%s", kr->keys[i].id);
		k->alg = GW_JWT_HS256;
		memcpy(k->secret, kr->keys[i].secret, kr->keys[i].len);
		k->secret_len = kr->keys[i].len;
	}
	return 0;
}

static bool kid_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > FS_KEY_ID_LEN_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-')
			return false;
	return true;
}

/* One PEM block from text (at its BEGIN line) into a key of kid. 0, or -1 with err. */
static int add_pem_key(struct gw_jwt_keys *ks, const char *kid, const char *pem, size_t len,
		       char *err, size_t err_len)
{
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	EVP_PKEY *pk = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	if (!pk) {
		snprintf(err, err_len, "kid %s: not a PEM public key", kid);
		return -1;
	}
	enum gw_jwt_alg alg;
	if (EVP_PKEY_is_a(pk, "ED25519")) {
		alg = GW_JWT_EDDSA;
	} else if (EVP_PKEY_is_a(pk, "EC")) {
		char group[64] = "";
		size_t gl = 0;
		EVP_PKEY_get_utf8_string_param(pk, "group", group, sizeof group, &gl);
		if (strcmp(group, "prime256v1") != 0 && strcmp(group, "P-256") != 0) {
			snprintf(err, err_len, "kid %s: an EC key not on P-256 (ES256 only)", kid);
			EVP_PKEY_free(pk);
			return -1;
		}
		alg = GW_JWT_ES256;
	} else {
		snprintf(err, err_len, "kid %s: neither a P-256 (ES256) nor an Ed25519 (EdDSA) key",
			 kid);
		EVP_PKEY_free(pk);
		return -1;
	}
	struct gw_jwt_key *k = &ks->k[ks->n++];
	memset(k, 0, sizeof *k);
	snprintf(k->kid, sizeof k->kid, "%s", kid);
	k->alg = alg;
	k->pub = pk;
	return 0;
}

int gw_jwt_add_pem(struct gw_jwt_keys *ks, const char *text, char *err, size_t err_len)
{
	const char *p = text;
	int line = 1;
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char l[128];
		snprintf(l, sizeof l, "%.*s", (int)(n < sizeof l - 1 ? n : sizeof l - 1), p);
		size_t ll = strlen(l);
		while (ll && (l[ll - 1] == '\r' || l[ll - 1] == ' ' || l[ll - 1] == '\t'))
			l[--ll] = '\0';
		if (ll == 0 || l[0] == '#') {
			p += n + (eol != NULL);
			line++;
			continue;
		}
		char kid[FS_KEY_ID_LEN_MAX + 2];
		if (strncmp(l, "kid ", 4) != 0 || snprintf(kid, sizeof kid, "%s", l + 4) < 0 ||
		    !kid_ok(kid)) {
			snprintf(err, err_len,
				 "line %d: expected `kid KID` (KID 1-16 of A-Z a-z 0-9 _ -)", line);
			return -1;
		}
		if (key_find(ks, kid) || ks->n >= GW_JWT_KEYS_MAX) {
			snprintf(err, err_len, "line %d: kid %s: %s", line, kid,
				 ks->n >= GW_JWT_KEYS_MAX ? "too many keys" : "a kid used twice");
			return -1;
		}
		p += n + (eol != NULL);
		line++;
		const char *end = strstr(p, "-----END PUBLIC KEY-----");
		if (strncmp(p, "-----BEGIN PUBLIC KEY-----", 26) != 0 || !end) {
			snprintf(err, err_len, "line %d: kid %s: no PEM public key block follows",
				 line, kid);
			return -1;
		}
		end += strlen("-----END PUBLIC KEY-----");
		char why[160];
		if (add_pem_key(ks, kid, p, (size_t)(end - p), why, sizeof why) < 0) {
			snprintf(err, err_len, "line %d: %s", line, why);
			return -1;
		}
		for (; p < end; p++)
			line += *p == '\n';
	}
	return 0;
}

void gw_jwt_keys_free(struct gw_jwt_keys *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		EVP_PKEY_free(ks->k[i].pub);
	OPENSSL_cleanse(ks->k, sizeof ks->k);
	ks->n = 0;
}

/* ---- verifying ------------------------------------------------------------------------------ */

/* An ES256 signature (r||s, 32 bytes each) as the DER OpenSSL verifies; its length or 0. */
static int es256_der(const unsigned char *sig, unsigned char *der, size_t cap)
{
	ECDSA_SIG *es = ECDSA_SIG_new();
	BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
	if (!es || !r || !s || !ECDSA_SIG_set0(es, r, s)) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return 0;
	}
	int n = i2d_ECDSA_SIG(es, NULL);
	unsigned char *o = der;
	if (n <= 0 || (size_t)n > cap || i2d_ECDSA_SIG(es, &o) != n)
		n = 0;
	ECDSA_SIG_free(es);
	return n;
}

static bool sig_ok(const struct gw_jwt_key *k, const char *input, size_t in_len,
		   const unsigned char *sig, size_t sig_len)
{
	if (k->alg == GW_JWT_HS256) {
		unsigned char mac[32];
		unsigned int ml = 0;
		if (sig_len != sizeof mac || !HMAC(EVP_sha256(), k->secret, (int)k->secret_len,
						   (const unsigned char *)input, in_len, mac, &ml))
			return false;
		return ml == sizeof mac && CRYPTO_memcmp(mac, sig, sizeof mac) == 0;
	}
	unsigned char der[80];
	const unsigned char *s = sig;
	size_t sl = sig_len;
	if (k->alg == GW_JWT_ES256) {
		if (sig_len != 64)
			return false;
		int n = es256_der(sig, der, sizeof der);
		if (n <= 0)
			return false;
		s = der;
		sl = (size_t)n;
	} else if (sig_len != 64) {
		return false;
	}
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	bool ok = ctx &&
		  EVP_DigestVerifyInit(ctx, NULL, k->alg == GW_JWT_ES256 ? EVP_sha256() : NULL,
				       NULL, (EVP_PKEY *)k->pub) == 1 &&
		  EVP_DigestVerify(ctx, s, sl, (const unsigned char *)input, in_len) == 1;
	EVP_MD_CTX_free(ctx);
	return ok;
}

/* A base64url part of JSON holding an object, decoded and parsed; NULL if not. */
static json_t *json_part(const char *s, size_t n)
{
	unsigned char buf[PART_MAX];
	if (n == 0 || n > PART_MAX * 4 / 3)
		return NULL;
	long len = gw_b64url_decode(s, n, buf, sizeof buf);
	if (len <= 0)
		return NULL;
	json_t *o = json_loadb((const char *)buf, (size_t)len, JSON_REJECT_DUPLICATES, NULL);
	if (o && !json_is_object(o)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* The header: its key, when kid names one and alg is the one that key takes. */
static enum gw_jwt_verdict check_header(const struct gw_jwt_keys *ks, json_t *h,
					const struct gw_jwt_key **out)
{
	static const char *const names[] = {"HS256", "ES256", "EdDSA"};
	const char *alg = json_string_value(json_object_get(h, "alg"));
	const char *kid = json_string_value(json_object_get(h, "kid"));
	/* No extension is understood here: a critical one refuses the token (RFC 7515, 4.1.11). */
	if (!alg || json_object_get(h, "crit"))
		return GW_JWT_BAD_ALG;
	if (strcmp(alg, "HS256") != 0 && strcmp(alg, "ES256") != 0 && strcmp(alg, "EdDSA") != 0)
		return GW_JWT_BAD_ALG; /* none, RS256, HS512, ... */
	const struct gw_jwt_key *k = kid ? key_find(ks, kid) : NULL;
	if (!k)
		return GW_JWT_UNKNOWN_KID;
	/* The key decides the algorithm, never the token: HS256 naming a public key is the
	 * confusion that would make the public key's bytes a MAC secret. */
	if (strcmp(alg, names[k->alg]) != 0)
		return GW_JWT_BAD_ALG;
	*out = k;
	return GW_JWT_OK;
}

/* A NumericDate claim (RFC 7519, 2): absent (0, *has false), a number (*t), or bad (-1). */
static int numeric_date(json_t *claims, const char *name, double *t, bool *has)
{
	json_t *v = json_object_get(claims, name);
	*has = v != NULL;
	if (!v)
		return 0;
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return -1;
	*t = json_number_value(v);
	return 0;
}

static bool aud_ok(const struct gw_jwt_keys *ks, json_t *claims)
{
	if (!ks->audience[0])
		return true;
	json_t *aud = json_object_get(claims, "aud");
	if (json_is_string(aud))
		return strcmp(json_string_value(aud), ks->audience) == 0;
	size_t i;
	json_t *a;
	json_array_foreach(aud, i,
			   a) if (json_is_string(a) &&
				  strcmp(json_string_value(a), ks->audience) == 0) return true;
	return false;
}

static enum gw_jwt_verdict check_claims(const struct gw_jwt_keys *ks, json_t *c, int64_t now_s,
					char sub[FS_BUYER_LEN_MAX + 1])
{
	double exp = 0, nbf = 0, iat = 0;
	bool has_exp, has_nbf, has_iat;
	const char *s = json_string_value(json_object_get(c, "sub"));
	if (numeric_date(c, "exp", &exp, &has_exp) < 0 || !has_exp ||
	    numeric_date(c, "nbf", &nbf, &has_nbf) < 0 ||
	    numeric_date(c, "iat", &iat, &has_iat) < 0 || !s || !fs_buyer_valid(s))
		return GW_JWT_BAD_CLAIMS;
	double now = (double)now_s, lw = (double)ks->leeway_s;
	if (now >= exp + lw)
		return GW_JWT_EXPIRED;
	if ((has_nbf && now + lw < nbf) || (has_iat && now + lw < iat))
		return GW_JWT_NOT_YET;
	if (!aud_ok(ks, c))
		return GW_JWT_BAD_AUDIENCE;
	snprintf(sub, FS_BUYER_LEN_MAX + 1, "%s", s);
	return GW_JWT_OK;
}

enum gw_jwt_verdict gw_jwt_verify_token(const struct gw_jwt_keys *ks, const char *token, size_t len,
					int64_t now_s, char sub[FS_BUYER_LEN_MAX + 1])
{
	if (len == 0 || len > GW_JWT_TOKEN_MAX || memchr(token, '\0', len))
		return GW_JWT_MALFORMED;
	const char *d1 = memchr(token, '.', len);
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token)) : NULL;
	if (!d1 || !d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token)))
		return GW_JWT_MALFORMED;
	unsigned char sig[SIG_MAX];
	size_t sig_chars = len - (size_t)(d2 + 1 - token);
	long sig_len = sig_chars <= SIG_MAX * 4 / 3
			       ? gw_b64url_decode(d2 + 1, sig_chars, sig, sizeof sig)
			       : -1;
	json_t *h = json_part(token, (size_t)(d1 - token));
	json_t *c = json_part(d1 + 1, (size_t)(d2 - d1 - 1));
	enum gw_jwt_verdict v = GW_JWT_MALFORMED;
	const struct gw_jwt_key *k = NULL;
	/* alg none has an empty signature: it is refused as an alg, not as malformed. */
	if (h && c && sig_len >= 0)
		v = check_header(ks, h, &k);
	if (v == GW_JWT_OK && !sig_ok(k, token, (size_t)(d2 - token), sig, (size_t)sig_len))
		v = GW_JWT_BAD_SIGNATURE;
	if (v == GW_JWT_OK)
		v = check_claims(ks, c, now_s, sub);
	json_decref(h);
	json_decref(c);
	return v;
}

enum gw_jwt_verdict gw_jwt_verify(const struct gw_jwt_keys *ks, const char *authorization,
				  int64_t now_s, char sub[FS_BUYER_LEN_MAX + 1])
{
	if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
		return GW_JWT_MISSING;
	const char *t = authorization + 7;
	while (*t == ' ')
		t++;
	size_t n = strnlen(t, GW_JWT_TOKEN_MAX + 1);
	while (n > 0 && t[n - 1] == ' ')
		n--;
	if (n == 0)
		return GW_JWT_MISSING;
	return gw_jwt_verify_token(ks, t, n, now_s, sub);
}
