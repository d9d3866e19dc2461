/* test_room: the waiting room's pure parts (issue 33): admission tokens and the key ring
 * (src/core/token.c), the draw, admission at a rate on the log clock, and a room loaded again
 * from its rows (src/core/room.c). tests/meson.build also builds it against room.c with
 * FS_ROOM_MUTATE=1 (a draw in join order): the fairness check must fail that build. */
#include "check.h"
#include "core/core.h"
#include "core/result.h"
#include "core/room.h"
#include "core/token.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

/* Two keys of 32 bytes, one of 64. Test keys only. */
#define K1 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define K2 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
#define K3 K1 K2

static void ring(struct fs_keyring *kr, const char *text)
{
	char err[128];
	if (!CHECK_INT(fs_keyring_parse(text, kr, err, sizeof err), 0))
		fprintf(stderr, "  %s\n", err);
}

static void test_keyring(void)
{
	struct fs_keyring kr;
	ring(&kr, "# two keys; the last signs\nk1 " K1 "\n\n  k2\t" K2 "  \n");
	CHECK_INT(kr.n, 2);
	CHECK_INT(kr.sign, 1);
	CHECK_STR(kr.keys[0].id, "k1");
	CHECK_INT(kr.keys[0].len, 32);
	CHECK_INT(kr.keys[0].secret[1], 0x11);
	ring(&kr, "k1 " K1 "\nk2 " K2 "\nsign k1\nk3 " K3 "\n");
	CHECK_INT(kr.n, 3);
	CHECK_INT(kr.sign, 0);
	CHECK_INT(kr.keys[2].len, 64);
	/* Each error names its line, never the secret. */
	static const struct {
		const char *text, *want;
	} bad[] = {
		{"", "no key"},
		{"# only a comment\n", "no key"},
		{"k1 " K1 "\nk1 " K2 "\n", "line 2: a key id listed twice"},
		{"k1 00112233\n", "line 1: the secret must be"},
		{"k1 " K1 "0\n", "line 1: the secret must be"},
		{"k1 " K3 "00\n", "line 1: the secret must be"},
		{"k1 zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
		 "line 1: the secret is not hex"},
		{"k.1 " K1 "\n", "line 1: the key id must be"},
		{"a-very-long-key-id " K1 "\n", "line 1: the key id must be"},
		{"k1 " K1 " extra\n", "line 1: more than two words"},
		{"k1 " K1 "\nsign k9\n", "line 2: sign: no such key"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("bad ring %zu", i);
		char err[128] = "";
		CHECK_INT(fs_keyring_parse(bad[i].text, &kr, err, sizeof err), -EINVAL);
		CHECK(strstr(err, bad[i].want) != NULL);
		CHECK(strstr(err, "00112233") == NULL && strstr(err, "ffeedd") == NULL);
	}
	CHECK_CTX("wipe");
	ring(&kr, "k1 " K1 "\n");
	fs_keyring_wipe(&kr);
	CHECK_INT(kr.n, 0);
	CHECK_INT(kr.keys[0].secret[1], 0);
}

static void test_tokens(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	char tok[FS_TOKEN_TEXT_MAX + 1];
	CHECK_INT(fs_token_mint(&kr, "PHONE", "alice", 5000, 65000, tok), 0);
	CHECK(strncmp(tok, "v1.k1.5000.65000.", 17) == 0);
	CHECK(strlen(tok) < FS_TOKEN_LEN_MAX);
	/* The same claims, the same token (a replay mints alike). */
	char again[FS_TOKEN_TEXT_MAX + 1];
	CHECK_INT(fs_token_mint(&kr, "PHONE", "alice", 5000, 65000, again), 0);
	CHECK_STR(again, tok);

	CHECK_CTX("verdicts");
	CHECK_INT(fs_token_verify(&kr, tok, "PHONE", "alice", 5000), FS_TOKEN_OK);
	CHECK_INT(fs_token_verify(&kr, tok, "PHONE", "alice", 64999), FS_TOKEN_OK);
	CHECK_INT(fs_token_verify(&kr, tok, "PHONE", "alice", 65000), FS_TOKEN_EXPIRED);
	CHECK_INT(fs_token_verify(&kr, tok, "PHONE", "alice", 4999), FS_TOKEN_NOT_YET);
	CHECK_INT(fs_token_verify(&kr, tok, "PHONE", "bob", 6000), FS_TOKEN_OTHER_BUYER);
	CHECK_INT(fs_token_verify(&kr, tok, "CASE", "alice", 6000), FS_TOKEN_BAD);
	CHECK_INT(fs_token_verify(&kr, NULL, "PHONE", "alice", 6000), FS_TOKEN_NONE);
	CHECK_INT(fs_token_verify(&kr, "", "PHONE", "alice", 6000), FS_TOKEN_NONE);
	CHECK_STR(fs_token_reason(FS_TOKEN_NONE), "no_token");
	CHECK_STR(fs_token_reason(FS_TOKEN_BAD), "bad_token");
	CHECK_STR(fs_token_reason(FS_TOKEN_EXPIRED), "token_expired");
	CHECK_STR(fs_token_reason(FS_TOKEN_NOT_YET), "token_not_yet_valid");
	CHECK_STR(fs_token_reason(FS_TOKEN_OTHER_BUYER), "token_other_buyer");
	CHECK(fs_token_reason(FS_TOKEN_OK) == NULL);

	/* Every byte of the token altered, one at a time, and the claims changed: bad (or, for
	 * the buyer's digest, still not this buyer's). */
	size_t n = strlen(tok);
	for (size_t i = 0; i < n; i++) {
		char t[FS_TOKEN_TEXT_MAX + 1];
		memcpy(t, tok, n + 1);
		t[i] = t[i] == 'A' ? 'B' : 'A';
		CHECK_CTX("byte %zu altered", i);
		enum fs_token_verdict v = fs_token_verify(&kr, t, "PHONE", "alice", 6000);
		CHECK(v == FS_TOKEN_BAD);
	}
	CHECK_CTX("claims changed");
	char t[FS_TOKEN_TEXT_MAX * 2];
	snprintf(t, sizeof t, "v1.k1.5000.99999%s", tok + strlen("v1.k1.5000.65000"));
	CHECK_INT(fs_token_verify(&kr, t, "PHONE", "alice", 6000), FS_TOKEN_BAD);
	snprintf(t, sizeof t, "v1.k9%s", tok + strlen("v1.k1"));
	CHECK_INT(fs_token_verify(&kr, t, "PHONE", "alice", 6000), FS_TOKEN_BAD);
	static const char *const garbage[] = {
		"x",
		"v1",
		"v1.k1.5000.65000",
		"v1.k1.5000.65000.a.b",
		"v2.k1.1.2.a.b",
		"v1.k1.-1.65000.aaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"v1.k1.05000.65000.aaaaaaaaaaaaaaaaaaaaaa."
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"...........",
		"v1..1.2.aaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	};
	for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
		CHECK_CTX("garbage %zu", i);
		CHECK_INT(fs_token_verify(&kr, garbage[i], "PHONE", "alice", 6000), FS_TOKEN_BAD);
	}
	snprintf(t, sizeof t, "%s.x", tok);
	CHECK_INT(fs_token_verify(&kr, t, "PHONE", "alice", 6000), FS_TOKEN_BAD);

	CHECK_CTX("mint refuses");
	CHECK_INT(fs_token_mint(&kr, "PHONE", "alice", 5000, 4999, t), -EINVAL);
	struct fs_keyring none = {.n = 0, .sign = -1};
	CHECK_INT(fs_token_mint(&none, "PHONE", "alice", 1, 2, t), -EINVAL);
	CHECK_INT(fs_token_verify(&none, tok, "PHONE", "alice", 6000), FS_TOKEN_BAD);
}

/* Rotation: a new key signs, the old one still verifies (live tokens, and a replay's); a ring
 * that never had the new key cannot verify its tokens; a key with another secret under the
 * same id does not verify the old ones. */
static void test_rotation(void)
{
	struct fs_keyring old, both, retired, forged;
	ring(&old, "k1 " K1 "\n");
	ring(&both, "k1 " K1 "\nk2 " K2 "\n");
	ring(&retired, "k1 " K1 "\nk2 " K2 "\nsign k2\n");
	ring(&forged, "k1 " K2 "\n");
	char t1[FS_TOKEN_TEXT_MAX + 1], t2[FS_TOKEN_TEXT_MAX + 1];
	CHECK_INT(fs_token_mint(&old, "S", "b", 0, 1000, t1), 0);
	CHECK_INT(fs_token_mint(&both, "S", "b", 0, 1000, t2), 0);
	CHECK(strncmp(t2, "v1.k2.", 6) == 0);
	CHECK_INT(fs_token_verify(&both, t1, "S", "b", 10), FS_TOKEN_OK);
	CHECK_INT(fs_token_verify(&retired, t1, "S", "b", 10), FS_TOKEN_OK);
	CHECK_INT(fs_token_verify(&retired, t2, "S", "b", 10), FS_TOKEN_OK);
	CHECK_INT(fs_token_verify(&old, t2, "S", "b", 10), FS_TOKEN_BAD);
	CHECK_INT(fs_token_verify(&forged, t1, "S", "b", 10), FS_TOKEN_BAD);
}

static const struct fs_admission RANDOM = {
	.rate_per_s = 100, .token_ms = 60000, .draw = FS_DRAW_RANDOM, .seed = "seed-2026-12-05"};

static void join_all(struct fs_room *r, int n, int from, int64_t off0, int64_t now)
{
	for (int i = 0; i < n; i++) {
		char b[32];
		snprintf(b, sizeof b, "buyer-%d", from + i);
		bool rep;
		CHECK(fs_room_join(r, b, off0 + i, now, &rep) >= 0 && !rep);
	}
}

/* Spearman's rank correlation between join order and queue order of the first n entries. */
static double join_order_correlation(const struct fs_room *r, uint32_t n)
{
	double sum = 0;
	for (uint32_t k = 0; k < n; k++) {
		double d = (double)k - (double)r->order[k];
		sum += d * d;
	}
	double nn = (double)n;
	return 1.0 - 6.0 * sum / (nn * (nn * nn - 1.0));
}

static void test_draw(void)
{
	enum { N = 10000 };
	struct fs_room a, b, c, f;
	CHECK_INT(fs_room_init(&a, &RANDOM, 100000), 0);
	CHECK_INT(fs_room_init(&b, &RANDOM, 100000), 0);
	struct fs_admission other = RANDOM, fifo = RANDOM;
	snprintf(other.seed, sizeof other.seed, "another-seed");
	fifo.draw = FS_DRAW_FIFO;
	CHECK_INT(fs_room_init(&c, &other, 100000), 0);
	CHECK_INT(fs_room_init(&f, &fifo, 100000), 0);
	join_all(&a, N, 0, 10, 50000);
	join_all(&c, N, 0, 10, 50000);
	join_all(&f, N, 0, 10, 50000);
	/* b: the same buyers, joined in the reverse order */
	for (int i = N - 1; i >= 0; i--)
		join_all(&b, 1, i, 10 + (N - 1 - i), 50000);
	/* A repeat is the first entry. */
	bool rep;
	CHECK_INT(fs_room_join(&a, "buyer-7", 99999, 60000, &rep), 7);
	CHECK(rep);
	CHECK_INT(a.len, N);
	/* Nothing before the opening. */
	CHECK_INT(fs_room_advance(&a, 99999, 0), 0);
	CHECK(!a.drawn);
	struct fs_room_place p;
	fs_room_place(&a, "buyer-3", &p);
	CHECK(p.joined && !p.drawn && p.position == 0);
	/* The opening: one admitted (the credit's first), the rest drawn. */
	CHECK_INT(fs_room_advance(&a, 100000, 0), 1);
	CHECK_INT(fs_room_advance(&b, 100000, 0), 1);
	CHECK_INT(fs_room_advance(&c, 100000, 0), 1);
	CHECK_INT(fs_room_advance(&f, 100000, 0), 1);
	CHECK(a.drawn && a.order_len == N);
	/* A permutation. */
	char *seen = calloc(N, 1);
	for (uint32_t k = 0; k < a.order_len; k++)
		seen[a.order[k]]++;
	bool perm = true;
	for (int i = 0; i < N; i++)
		perm &= seen[i] == 1;
	CHECK(perm);
	free(seen);
	/* The same seed and buyers, the same order, whatever order they joined in. */
	bool same = true, same_seed_other = true;
	for (uint32_t k = 0; k < N; k++) {
		same &= strcmp(a.v[a.order[k]].buyer_id, b.v[b.order[k]].buyer_id) == 0;
		same_seed_other &= a.order[k] == c.order[k];
	}
	CHECK(same);
	CHECK(!same_seed_other);
	/* Fair: the queue's order is not the join order (Spearman's rho of 10,000 independent
	 * positions has a standard deviation of 0.01); fifo keeps it exactly. */
	double rho = join_order_correlation(&a, N);
	CHECK_CTX("rho %.4f", rho);
	CHECK(fabs(rho) < 0.05);
	CHECK_CTX("fifo");
	CHECK(join_order_correlation(&f, N) == 1.0);
	/* The first tenth of joiners gets about a tenth of the first tenth of places. */
	int early_first = 0;
	for (uint32_t k = 0; k < N / 10; k++)
		early_first += a.order[k] < N / 10;
	CHECK_CTX("first tenth %d", early_first);
	CHECK(early_first > 60 && early_first < 160);
	/* Late joiners queue behind, in join order. */
	CHECK_CTX("late");
	join_all(&a, 3, N, 20000, 100001);
	CHECK_INT(a.order_len, N + 3);
	CHECK_INT(a.order[N], N);
	CHECK_INT(a.order[N + 2], N + 2);
	CHECK(!a.v[N].early && a.v[N - 1].early);
	fs_room_place(&a, "buyer-10002", &p);
	CHECK(p.drawn && !p.admitted && p.position == N + 3);
	CHECK_INT(p.ahead, N + 3 - 1 - 1);
	fs_room_free(&a);
	fs_room_free(&b);
	fs_room_free(&c);
	fs_room_free(&f);
}

/* The admission times keep (j - i) * step <= (a_j - a_i) * 1000 + 999 for every pair: the
 * largest (j * step - a_j * 1000) - (i * step - a_i * 1000) over i < j, in one pass. */
static bool within_rate(const int64_t *at, uint32_t n, int64_t rate)
{
	int64_t step = (1000000 + rate - 1) / rate, lo = 0;
	for (uint32_t j = 0; j < n; j++) {
		int64_t x = (int64_t)j * step - at[j] * 1000;
		if (j && x - lo > 999)
			return false;
		if (j == 0 || x < lo)
			lo = x;
	}
	return true;
}

static void test_admission(void)
{
	static const int64_t rates[] = {1, 3, 100, 1000, 5000, 250000};
	for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
		int64_t rate = rates[ri];
		CHECK_CTX("rate %" PRId64, rate);
		struct fs_admission adm = RANDOM;
		adm.rate_per_s = rate;
		struct fs_room r;
		CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
		enum { N = 3000 };
		join_all(&r, N, 0, 0, 5000);
		int64_t *at = calloc(N + 100, sizeof *at);
		uint32_t n = 0;
		/* The clock in uneven steps: 1 ms, then 7, then a gap of 0.9 s, as records and
		 * ticks come (a gap longer than FS_ROOM_CATCHUP_MS moves the schedule on:
		 * test_catchup). */
		int64_t now = 10000, last = now, admitted = 0;
		for (int s = 0; now < 10000 + 20000 && (!r.drawn || r.next < r.order_len); s++) {
			int got = fs_room_advance(&r, now, 0);
			for (uint32_t k = r.admitted_len - (uint32_t)got; k < r.admitted_len; k++)
				at[n++] = r.v[r.admitted[k]].admitted_ms;
			admitted += got;
			last = now;
			if (s % 50 == 49) /* the batch committed */
				fs_room_commit(&r);
			now += s % 100 == 99 ? FS_ROOM_CATCHUP_MS - 100 : s % 2 ? 7 : 1;
		}
		CHECK(within_rate(at, n, rate));
		/* Never slower than the rate either, while buyers wait: every slot the clock
		 * reached, the 0.9 s jumps included, each stamped with its own slot. */
		int64_t step = (1000000 + rate - 1) / rate;
		int64_t want = ((last - 10000) * 1000 + 999) / step + 1;
		CHECK_INT(admitted, want < N ? want : N);
		for (uint32_t k = 0; k < n; k++)
			if (at[k] != 10000 + (int64_t)k * step / 1000)
				CHECK_INT(at[k], 10000 + (int64_t)k * step / 1000);
		/* Late joiners after a quiet spell: no burst beyond the rate. */
		if (r.next == r.order_len) {
			join_all(&r, 100, N, 100000, now + 60000);
			uint32_t before = n;
			for (int64_t t = now + 60000;
			     t < now + 60000 + 200000 && r.next < r.order_len; t++) {
				int got = fs_room_advance(&r, t, 0);
				for (uint32_t k = r.admitted_len - (uint32_t)got;
				     k < r.admitted_len; k++)
					at[n++] = r.v[r.admitted[k]].admitted_ms;
				fs_room_commit(&r);
			}
			CHECK_INT(n - before, 100);
			CHECK(within_rate(at + before, n - before, rate));
		}
		free(at);
		fs_room_free(&r);
	}
	CHECK_CTX("refused settings");
	struct fs_room r;
	struct fs_admission adm = RANDOM;
	adm.rate_per_s = 0;
	CHECK_INT(fs_room_init(&r, &adm, 0), -EINVAL);
	adm = RANDOM;
	adm.seed[0] = '\0';
	CHECK_INT(fs_room_init(&r, &adm, 0), -EINVAL);
	adm.draw = FS_DRAW_FIFO; /* fifo needs no seed */
	CHECK_INT(fs_room_init(&r, &adm, 0), 0);
	fs_room_free(&r);
}

/* After a gap in the clock longer than FS_ROOM_CATCHUP_MS (an outage: the worker's ticks stop,
 * nothing else comes) the room does not admit every slot the gap passed at once: the schedule
 * moves up to the clock minus the bound, and admissions resume at the rate. Loading the rows
 * again rebuilds the moved schedule; rows admitted more than the bound behind their clock are
 * not the log's. */
static void test_catchup(void)
{
	struct fs_admission adm = RANDOM;
	adm.draw = FS_DRAW_FIFO;
	adm.rate_per_s = 2; /* a slot every 500 ms */
	CHECK_CTX("catch-up");
	struct fs_room r;
	CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
	join_all(&r, 100, 0, 0, 5000);
	CHECK_INT(fs_room_advance(&r, 10000, 1), 1);
	CHECK_INT(fs_room_advance(&r, 10100, 2), 0);
	/* 12 s without a tick: 24 slots passed; the bound's 1 s holds 3 of them. */
	CHECK_INT(fs_room_advance(&r, 22100, 3), 1 + FS_ROOM_CATCHUP_MS * 2 / 1000);
	CHECK_INT(r.v[r.admitted[1]].admitted_ms, 22100 - FS_ROOM_CATCHUP_MS);
	CHECK_INT(r.v[r.admitted[3]].admitted_ms, 22100);
	CHECK_INT(r.v[r.admitted[3]].decided_ms, 22100);
	fs_room_commit(&r);
	/* Then at the rate, a tick every 100 ms: one slot each 500 ms, at its own time. */
	int64_t at[64];
	uint32_t n = 0;
	at[n++] = 10000;
	for (uint32_t k = 1; k < 4; k++)
		at[n++] = r.v[r.order[k]].admitted_ms;
	int64_t in_first_s = 0;
	for (int64_t t = 22200, off = 4; t <= 27100; t += 100, off++) {
		int got = fs_room_advance(&r, t, off);
		for (uint32_t k = 0; k < (uint32_t)got; k++)
			at[n++] = r.v[r.admitted[k]].admitted_ms;
		in_first_s += t < 23100 ? got : 0;
		fs_room_commit(&r);
	}
	CHECK_INT(in_first_s, 1); /* 22600 */
	CHECK_INT(n, 4 + 10);
	CHECK_INT(at[n - 1], 27100);
	CHECK(within_rate(at, n, 2));
	/* Loaded from its rows: the same schedule, the same admissions after. */
	struct fs_room l;
	CHECK_INT(fs_room_init(&l, &adm, 10000), 0);
	for (uint32_t i = 0; i < r.len; i++)
		CHECK_INT(fs_room_load(&l, &r.v[i]), 0);
	CHECK_INT(fs_room_load_done(&l, 27100), 0);
	CHECK_INT(l.next, r.next);
	CHECK_INT(l.credit_us, r.credit_us);
	for (int64_t t = 27200; t < 40000; t += 700) {
		CHECK_INT(fs_room_advance(&l, t, 0), fs_room_advance(&r, t, 0));
		fs_room_commit(&r);
		fs_room_commit(&l);
		CHECK_INT(l.credit_us, r.credit_us);
	}
	/* A row admitted at the old schedule's slot, 12 s behind its clock: refused. */
	struct fs_room x;
	CHECK_INT(fs_room_init(&x, &adm, 10000), 0);
	struct fs_room_entry e = r.v[r.order[0]], f = r.v[r.order[1]];
	f.admitted_ms = 10500;
	CHECK_INT(fs_room_load(&x, &e), 0);
	CHECK_INT(fs_room_load(&x, &f), 0);
	CHECK_INT(fs_room_load_done(&x, 22100), -EINVAL);
	fs_room_free(&x);
	fs_room_free(&l);
	fs_room_free(&r);
}

/* A tick after a gap re-mints the tokens of the admissions of the second before the room's
 * last token (issue 47, item 4: a stale tick, appended by a worker that stopped, is decided by
 * the next one with its old clock): same slot, same decision, a token minted at the tick, once
 * per admission, while buyers wait. A live room (a tick every 100 ms) never re-mints, nor does
 * a room that ran empty. */
static void test_remint(void)
{
	struct fs_admission adm = RANDOM;
	adm.draw = FS_DRAW_FIFO;
	adm.rate_per_s = 2; /* a slot every 500 ms */
	adm.token_ms = 3000;
	CHECK_CTX("re-mint");
	struct fs_room r;
	CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
	CHECK_INT(fs_room_remint_gap_ms(&r), 1500); /* step + FS_ROOM_CATCHUP_MS < the life */
	join_all(&r, 20, 0, 0, 5000);
	CHECK_INT(fs_room_remint(&r, 10000, 1), 0); /* nothing minted yet */
	CHECK_INT(fs_room_advance(&r, 10000, 1), 1);
	fs_room_commit(&r);
	CHECK_INT(fs_room_remint(&r, 10500, 2), 0);
	CHECK_INT(fs_room_advance(&r, 10500, 2), 1);
	fs_room_commit(&r);
	CHECK_INT(fs_room_remint(&r, 11000, 3), 0);
	CHECK_INT(fs_room_advance(&r, 11000, 3), 1); /* the stale tick */
	CHECK_INT(r.last_mint_ms, 11000);
	fs_room_commit(&r);
	/* 6 s later: the second before 11000 (its three admissions) gets tokens minted now. */
	CHECK_INT(fs_room_remint(&r, 17000, 4), 3);
	CHECK_INT(r.admitted_len, 3);
	CHECK_INT(r.dirty_len, 3);
	for (uint32_t k = 0; k < 3; k++) {
		const struct fs_room_entry *e = &r.v[r.order[k]];
		CHECK_INT(e->minted_ms, 17000);
		CHECK_INT(e->minted_off, 4);
		CHECK_INT(e->decided_off, (int64_t)k + 1); /* not a new admission */
		CHECK_INT(e->admitted_ms, 10000 + 500 * (int64_t)k);
	}
	CHECK_INT(fs_room_advance(&r, 17000, 4), 3); /* the catch-up bound's */
	CHECK_INT(r.admitted_len, 6);
	fs_room_commit(&r);
	CHECK_INT(fs_room_remint(&r, 17100, 5), 0);
	/* Loaded from its rows: the same last token, the same re-mints after. */
	struct fs_room l;
	CHECK_INT(fs_room_init(&l, &adm, 10000), 0);
	for (uint32_t i = 0; i < r.len; i++)
		CHECK_INT(fs_room_load(&l, &r.v[i]), 0);
	CHECK_INT(fs_room_load_done(&l, 17100), 0);
	CHECK_INT(l.last_mint_ms, r.last_mint_ms);
	/* Another outage (buyers still wait): 17000's three once; the re-minted ones never
	 * again. */
	CHECK_INT(fs_room_remint(&r, 30000, 6), 3);
	CHECK_INT(fs_room_remint(&l, 30000, 6), 3);
	for (uint32_t k = 0; k < 6; k++)
		CHECK_INT(r.v[r.order[k]].minted_off, k < 3 ? 4 : 6);
	fs_room_commit(&r);
	CHECK_INT(fs_room_remint(&r, 60000, 7), 0);
	/* A row whose token is older than its admission is not the log's. */
	struct fs_room x;
	CHECK_INT(fs_room_init(&x, &adm, 10000), 0);
	struct fs_room_entry e = r.v[r.order[0]];
	e.minted_ms = e.decided_ms - 1;
	CHECK_INT(fs_room_load(&x, &e), -EINVAL);
	fs_room_free(&x);
	fs_room_free(&l);
	fs_room_free(&r);
	/* A live room: a tick every 100 ms, at 1/s (the longest step): no re-mint in 20 s. */
	adm.rate_per_s = 1;
	CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
	join_all(&r, 30, 0, 0, 5000);
	int reminted = 0, admitted = 0;
	for (int64_t t = 10000, off = 1; t < 30000; t += 100, off++) {
		reminted += fs_room_remint(&r, t, off);
		admitted += fs_room_advance(&r, t, off);
		fs_room_commit(&r);
	}
	CHECK_INT(reminted, 0);
	CHECK_INT(admitted, 20);
	fs_room_free(&r);
	/* A room that runs empty (a trickle: each buyer admitted alone, the next joins later)
	 * never re-mints: its gaps are no outage. */
	CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
	reminted = 0;
	for (int i = 0; i < 5; i++) {
		int64_t t = 10000 + 5000 * (int64_t)i;
		join_all(&r, 1, i, 100 * i, t);
		reminted += fs_room_remint(&r, t + 50, 100 * i + 1);
		CHECK_INT(fs_room_advance(&r, t + 50, 100 * i + 1), 1);
		fs_room_commit(&r);
	}
	CHECK_INT(reminted, 0);
	fs_room_free(&r);
	/* Tokens shorter than step + the catch-up bound: the gap is the life. */
	adm.token_ms = 1000;
	CHECK_INT(fs_room_init(&r, &adm, 10000), 0);
	CHECK_INT(fs_room_remint_gap_ms(&r), 1000);
	fs_room_free(&r);
}

/* A room loaded from its rows (join order, early flag, admission) is the room the log built:
 * the same queue, the same front, the same credit, and the same admissions after. */
static void test_load(void)
{
	struct fs_admission adm = RANDOM;
	adm.rate_per_s = 2500;
	struct fs_room r, l;
	CHECK_INT(fs_room_init(&r, &adm, 1000), 0);
	join_all(&r, 500, 0, 0, 10);
	CHECK_INT(fs_room_advance(&r, 1000, 0), 3);
	join_all(&r, 20, 500, 1000, 1001);
	CHECK(fs_room_advance(&r, 1002, 0) > 0);
	fs_room_commit(&r);
	CHECK_INT(fs_room_init(&l, &adm, 1000), 0);
	for (uint32_t i = 0; i < r.len; i++)
		CHECK_INT(fs_room_load(&l, &r.v[i]), 0);
	CHECK_INT(fs_room_load_done(&l, 1002), 0);
	CHECK_INT(l.order_len, r.order_len);
	CHECK_INT(l.next, r.next);
	CHECK_INT(l.credit_us, r.credit_us);
	CHECK(memcmp(l.order, r.order, r.order_len * sizeof *r.order) == 0);
	for (int64_t t = 1003; t < 1300; t += 3) {
		CHECK_INT(fs_room_advance(&l, t, 0), fs_room_advance(&r, t, 0));
		fs_room_commit(&r);
		fs_room_commit(&l);
	}
	CHECK_INT(l.next, r.next);
	/* Rows that cannot be the log's are refused. */
	struct fs_room x;
	struct fs_room_entry e = {.buyer_id = "a",
				  .offset = 5,
				  .joined_ms = 10,
				  .early = true,
				  .admitted_ms = -1,
				  .decided_ms = -1,
				  .decided_off = -1};
	CHECK_INT(fs_room_init(&x, &adm, 1000), 0);
	CHECK_INT(fs_room_load(&x, &e), 0);
	e.offset = 4;
	snprintf(e.buyer_id, sizeof e.buyer_id, "b");
	CHECK_INT(fs_room_load(&x, &e), -EINVAL); /* out of order */
	e.offset = 6;
	snprintf(e.buyer_id, sizeof e.buyer_id, "a");
	CHECK_INT(fs_room_load(&x, &e), -EINVAL); /* twice */
	snprintf(e.buyer_id, sizeof e.buyer_id, "c");
	e.admitted_ms = 1000;
	CHECK_INT(fs_room_load(&x, &e), -EINVAL); /* admitted, never decided */
	e.decided_ms = 1000;
	CHECK_INT(fs_room_load(&x, &e), -EINVAL); /* nor by a record */
	e.decided_ms = -1;
	e.admitted_ms = -1;
	e.early = false;
	CHECK_INT(fs_room_load(&x, &e), 0);
	CHECK_INT(fs_room_load_done(&x, 999), -EINVAL); /* late before the draw */
	fs_room_free(&x);
	/* Admitted, but not the front of the draw's order; then at a slot not its own. */
	for (int round = 0; round < 2; round++) {
		CHECK_CTX("bad admission %d", round);
		CHECK_INT(fs_room_init(&x, &adm, 1000), 0);
		uint64_t r0 = fs_draw_rank(adm.seed, "a"), r1 = fs_draw_rank(adm.seed, "b");
		const char *front = r0 < r1 ? "a" : "b";
		for (int i = 0; i < 2; i++) {
			struct fs_room_entry y = {.offset = i + 1,
						  .joined_ms = 10,
						  .early = true,
						  .admitted_ms = -1,
						  .decided_ms = -1,
						  .decided_off = -1,
						  .minted_ms = -1,
						  .minted_off = -1};
			snprintf(y.buyer_id, sizeof y.buyer_id, "%s", i ? "b" : "a");
			bool is_front = strcmp(y.buyer_id, front) == 0;
			if (round == 0 ? !is_front : is_front) {
				y.admitted_ms = round == 0 ? 1000 : 1001;
				y.decided_ms = y.minted_ms = 1001;
				y.decided_off = y.minted_off = 9;
			}
			CHECK_INT(fs_room_load(&x, &y), 0);
		}
		CHECK_INT(fs_room_load_done(&x, 1001), -EINVAL);
		fs_room_free(&x);
	}
	fs_room_free(&r);
	fs_room_free(&l);
}

/* ---- the core: records parsed by the real parser, decided by fs_core_decide --------------- */

static int64_t core_off;

static struct fs_record parse(const char *key, const char *json, int64_t ts)
{
	struct fs_record_limits lim = {.carts = false};
	struct fs_record r;
	fs_record_parse(&lim, key, strlen(key), json, strlen(json), 0, core_off++, ts, &r);
	return r;
}

static struct fs_decision decide(struct fs_core *c, const char *key, const char *json, int64_t ts)
{
	struct fs_record r = parse(key, json, ts);
	struct fs_decision d;
	CHECK_INT(fs_core_decide(c, &r, &d), 0);
	return d;
}

static const char *verdict(const struct fs_decision *d)
{
	static char out[64];
	snprintf(out, sizeof out, "%s%s%s", fs_outcome_name(d->outcome), d->reason ? " " : "",
		 d->reason ? d->reason : "");
	return out;
}

static void test_records(void)
{
	static const struct {
		const char *json, *want; /* want: the kind, or the reject reason */
	} cases[] = {
		{"{\"v\":1,\"type\":\"join\",\"sku\":\"R\",\"buyer_id\":\"b\"}", "join"},
		{"{\"v\":1,\"type\":\"join\",\"sku\":\"R\"}", "missing_buyer_id"},
		{"{\"v\":1,\"type\":\"join\",\"sku\":\"X\",\"buyer_id\":\"b\"}", "key_mismatch"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":10,"
		 "\"token_seconds\":60,\"seed\":\"s-1\"}}",
		 "open"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":10,"
		 "\"token_seconds\":60,\"draw\":\"fifo\"}}",
		 "open"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":10,"
		 "\"token_seconds\":60}}",
		 "bad_admission"}, /* random needs a seed */
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":0,"
		 "\"token_seconds\":60,\"draw\":\"fifo\"}}",
		 "bad_admission"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":5,"
		 "\"token_seconds\":86401,\"draw\":\"fifo\"}}",
		 "bad_admission"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":5,"
		 "\"token_seconds\":6,\"draw\":\"lottery\",\"seed\":\"s\"}}",
		 "bad_admission"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":{\"rate_per_"
		 "s\":5,"
		 "\"token_seconds\":6,\"seed\":\"a b\"}}",
		 "bad_admission"},
		{"{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":5,\"admission\":7}",
		 "bad_admission"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CHECK_CTX("record %zu", i);
		struct fs_record r = parse("R", cases[i].json, 1);
		CHECK_STR(r.kind == FS_KIND_INVALID ? r.reject_reason : fs_kind_name(r.kind),
			  cases[i].want);
	}
	CHECK_CTX("a buy's token");
	struct fs_record r = parse(
		"R",
		"{\"v\":1,\"type\":\"buy\",\"intent_id\":\"01a231db-3fc2-7d33-82a8-e9cb95f449f8\","
		"\"sku\":\"R\",\"buyer_id\":\"b\",\"qty\":1,\"token\":\"v1.x\"}",
		1);
	CHECK(r.u.token.present && !r.u.token.too_long);
	CHECK_STR(r.u.token.text, "v1.x");
	struct fs_record same =
		parse("R",
		      "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"01a231db-3fc2-7d33-82a8-"
		      "e9cb95f449f8\",\"sku\":\"R\",\"buyer_id\":\"b\",\"qty\":1}",
		      1);
	CHECK(!same.u.token.present);
	CHECK_INT(same.body_hash, r.body_hash); /* the token is not the body */
}

/* A buy of R (intent id n) by buyer, with token (NULL: none). */
static const char *buy_json(int n, const char *buyer, const char *token)
{
	static char out[512];
	snprintf(out, sizeof out,
		 "{\"v\":1,\"type\":\"buy\",\"intent_id\":\"01a231db-3fc2-7d33-82a8-e9cb95f449%"
		 "02d\","
		 "\"sku\":\"R\",\"buyer_id\":\"%s\",\"qty\":1%s%s%s}",
		 n, buyer, token ? ",\"token\":\"" : "", token ? token : "", token ? "\"" : "");
	return out;
}

static void test_core_room(void)
{
	struct fs_keyring kr;
	ring(&kr, "k1 " K1 "\n");
	struct fs_core c;
	fs_core_init(&c, 0);
	static const char open_r[] = "{\"v\":1,\"type\":\"open\",\"sku\":\"R\",\"stock\":2,\"opens_"
				     "at\":10000,\"admission\":"
				     "{\"rate_per_s\":1000,\"token_seconds\":5,\"seed\":\"s1\"}}";
	/* No key ring: the sale is refused. */
	struct fs_decision d = decide(&c, "R", open_r, 1000);
	CHECK_STR(verdict(&d), "rejected no_key_ring");
	c.keys = &kr;
	d = decide(&c, "R", open_r, 1000);
	CHECK_STR(verdict(&d), "applied");
	d = decide(&c, "P", "{\"v\":1,\"type\":\"open\",\"sku\":\"P\",\"stock\":2}", 1000);
	CHECK_STR(verdict(&d), "applied");
	/* Joins before the opening: waiting, no place yet; a repeat is the first answer. */
	static const char *const who[] = {"ann", "bob", "cy"};
	for (int i = 0; i < 3; i++) {
		char j[128];
		snprintf(j, sizeof j,
			 "{\"v\":1,\"type\":\"join\",\"sku\":\"R\",\"buyer_id\":\"%s\"}", who[i]);
		d = decide(&c, "R", j, 2000 + i);
		CHECK_STR(verdict(&d), "waiting");
		CHECK_INT(d.position, 0);
	}
	d = decide(&c, "R", "{\"v\":1,\"type\":\"join\",\"sku\":\"R\",\"buyer_id\":\"bob\"}", 3000);
	CHECK(d.outcome == FS_OUT_WAITING && d.duplicate && d.decided_at_ms == 2001);
	d = decide(&c, "P", "{\"v\":1,\"type\":\"join\",\"sku\":\"P\",\"buyer_id\":\"bob\"}", 3000);
	CHECK_STR(verdict(&d), "rejected no_waiting_room");
	d = decide(&c, "Q", "{\"v\":1,\"type\":\"join\",\"sku\":\"Q\",\"buyer_id\":\"bob\"}", 3000);
	CHECK_STR(verdict(&d), "rejected unknown_sku");
	const struct fs_sku *s = fs_core_sku(&c, "R");
	CHECK_INT(fs_core_next_room_due(&c), 10000); /* the draw */
	fs_core_commit(&c);
	/* The opening: a tick at 10000 draws; the first slot is due at once, the next a ms on. */
	d = decide(&c, "", "{\"v\":1,\"type\":\"tick\"}", 10000);
	CHECK(s->room->drawn);
	CHECK_INT(s->room->admitted_len, 1);
	CHECK_INT(fs_core_next_room_due(&c), 10001);
	const struct fs_room_entry *first = &s->room->v[s->room->admitted[0]];
	CHECK_INT(first->admitted_ms, 10000);
	CHECK_INT(first->decided_off, core_off - 1);
	/* The admission's result: its token verifies for its buyer, and is what fs_token_mint
	 * gives. */
	char tok[FS_TOKEN_TEXT_MAX + 1];
	CHECK_INT(fs_token_mint(&kr, "R", first->buyer_id, 10000, 15000, tok), 0);
	struct fs_buf out = {0};
	fs_result_admitted(&out, "R", first, s->admission.token_ms, tok, 0);
	CHECK(strstr(fs_buf_cstr(&out), "\"type\":\"admission\"") != NULL);
	CHECK(strstr(out.data, tok) != NULL);
	CHECK(strstr(out.data, "\"not_before\":10000,\"expires_at\":15000") != NULL);
	fs_buf_free(&out);
	/* Buys: the window first, then the token, then the stock. */
	d = decide(&c, "R", buy_json(1, first->buyer_id, NULL), 10000);
	CHECK_STR(verdict(&d), "rejected no_token");
	d = decide(&c, "R", buy_json(2, first->buyer_id, "nonsense"), 10000);
	CHECK_STR(verdict(&d), "rejected bad_token");
	d = decide(&c, "R", buy_json(3, strcmp(first->buyer_id, "ann") ? "ann" : "bob", tok),
		   10000);
	CHECK_STR(verdict(&d), "rejected token_other_buyer");
	char early[FS_TOKEN_TEXT_MAX + 1];
	CHECK_INT(fs_token_mint(&kr, "R", first->buyer_id, 20000, 25000, early), 0);
	d = decide(&c, "R", buy_json(5, first->buyer_id, early), 14999);
	CHECK_STR(verdict(&d), "rejected token_not_yet_valid");
	d = decide(&c, "R", buy_json(6, first->buyer_id, tok), 14999);
	CHECK_STR(verdict(&d), "held");
	d = decide(&c, "R", buy_json(4, first->buyer_id, tok), 15000);
	CHECK_STR(verdict(&d), "rejected token_expired");
	/* The buys moved the clock past the others' slots (1 ms a slot at 1,000 a second) and
	 * admitted no one: a room admits at ticks only (issue 47, item 4). The next tick admits
	 * them, their slots moved up to FS_ROOM_CATCHUP_MS before its clock. */
	CHECK_INT(s->room->next, 1);
	CHECK_INT(fs_core_next_room_due(&c), 10001);
	d = decide(&c, "", "{\"v\":1,\"type\":\"tick\"}", 15000);
	CHECK_INT(s->room->next, 3);
	/* 5 s after the first token: it is re-minted at this tick (a gap: fs_room_remint). */
	CHECK_INT(first->minted_ms, 15000);
	CHECK_INT(first->decided_ms, 10000);
	CHECK_INT(s->room->v[s->room->order[1]].admitted_ms, 15000 - FS_ROOM_CATCHUP_MS);
	CHECK_INT(s->room->v[s->room->order[2]].admitted_ms, 15000 - FS_ROOM_CATCHUP_MS + 1);
	CHECK_INT(s->room->v[s->room->order[2]].decided_ms, 15000);
	CHECK_INT(fs_core_next_room_due(&c), -1);
	/* A cart line of a sale behind a room: refused. */
	struct fs_decision cd;
	CHECK(fs_core_refuses(&c, s, 1, 0, &cd));
	CHECK_STR(verdict(&cd), "rejected admission_required");
	fs_core_commit(&c);
	/* A join after the draw: behind everyone, its slot free, and still waiting: admitted at
	 * the next tick, its token's life from the tick's clock. */
	d = decide(&c, "R", "{\"v\":1,\"type\":\"join\",\"sku\":\"R\",\"buyer_id\":\"dee\"}",
		   16000);
	CHECK_STR(verdict(&d), "waiting");
	CHECK_INT(fs_core_next_room_due(&c), 16000);
	/* The tick comes 1,040 ms after the room's last tokens (at 15000), more than step + 1 s,
	 * but the room had run empty (dee joined after them): no re-mint, dee is admitted. */
	d = decide(&c, "", "{\"v\":1,\"type\":\"tick\"}", 16040);
	CHECK_INT(s->room->admitted_len, 1);
	for (uint32_t k = 1; k < 3; k++)
		CHECK_INT(s->room->v[s->room->order[k]].minted_ms, 15000);
	const struct fs_room_entry *dee = &s->room->v[s->room->admitted[0]];
	CHECK(strcmp(dee->buyer_id, "dee") == 0);
	CHECK(dee->admitted_ms == 16000 && dee->decided_ms == 16040 && dee->minted_ms == 16040);
	/* Joined again: waiting as first answered (its admission is its own result). */
	d = decide(&c, "R", "{\"v\":1,\"type\":\"join\",\"sku\":\"R\",\"buyer_id\":\"dee\"}",
		   17000);
	CHECK(d.outcome == FS_OUT_WAITING && d.duplicate);
	/* The state goes with the core: reset frees the rooms. */
	fs_core_reset(&c);
	CHECK_INT(c.room_skus_len, 0);
	fs_core_free(&c);
	fs_keyring_wipe(&kr);
}

/* ---- token.c's cached contexts against OpenSSL's one-shot functions --------------------------
 * token.c keeps a few keyed HMAC contexts per thread; the tokens and ranks must be the bytes the
 * documented format gives, whichever key was used last, after evictions (more keys than slots),
 * and from several threads at once. The expected values come from HMAC() and SHA256() here. */
static void b64url_test(const unsigned char *in, int n, char *out)
{
	int len = EVP_EncodeBlock((unsigned char *)out, in, n);
	while (len > 0 && out[len - 1] == '=')
		out[--len] = '\0';
	for (int i = 0; i < len; i++)
		out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
}

/* The token of the claims as docs/reference/records.md writes it, with one-shot HMAC(). */
static void token_expected(const char *kid, const unsigned char *key, size_t key_len,
			   const char *sku, const char *buyer, int64_t nbf, int64_t exp, char *out)
{
	unsigned char d[SHA256_DIGEST_LENGTH], mac[EVP_MAX_MD_SIZE];
	char digest[64], mac64[64], msg[256];
	SHA256((const unsigned char *)buyer, strlen(buyer), d);
	b64url_test(d, 16, digest);
	int n = snprintf(msg, sizeof msg, "fs-token-v1\n%s\n%s\n%s\n%" PRId64 "\n%" PRId64, kid,
			 sku, digest, nbf, exp);
	unsigned int len = 0;
	HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, (size_t)n, mac, &len);
	b64url_test(mac, (int)len, mac64);
	snprintf(out, FS_TOKEN_TEXT_MAX + 1, "v1.%s.%" PRId64 ".%" PRId64 ".%s.%s", kid, nbf, exp,
		 digest, mac64);
}

static uint64_t rank_expected(const char *seed, const char *buyer)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	HMAC(EVP_sha256(), seed, (int)strlen(seed), (const unsigned char *)buyer, strlen(buyer),
	     mac, &len);
	uint64_t r = 0;
	for (int i = 0; i < 8; i++)
		r = r << 8 | mac[i];
	return r;
}

enum { CACHE_KEYS = 20, CACHE_ROUNDS = 300 };
static struct fs_keyring cache_rings[CACHE_KEYS];

/* CACHE_ROUNDS rounds over every key (and a seed each), in an order that depends on the
 * thread; the number of mismatches. */
static void *cache_round(void *arg)
{
	uintptr_t t = (uintptr_t)arg, bad = 0;
	for (int r = 0; r < CACHE_ROUNDS; r++) {
		for (int j = 0; j < CACHE_KEYS; j++) {
			int k = (int)((j * 7 + r + t * 3) % CACHE_KEYS);
			const struct fs_key *key = &cache_rings[k].keys[0];
			char buyer[32], seed[32], got[FS_TOKEN_TEXT_MAX + 1],
				want[FS_TOKEN_TEXT_MAX + 1];
			snprintf(buyer, sizeof buyer, "b-%d-%d", r, j);
			snprintf(seed, sizeof seed, "seed-%d", k);
			int64_t nbf = 1000 * r, exp = nbf + 60000;
			fs_token_mint(&cache_rings[k], "SKU", buyer, nbf, exp, got);
			token_expected(key->id, key->secret, key->len, "SKU", buyer, nbf, exp,
				       want);
			bad += strcmp(got, want) != 0;
			bad += fs_token_verify(&cache_rings[k], want, "SKU", buyer, nbf) !=
			       FS_TOKEN_OK;
			bad += fs_draw_rank(seed, buyer) != rank_expected(seed, buyer);
		}
	}
	return (void *)bad;
}

static void test_crypto_cache(void)
{
	CHECK_CTX("cached HMAC contexts");
	for (int k = 0; k < CACHE_KEYS; k++) {
		char text[256];
		/* 32 bytes of k's own pattern: every key distinct */
		int n = snprintf(text, sizeof text, "k%d ", k);
		for (int i = 0; i < 32; i++)
			n += snprintf(text + n, sizeof text - (size_t)n, "%02x",
				      (k * 37 + i * 11) & 0xff);
		snprintf(text + n, sizeof text - (size_t)n, "\n");
		ring(&cache_rings[k], text);
	}
	/* One thread: hits, evictions (20 keys and 20 seeds for 8 slots), keys set up again. */
	CHECK_INT((int)(uintptr_t)cache_round((void *)0), 0);
	/* Four at once: each thread its own contexts. */
	pthread_t th[4];
	for (uintptr_t t = 0; t < 4; t++)
		CHECK_INT(pthread_create(&th[t], NULL, cache_round, (void *)(t + 1)), 0);
	for (int t = 0; t < 4; t++) {
		void *bad = NULL;
		pthread_join(th[t], &bad);
		CHECK_INT((int)(uintptr_t)bad, 0);
	}
	for (int k = 0; k < CACHE_KEYS; k++)
		fs_keyring_wipe(&cache_rings[k]);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_room");
	}
	test_keyring();
	test_tokens();
	test_crypto_cache();
	test_rotation();
	test_draw();
	test_admission();
	test_catchup();
	test_remint();
	test_load();
	test_records();
	test_core_room();
	return check_done("test_room");
}
