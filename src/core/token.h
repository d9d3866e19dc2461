/* token.h: admission tokens (issue 33) and the key ring that signs and verifies them. Pure: the
 * key ring comes in as text (src/io/keyring.c reads the file and checks its mode), a token is a
 * function of its claims and a key, a verdict a function of the token, the buy and the log
 * clock. HMAC-SHA256 and SHA-256 are OpenSSL's libcrypto (Debian's libssl3), not hand-written.
 *
 * A token, as text (at most FS_TOKEN_LEN_MAX):
 *
 *     v1.KID.NBF.EXP.BUYER.MAC
 *
 * KID the signing key's id; NBF and EXP the log-clock milliseconds it is valid from
 * (inclusive) and until (exclusive); BUYER the first 16 bytes of SHA-256(buyer id) in base64url
 * (no padding); MAC base64url of HMAC-SHA256(key, "fs-token-v1\n" KID "\n" SKU "\n" BUYER "\n"
 * NBF "\n" EXP). The SKU is not in the text: the MAC covers it, so a token of another SKU does
 * not verify. The buyer's digest is, so that a genuine token shown by another buyer is told
 * apart (`token_other_buyer`) from a forged one (`bad_token`). Thread: any (no state). */
#ifndef FS_TOKEN_H
#define FS_TOKEN_H

#include "core/record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	FS_KEY_ID_LEN_MAX = 16, /* [A-Za-z0-9_-] */
	FS_KEY_BYTES_MIN = 32,	/* 256 bits: HMAC-SHA256's block is 64, its output 32 */
	FS_KEY_BYTES_MAX = 64,
	FS_KEYS_MAX = 32,
};

struct fs_key {
	char id[FS_KEY_ID_LEN_MAX + 1];
	unsigned char secret[FS_KEY_BYTES_MAX];
	size_t len;
};

/* Every key a worker may verify with (retired ones included: a replay verifies the tokens of
 * the past), and the one new tokens are signed with. */
struct fs_keyring {
	struct fs_key keys[FS_KEYS_MAX];
	uint32_t n;
	int32_t sign; /* index into keys */
};

/* Parses a key ring's text:
 *
 *     # comment
 *     KID SECRET          one key per line; SECRET in hex, 64 to 128 digits (32 to 64 bytes)
 *     sign KID            the key new tokens are signed with (default: the last key listed)
 *
 * 0 or -EINVAL with a message in err that names the line, never a secret. */
int fs_keyring_parse(const char *text, struct fs_keyring *kr, char *err, size_t err_len);
/* Overwrites the secrets (before the memory is freed or reused), and the copies this thread
 * keeps in its HMAC contexts (token.c). */
void fs_keyring_wipe(struct fs_keyring *kr);

/* Writes the token of (sku, buyer, nbf_ms, exp_ms) signed with the ring's signing key into out
 * (FS_TOKEN_TEXT_MAX + 1 bytes, record.h). 0, or -EINVAL (no key). */
int fs_token_mint(const struct fs_keyring *kr, const char *sku, const char *buyer_id,
		  int64_t nbf_ms, int64_t exp_ms, char *out);

/* The verdict on a buy's token; the reasons are stable (docs/reference/records.md). */
enum fs_token_verdict {
	FS_TOKEN_OK = 0,
	FS_TOKEN_NONE = 1,	  /* no_token */
	FS_TOKEN_BAD = 2,	  /* bad_token: not ours, altered, another SKU's, an unknown key */
	FS_TOKEN_EXPIRED = 3,	  /* token_expired: clock >= EXP */
	FS_TOKEN_NOT_YET = 4,	  /* token_not_yet_valid: clock < NBF */
	FS_TOKEN_OTHER_BUYER = 5, /* token_other_buyer: genuine, another buyer's */
};
const char *fs_token_reason(enum fs_token_verdict v); /* NULL for FS_TOKEN_OK */

/* Checks token (NULL or "" for none) for a buy of sku by buyer_id at the log clock now_ms. The
 * order of the checks: present, well formed and signed by a known key for this SKU (bad),
 * this buyer's, then live. The MAC is compared in constant time. */
enum fs_token_verdict fs_token_verify(const struct fs_keyring *kr, const char *token,
				      const char *sku, const char *buyer_id, int64_t now_ms);

/* The key id a token names (its KID field, when the token starts "v1." and the id is well
 * formed) into out (FS_KEY_ID_LEN_MAX + 1 bytes): true, or false (no key named). The key a
 * buy's verification checked is on the log with the buy (issue 47 item 1): a replay whose
 * ring lacks it can say so by name. */
bool fs_token_key_id(const char *token, char *out);
/* True if the ring (NULL: none) holds the key id. */
bool fs_keyring_has(const struct fs_keyring *kr, const char *id);

/* The draw's rank of a buyer (issue 33): the first 8 bytes of HMAC-SHA256(seed, buyer id),
 * big-endian. Random to the buyers, a pure function of the seed for a replay. */
uint64_t fs_draw_rank(const char *seed, const char *buyer_id);

/* HMAC-SHA256(key, msg) into out (32 bytes), on this thread's keyed contexts as the tokens'
 * own: the gateway's check of the payment provider's signatures (issue 48, item 3). */
void fs_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n,
		    unsigned char out[32]);

#endif
