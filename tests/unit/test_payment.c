/* test_payment: the payment provider's signature on a confirm (issue 48, item 3;
 * src/gateway/payment.c): a known vector (Python's hmac), the window's edges both ways, the MAC
 * compared as bytes and checked before the window, several v1 entries and keys, malformed
 * headers (a clear refusal, never a crash: a table, then random bytes), the body naming its
 * intent; and the payment key ring's file and payment.checkout.url's syntax. */
#include "check.h"

#include "gateway/payment.h"
#include "io/config.h"
#include "io/keyring.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

/* Test keys only. */
#define K1 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define K2 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
#define ID "0190a0b0-c0d0-7000-8000-000000000001"
#define BODY "{\"intent_id\":\"" ID "\",\"sku\":\"HOT\"}"
/* hmac.new(K1, b"1700000000." + BODY, sha256).hexdigest(), by Python */
#define VECTOR "832bc122d799115d5353d15daf9e10cc55f2cc2a01616f0b0d1786b947f0613c"
enum { T0 = 1700000000 };

static void ring(struct fs_keyring *kr, const char *text)
{
	char err[128];
	if (!CHECK_INT(fs_keyring_parse(text, kr, err, sizeof err), 0))
		fprintf(stderr, "  %s\n", err);
}

static enum gw_pay_verdict verify(const struct fs_keyring *kr, const char *h, const char *body,
				  int64_t now)
{
	return gw_pay_verify(kr, h, body, strlen(body), now);
}

/* The v1 of (t, body) with key hex, by OpenSSL's one-shot HMAC (not the code under test). */
static void v1_of(const char *hex, int64_t t, const char *body, char out[65])
{
	unsigned char key[64], mac[32];
	size_t kl = strlen(hex) / 2;
	for (size_t i = 0; i < kl; i++)
		sscanf(hex + 2 * i, "%2hhx", &key[i]);
	char msg[4096];
	int n = snprintf(msg, sizeof msg, "%" PRId64 ".%s", t, body);
	unsigned int ml = 0;
	HMAC(EVP_sha256(), key, (int)kl, (unsigned char *)msg, (size_t)n, mac, &ml);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static void test_vector(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	char h[256];
	CHECK_INT(gw_pay_sign(&kr.keys[0], T0, BODY, strlen(BODY), h, sizeof h), 0);
	CHECK_STR(h, "t=1700000000,v1=" VECTOR);
	CHECK_INT(verify(&kr, h, BODY, T0), GW_PAY_OK);
	char mine[65];
	v1_of(K1, T0, BODY, mine);
	CHECK_STR(mine, VECTOR);
	/* The v1 compared as bytes: upper-case hex is the same MAC. */
	char upper[256];
	snprintf(upper, sizeof upper, "t=1700000000,v1=%s", VECTOR);
	for (char *p = upper + 16; *p; p++)
		*p = (char)toupper((unsigned char)*p);
	CHECK_INT(verify(&kr, upper, BODY, T0), GW_PAY_OK);
	CHECK_INT(gw_pay_sign(&kr.keys[0], T0, BODY, strlen(BODY), h, 20), -ENOSPC);
	fs_keyring_wipe(&kr);
}

static void test_window(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	const struct {
		int64_t now;
		enum gw_pay_verdict want;
	} rows[] = {
		{T0, GW_PAY_OK},
		{T0 + GW_PAY_TOLERANCE_S, GW_PAY_OK},	     /* signed 300 s ago */
		{T0 + GW_PAY_TOLERANCE_S + 1, GW_PAY_STALE}, /* 301 s ago */
		{T0 - GW_PAY_TOLERANCE_S, GW_PAY_OK},	     /* 300 s ahead of the gateway */
		{T0 - GW_PAY_TOLERANCE_S - 1, GW_PAY_STALE}, /* 301 s ahead */
		{T0 + 86400 * 365, GW_PAY_STALE},
		{0, GW_PAY_STALE},
	};
	char h[256];
	gw_pay_sign(&kr.keys[0], T0, BODY, strlen(BODY), h, sizeof h);
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("now = t %+" PRId64, rows[i].now - T0);
		CHECK_INT(verify(&kr, h, BODY, rows[i].now), rows[i].want);
	}
	CHECK_CTX("%s", "");
	/* The MAC first: a forged signature is bad however stale, a genuine stale one stale. */
	struct fs_keyring other;
	ring(&other, "k2 " K2 "\n");
	CHECK_INT(verify(&other, h, BODY, T0 + 1000), GW_PAY_BAD);
	CHECK_INT(verify(&kr, h, BODY, T0 + 1000), GW_PAY_STALE);
	fs_keyring_wipe(&kr);
	fs_keyring_wipe(&other);
}

static void test_wrong(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	char h[256], good[65];
	v1_of(K1, T0, BODY, good);
	/* A body changed after signing, by one byte; another t with the same v1. */
	char changed[] = BODY;
	changed[sizeof changed - 3] = 'U';
	snprintf(h, sizeof h, "t=%d,v1=%s", T0, good);
	CHECK_INT(verify(&kr, h, changed, T0), GW_PAY_BAD);
	CHECK_INT(verify(&kr, h, BODY " ", T0), GW_PAY_BAD);
	CHECK_INT(verify(&kr, h, "", T0), GW_PAY_BAD);
	snprintf(h, sizeof h, "t=%d,v1=%s", T0 + 1, good);
	CHECK_INT(verify(&kr, h, BODY, T0), GW_PAY_BAD);
	/* A MAC off in its first byte, in its last byte. */
	for (int at = 0; at < 64; at += 63) {
		char off[65];
		memcpy(off, good, sizeof off);
		off[at] = off[at] == '0' ? '1' : '0';
		snprintf(h, sizeof h, "t=%d,v1=%s", T0, off);
		CHECK_CTX("MAC off at hex digit %d", at);
		CHECK_INT(verify(&kr, h, BODY, T0), GW_PAY_BAD);
	}
	CHECK_CTX("%s", "");
	/* No key ring: nothing verifies. */
	snprintf(h, sizeof h, "t=%d,v1=%s", T0, good);
	struct fs_keyring none = {.n = 0, .sign = -1};
	CHECK_INT(verify(&none, h, BODY, T0), GW_PAY_BAD);
	CHECK_INT(verify(NULL, h, BODY, T0), GW_PAY_BAD);
	/* The empty body is signed like any other. */
	char e[65];
	v1_of(K1, T0, "", e);
	snprintf(h, sizeof h, "t=%d,v1=%s", T0, e);
	CHECK_INT(verify(&kr, h, "", T0), GW_PAY_OK);
	fs_keyring_wipe(&kr);
}

static void test_several(void)
{
	struct fs_keyring one, both;
	ring(&one, "k1 " K1 "\n");
	ring(&both, "old " K1 "\nnew " K2 "\n");
	char g1[65], g2[65], bad[65], h[1024];
	v1_of(K1, T0, BODY, g1);
	v1_of(K2, T0, BODY, g2);
	memset(bad, 'a', 64);
	bad[64] = '\0';
	/* A rotation: the provider signs with both secrets; a gateway with either key passes. */
	snprintf(h, sizeof h, "t=%d,v1=%s,v1=%s", T0, g2, g1);
	CHECK_INT(verify(&one, h, BODY, T0), GW_PAY_OK);
	CHECK_INT(verify(&both, h, BODY, T0), GW_PAY_OK);
	/* The ring's second key alone. */
	snprintf(h, sizeof h, "t=%d,v1=%s", T0, g2);
	CHECK_INT(verify(&both, h, BODY, T0), GW_PAY_OK);
	CHECK_INT(verify(&one, h, BODY, T0), GW_PAY_BAD);
	/* The match last of GW_PAY_V1_MAX entries; one more entry is a bad header. */
	int n = snprintf(h, sizeof h, "t=%d", T0);
	for (int i = 0; i < GW_PAY_V1_MAX - 1; i++)
		n += snprintf(h + n, sizeof h - (size_t)n, ",v1=%s", bad);
	snprintf(h + n, sizeof h - (size_t)n, ",v1=%s", g1);
	CHECK_INT(verify(&one, h, BODY, T0), GW_PAY_OK);
	snprintf(h + n, sizeof h - (size_t)n, ",v1=%s,v1=%s", bad, g1);
	CHECK_INT(verify(&one, h, BODY, T0), GW_PAY_BAD);
	/* Other schemes are skipped; blanks around items allowed; the order is free. */
	snprintf(h, sizeof h, " v0=%s , v1=%s ,t=%d\t", bad, g1, T0);
	CHECK_INT(verify(&one, h, BODY, T0), GW_PAY_OK);
	/* Only wrong entries. */
	snprintf(h, sizeof h, "t=%d,v1=%s,v1=%s", T0, bad, bad);
	CHECK_INT(verify(&both, h, BODY, T0), GW_PAY_BAD);
	fs_keyring_wipe(&one);
	fs_keyring_wipe(&both);
}

static void test_malformed(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	char good[65];
	v1_of(K1, T0, BODY, good);
	char long_h[GW_PAY_HEADER_MAX + 64];
	int n = snprintf(long_h, sizeof long_h, "t=%d,v1=%s,", T0, good);
	memset(long_h + n, 'x', sizeof long_h - (size_t)n - 1);
	long_h[sizeof long_h - 1] = '\0';
	char h[12][256];
	snprintf(h[0], 256, "t=%d,t=%d,v1=%s", T0, T0, good); /* which t was signed? */
	snprintf(h[1], 256, "t=,v1=%s", good);
	snprintf(h[2], 256, "t=-%d,v1=%s", T0, good);
	snprintf(h[3], 256, "t=%dx,v1=%s", T0, good);
	snprintf(h[4], 256, "t=1234567890123456,v1=%s", good); /* 16 digits */
	snprintf(h[5], 256, "t=%d,v1=%.63s", T0, good);
	snprintf(h[6], 256, "t=%d,v1=%sa", T0, good);
	snprintf(h[7], 256, "t=%d,v1=%.62szz", T0, good);
	snprintf(h[8], 256, "t=%d,v1=%s,", T0, good); /* an empty item */
	snprintf(h[9], 256, "t=%d,%s", T0, good);     /* no key */
	snprintf(h[10], 256, "t=%d,=%s", T0, good);
	snprintf(h[11], 256, "t = %d,v1=%s", T0, good);
	const char *bad[] = {"t=1700000000", "v1=" VECTOR, "garbage", ",,,,", "=",   "t",  "v1",
			     long_h,	     h[0],	   h[1],      h[2],   h[3],  h[4], h[5],
			     h[6],	     h[7],	   h[8],      h[9],   h[10], h[11]};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("header %.60s", bad[i]);
		CHECK_INT(verify(&kr, bad[i], BODY, T0), GW_PAY_BAD);
	}
	const char *missing[] = {"", " ", "\t \t"};
	for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
		CHECK_CTX("header '%s'", missing[i]);
		CHECK_INT(verify(&kr, missing[i], BODY, T0), GW_PAY_MISSING);
	}
	CHECK_CTX("%s", "");
	CHECK_INT(verify(&kr, NULL, BODY, T0), GW_PAY_MISSING);
	/* Random bytes, and a good header cut or mangled anywhere: a verdict, never a crash. */
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	char good_h[256];
	snprintf(good_h, sizeof good_h, "t=%d,v1=%s", T0, good);
	long ok = 0;
	for (int i = 0; i < 20000; i++) {
		char r[256];
		size_t len = (size_t)(i % 199);
		for (size_t j = 0; j < len; j++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			char any = (char)(seed >> 56); /* any byte but NUL, or the header's own */
			r[j] = i & 1 ? (any ? any : 'x')
				     : "t=v1,0123456789abcdef "[(seed >> 33) % 22];
		}
		r[len] = '\0';
		if (i % 3 == 0) { /* the good header, one byte changed */
			snprintf(r, sizeof r, "%s", good_h);
			r[(seed >> 20) % strlen(r)] = (char)(seed >> 40 | 1);
		}
		enum gw_pay_verdict v = verify(&kr, r, BODY, T0);
		ok += v == GW_PAY_OK;
		if (!CHECK(v == GW_PAY_OK || v == GW_PAY_MISSING || v == GW_PAY_BAD))
			break;
	}
	/* A changed byte can land in a skipped part (never in the MAC or t): rare, and harmless. */
	CHECK(ok < 20000 / 3 / 10);
	fs_keyring_wipe(&kr);
}

static void test_names(void)
{
	const struct {
		const char *body, *member;
		enum gw_pay_verdict want;
	} rows[] = {
		{BODY, "intent_id", GW_PAY_OK},
		{"{\"intent_id\":\"0190A0B0-C0D0-7000-8000-000000000001\"}", "intent_id",
		 GW_PAY_OK},
		{"{\"cart_id\":\"" ID "\"}", "cart_id", GW_PAY_OK},
		{"{\"cart_id\":\"" ID "\"}", "intent_id", GW_PAY_WRONG_INTENT},
		{"{\"intent_id\":\"0190a0b0-c0d0-7000-8000-000000000002\"}", "intent_id",
		 GW_PAY_WRONG_INTENT},
		{"{\"sku\":\"HOT\"}", "intent_id", GW_PAY_WRONG_INTENT},
		{"{\"intent_id\":1}", "intent_id", GW_PAY_WRONG_INTENT},
		{"{\"intent_id\":\"not-a-uuid\"}", "intent_id", GW_PAY_WRONG_INTENT},
		{"{\"intent_id\":\"" ID
		 "\",\"intent_id\":\"0190a0b0-c0d0-7000-8000-000000000002\"}",
		 "intent_id", GW_PAY_WRONG_INTENT},
		{"[\"" ID "\"]", "intent_id", GW_PAY_WRONG_INTENT},
		{"{", "intent_id", GW_PAY_WRONG_INTENT},
		{"", "intent_id", GW_PAY_WRONG_INTENT},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("%s in %s", rows[i].member, rows[i].body);
		CHECK_INT(gw_pay_names(rows[i].body, strlen(rows[i].body), rows[i].member, ID),
			  rows[i].want);
	}
	CHECK_CTX("%s", "");
	const char *codes[] = {
		"ok",		"missing_signature", "bad_signature", "stale_signature",
		"wrong_intent", "payments_disabled"};
	for (int v = 0; v < GW_PAY_VERDICTS; v++)
		CHECK_STR(gw_pay_reason((enum gw_pay_verdict)v), codes[v]);
}

static int write_file(const char *path, const char *text, size_t len, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, len);
	fchmod(fd, mode);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* The payment key ring's file (io/keyring.c's reader, named for payment.secret.file; its
 * mode rules are io/secret.c's, tested by test_config): a private ring loads, two keys for a
 * rotation; one others may read is refused, saying which key and file, never the secret. */
static void test_secret_file(void)
{
	char dir[] = "/tmp/test_payment.XXXXXX";
	if (!CHECK(mkdtemp(dir) != NULL))
		return;
	char path[128], err[512];
	snprintf(path, sizeof path, "%s/keys", dir);
	const char *text = "old " K1 "\nnew " K2 "\n";
	struct fs_keyring kr;
	CHECK_INT(write_file(path, text, strlen(text), 0600), 0);
	if (CHECK_INT(fs_keyring_load_named("payment.secret.file", path, &kr, err, sizeof err),
		      0)) {
		CHECK_INT(kr.n, 2);
		CHECK_STR(kr.keys[1].id, "new");
	}
	fs_keyring_wipe(&kr);
	const mode_t open_modes[] = {0640, 0604, 0644};
	for (size_t i = 0; i < sizeof open_modes / sizeof open_modes[0]; i++) {
		CHECK_CTX("mode %03o", (unsigned)open_modes[i]);
		CHECK_INT(write_file(path, text, strlen(text), open_modes[i]), 0);
		CHECK_INT(fs_keyring_load_named("payment.secret.file", path, &kr, err, sizeof err),
			  -EINVAL);
		CHECK(strncmp(err, "payment.secret.file ", 20) == 0 && strstr(err, path) &&
		      strstr(err, "chmod 600"));
		CHECK(!strstr(err, K1) && !strstr(err, K2));
	}
	CHECK_CTX("%s", "");
	const char *short_key = "k1 00112233\n"; /* under 32 bytes */
	CHECK_INT(write_file(path, short_key, strlen(short_key), 0600), 0);
	CHECK_INT(fs_keyring_load_named("payment.secret.file", path, &kr, err, sizeof err),
		  -EINVAL);
	CHECK(strncmp(err, "payment.secret.file ", 20) == 0 && strstr(err, "line 1"));
	unlink(path);
	CHECK_INT(fs_keyring_load_named("payment.secret.file", path, &kr, err, sizeof err),
		  -ENOENT);
	CHECK(strncmp(err, "payment.secret.file ", 20) == 0);
	rmdir(dir);
}

static void test_checkout_url(void)
{
	struct fs_config c;
	fs_config_defaults(&c);
	CHECK_STR(c.payment_checkout_url, "");
	CHECK_STR(c.payment_secret_file, "");
	char err[FS_CONF_ERR_MAX];
	const char *good[] = {"", "http://127.0.0.1:58090/checkout", "https://pay.example.com",
			      "https://pay.example.com/a/b-c_d.e~f"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		CHECK_CTX("%s", good[i]);
		CHECK_INT(fs_config_set(&c, "payment.checkout.url", good[i], "t", err), 0);
		CHECK_STR(c.payment_checkout_url, good[i]);
	}
	const char *bad[] = {
		"javascript:alert(1)",	"ftp://x",	 "http://",	 "http:///x",
		"http://x/\"><script>", "http://x/?a=b", "http://x/a b", "//evil.example",
		"http://x/&",		"http://x/'"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("%s", bad[i]);
		CHECK_INT(fs_config_set(&c, "payment.checkout.url", bad[i], "t", err), -EINVAL);
	}
	CHECK_CTX("%s", "");
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_payment");
	}
	test_vector();
	test_window();
	test_wrong();
	test_several();
	test_malformed();
	test_names();
	test_secret_file();
	test_checkout_url();
	return check_done("test_payment");
}
