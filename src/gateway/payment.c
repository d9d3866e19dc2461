/* payment.c: the payment provider's signature on a confirm (see payment.h). */
#include "gateway/payment.h"

#include "core/buf.h"
#include "core/record.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

const char *gw_pay_reason(enum gw_pay_verdict v)
{
	static const char *const reasons[GW_PAY_VERDICTS] = {
		"ok",		"missing_signature", "bad_signature", "stale_signature",
		"wrong_intent", "payments_disabled",
	};
	return (unsigned)v < GW_PAY_VERDICTS ? reasons[v] : "bad_signature";
}

const char *gw_pay_message(enum gw_pay_verdict v)
{
	switch (v) {
	case GW_PAY_MISSING:
		return "a confirm is the payment provider's: it needs a Flashsale-Signature header "
		       "(t=UNIX_SECONDS,v1=HMAC-SHA256 hex of \"t.body\")";
	case GW_PAY_STALE:
		return "the signature's t is more than 300 s from the gateway's clock";
	case GW_PAY_WRONG_INTENT:
		return "the signed body does not name this intent (\"intent_id\") or cart "
		       "(\"cart_id\")";
	case GW_PAY_DISABLED:
		return "payments are off: the gateway has no payment.secret.file, so no confirm "
		       "can be signed";
	default:
		return "the Flashsale-Signature header is malformed or matches no payment key";
	}
}

/* What a header says: its t (the text as sent, and its value) and its v1 entries, decoded. */
struct sig {
	const char *t;
	size_t t_len;
	int64_t t_val;
	unsigned char v1[GW_PAY_V1_MAX][GW_PAY_HEX / 2];
	int n_v1;
};

static bool t_field(const char *s, size_t n, struct sig *p)
{
	if (p->t || n == 0 || n > GW_PAY_T_DIGITS_MAX)
		return false; /* a second t is ambiguous: which one was signed? */
	int64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (s[i] - '0');
	}
	p->t = s;
	p->t_len = n;
	p->t_val = x;
	return true;
}

static bool v1_field(const char *s, size_t n, struct sig *p)
{
	if (n != GW_PAY_HEX || p->n_v1 == GW_PAY_V1_MAX)
		return false;
	unsigned char *out = p->v1[p->n_v1];
	for (size_t i = 0; i < n; i += 2) {
		int hi = fs_hexval(s[i]), lo = fs_hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i / 2] = (unsigned char)(hi << 4 | lo);
	}
	p->n_v1++;
	return true;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Parses "key=value" items separated by commas (blanks around an item allowed): MISSING for
 * an empty header, BAD for a malformed one, else OK with p filled. */
static enum gw_pay_verdict parse(const char *h, struct sig *p)
{
	memset(p, 0, sizeof *p);
	size_t n = strnlen(h, GW_PAY_HEADER_MAX + 1);
	if (n > GW_PAY_HEADER_MAX)
		return GW_PAY_BAD;
	size_t lead = 0;
	while (lead < n && blank(h[lead]))
		lead++;
	if (lead == n)
		return GW_PAY_MISSING;
	for (const char *s = h, *end = h + n; s <= end;) {
		const char *comma = memchr(s, ',', (size_t)(end - s));
		const char *e = comma ? comma : end;
		const char *a = s, *b = e;
		while (a < b && blank(*a))
			a++;
		while (b > a && blank(b[-1]))
			b--;
		const char *eq = memchr(a, '=', (size_t)(b - a));
		if (!eq || eq == a)
			return GW_PAY_BAD;
		size_t kl = (size_t)(eq - a), vl = (size_t)(b - eq - 1);
		if (kl == 1 && a[0] == 't' && !t_field(eq + 1, vl, p))
			return GW_PAY_BAD;
		if (kl == 2 && memcmp(a, "v1", 2) == 0 && !v1_field(eq + 1, vl, p))
			return GW_PAY_BAD;
		s = e + 1; /* other schemes (v0, a later v2) are not ours: skipped */
	}
	return p->t && p->n_v1 > 0 ? GW_PAY_OK : GW_PAY_BAD;
}

enum gw_pay_verdict gw_pay_verify(const struct fs_keyring *kr, const char *header, const char *body,
				  size_t len, int64_t now_s)
{
	if (!header)
		return GW_PAY_MISSING;
	struct sig p;
	enum gw_pay_verdict v = parse(header, &p);
	if (v != GW_PAY_OK)
		return v;
	if (!kr || kr->n == 0)
		return GW_PAY_BAD;
	/* "T.BODY": the bytes signed, the body as received (never re-encoded). */
	char *msg = malloc(p.t_len + 1 + len + 1);
	if (!msg)
		return GW_PAY_BAD;
	memcpy(msg, p.t, p.t_len);
	msg[p.t_len] = '.';
	if (len)
		memcpy(msg + p.t_len + 1, body, len);
	unsigned match = 0;
	for (uint32_t k = 0; k < kr->n; k++) {
		unsigned char mac[GW_PAY_HEX / 2];
		fs_hmac_sha256(kr->keys[k].secret, kr->keys[k].len, msg, p.t_len + 1 + len, mac);
		for (int i = 0; i < p.n_v1; i++)
			match |= (unsigned)(CRYPTO_memcmp(mac, p.v1[i], sizeof mac) == 0);
		OPENSSL_cleanse(mac, sizeof mac);
	}
	free(msg);
	if (!match)
		return GW_PAY_BAD;
	/* Checked after the MAC, as Stripe does: `stale` is said only of a genuine signature
	 * (the provider's clock, or a replay), never of a forged one. */
	if (p.t_val < now_s - GW_PAY_TOLERANCE_S || p.t_val > now_s + GW_PAY_TOLERANCE_S)
		return GW_PAY_STALE;
	return GW_PAY_OK;
}

enum gw_pay_verdict gw_pay_names(const char *body, size_t len, const char *member, const char *id)
{
	json_error_t e;
	json_t *o = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &e) : NULL;
	json_t *m = json_is_object(o) ? json_object_get(o, member) : NULL;
	char canon[FS_UUID_LEN + 1];
	bool ok = json_is_string(m) && fs_uuid_canon(json_string_value(m), canon) &&
		  strcmp(canon, id) == 0;
	json_decref(o);
	return ok ? GW_PAY_OK : GW_PAY_WRONG_INTENT;
}

int gw_pay_sign(const struct fs_key *k, int64_t t, const char *body, size_t len, char *out,
		size_t n)
{
	char ts[32];
	int tl = snprintf(ts, sizeof ts, "%" PRId64, t);
	char *msg = malloc((size_t)tl + 1 + len + 1);
	if (!msg)
		return -ENOMEM;
	memcpy(msg, ts, (size_t)tl);
	msg[tl] = '.';
	if (len)
		memcpy(msg + tl + 1, body, len);
	unsigned char mac[GW_PAY_HEX / 2];
	fs_hmac_sha256(k->secret, k->len, msg, (size_t)tl + 1 + len, mac);
	free(msg);
	char hex[GW_PAY_HEX + 1];
	for (size_t i = 0; i < sizeof mac; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	OPENSSL_cleanse(mac, sizeof mac);
	int w = snprintf(out, n, "t=%s,v1=%s", ts, hex);
	return w > 0 && (size_t)w < n ? 0 : -ENOSPC;
}
