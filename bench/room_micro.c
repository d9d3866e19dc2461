/* room_micro.c: flashsale-room-micro, the waiting room's pure costs on this machine (issue 33):
 * N buyers joining a room before its opening, the draw at the opening, and a token's minting
 * and verification (src/core/room.c, src/core/token.c), each timed on the monotonic clock with
 * the memory the room holds (its arrays' bytes). No services: what the core costs, beside
 * which test 72 and a sale's end-to-end figures can be read.
 *
 *   build/bench/flashsale-room-micro [--buyers N] [--tokens N]
 *
 * Prints one line per measure. */
#include "core/room.h"
#include "core/token.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long buyers = 100000, tokens = 200000;
	static const struct option opts[] = {{"buyers", required_argument, NULL, 'b'},
					     {"tokens", required_argument, NULL, 't'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'b')
			buyers = strtol(optarg, NULL, 10);
		else if (c == 't')
			tokens = strtol(optarg, NULL, 10);
		else {
			fprintf(stderr, "usage: flashsale-room-micro [--buyers N] [--tokens N]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (buyers < 1 || buyers > 10000000 || tokens < 1) {
		fprintf(stderr, "flashsale-room-micro: --buyers 1..10000000, --tokens >= 1\n");
		return 2;
	}
	struct fs_admission adm = {
		.rate_per_s = 1000, .token_ms = 60000, .draw = FS_DRAW_RANDOM, .seed = "micro"};
	struct fs_room r;
	if (fs_room_init(&r, &adm, 1000000) < 0)
		return 1;
	double t0 = now_s();
	for (long i = 0; i < buyers; i++) {
		char b[32];
		snprintf(b, sizeof b, "buyer-%ld", i);
		bool rep;
		if (fs_room_join(&r, b, i, 1000, &rep) < 0) {
			fprintf(stderr, "out of memory at %ld\n", i);
			return 1;
		}
	}
	double t1 = now_s();
	fs_room_advance(&r, 1000000, buyers); /* the draw, and the first slot */
	double t2 = now_s();
	size_t bytes = (size_t)r.cap * (sizeof *r.v + 4 * sizeof(uint32_t) + 24) +
		       (size_t)r.index.cap * (sizeof(uint64_t) + sizeof(uint32_t));
	printf("joins: %ld buyers in %.1f ms (%.2f us a join, the rank's HMAC included)\n", buyers,
	       (t1 - t0) * 1e3, (t1 - t0) * 1e6 / (double)buyers);
	printf("draw: %ld buyers ordered in %.1f ms\n", buyers, (t2 - t1) * 1e3);
	printf("memory: %.1f MB for the room's arrays and index (%.0f bytes a buyer)\n",
	       (double)bytes / 1e6, (double)bytes / (double)buyers);
	fs_room_free(&r);

	struct fs_keyring kr;
	char err[128];
	if (fs_keyring_parse(
		    "k1 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", &kr,
		    err, sizeof err) < 0)
		return 1;
	char tok[FS_TOKEN_TEXT_MAX + 1];
	double m0 = now_s();
	for (long i = 0; i < tokens; i++)
		fs_token_mint(&kr, "PHONE-X", "alice", 1000 + i, 61000 + i, tok);
	double m1 = now_s();
	long ok = 0;
	for (long i = 0; i < tokens; i++)
		ok += fs_token_verify(&kr, tok, "PHONE-X", "alice", 5000 + tokens) == FS_TOKEN_OK;
	double m2 = now_s();
	printf("tokens: mint %.2f us, verify %.2f us (%ld verified)\n",
	       (m1 - m0) * 1e6 / (double)tokens, (m2 - m1) * 1e6 / (double)tokens, ok);
	fs_keyring_wipe(&kr);
	return ok == tokens ? 0 : 1;
}
