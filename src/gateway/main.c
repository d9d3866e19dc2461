/* main.c: flashsale-gateway, the web tier's HTTP front door: its options, start-up and
 * shutdown (see gateway.h; the API is docs/reference/http.md). */
#include "gateway/gateway.h"

#include "io/entropy.h"
#include "io/keyring.h"
#include "io/log.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *out)
{
	fprintf(out,
		"usage: flashsale-gateway [-c FILE] [--set KEY=VALUE]... [--help] [--help-config]\n"
		"\n"
		"The HTTP front door of flashsale: buyers' requests become records on the intents\n"
		"topic (answered 202 once on the log), and results come back from one consumer of\n"
		"the results and stock topics per process, to long-polls and event streams. A buy\n"
		"for a SKU the stock topic says is sold out or closed is answered at the edge.\n"
		"API: docs/reference/http.md. The sale page, for buyers' browsers: GET /sale/SKU.\n"
		"\n"
		"  -c, --config FILE   configuration file (key = value; see "
		"config/flashsale.conf)\n"
		"  -s, --set K=V       set one configuration key (after the file)\n"
		"      --help-config   list every configuration key (the gateway's say "
		"(gateway))\n"
		"  -h, --help          this text\n"
		"\n"
		"Environment: FLASHSALE_KAFKA (bootstrap servers) and FLASHSALE_PG (libpq "
		"conninfo)\n"
		"override the file. Listens on `listen` (default 127.0.0.1:58080).\n"
		"SIGTERM or SIGINT: stop accepting, deliver what was accepted, answer who waits, "
		"exit 0.\n");
}

static int parse_args(struct fs_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{"help-config", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0},
	};
	char err[FS_CONF_ERR_MAX];
	const char *sets[64];
	int nsets = 0, c;
	while ((c = getopt_long(argc, argv, "c:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (fs_config_load_file(cfg, optarg, err) < 0) {
				fprintf(stderr, "flashsale-gateway: %s\n", err);
				return 2;
			}
			break;
		case 's':
			if (nsets == 64) {
				fprintf(stderr, "flashsale-gateway: too many --set options\n");
				return 2;
			}
			sets[nsets++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'H':
			fs_config_describe(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flashsale-gateway: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (fs_config_apply_env(cfg, err) < 0) {
		fprintf(stderr, "flashsale-gateway: %s\n", err);
		return 2;
	}
	for (int i = 0; i < nsets; i++)
		if (fs_config_set_kv(cfg, sets[i], err) < 0) {
			fprintf(stderr, "flashsale-gateway: %s\n", err);
			return 2;
		}
	return -1;
}

/* Enough descriptors for the connections served and the reserve answered 503. */
static void raise_fd_limit(const struct fs_config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	rlim_t want = (rlim_t)cfg->http_connections_max + 256;
	if (rl.rlim_cur >= want)
		return;
	rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
		fs_warn("open files limited to %ju: fewer than http.connections.max + 256",
			(uintmax_t)rl.rlim_cur);
}

/* The payment provider's key ring (payment.secret.file, issue 48 item 3), and the sale page's
 * Pay (payment.checkout.url). Without a key ring the gateway starts, and refuses every confirm
 * (payments_disabled): a confirm is accepted only signed, and nothing can be signed. 0, or 2
 * (a refused file: the gateway does not start). */
static int payment_start(struct gw *g)
{
	char err[FS_CONF_STR_MAX + 256];
	if (g->cfg.payment_checkout_url[0] &&
	    gw_page_checkout(g, g->cfg.payment_checkout_url) < 0) {
		fs_error("payment.checkout.url: the sale page has no place for it");
		return 2;
	}
	if (!g->cfg.payment_secret_file[0]) {
		fs_warn("payment.secret.file is not set: payments are off, every confirm is "
			"refused (403 payments_disabled)");
		return 0;
	}
	int rc = fs_keyring_load_named("payment.secret.file", g->cfg.payment_secret_file,
				       &g->pay_keys, err, sizeof err);
	if (rc < 0) {
		fs_keyring_wipe(&g->pay_keys);
		fs_error("%s", err);
		return 2;
	}
	g->has_pay_keys = true;
	fs_info("payment.secret.file: %" PRIu32 " key(s): a confirm needs the provider's "
		"signature",
		g->pay_keys.n);
	return 0;
}

int main(int argc, char **argv)
{
	static struct gw g;
	fs_config_defaults(&g.cfg);
	fs_log_set_prefix("flashsale-gateway");
	int status = parse_args(&g.cfg, argc, argv);
	if (status >= 0)
		return status;
	fs_log_set_level(g.cfg.log_level);
	if (fs_hash_key_random() < 0)
		fs_warn("no randomness for the maps' hash key: crafted keys could collide");
	raise_fd_limit(&g.cfg);

	/* The signals are taken by sigwait below: every thread started from here blocks them. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	pthread_mutex_init(&g.lock, NULL);
	gw_waiter_init(&g.polls);
	gw_waiter_init(&g.streams);
	gw_waiter_init(&g.sku_pending);
	/* One second's worth in the bucket: a burst of honest reads after a restart passes. */
	gw_bucket_init(&g.unknown, (double)g.cfg.lookups_unknown_rate,
		       (double)g.cfg.lookups_unknown_rate, gw_now_ms());
	if (gw_cache_init(&g.cache, (size_t)g.cfg.results_cache_max, (size_t)g.cfg.skus_max) < 0) {
		fs_error("out of memory");
		return 1;
	}
	if (gw_edge_init(&g) < 0) {
		fs_error("out of memory");
		return 1;
	}
	if (!g.per_client && strncmp(g.cfg.listen, "127.", 4) != 0 &&
	    strncmp(g.cfg.listen, "[::1]", 5) != 0)
		fs_warn("listen %s is not loopback and http.client.rate and http.client.waits.max "
			"are 0: no per-client bound here (set them, or put a proxy that bounds "
			"clients in front)",
			g.cfg.listen);
	char err[512];
	if (g.cfg.admission_keys[0]) {
		if (fs_keyring_load(g.cfg.admission_keys, &g.keys, err, sizeof err) < 0) {
			fs_error("%s", err);
			return 2;
		}
		g.has_keys = true;
		fs_info("admission.keys: %" PRIu32 " key(s): tokens checked at the edge", g.keys.n);
	}
	if (payment_start(&g) != 0)
		return 2;
	if (gw_auth_start(&g, err, sizeof err) < 0) {
		fs_error("%s", err);
		return 2;
	}
	int rc = gw_kafka_start(&g, err, sizeof err);
	if (rc == -EINVAL) {
		fprintf(stderr, "flashsale-gateway: %s\n", err);
		return 2;
	}
	if (rc == 0)
		rc = gw_lookup_start(&g);
	if (rc == 0)
		rc = pthread_create(&g.timer_thread, NULL, gw_timer_main, &g) == 0 ? 0 : -EIO;
	if (rc == 0) {
		rc = gw_metrics_start(&g, err, sizeof err);
		if (rc < 0)
			fs_error("%s", err);
	}
	if (rc == 0) {
		rc = gw_http_start(&g, err, sizeof err);
		if (rc < 0)
			fs_error("%s", err);
	}
	if (rc == 0) {
		fs_info("listening on %s (port %d): brokers %s, topics %s -> %s, %s", g.cfg.listen,
			g.port, g.cfg.brokers, g.cfg.topic_intents, g.cfg.topic_results,
			g.cfg.topic_stock);
		int sig = 0;
		sigwait(&sigs, &sig);
		fs_info("signal %d: stopping", sig);
	}
	atomic_store(&g.stopping, true);
	if (g.daemon)
		MHD_quiesce_daemon(g.daemon);
	gw_kafka_stop(&g);
	gw_lookup_stop(&g);
	if (g.timer_thread)
		pthread_join(g.timer_thread, NULL);
	gw_http_stop(&g);
	gw_metrics_stop(&g);
	fs_info("exit: requests %lld, published %lld (failed %lld), answered at the edge %lld, "
		"results %lld, stock records %lld, lookups %lld, overloaded %lld",
		(long long)g.stats.requests, (long long)g.stats.published,
		(long long)g.stats.publish_failed, (long long)g.stats.edge_answers,
		(long long)g.stats.results, (long long)g.stats.stock_records,
		(long long)g.stats.lookups, (long long)g.stats.overloaded);
	gw_cache_free(&g.cache);
	gw_edge_free(&g);
	fs_keyring_wipe(&g.keys);
	fs_keyring_wipe(&g.pay_keys);
	free(g.page);
	gw_jwt_keys_free(&g.jwt);
	return rc == 0 && !gw_kafka_auth_failed() ? 0 : 1;
}
