/* test_jwt.c: the buyers' tokens (src/gateway/auth.c, issue 48 item 2): every refusal (alg
 * none, HS256 under a public key, the wrong key, an unknown kid, expired, not yet, the wrong
 * audience, claims missing or of the wrong type), the leeway's edges, malformed tokens (bad
 * base64, a huge header, missing dots: refused, no crash), the key files' rules, and tokens
 * that verify (HS256, ES256, EdDSA), signed here with OpenSSL as a shop would. */
#include "check.h"

#include "gateway/auth.h"

#include <openssl/bio.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

enum { NOW = 1800000000 };

static const char HS_HEX[] =
	"k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
static const unsigned char HS_KEY[32] = {0,  1,	 2,  3,	 4,  5,	 6,  7,	 8,  9,	 10,
					 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
					 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

static EVP_PKEY *ec_key, *ed_key;
static char pub_text[4096]; /* kid e1 (P-256), kid d1 (Ed25519) */

static void pem_of(EVP_PKEY *k, const char *kid, char *out, size_t cap)
{
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_PUBKEY(b, k);
	char *p = NULL;
	long n = BIO_get_mem_data(b, &p);
	size_t l = strlen(out);
	snprintf(out + l, cap - l, "kid %s\n%.*s", kid, (int)n, p);
	BIO_free(b);
}

static void b64s(const char *s, char *out)
{
	gw_b64url_encode((const unsigned char *)s, strlen(s), out);
}

/* A token of header and claims (JSON texts), signed as alg says with key (NULL: HS_KEY). */
static void make(const char *header, const char *claims, const char *how, const void *key,
		 size_t key_len, char *out)
{
	char h[1024], c[1024];
	b64s(header, h);
	b64s(claims, c);
	char input[2100];
	snprintf(input, sizeof input, "%s.%s", h, c);
	unsigned char sig[128];
	size_t sl = 0;
	if (strcmp(how, "HS256") == 0) {
		unsigned int ml = 0;
		HMAC(EVP_sha256(), key ? key : HS_KEY, key ? (int)key_len : 32,
		     (const unsigned char *)input, strlen(input), sig, &ml);
		sl = ml;
	} else if (strcmp(how, "ES256") == 0 || strcmp(how, "EdDSA") == 0) {
		bool es = how[0] == 'E' && how[1] == 'S';
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		unsigned char der[128];
		size_t dl = sizeof der;
		EVP_DigestSignInit(ctx, NULL, es ? EVP_sha256() : NULL, NULL, es ? ec_key : ed_key);
		EVP_DigestSign(ctx, der, &dl, (const unsigned char *)input, strlen(input));
		EVP_MD_CTX_free(ctx);
		if (es) { /* DER to JOSE's r||s */
			const unsigned char *p = der;
			ECDSA_SIG *s = d2i_ECDSA_SIG(NULL, &p, (long)dl);
			BN_bn2binpad(ECDSA_SIG_get0_r(s), sig, 32);
			BN_bn2binpad(ECDSA_SIG_get0_s(s), sig + 32, 32);
			ECDSA_SIG_free(s);
			sl = 64;
		} else {
			memcpy(sig, der, dl);
			sl = dl;
		}
	}
	char s64[200];
	gw_b64url_encode(sig, sl, s64);
	sprintf(out, "%s.%s", input, s64);
}

static enum gw_jwt_verdict verify(const struct gw_jwt_keys *ks, const char *tok, char *sub)
{
	char auth[8192];
	snprintf(auth, sizeof auth, "Bearer %s", tok);
	return gw_jwt_verify(ks, auth, NOW, sub);
}

#define CLAIMS(extra) "{\"sub\":\"alice\",\"exp\":1800000600" extra "}"

static void load_keys(struct gw_jwt_keys *ks, const char *audience)
{
	memset(ks, 0, sizeof *ks);
	ks->leeway_s = 30;
	snprintf(ks->audience, sizeof ks->audience, "%s", audience);
	struct fs_keyring kr;
	char err[200];
	CHECK_INT(fs_keyring_parse(HS_HEX, &kr, err, sizeof err), 0);
	CHECK_INT(gw_jwt_add_ring(ks, &kr, err, sizeof err), 0);
	CHECK_INT(gw_jwt_add_pem(ks, pub_text, err, sizeof err), 0);
	CHECK_INT((long)ks->n, 3);
}

static void test_good_and_forged(void)
{
	struct gw_jwt_keys ks;
	load_keys(&ks, "");
	char tok[4096], sub[FS_BUYER_LEN_MAX + 1] = "";
	make("{\"alg\":\"HS256\",\"kid\":\"k1\",\"typ\":\"JWT\"}", CLAIMS(""), "HS256", NULL, 0,
	     tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_OK);
	CHECK_STR(sub, "alice");
	make("{\"alg\":\"ES256\",\"kid\":\"e1\"}", CLAIMS(""), "ES256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_OK);
	make("{\"alg\":\"EdDSA\",\"kid\":\"d1\"}", CLAIMS(""), "EdDSA", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_OK);
	/* A byte of the signature changed. */
	tok[strlen(tok) - 2] = tok[strlen(tok) - 2] == 'A' ? 'B' : 'A';
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_SIGNATURE);
	/* The wrong HS256 key. */
	unsigned char other[32] = {9};
	make("{\"alg\":\"HS256\",\"kid\":\"k1\"}", CLAIMS(""), "HS256", other, 32, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_SIGNATURE);
	/* A claim changed after signing (alice's token made bob's). */
	make("{\"alg\":\"HS256\",\"kid\":\"k1\"}", CLAIMS(""), "HS256", NULL, 0, tok);
	char h[200], c[200];
	b64s("{\"sub\":\"bob\",\"exp\":1800000600}", c);
	snprintf(h, sizeof h, "%.*s", (int)(strchr(tok, '.') - tok), tok);
	char forged[4096];
	sprintf(forged, "%s.%s%s", h, c, strrchr(tok, '.'));
	CHECK_INT(verify(&ks, forged, sub), GW_JWT_BAD_SIGNATURE);
	/* alg none, with and without a signature; other algs. */
	make("{\"alg\":\"none\",\"kid\":\"k1\"}", CLAIMS(""), "none", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	make("{\"alg\":\"HS512\",\"kid\":\"k1\"}", CLAIMS(""), "HS256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	make("{\"kid\":\"k1\"}", CLAIMS(""), "HS256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	/* HS256 under a public key's bytes (its PEM, as the classic attack sends it). */
	const char *pem = strstr(pub_text, "-----BEGIN");
	make("{\"alg\":\"HS256\",\"kid\":\"e1\"}", CLAIMS(""), "HS256", pem, strlen(pem), tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	/* A token of one asymmetric alg naming the other's key. */
	make("{\"alg\":\"ES256\",\"kid\":\"d1\"}", CLAIMS(""), "ES256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	make("{\"alg\":\"EdDSA\",\"kid\":\"k1\"}", CLAIMS(""), "EdDSA", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	/* A critical extension nobody here understands. */
	make("{\"alg\":\"HS256\",\"kid\":\"k1\",\"crit\":[\"x\"],\"x\":1}", CLAIMS(""), "HS256",
	     NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_BAD_ALG);
	/* Kids. */
	make("{\"alg\":\"HS256\",\"kid\":\"k9\"}", CLAIMS(""), "HS256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_UNKNOWN_KID);
	make("{\"alg\":\"HS256\"}", CLAIMS(""), "HS256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_UNKNOWN_KID);
	make("{\"alg\":\"HS256\",\"kid\":7}", CLAIMS(""), "HS256", NULL, 0, tok);
	CHECK_INT(verify(&ks, tok, sub), GW_JWT_UNKNOWN_KID);
	gw_jwt_keys_free(&ks);
}

static enum gw_jwt_verdict hs(const struct gw_jwt_keys *ks, const char *claims)
{
	char tok[4096], sub[FS_BUYER_LEN_MAX + 1];
	make("{\"alg\":\"HS256\",\"kid\":\"k1\"}", claims, "HS256", NULL, 0, tok);
	return verify(ks, tok, sub);
}

static void test_claims(void)
{
	struct gw_jwt_keys ks;
	load_keys(&ks, "");
	/* exp with a leeway of 30 s: valid while now < exp + 30. */
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":1799999971}"), GW_JWT_OK);
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":1799999970}"), GW_JWT_EXPIRED);
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":1799999000}"), GW_JWT_EXPIRED);
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":1799999970.5}"), GW_JWT_OK);
	/* nbf and iat: valid from 30 s before them. */
	CHECK_INT(hs(&ks, CLAIMS(",\"nbf\":1800000030")), GW_JWT_OK);
	CHECK_INT(hs(&ks, CLAIMS(",\"nbf\":1800000031")), GW_JWT_NOT_YET);
	CHECK_INT(hs(&ks, CLAIMS(",\"iat\":1800000030")), GW_JWT_OK);
	CHECK_INT(hs(&ks, CLAIMS(",\"iat\":1800000031")), GW_JWT_NOT_YET);
	CHECK_INT(hs(&ks, CLAIMS(",\"iat\":1700000000,\"nbf\":1700000000")), GW_JWT_OK);
	/* Required and typed. */
	CHECK_INT(hs(&ks, "{\"sub\":\"a\"}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":\"1800000600\"}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"sub\":\"a\",\"exp\":null}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, CLAIMS(",\"nbf\":\"soon\"")), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"exp\":1800000600}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"sub\":7,\"exp\":1800000600}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"sub\":\"\",\"exp\":1800000600}"), GW_JWT_BAD_CLAIMS);
	CHECK_INT(hs(&ks, "{\"sub\":\"a b\",\"exp\":1800000600}"), GW_JWT_BAD_CLAIMS);
	/* No audience set: any aud passes. */
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":\"elsewhere\"")), GW_JWT_OK);
	gw_jwt_keys_free(&ks);
	load_keys(&ks, "shop");
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":\"shop\"")), GW_JWT_OK);
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":[\"x\",\"shop\"]")), GW_JWT_OK);
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":\"shop2\"")), GW_JWT_BAD_AUDIENCE);
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":[\"x\"]")), GW_JWT_BAD_AUDIENCE);
	CHECK_INT(hs(&ks, CLAIMS(",\"aud\":7")), GW_JWT_BAD_AUDIENCE);
	CHECK_INT(hs(&ks, CLAIMS("")), GW_JWT_BAD_AUDIENCE);
	gw_jwt_keys_free(&ks);
}

static void test_malformed(void)
{
	struct gw_jwt_keys ks;
	load_keys(&ks, "");
	char sub[FS_BUYER_LEN_MAX + 1];
	CHECK_INT(gw_jwt_verify(&ks, NULL, NOW, sub), GW_JWT_MISSING);
	CHECK_INT(gw_jwt_verify(&ks, "", NOW, sub), GW_JWT_MISSING);
	CHECK_INT(gw_jwt_verify(&ks, "Bearer", NOW, sub), GW_JWT_MISSING);
	CHECK_INT(gw_jwt_verify(&ks, "Bearer    ", NOW, sub), GW_JWT_MISSING);
	CHECK_INT(gw_jwt_verify(&ks, "Basic YWxpY2U6cHc=", NOW, sub), GW_JWT_MISSING);
	const char *bad[] = {
		"abc",
		"a.b",
		"a.b.c.d",
		"..",
		"...",
		"!!!.e30.AAAA",
		"e30=.e30.AAAA",
		"e30.e30.AA=A",
		"e30.e30.A",
		"WzFd.e30.AAAA",				/* a header that is an array */
		"bnVsbA.e30.AAAA",				/* null */
		"eyJhbGciOiJIUzI1NiIsImtpZCI6ImsxIn0.eyJ.AAAA", /* claims cut in the middle */
		"e30.e30.\xff\xfe",
		"e31.e30.AAAA", /* stray bits in the last character */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("bad[%zu] %s", i, bad[i]);
		CHECK_INT(gw_jwt_verify_token(&ks, bad[i], strlen(bad[i]), NOW, sub),
			  GW_JWT_MALFORMED);
	}
	CHECK_CTX("%s", "");
	/* An empty signature is alg none's: refused for the alg (the header names none). */
	CHECK_INT(gw_jwt_verify_token(&ks, "e30.e30.", 8, NOW, sub), GW_JWT_BAD_ALG);
	/* A NUL inside. */
	CHECK_INT(gw_jwt_verify_token(&ks, "e30.e\0.AAAA", 11, NOW, sub), GW_JWT_MALFORMED);
	/* A huge header: refused by its size, unparsed; a token over the cap too. */
	static char huge[20000], hb[20000];
	memset(huge, 'a', 6000);
	const char *h1 = "{\"alg\":\"HS256\",\"kid\":\"k1\",\"x\":\"";
	memcpy(huge, h1, strlen(h1));
	strcpy(huge + 5990, "\"}");
	gw_b64url_encode((const unsigned char *)huge, strlen(huge), hb);
	strcat(hb, ".e30.AAAA");
	CHECK_INT(gw_jwt_verify_token(&ks, hb, strlen(hb), NOW, sub), GW_JWT_MALFORMED);
	char auth[20100];
	snprintf(auth, sizeof auth, "Bearer %s", hb);
	CHECK_INT(gw_jwt_verify(&ks, auth, NOW, sub), GW_JWT_MALFORMED);
	/* A header just under the part's cap still parses (and is refused for its alg only). */
	memset(huge, 'a', 1500);
	const char *h2 = "{\"alg\":\"XX\",\"kid\":\"k1\",\"x\":\"";
	memcpy(huge, h2, strlen(h2));
	strcpy(huge + 1490, "\"}");
	gw_b64url_encode((const unsigned char *)huge, strlen(huge), hb);
	strcat(hb, ".e30.AAAA");
	CHECK_INT(gw_jwt_verify_token(&ks, hb, strlen(hb), NOW, sub), GW_JWT_BAD_ALG);
	/* Every cut of a good token: refused, never a crash. */
	char tok[4096];
	make("{\"alg\":\"ES256\",\"kid\":\"e1\"}", CLAIMS(""), "ES256", NULL, 0, tok);
	for (size_t n = 0; n < strlen(tok); n++)
		CHECK(gw_jwt_verify_token(&ks, tok, n, NOW, sub) != GW_JWT_OK);
	CHECK_INT(gw_jwt_verify_token(&ks, tok, strlen(tok), NOW, sub), GW_JWT_OK);
	gw_jwt_keys_free(&ks);
}

static void test_key_files(void)
{
	struct gw_jwt_keys ks = {.leeway_s = 30};
	char err[256] = "";
	CHECK_INT(gw_jwt_add_pem(&ks, "# only a comment\n\n", err, sizeof err), 0);
	CHECK_INT(gw_jwt_add_pem(&ks, "kid e1\nnot a key\n", err, sizeof err), -1);
	CHECK(strstr(err, "no PEM public key block") != NULL);
	CHECK_INT(gw_jwt_add_pem(&ks, "-----BEGIN PUBLIC KEY-----\n", err, sizeof err), -1);
	CHECK(strstr(err, "expected `kid KID`") != NULL);
	CHECK_INT(gw_jwt_add_pem(
			  &ks,
			  "kid bad kid\n-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n",
			  err, sizeof err),
		  -1);
	CHECK_INT(gw_jwt_add_pem(
			  &ks,
			  "kid x\n-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
			  err, sizeof err),
		  -1);
	CHECK(strstr(err, "not a PEM public key") != NULL);
	/* An RSA key: not one of the algs (RS256 is not taken). */
	EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	char rsa_text[4096] = "";
	pem_of(rsa, "r1", rsa_text, sizeof rsa_text);
	CHECK_INT(gw_jwt_add_pem(&ks, rsa_text, err, sizeof err), -1);
	CHECK(strstr(err, "neither a P-256") != NULL);
	EVP_PKEY_free(rsa);
	/* A P-384 key: ES384 is not taken. */
	EVP_PKEY *p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	char p384_text[4096] = "";
	pem_of(p384, "p1", p384_text, sizeof p384_text);
	CHECK_INT(gw_jwt_add_pem(&ks, p384_text, err, sizeof err), -1);
	CHECK(strstr(err, "not on P-256") != NULL);
	EVP_PKEY_free(p384);
	CHECK_INT((long)ks.n, 0);
	/* One kid, one key: the same kid in the ring and the public keys is refused. */
	CHECK_INT(gw_jwt_add_pem(&ks, pub_text, err, sizeof err), 0);
	CHECK_INT(gw_jwt_add_pem(&ks, pub_text, err, sizeof err), -1);
	CHECK(strstr(err, "a kid used twice") != NULL);
	struct fs_keyring kr;
	CHECK_INT(fs_keyring_parse(
			  "e1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
			  &kr, err, sizeof err),
		  0);
	CHECK_INT(gw_jwt_add_ring(&ks, &kr, err, sizeof err), -1);
	CHECK(strstr(err, "a kid used twice") != NULL);
	gw_jwt_keys_free(&ks);
	/* base64url: round trips, strict decoding. */
	unsigned char in[40], out[64];
	char text[80];
	for (size_t n = 0; n <= sizeof in; n++) {
		for (size_t i = 0; i < n; i++)
			in[i] = (unsigned char)(i * 37 + n);
		size_t l = gw_b64url_encode(in, n, text);
		CHECK(gw_b64url_decode(text, l, out, sizeof out) == (long)n);
		CHECK(memcmp(in, out, n) == 0);
	}
	CHECK(gw_b64url_decode("AA==", 4, out, sizeof out) == -1);
	CHECK(gw_b64url_decode("A+/A", 4, out, sizeof out) == -1);
	CHECK(gw_b64url_decode("AB", 2, out, sizeof out) == -1); /* stray bits */
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_jwt");
	}
	ec_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	ed_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	pem_of(ec_key, "e1", pub_text, sizeof pub_text);
	pem_of(ed_key, "d1", pub_text, sizeof pub_text);
	test_good_and_forged();
	test_claims();
	test_malformed();
	test_key_files();
	EVP_PKEY_free(ec_key);
	EVP_PKEY_free(ed_key);
	return check_done("test_jwt");
}
