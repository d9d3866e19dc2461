/* main.c: the flashsale command line, on top of the public API (flashsale.h). */
#include "cli/cli.h"

#include "io/config.h"
#include "io/entropy.h"
#include "io/kafka.h"
#include "core/record.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
	FLUSH_MS = 30000,
	WAIT_STEP_MS = 20
}; /* wait: a cheap query; 20 ms resolution for timings */

static const char usage_main[] =
	"usage: flashsale [-c FILE] [--set KEY=VALUE]... COMMAND [ARGS]\n"
	"\n"
	"Commands:\n"
	"  sale open SKU --stock N [--per-buyer N] [--max-qty N] [--hold SECONDS]\n"
	"  sale restock SKU --add N\n"
	"  sale close SKU\n"
	"  stock SKU [--json] [--follow]       a SKU's counters (Postgres; --follow: the topic)\n"
	"  buy SKU --buyer B [--qty N] [--intent UUID] [--token T]   publish a buy, print its id\n"
	"  join SKU --buyer B                  join the SKU's waiting room (issue 33)\n"
	"  queue SKU --buyer B [--wait SECONDS] [--json]   where the buyer stands in it\n"
	"  result INTENT_ID [--wait SECONDS] [--json]    a buy's decision (and its hold)\n"
	"  confirm INTENT_ID [--sku SKU] [--wait SECONDS]  the buy was paid\n"
	"  cancel INTENT_ID [--sku SKU] [--wait SECONDS]   the buyer gave up\n"
	"  cart --buyer B SKU:QTY...           publish a cart (all lines or none), print its id\n"
	"  cart show|confirm|cancel CART_ID [--wait SECONDS]   a cart's answer; pay; give up\n"
	"  load SKU --buyers N [--qty N] [--rate R] [--dup-ratio X] [--seed S]\n"
	"                                      the load generator\n"
	"  wait [--timeout SECONDS]            until every published record is decided\n"
	"  summary [--sku SKU] [--json]        outcome counts and stock\n"
	"  audit [--json] [--allow-lag] [--no-replay]  check the invariants (and replay the log)\n"
	"  topics create [--partitions N]      create the three topics (admin API)\n"
	"  topics delete                       delete the three topics\n"
	"  publish --key KEY [--file FILE]     publish one raw record (tests, operators)\n"
	"  replay [--dry-run]                  rebuild the database from the log, or diff against "
	"it\n"
	"  timing [--since MS] [--timeout S]   end-to-end rate and latency, on the broker's clock\n"
	"                                      and from the publish call\n"
	"  move --to FILE --partitions N       move the sale to a topic of N partitions, by "
	"replay\n"
	"  top [--metrics URL,...] [--once] [--json] [SKU...]\n"
	"                                      a live view: stock, partitions, commits\n"
	"\n"
	"Global options:\n"
	"  -c, --config FILE   configuration file (see config/flashsale.conf)\n"
	"  -s, --set K=V       set one configuration key\n"
	"      --help-config   list every configuration key\n"
	"  -h, --help          this text; `flashsale COMMAND --help` for one command\n"
	"\n"
	"Environment: FLASHSALE_KAFKA (bootstrap servers), FLASHSALE_PG (libpq conninfo).\n"
	"Exit status: 0 ok, 1 failure or violation, 2 usage error.\n";

/* ---- sale -------------------------------------------------------------------------------- */

static const char usage_sale[] =
	"usage: flashsale sale open SKU --stock N [--per-buyer N] [--max-qty N] [--hold SECONDS]\n"
	"                                [--opens-at MS] [--closes-at MS] [--wait SECONDS]\n"
	"                                [--admission-rate N --token-seconds S\n"
	"                                 [--draw random|fifo] [--draw-seed SEED]]\n"
	"       flashsale sale restock SKU --add N [--wait SECONDS]\n"
	"       flashsale sale close SKU [--wait SECONDS]\n"
	"\n"
	"Publishes the sale's own record to the intents topic (keyed by SKU), so that a replay\n"
	"of the topic rebuilds the stock exactly. --per-buyer defaults to 1, --max-qty (units in\n"
	"one intent) to the per-buyer limit, --hold (seconds a win is held before it expires) to\n"
	"600. Times are epoch milliseconds on the partition's log clock.\n"
	"--admission-rate puts the sale behind a waiting room (issue 33): buyers `join` before\n"
	"or after --opens-at; at the opening those who joined are ordered by a draw (random: a\n"
	"keyed hash of --draw-seed and the buyer id; fifo: join order), and the worker admits N\n"
	"a second with a token valid --token-seconds; a buy then needs its buyer's token. The\n"
	"worker needs a key ring (admission.keys) or it refuses the sale (no_key_ring).\n"
	"--draw-seed is the room's secret until the draw: 128 bits at least (32 characters, 8\n"
	"of them different: \"$(openssl rand -hex 16)\"), or it is refused and nothing published.\n"
	"Without --wait it prints that the record was published, not what it did (no worker may\n"
	"be running yet). With --wait SECONDS it waits for the worker's decision and prints it:\n"
	"`open SKU applied`, or `open SKU rejected (already_open)`, exit 1 unless applied\n"
	"(or on timeout).\n";

/* Waits for the worker's decision of the sale record just published and prints it. */
static int sale_outcome(flashsale_t *fs, const char *verb, const char *sku, int64_t wait_s)
{
	char outcome[32], reason[64];
	int rc = flashsale_sale_wait(fs, (int)(wait_s * 1000), outcome, reason);
	if (rc < 0) {
		cli_err("sale %s: %s", verb, flashsale_error(fs));
		return 1;
	}
	printf("%s %s %s%s%s%s\n", verb, sku, outcome, reason[0] ? " (" : "", reason,
	       reason[0] ? ")" : "");
	return strcmp(outcome, "applied") == 0 || strcmp(outcome, "forwarded") == 0 ? 0 : 1;
}

static int cmd_sale(flashsale_t *fs, int argc, char **argv)
{
	struct flashsale_sale sale = {.stock = -1};
	int64_t add = 0, wait_s = 0;
	const struct cli_opt spec[] = {
		{"stock", CLI_INT, &sale.stock, 0, FS_STOCK_MAX},
		{"per-buyer", CLI_INT, &sale.per_buyer_limit, 1, FS_QTY_MAX},
		{"max-qty", CLI_INT, &sale.max_qty, 1, FS_QTY_MAX},
		{"hold", CLI_SECONDS, &sale.hold_seconds, 1, 7 * 24 * 3600},
		{"opens-at", CLI_INT, &sale.opens_at_ms, 0, INT64_MAX / 2},
		{"closes-at", CLI_INT, &sale.closes_at_ms, 0, INT64_MAX / 2},
		{"admission-rate", CLI_INT, &sale.admission_rate, 1, FS_ADMIT_RATE_MAX},
		{"token-seconds", CLI_INT, &sale.token_seconds, 1, FS_TOKEN_SECONDS_MAX},
		{"draw", CLI_STR, &sale.draw},
		{"draw-seed", CLI_STR, &sale.draw_seed},
		{"add", CLI_INT, &add, 1, FS_STOCK_MAX},
		{"wait", CLI_TIMEOUT, &wait_s, 0, 86400},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_sale, spec, 2, 2);
	if (rc >= 0)
		return rc;
	const char *verb = argv[optind], *sku = argv[optind + 1];
	if (strcmp(verb, "open") == 0) {
		if (sale.stock < 0) {
			cli_err("sale open: --stock is required");
			return 2;
		}
		rc = flashsale_sale_open(fs, sku, &sale);
	} else if (strcmp(verb, "restock") == 0) {
		if (add < 1) {
			cli_err("sale restock: --add is required");
			return 2;
		}
		rc = flashsale_sale_restock(fs, sku, add);
	} else if (strcmp(verb, "close") == 0) {
		rc = flashsale_sale_close(fs, sku);
	} else {
		cli_err("sale: unknown action '%s' (open, restock, close)", verb);
		return 2;
	}
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("sale %s: %s", verb, flashsale_error(fs));
		return rc == -EINVAL ? 2 : 1;
	}
	if (wait_s == 0) {
		printf("published %s %s (not decided yet: --wait SECONDS prints the outcome)\n",
		       verb, sku);
		return 0;
	}
	return sale_outcome(fs, verb, sku, wait_s);
}

/* ---- buy --------------------------------------------------------------------------------- */

static const char usage_buy[] =
	"usage: flashsale buy SKU --buyer B [--qty N] [--intent UUID] [--token TOKEN]\n"
	"\n"
	"Publishes one buy intent and prints its intent id. Re-running with the same --intent\n"
	"and the same body is a retry: it is answered with the first decision, never twice.\n"
	"--token: the buyer's admission token, for a sale behind a waiting room (`flashsale\n"
	"queue` prints it once admitted); it is not part of the intent (a retry may refresh it).\n"
	"A buy refused for its token (no_token, bad_token, token_expired, ...) does not use up\n"
	"the --intent: the same one with a valid token is decided on its merits.\n";

static int cmd_buy(flashsale_t *fs, int argc, char **argv)
{
	const char *buyer = NULL, *intent = NULL, *token = NULL;
	int64_t qty = 1;
	const struct cli_opt spec[] = {
		{"buyer", CLI_STR, &buyer},
		{"qty", CLI_INT, &qty, 1, FS_QTY_MAX},
		{"intent", CLI_STR, &intent},
		{"token", CLI_STR, &token},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_buy, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (!buyer)
		return cli_usage(usage_buy);
	char id[37];
	rc = flashsale_buy_token(fs, argv[optind], buyer, qty, intent, token, id);
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("buy: %s", flashsale_error(fs));
		return rc == -EINVAL ? 2 : 1;
	}
	printf("%s\n", id);
	return 0;
}

static void print_result(const struct flashsale_result *r, bool json);

/* ---- the waiting room (issue 33) ----------------------------------------------------------- */

static const char usage_join[] =
	"usage: flashsale join SKU --buyer B\n"
	"\n"
	"Joins the SKU's waiting room: one entry per buyer (joining again changes nothing). The\n"
	"worker answers on the results topic under SKU/BUYER; `flashsale queue` reads where the\n"
	"buyer stands.\n";

static int cmd_join(flashsale_t *fs, int argc, char **argv)
{
	const char *buyer = NULL;
	const struct cli_opt spec[] = {{"buyer", CLI_STR, &buyer}, {NULL}};
	int rc = cli_parse(argc, argv, usage_join, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (!buyer)
		return cli_usage(usage_join);
	rc = flashsale_join(fs, argv[optind], buyer);
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("join: %s", flashsale_error(fs));
		return rc == -EINVAL ? 2 : 1;
	}
	printf("joined %s %s\n", argv[optind], buyer);
	return 0;
}

static const char usage_queue[] =
	"usage: flashsale queue SKU --buyer B [--wait SECONDS] [--json]\n"
	"\n"
	"Where the buyer stands in the SKU's waiting room, as the worker last committed it:\n"
	"`waiting` with the place in the queue once drawn (position, ahead, estimated wait), or\n"
	"`admitted` with the token's life and the token to buy with: the worker's, as its\n"
	"admission result gave it (kept in the room's row; never one made here). --wait\n"
	"SECONDS: until admitted (exit 1 on timeout). Exit 1 if the buyer has not joined.\n";

static int cmd_queue(flashsale_t *fs, int argc, char **argv)
{
	const char *buyer = NULL;
	int64_t wait_s = 0;
	bool json = false;
	const struct cli_opt spec[] = {{"buyer", CLI_STR, &buyer},
				       {"wait", CLI_TIMEOUT, &wait_s, 0, 86400},
				       {"json", CLI_FLAG, &json},
				       {NULL}};
	int rc = cli_parse(argc, argv, usage_queue, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (!buyer)
		return cli_usage(usage_queue);
	const char *sku = argv[optind];
	struct flashsale_queue q;
	int64_t polls = wait_s * 10; /* every 100 ms */
	for (;;) {
		rc = flashsale_queue_get(fs, sku, buyer, &q);
		if (rc < 0 && rc != -ENOENT) {
			cli_err("queue: %s", flashsale_error(fs));
			return 1;
		}
		if ((rc == 0 && strcmp(q.status, "admitted") == 0) || polls-- <= 0)
			break;
		struct timespec ts = {0, 100 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (rc == -ENOENT) {
		cli_err("queue: %s has not joined %s's waiting room", buyer, sku);
		return 1;
	}
	bool admitted = strcmp(q.status, "admitted") == 0;
	if (json) {
		/* sku: validated charset; token: base64url and digits */
		printf("{\"sku\":\"%s\",\"status\":\"%s\",\"drawn\":%s,\"position\":%" PRId64
		       ",\"ahead\":%" PRId64 ",\"estimated_wait_ms\":%" PRId64,
		       sku, q.status, q.drawn ? "true" : "false", q.position, q.ahead,
		       q.estimated_wait_ms);
		if (admitted)
			printf(",\"not_before\":%" PRId64 ",\"expires_at\":%" PRId64, q.not_before,
			       q.expires_at);
		if (admitted && q.token[0])
			printf(",\"token\":\"%s\"", q.token);
		printf("}\n");
	} else if (admitted) {
		printf("%s %s admitted not_before %" PRId64 " expires_at %" PRId64 "%s%s\n", sku,
		       buyer, q.not_before, q.expires_at, q.token[0] ? " token " : "", q.token);
	} else if (q.drawn) {
		printf("%s %s waiting position %" PRId64 " ahead %" PRId64
		       " estimated_wait_ms %" PRId64 "\n",
		       sku, buyer, q.position, q.ahead, q.estimated_wait_ms);
	} else {
		printf("%s %s waiting (the draw is at the opening)\n", sku, buyer);
	}
	return wait_s && !admitted ? 1 : 0;
}

/* ---- cart --------------------------------------------------------------------------------- */

static const char usage_cart[] =
	"usage: flashsale cart --buyer B [--cart UUID] [--wait SECONDS] [--json] SKU:QTY...\n"
	"       flashsale cart show CART_ID [--wait SECONDS] [--json]\n"
	"       flashsale cart confirm CART_ID [--wait SECONDS] [--json]\n"
	"       flashsale cart cancel CART_ID [--wait SECONDS] [--json]\n"
	"\n"
	"A cart: 1 to 8 lines of SKU:QTY (each SKU once), all held or none. It is published keyed\n"
	"by its cart id (printed): the cart id's partition decides it, reserving the lines on\n"
	"their SKUs' partitions one partition at a time (docs/DESIGN-NOTES.md, \"Carts across\n"
	"partitions\"). Its answer is `held` (every line, one expiry) or a refusal naming the\n"
	"first line that failed (line, 0-based) and why (sold_out, limit_exceeded, ...), with no\n"
	"unit of any line taken. Re-running with the same --cart and lines is a retry.\n"
	"show: the cart's state and answer. confirm: the payment succeeded: every line is sold\n"
	"(after the expiry: fresh units for every line, or refund_required). cancel: every line\n"
	"goes back. With --wait, prints the cart once it has its answer (exit 1 on timeout).\n";

static void print_cart(const struct flashsale_cart *c, bool json)
{
	if (json) {
		printf("{\"cart_id\":\"%s\",\"state\":\"%s\",\"outcome\":\"%s\"", c->cart_id,
		       c->state, c->outcome);
		if (c->reason[0])
			printf(",\"reason\":\"%s\"", c->reason);
		if (c->line >= 0)
			printf(",\"line\":%" PRId32, c->line);
		if (c->expires_at_ms)
			printf(",\"expires_at\":%" PRId64, c->expires_at_ms);
		printf(",\"partition\":%" PRId32 ",\"offset\":%" PRId64 "}\n", c->partition,
		       c->offset);
		return;
	}
	printf("%s %s", c->cart_id, c->outcome[0] ? c->outcome : "undecided");
	if (c->reason[0])
		printf(" (%s)", c->reason);
	if (c->line >= 0)
		printf(" line %" PRId32, c->line);
	printf(" state %s\n", c->state);
}

/* Waits for the cart's answer, or for its state to leave `from` (a confirm or cancel). */
static int cart_show(flashsale_t *fs, const char *id, int64_t wait_s, const char *from, bool json)
{
	struct flashsale_cart c;
	int rc = flashsale_cart_wait(fs, id, (int)(wait_s * 1000), &c);
	int64_t deadline_polls = wait_s * 20;
	while (rc == 0 && from && strcmp(c.state, from) == 0 && deadline_polls-- > 0) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
		rc = flashsale_cart_get(fs, id, &c);
	}
	if (rc < 0) {
		cli_err("cart: %s", flashsale_error(fs));
		return 1;
	}
	print_cart(&c, json);
	return 0;
}

/* SKU:QTY into a line (the SKU's text stays in argv). */
static int cart_line(char *arg, struct flashsale_cart_line *l)
{
	char *colon = strrchr(arg, ':');
	char *end = NULL;
	if (!colon || colon == arg)
		return -1;
	long long q = strtoll(colon + 1, &end, 10);
	if (!end || *end || end == colon + 1 || q < 1 || q > FS_QTY_MAX)
		return -1;
	*colon = '\0';
	l->sku = arg;
	l->qty = q;
	return 0;
}

static int cmd_cart(flashsale_t *fs, int argc, char **argv)
{
	const char *buyer = NULL, *cart = NULL;
	int64_t wait_s = 0;
	bool json = false;
	const struct cli_opt spec[] = {
		{"buyer", CLI_STR, &buyer},
		{"cart", CLI_STR, &cart},
		{"wait", CLI_TIMEOUT, &wait_s, 0, 86400},
		{"json", CLI_FLAG, &json},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_cart, spec, 1, FS_CART_LINES_MAX);
	if (rc >= 0)
		return rc;
	const char *verb = argv[optind];
	bool show = strcmp(verb, "show") == 0, confirm = strcmp(verb, "confirm") == 0,
	     cancel = strcmp(verb, "cancel") == 0;
	if (show || confirm || cancel) {
		if (argc - optind != 2)
			return cli_usage(usage_cart);
		const char *id = argv[optind + 1];
		struct flashsale_cart before;
		bool known = !show && flashsale_cart_get(fs, id, &before) == 0;
		rc = show      ? 0
		     : confirm ? flashsale_cart_confirm(fs, id)
			       : flashsale_cart_cancel(fs, id);
		if (rc == 0 && !show)
			rc = flashsale_flush(fs, FLUSH_MS);
		if (rc < 0) {
			cli_err("cart %s: %s", verb, flashsale_error(fs));
			return rc == -EINVAL ? 2 : 1;
		}
		if (!show && wait_s == 0) {
			printf("published cart %s %s\n", verb, id);
			return 0;
		}
		return cart_show(fs, id, wait_s, known ? before.state : NULL, json);
	}
	if (!buyer)
		return cli_usage(usage_cart);
	struct flashsale_cart_line lines[FS_CART_LINES_MAX];
	size_t n = 0;
	for (int i = optind; i < argc; i++) {
		if (cart_line(argv[i], &lines[n]) < 0) {
			cli_err("cart: '%s' is not SKU:QTY (QTY 1 to %d)", argv[i], FS_QTY_MAX);
			return 2;
		}
		n++;
	}
	char id[37];
	rc = flashsale_cart_buy(fs, buyer, lines, n, cart, id);
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("cart: %s", flashsale_error(fs));
		return rc == -EINVAL ? 2 : 1;
	}
	if (wait_s == 0) {
		printf("%s\n", id);
		return 0;
	}
	return cart_show(fs, id, wait_s, NULL, json);
}

/* ---- confirm, cancel -------------------------------------------------------------------- */

static const char usage_followup[] =
	"usage: flashsale confirm INTENT_ID [--sku SKU] [--wait SECONDS] [--json]\n"
	"       flashsale cancel INTENT_ID [--sku SKU] [--wait SECONDS] [--json]\n"
	"\n"
	"confirm: the payment for the buy INTENT_ID succeeded. A live hold becomes a sale\n"
	"(confirmed); an expired one takes a fresh unit if one is left (confirmed_late), else the\n"
	"buyer must be refunded (refund_required). cancel: the buyer gave up; a live hold returns\n"
	"its units to stock (cancelled). Both are idempotent: repeating one gives the same "
	"answer.\n"
	"The record is keyed by the buy's SKU: give --sku, or it is looked up in Postgres.\n"
	"With --wait, prints the decision once it is made (exit 1 on timeout).\n";

static int cmd_followup(flashsale_t *fs, int argc, char **argv)
{
	const char *type = argv[0], *sku_opt = NULL;
	int64_t wait_s = 0;
	bool json = false;
	const struct cli_opt spec[] = {
		{"sku", CLI_STR, &sku_opt},
		{"wait", CLI_TIMEOUT, &wait_s, 0, 86400},
		{"json", CLI_FLAG, &json},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_followup, spec, 1, 1);
	if (rc >= 0)
		return rc;
	char sku[65];
	snprintf(sku, sizeof sku, "%s", sku_opt ? sku_opt : "");
	const char *id = argv[optind];
	rc = 0;
	if (!sku[0])
		rc = flashsale_buy_sku(fs, id, sku);
	if (rc == 0)
		rc = strcmp(type, "confirm") == 0 ? flashsale_confirm(fs, id, sku)
						  : flashsale_cancel(fs, id, sku);
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("%s: %s%s", type, flashsale_error(fs),
			rc == -ENOENT ? " (pass --sku to send it anyway)" : "");
		return rc == -EINVAL ? 2 : 1;
	}
	if (wait_s == 0) {
		printf("published %s %s\n", type, id);
		return 0;
	}
	struct flashsale_result r;
	rc = flashsale_decision_wait(fs, id, type, (int)(wait_s * 1000), &r);
	if (rc < 0) {
		cli_err("%s: %s", type,
			rc == -ETIMEDOUT || rc == -ENOENT ? "no decision yet"
							  : flashsale_error(fs));
		return 1;
	}
	print_result(&r, json);
	return 0;
}

/* ---- result, stock ----------------------------------------------------------------------- */

static void print_result(const struct flashsale_result *r, bool json)
{
	if (json) {
		printf("{\"intent_id\":\"%s\",\"sku\":\"%s\",\"outcome\":\"%s\"", r->intent_id,
		       r->sku, r->outcome);
		if (r->reason[0])
			printf(",\"reason\":\"%s\"", r->reason);
		printf(",\"qty\":%" PRId64, r->qty);
		if (r->expires_at_ms)
			printf(",\"expires_at\":%" PRId64, r->expires_at_ms);
		if (r->hold[0])
			printf(",\"hold\":\"%s\"", r->hold);
		printf(",\"partition\":%" PRId32 ",\"offset\":%" PRId64 "}\n", r->partition,
		       r->offset);
		return;
	}
	printf("%s %s", r->intent_id, r->outcome);
	if (r->reason[0])
		printf(" (%s)", r->reason);
	printf(" sku=%s qty=%" PRId64, r->sku, r->qty);
	if (r->expires_at_ms)
		printf(" expires_at=%" PRId64, r->expires_at_ms);
	if (r->hold[0])
		printf(" hold=%s", r->hold);
	printf(" partition=%" PRId32 " offset=%" PRId64 "\n", r->partition, r->offset);
}

static const char usage_result[] =
	"usage: flashsale result INTENT_ID [--wait SECONDS] [--json]\n"
	"\n"
	"Prints a buy's decision from Postgres. With --wait, if it is not decided yet, follows\n"
	"the results topic until it arrives (exit 1 on timeout). The id of a cart its\n"
	"coordinator has read prints the cart, as `flashsale cart show` does.\n";

static int cmd_result(flashsale_t *fs, int argc, char **argv)
{
	int64_t wait_s = 0;
	bool json = false;
	const struct cli_opt spec[] = {
		{"wait", CLI_TIMEOUT, &wait_s, 0, 86400},
		{"json", CLI_FLAG, &json},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_result, spec, 1, 1);
	if (rc >= 0)
		return rc;
	struct flashsale_cart cart;
	if (flashsale_cart_get(fs, argv[optind], &cart) == 0)
		return cart_show(fs, argv[optind], wait_s, NULL, json);
	struct flashsale_result r;
	rc = flashsale_result_wait(fs, argv[optind], (int)(wait_s * 1000), &r);
	if (rc == -ENOENT || rc == -ETIMEDOUT) {
		cli_err("result: %s has no decision yet", argv[optind]);
		return 1;
	}
	if (rc < 0) {
		cli_err("result: %s", flashsale_error(fs));
		return rc == -EINVAL ? 2 : 1;
	}
	print_result(&r, json);
	return 0;
}

static const char usage_stock[] =
	"usage: flashsale stock SKU [--json] [--follow [--timeout S]]\n"
	"\n"
	"Prints a SKU's counters from Postgres. --follow reads the compacted stock topic\n"
	"instead (the web tier's sold-out flag): the latest state, then one line per change,\n"
	"until --timeout seconds pass (default: forever) or the SKU is sold out or closed\n"
	"with --until-sold-out. The status is open, sold_out, closed, or not_open before the\n"
	"sale's window, at the partition's clock.\n";

struct follow_ctx {
	bool follow, json, until_sold_out;
};

static int print_stock_update(const struct flashsale_stock *s, void *ctx)
{
	const struct follow_ctx *fc = ctx;
	if (fc->json)
		printf("{\"sku\":\"%s\",\"status\":\"%s\",\"supply\":%" PRId64
		       ",\"available\":%" PRId64 ",\"held\":%" PRId64 ",\"sold\":%" PRId64
		       ",\"partition\":%" PRId32 ",\"offset\":%" PRId64 "}\n",
		       s->sku, s->status, s->supply, s->available, s->held, s->sold, s->partition,
		       s->offset);
	else
		printf("%s %s supply=%" PRId64 " available=%" PRId64 " held=%" PRId64
		       " sold=%" PRId64 "\n",
		       s->sku, s->status, s->supply, s->available, s->held, s->sold);
	fflush(stdout);
	return fc->until_sold_out &&
	       (strcmp(s->status, "sold_out") == 0 || strcmp(s->status, "closed") == 0);
}

static int cmd_stock(flashsale_t *fs, int argc, char **argv)
{
	bool json = false;
	struct follow_ctx fc = {0};
	int64_t timeout_s = -1;
	const struct cli_opt spec[] = {
		{"json", CLI_FLAG, &json},
		{"follow", CLI_FLAG, &fc.follow},
		{"until-sold-out", CLI_FLAG, &fc.until_sold_out},
		{"timeout", CLI_TIMEOUT, &timeout_s, 0, 86400},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_stock, spec, 1, 1);
	if (rc >= 0)
		return rc;
	if (fc.follow) {
		fc.json = json;
		rc = flashsale_stock_follow(fs, argv[optind], print_stock_update, &fc,
					    timeout_s < 0 ? -1 : (int)(timeout_s * 1000));
		if (rc == -ETIMEDOUT && !fc.until_sold_out)
			return 0;
		if (rc < 0) {
			cli_err("stock: %s", rc == -ETIMEDOUT ? "timed out" : flashsale_error(fs));
			return 1;
		}
		return 0;
	}
	struct flashsale_stock s;
	rc = flashsale_stock_get(fs, argv[optind], &s);
	if (rc == -ENOENT) {
		cli_err("stock: unknown sku '%s'", argv[optind]);
		return 1;
	}
	if (rc < 0) {
		cli_err("stock: %s", flashsale_error(fs));
		return 1;
	}
	if (json)
		printf("{\"sku\":\"%s\",\"status\":\"%s\",\"supply\":%" PRId64
		       ",\"available\":%" PRId64 ",\"held\":%" PRId64 ",\"sold\":%" PRId64
		       ",\"per_buyer_limit\":%" PRId64 ",\"max_qty\":%" PRId64
		       ",\"hold_seconds\":%" PRId64 "}\n",
		       s.sku, s.status, s.supply, s.available, s.held, s.sold, s.per_buyer_limit,
		       s.max_qty, s.hold_ms / 1000);
	else
		printf("%s %s supply=%" PRId64 " available=%" PRId64 " held=%" PRId64
		       " sold=%" PRId64 "\n",
		       s.sku, s.status, s.supply, s.available, s.held, s.sold);
	return 0;
}

/* ---- wait -------------------------------------------------------------------------------- */

/* The high watermark of one partition. A handle that has only just learned the topic may not
 * know the partition's leader yet (librdkafka 2.0.2 answers "Local: Unknown partition", once
 * seen in CI right after a rebalance): such errors are retried for up to 10 s. */
static rd_kafka_resp_err_t partition_end(rd_kafka_t *rk, const char *topic, int32_t p, int64_t *lo,
					 int64_t *hi)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		rd_kafka_resp_err_t e =
			rd_kafka_query_watermark_offsets(rk, topic, p, lo, hi, 10000);
		if (e != RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION &&
		    e != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE &&
		    e != RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION &&
		    e != RD_KAFKA_RESP_ERR__TRANSPORT)
			return e;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 10)
			return e;
		rd_kafka_poll(rk, 200); /* serves the metadata refresh meanwhile */
	}
}

int cli_topic_ends(flashsale_t *fs, const char *topic, int64_t **ends)
{
	rd_kafka_t *rk = flashsale_producer(fs);
	if (!rk) {
		cli_err("%s", flashsale_error(fs));
		return -1;
	}
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, 10000);
	rd_kafka_topic_destroy(t);
	if (e || md->topic_cnt != 1 || md->topics[0].err) {
		cli_err("topic %s: %s", topic, rd_kafka_err2str(e ? e : md->topics[0].err));
		if (md)
			rd_kafka_metadata_destroy(md);
		return -1;
	}
	int n = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	*ends = calloc((size_t)n, sizeof **ends);
	int64_t *lo = calloc((size_t)n, sizeof *lo), *hi = calloc((size_t)n, sizeof *hi);
	int rc = *ends && lo && hi ? n : -1;
	for (int p = 0; rc > 0 && p < n; p++) {
		e = partition_end(rk, topic, p, &lo[p], &hi[p]);
		if (e) {
			cli_err("topic %s partition %d: %s", topic, p, rd_kafka_err2str(e));
			rc = -1;
		}
	}
	/* Where the records end, not the offsets: a log may end with a transaction's marker. */
	char err[512];
	if (rc > 0 && fs_kafka_readable_ends(flashsale_config(fs), topic, 0, n, lo, hi, *ends,
					     30000, err, sizeof err) < 0) {
		cli_err("%s", err);
		rc = -1;
	}
	free(lo);
	free(hi);
	if (rc < 0) {
		free(*ends);
		*ends = NULL;
	}
	return rc;
}

rd_kafka_t *cli_topic_reader(flashsale_t *fs, const char *topic, int nparts, const char *group,
			     int64_t *lo)
{
	const struct fs_config *cfg = flashsale_config(fs);
	char err[512];
	static const char *const defaults[] = {"enable.auto.commit", "false", NULL, NULL};
	rd_kafka_conf_t *conf = fs_kafka_conf(cfg, RD_KAFKA_CONSUMER, defaults, err, sizeof err);
	if (!conf ||
	    rd_kafka_conf_set(conf, "group.id", group, err, sizeof err) != RD_KAFKA_CONF_OK) {
		if (conf)
			rd_kafka_conf_destroy(conf);
		cli_err("kafka config: %s", err);
		return NULL;
	}
	rd_kafka_t *rk = fs_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
	if (!rk) {
		cli_err("%s", err);
		return NULL;
	}
	rd_kafka_poll_set_consumer(rk);
	rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
	for (int i = 0; i < nparts; i++) {
		int64_t low = 0, hi;
		rd_kafka_query_watermark_offsets(rk, topic, i, &low, &hi, 10000);
		if (lo)
			lo[i] = low;
		rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
	}
	rd_kafka_assign(rk, l);
	rd_kafka_topic_partition_list_destroy(l);
	return rk;
}

/* Records still to decide: sum over partitions of log end - stored next offset. */
int64_t cli_undecided(flashsale_t *fs, const int64_t *ends, int n)
{
	PGconn *c = flashsale_pg(fs);
	if (!c)
		return -1;
	const struct fs_config *cfg = flashsale_config(fs);
	const char *p[] = {cfg->group, cfg->topic_intents};
	PGresult *r = PQexecParams(c,
				   "SELECT part, next_offset FROM partitions WHERE grp = $1 AND "
				   "topic = $2",
				   2, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		PQclear(r);
		return -1;
	}
	int64_t left = 0;
	for (int part = 0; part < n; part++) {
		int64_t next = 0;
		for (int i = 0; i < PQntuples(r); i++)
			if (atoi(PQgetvalue(r, i, 0)) == part)
				next = strtoll(PQgetvalue(r, i, 1), NULL, 10);
		if (next < 0)
			next = 0;
		if (ends[part] > next)
			left += ends[part] - next;
	}
	PQclear(r);
	return left;
}

static const char usage_wait[] =
	"usage: flashsale wait [--timeout SECONDS] [--quiet]\n"
	"\n"
	"Waits until the worker has decided every record published to the intents topic so far\n"
	"(the stored next offset of each partition reaches the end of its records: past the\n"
	"last record a consumer is given, as the log may end with a transaction's marker).\n"
	"Exit 1 on timeout.\n";

static int cmd_wait(flashsale_t *fs, int argc, char **argv)
{
	int64_t timeout_s = 300;
	bool quiet = false;
	const struct cli_opt spec[] = {
		{"timeout", CLI_TIMEOUT, &timeout_s, 1, 86400},
		{"quiet", CLI_FLAG, &quiet},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_wait, spec, 0, -1);
	if (rc >= 0)
		return rc;
	int64_t *ends = NULL;
	int n = cli_topic_ends(fs, flashsale_config(fs)->topic_intents, &ends);
	if (n < 0)
		return 1;
	int64_t total = 0;
	for (int i = 0; i < n; i++)
		total += ends[i];
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int64_t last_print = -1, left = -1;
	bool tty = isatty(STDERR_FILENO);
	for (;;) {
		left = cli_undecided(fs, ends, n);
		clock_gettime(CLOCK_MONOTONIC, &t);
		double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
		if (left == 0)
			break;
		if (el > (double)timeout_s)
			break;
		/* A live counter on a terminal, a line every 5 s in a log. */
		int64_t step = tty ? 1 : 5;
		if (!quiet && (int64_t)el / step != last_print) {
			last_print = (int64_t)el / step;
			fprintf(stderr, "%swaiting: %" PRId64 " of %" PRId64 " records decided%s",
				tty ? "\r" : "", total - (left < 0 ? total : left), total,
				tty ? "" : "\n");
		}
		usleep(WAIT_STEP_MS * 1000);
	}
	if (!quiet && tty && last_print >= 0)
		fputc('\n', stderr);
	free(ends);
	if (left != 0) {
		cli_err("wait: %" PRId64 " records still undecided after %" PRId64 " s", left,
			timeout_s);
		return 1;
	}
	if (!quiet)
		printf("all %" PRId64 " records decided\n", total);
	return 0;
}

/* ---- summary ----------------------------------------------------------------------------- */

static int64_t scalar(PGconn *c, const char *sql, int n, const char *const *p)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, p, NULL, NULL, 0);
	int64_t v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

static const char usage_summary[] =
	"usage: flashsale summary [--sku SKU] [--json]\n"
	"\n"
	"Counts from Postgres: units won (held + confirmed), buys by outcome, invalid records,\n"
	"repeated intents, and the remaining stock (of one SKU, or of all).\n";

static int cmd_summary(flashsale_t *fs, int argc, char **argv)
{
	const char *sku = NULL;
	bool json = false;
	const struct cli_opt spec[] = {
		{"sku", CLI_STR, &sku},
		{"json", CLI_FLAG, &json},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_summary, spec, 0, -1);
	if (rc >= 0)
		return rc;
	PGconn *pg = flashsale_pg(fs);
	if (!pg) {
		cli_err("summary: %s", flashsale_error(fs));
		return 1;
	}
	const char *p[] = {sku ? sku : ""};
	const char *any = "($1 = '' OR sku = $1)";
	char q[512];
#define COUNT(where)                                                                               \
	(snprintf(q, sizeof q, "SELECT count(*) FROM decisions WHERE kind = 1 AND %s AND %s", any, \
		  where),                                                                          \
	 scalar(pg, q, 1, p))
	int64_t held = COUNT("outcome = 'held'");
	int64_t sold_out = COUNT("outcome = 'sold_out'");
	int64_t rejected = COUNT("outcome NOT IN ('held', 'sold_out')");
#undef COUNT
	/* and the buys refused for their token (kind 11) whose id no decision took up since */
	snprintf(q, sizeof q,
		 "SELECT count(*) FROM decisions d WHERE kind = 11 AND %s AND NOT EXISTS (SELECT 1 "
		 "FROM decisions e WHERE e.intent_id = d.intent_id AND e.part = d.part AND e.kind "
		 "= 1)",
		 any);
	int64_t refused = scalar(pg, q, 1, p);
	rejected = rejected < 0 || refused < 0 ? -1 : rejected + refused;
	snprintf(q, sizeof q, "SELECT coalesce(sum(held + sold), 0) FROM skus WHERE %s", any);
	int64_t won = scalar(pg, q, 1, p);
	snprintf(q, sizeof q, "SELECT coalesce(sum(available), 0) FROM skus WHERE %s", any);
	int64_t remaining = scalar(pg, q, 1, p);
	int64_t invalid =
		scalar(pg, "SELECT coalesce(sum(off_end - off + 1), 0) FROM rejects", 0, NULL);
	const char *g[] = {flashsale_config(fs)->group, flashsale_config(fs)->topic_intents};
	int64_t dups = scalar(pg,
			      "SELECT coalesce(sum(n_repeats), 0) FROM partitions WHERE grp = $1 "
			      "AND topic = $2",
			      2, g);
	int64_t conflicts = scalar(pg,
				   "SELECT coalesce(sum(n_conflicts), 0) FROM partitions WHERE "
				   "grp = $1 AND topic = $2",
				   2, g);
	if (held < 0 || won < 0 || dups < 0) {
		cli_err("summary: postgres: %s", PQerrorMessage(pg));
		return 1;
	}
	/* rejected here: buys decided as anything but held or sold_out, plus invalid records. */
	if (json)
		printf("{\"sold\":%" PRId64 ",\"held_buys\":%" PRId64 ",\"sold_out\":%" PRId64
		       ",\"rejected\":%" PRId64 ",\"invalid\":%" PRId64 ",\"duplicates\":%" PRId64
		       ",\"conflicts\":%" PRId64 ",\"remaining\":%" PRId64 "}\n",
		       won, held, sold_out, rejected + invalid, invalid, dups, conflicts,
		       remaining);
	else
		printf("sold=%" PRId64 " held_buys=%" PRId64 " sold_out=%" PRId64
		       " rejected=%" PRId64 " invalid=%" PRId64 " duplicates=%" PRId64
		       " conflicts=%" PRId64 " remaining=%" PRId64 "\n",
		       won, held, sold_out, rejected + invalid, invalid, dups, conflicts,
		       remaining);
	return 0;
}

/* ---- topics ------------------------------------------------------------------------------ */

static const char usage_topics[] =
	"usage: flashsale topics create [--partitions N] [--replication N]\n"
	"\n"
	"Creates the intents topic (LogAppendTime, unlimited retention), the results topic\n"
	"(LogAppendTime, so that `flashsale timing` reads both on the broker's clock) and the\n"
	"compacted stock topic with the names of the configuration. Existing topics are left as\n"
	"they are.\n";

/* Deletes the three topics; a missing one is not an error. */
/* The handle for the admin calls and the configuration's three topics (intents, results,
 * stock); NULL, said on stderr, without a producer. */
static rd_kafka_t *topics_of(flashsale_t *fs, const char *names[3])
{
	rd_kafka_t *rk = flashsale_producer(fs);
	if (!rk) {
		cli_err("topics: %s", flashsale_error(fs));
		return NULL;
	}
	const struct fs_config *cfg = flashsale_config(fs);
	names[0] = cfg->topic_intents;
	names[1] = cfg->topic_results;
	names[2] = cfg->topic_stock;
	return rk;
}

static int topics_delete(rd_kafka_t *rk, const char *const names[3])
{
	rd_kafka_DeleteTopic_t *dt[3];
	for (int i = 0; i < 3; i++)
		dt[i] = rd_kafka_DeleteTopic_new(names[i]);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_DeleteTopics(rk, dt, 3, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	int rc = 0;
	if (!ev || rd_kafka_event_error(ev)) {
		cli_err("topics: %s", ev ? rd_kafka_event_error_string(ev) : "timed out");
		rc = 1;
	} else {
		size_t n;
		const rd_kafka_topic_result_t **res = rd_kafka_DeleteTopics_result_topics(
			rd_kafka_event_DeleteTopics_result(ev), &n);
		for (size_t i = 0; i < n; i++) {
			rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
			const char *name = rd_kafka_topic_result_name(res[i]);
			if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
				printf("topic %s absent\n", name);
			} else if (e) {
				cli_err("topics: %s: %s", name,
					rd_kafka_topic_result_error_string(res[i]));
				rc = 1;
			} else {
				printf("topic %s deleted\n", name);
			}
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	for (int i = 0; i < 3; i++)
		rd_kafka_DeleteTopic_destroy(dt[i]);
	return rc;
}

static int cmd_topics(flashsale_t *fs, int argc, char **argv)
{
	int64_t parts = 4, repl = 1;
	const struct cli_opt spec[] = {
		{"partitions", CLI_INT, &parts, 1, 1024},
		{"replication", CLI_INT, &repl, 1, 16},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_topics, spec, 1, 1);
	if (rc >= 0)
		return rc;
	const char *names[3];
	rd_kafka_t *rk = topics_of(fs, names);
	if (!rk)
		return 1;
	if (strcmp(argv[optind], "delete") == 0)
		return topics_delete(rk, names);
	if (strcmp(argv[optind], "create") != 0)
		return cli_usage(usage_topics);
	return cli_topics_create(fs, (int)parts, (int)repl, "LogAppendTime");
}

int cli_topics_create(flashsale_t *fs, int parts, int repl, const char *intents_time)
{
	const char *names[3];
	rd_kafka_t *rk = topics_of(fs, names);
	if (!rk)
		return 1;
	int rc;
	rd_kafka_NewTopic_t *nt[3];
	char err[512];
	for (int i = 0; i < 3; i++) {
		nt[i] = rd_kafka_NewTopic_new(names[i], parts, repl, err, sizeof err);
		if (!nt[i]) {
			cli_err("topics: %s: %s", names[i], err);
			return 1;
		}
	}
	rd_kafka_NewTopic_set_config(nt[0], "message.timestamp.type", intents_time);
	/* The results too: `flashsale timing` reads both on the broker's one clock. */
	rd_kafka_NewTopic_set_config(nt[1], "message.timestamp.type", "LogAppendTime");
	rd_kafka_NewTopic_set_config(nt[0], "retention.ms", "-1");
	rd_kafka_NewTopic_set_config(nt[0], "retention.bytes", "-1");
	rd_kafka_NewTopic_set_config(nt[2], "cleanup.policy", "compact");
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, nt, 3, NULL, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
	rc = 0;
	if (!ev || rd_kafka_event_error(ev)) {
		cli_err("topics: %s", ev ? rd_kafka_event_error_string(ev) : "timed out");
		rc = 1;
	} else {
		size_t n;
		const rd_kafka_topic_result_t **res = rd_kafka_CreateTopics_result_topics(
			rd_kafka_event_CreateTopics_result(ev), &n);
		for (size_t i = 0; i < n; i++) {
			rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
			const char *name = rd_kafka_topic_result_name(res[i]);
			if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
				printf("topic %s exists\n", name);
			else if (e) {
				cli_err("topics: %s: %s", name,
					rd_kafka_topic_result_error_string(res[i]));
				rc = 1;
			} else
				printf("topic %s created\n", name);
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	for (int i = 0; i < 3; i++)
		rd_kafka_NewTopic_destroy(nt[i]);
	return rc;
}

/* ---- publish ----------------------------------------------------------------------------- */

static const char usage_publish[] =
	"usage: flashsale publish --key KEY [--file FILE]\n"
	"\n"
	"Publishes one record, byte for byte, from FILE or standard input (at most 1 MiB) to the\n"
	"intents topic with the given key. For tests and operators: the worker judges whatever\n"
	"arrives, and answers a bad record with `rejected` and a reason.\n";

enum { PUBLISH_BYTES_MAX = 1 << 20 };

static int cmd_publish(flashsale_t *fs, int argc, char **argv)
{
	const char *key = NULL, *path = NULL;
	const struct cli_opt spec[] = {
		{"key", CLI_STR, &key},
		{"file", CLI_STR, &path},
		{NULL},
	};
	int rc = cli_parse(argc, argv, usage_publish, spec, 0, 0);
	if (rc >= 0)
		return rc;
	if (!key)
		return cli_usage(usage_publish);
	FILE *f = path ? fopen(path, "rb") : stdin;
	if (!f) {
		cli_err("publish: %s: %s", path, strerror(errno));
		return 1;
	}
	char *data = malloc(PUBLISH_BYTES_MAX + 1);
	size_t n = data ? fread(data, 1, PUBLISH_BYTES_MAX + 1, f) : 0;
	if (path)
		fclose(f);
	if (!data || n > PUBLISH_BYTES_MAX) {
		free(data);
		cli_err("publish: record larger than %d bytes", PUBLISH_BYTES_MAX);
		return 1;
	}
	rc = flashsale_publish_raw(fs, key, strlen(key), data, n);
	free(data);
	if (rc == 0)
		rc = flashsale_flush(fs, FLUSH_MS);
	if (rc < 0) {
		cli_err("publish: %s", flashsale_error(fs));
		return 1;
	}
	printf("published %zu bytes with key %s\n", n, key);
	return 0;
}

/* ---- main -------------------------------------------------------------------------------- */

static const struct {
	const char *name;
	int (*fn)(flashsale_t *, int, char **);
} commands[] = {
	{"sale", cmd_sale},	  {"buy", cmd_buy},	     {"result", cmd_result},
	{"stock", cmd_stock},	  {"wait", cmd_wait},	     {"summary", cmd_summary},
	{"topics", cmd_topics},	  {"load", cli_load},	     {"audit", cli_audit},
	{"publish", cmd_publish}, {"confirm", cmd_followup}, {"cancel", cmd_followup},
	{"replay", cli_replay},	  {"timing", cli_timing},    {"move", cli_move},
	{"top", cli_top},	  {"cart", cmd_cart},	     {"join", cmd_join},
	{"queue", cmd_queue},
};

const char *cli_config_file;
const char *cli_sets[64];
int cli_nsets;

/* The --set KEY=VALUE options, over the file and the environment; -1 after saying why. As the
 * worker and the gateway take them: a secret is refused (io/config.h). */
static int apply_sets(struct fs_config *cfg, const char **sets, int nsets)
{
	char err[FS_CONF_ERR_MAX];
	for (int k = 0; k < nsets; k++) {
		if (fs_config_set_kv(cfg, sets[k], err) < 0) {
			cli_err("%s", err);
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct fs_config cfg;
	fs_config_defaults(&cfg);
	fs_hash_key_random(); /* the replay's maps, as the worker's (core/map.h) */
	char err[FS_CONF_ERR_MAX];
	const char *config_file = NULL;
	const char **sets = cli_sets;
	int nsets = 0, i = 1;
	/* Global options come before the command. */
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			printf("%s", usage_main);
			return 0;
		}
		if (strcmp(a, "--help-config") == 0) {
			fs_config_describe(stdout);
			return 0;
		}
		bool has_arg = i + 1 < argc;
		if ((strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) && has_arg) {
			config_file = argv[++i];
		} else if ((strcmp(a, "-s") == 0 || strcmp(a, "--set") == 0) && has_arg &&
			   nsets < 64) {
			sets[nsets++] = argv[++i];
		} else {
			cli_err("unknown or incomplete option '%s' (see flashsale --help)", a);
			return 2;
		}
	}
	if (i >= argc) {
		fprintf(stderr, "%s", usage_main);
		return 2;
	}
	cli_config_file = config_file;
	cli_nsets = nsets;
	if (config_file && fs_config_load_file(&cfg, config_file, err) < 0) {
		cli_err("%s", err);
		return 2;
	}
	if (fs_config_apply_env(&cfg, err) < 0) {
		cli_err("%s", err);
		return 2;
	}
	if (apply_sets(&cfg, sets, nsets) < 0)
		return 2;
	for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
		if (strcmp(commands[k].name, argv[i]) != 0)
			continue;
		flashsale_t *fs = flashsale_new(&cfg, err, sizeof err);
		if (!fs) {
			cli_err("%s", err);
			return 1;
		}
		int rc = commands[k].fn(fs, argc - i, argv + i);
		flashsale_destroy(fs);
		return rc;
	}
	cli_err("unknown command '%s' (see flashsale --help)", argv[i]);
	return 2;
}
