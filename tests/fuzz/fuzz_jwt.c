/* fuzz_jwt.c: libFuzzer target for the buyers' token verifier (src/gateway/auth.c, issue 48
 * item 2). Each input is tried twice: as a token as it is (a refusal, never a crash or a
 * sanitizer report), and cut at its first two NUL bytes into a header, claims and a tail, the
 * header and claims signed HS256 with the ring's key (so that the claims' checks run on
 * whatever JSON the input holds). A token that verifies must name a valid buyer id. Run:
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false
 *   ninja -C build-fuzz tests/fuzz/fuzz_jwt && build-fuzz/tests/fuzz/fuzz_jwt -max_total_time=60 */
#include "core/record.h"
#include "gateway/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gw_jwt_keys ks;
static const unsigned char key[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
				      12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
				      23, 24, 25, 26, 27, 28, 29, 30, 31};

static void setup(void)
{
	if (ks.n)
		return;
	struct fs_keyring kr;
	char err[200];
	if (fs_keyring_parse(
		    "k1 0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00\n", &kr,
		    err, sizeof err) < 0 ||
	    gw_jwt_add_ring(&ks, &kr, err, sizeof err) < 0)
		abort();
	memcpy(ks.k[0].secret, key, sizeof key);
	ks.leeway_s = 30;
	snprintf(ks.audience, sizeof ks.audience, "shop");
}

static void check(const char *tok, size_t len)
{
	char sub[FS_BUYER_LEN_MAX + 1] = "";
	if (gw_jwt_verify_token(&ks, tok, len, 1800000000, sub) == GW_JWT_OK &&
	    !fs_buyer_valid(sub))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	check((const char *)data, size);
	const uint8_t *z1 = memchr(data, 0, size);
	const uint8_t *z2 = z1 ? memchr(z1 + 1, 0, size - (size_t)(z1 + 1 - data)) : NULL;
	if (!z2 || size > 3000)
		return 0;
	static char tok[8192];
	size_t n = gw_b64url_encode(data, (size_t)(z1 - data), tok);
	tok[n++] = '.';
	n += gw_b64url_encode(z1 + 1, (size_t)(z2 - z1 - 1), tok + n);
	unsigned char mac[32];
	unsigned int ml = 0;
	HMAC(EVP_sha256(), key, sizeof key, (const unsigned char *)tok, n, mac, &ml);
	tok[n++] = '.';
	n += gw_b64url_encode(mac, ml, tok + n);
	check(tok, n);
	return 0;
}
