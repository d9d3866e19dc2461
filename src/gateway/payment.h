/* payment.h: the payment provider's signature on a confirm (issue 48, item 3), modelled on
 * Stripe's webhooks. Pure (no clock, no I/O): the caller gives the time; the unit suite tests
 * it (tests/unit/test_payment.c). The contract is docs/reference/http.md, "Signed payments".
 *
 * A confirm (POST /v1/intents/{id}/confirm, POST /v1/carts/{id}/confirm) carries
 *
 *     Flashsale-Signature: t=UNIX_SECONDS,v1=HEX[,v1=HEX...]
 *
 * HEX = hex of HMAC-SHA256(secret, T "." BODY), T the t field as sent and BODY the request's
 * raw bytes as received. Any v1 made with any key of the gateway's payment key ring
 * (payment.secret.file, the key ring's format: core/token.h) passes: during a rotation the
 * provider sends one v1 per secret, as Stripe does. Other fields (v0, a future v2) are
 * ignored. The signature does not cover the path, so the body names what it pays for
 * ("intent_id" or "cart_id"): a genuine body replayed to another id is refused. Thread: any. */
#ifndef GW_PAYMENT_H
#define GW_PAYMENT_H

#include "core/token.h"

#include <stddef.h>
#include <stdint.h>

enum {
	GW_PAY_TOLERANCE_S = 300, /* |now - t| at most this: Stripe's default */
	GW_PAY_HEADER_MAX = 1024, /* a longer header is refused unread */
	GW_PAY_V1_MAX = 8,	  /* v1 entries looked at; more is a bad header */
	GW_PAY_T_DIGITS_MAX = 15,
	GW_PAY_HEX = 64, /* a v1: 32 bytes in hex */
};

/* The verdict, in the order checked; each refusal's reason is a stable error code and the
 * metric's label (docs/reference/http.md, metrics.md). */
enum gw_pay_verdict {
	GW_PAY_OK = 0,
	GW_PAY_MISSING = 1,	 /* missing_signature: no header, or an empty one */
	GW_PAY_BAD = 2,		 /* bad_signature: malformed, or no v1 matches any key */
	GW_PAY_STALE = 3,	 /* stale_signature: genuine, but t is out of the window */
	GW_PAY_WRONG_INTENT = 4, /* wrong_intent: genuine and fresh, for another id */
	GW_PAY_DISABLED = 5,	 /* payments_disabled: the gateway has no payment key ring */
	GW_PAY_VERDICTS = 6,
};
const char *gw_pay_reason(enum gw_pay_verdict v); /* "ok" for GW_PAY_OK */
/* What the refusal's "message" says (never a secret, nor the expected MAC). */
const char *gw_pay_message(enum gw_pay_verdict v);

/* Checks header (NULL: absent) over body[0, len) at now_s (the gateway's wall clock, seconds
 * since the epoch): MISSING, BAD, STALE or OK. Every v1 is compared with every key's MAC in
 * constant time (CRYPTO_memcmp over the decoded bytes), all of them, whatever matched: the
 * time says which entry and key matched to nobody. */
enum gw_pay_verdict gw_pay_verify(const struct fs_keyring *kr, const char *header, const char *body,
				  size_t len, int64_t now_s);

/* Whether the (signed) body is a JSON object whose member (intent_id, cart_id) is the UUID id
 * (canonical, as the path's): OK, or WRONG_INTENT (absent, another, not a UUID, not JSON). */
enum gw_pay_verdict gw_pay_names(const char *body, size_t len, const char *member, const char *id);

/* The header's value for body at t with key k ("t=T,v1=HEX") into out (n bytes): the
 * provider's side, for the tests and tools. 0, or -ENOSPC. */
int gw_pay_sign(const struct fs_key *k, int64_t t, const char *body, size_t len, char *out,
		size_t n);

#endif
