/* config.h: the configuration of the worker and the CLI: one table of keys (name, type,
 * bounds, default, doc), read from a `key = value` file, then overridden by the environment
 * (FLASHSALE_KAFKA, FLASHSALE_PG, FLASHSALE_PG_GATEWAY) and by `--set key=value`. Keys under
 * `kafka.` pass through to librdkafka untouched. An invalid entry stops start-up with
 * `file:line: reason`.
 *
 * Secrets (issue 48): admin.token, Kafka's passwords and secret keys (kafka.sasl.password,
 * kafka.ssl.key.password, ...) and a pg conninfo carrying a password are refused on --set (a
 * command line is readable by every user of the machine) and in a config file that is not
 * private (io/secret.h); `admin.token.file` reads the admin token from a private file.
 * An admin token must be strong (fs_secret_weak). Errors never repeat a secret. */
#ifndef FS_CONFIG_H
#define FS_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum {
	FS_CONF_STR_MAX = 512,
	FS_CONF_PASSTHROUGH_MAX = 64,
	FS_CONF_ERR_MAX = 512,
};

struct fs_config {
	char brokers[FS_CONF_STR_MAX];
	char pg[FS_CONF_STR_MAX];
	char group[FS_CONF_STR_MAX];
	char topic_intents[FS_CONF_STR_MAX];
	char topic_results[FS_CONF_STR_MAX];
	char topic_stock[FS_CONF_STR_MAX];
	char log_level[16];
	char misrouted[16]; /* "forward" or "reject" */
	int64_t batch_max;
	int64_t batch_max_behind;
	int64_t batch_wait_ms;
	int64_t commit_overlap;
	int64_t poll_timeout_ms;
	int64_t record_max_bytes;
	int64_t stats_interval_ms;
	int64_t retry_backoff_max_ms;
	int64_t flush_timeout_ms;
	int64_t tick_interval_ms;
	int64_t dedupe_cache_max;
	char trace_batches[FS_CONF_STR_MAX];
	int64_t admission_tick_ms;
	char admission_keys[FS_CONF_STR_MAX];

	/* flashsale-gateway only (src/gateway/) */
	char metrics_listen[128];
	char listen[128];
	char admin_token[FS_CONF_STR_MAX];
	char admin_token_file[FS_CONF_STR_MAX];
	char gateway_pg[FS_CONF_STR_MAX];
	int64_t http_threads;
	int64_t http_connections_max;
	int64_t http_body_max;
	int64_t http_connection_memory;
	int64_t http_timeout_s;
	int64_t http_wait_max_ms;
	int64_t http_heartbeat_ms;
	int64_t http_request_deadline_s;
	int64_t http_client_waits_max;
	int64_t http_client_rate;
	int64_t http_client_burst;
	int64_t results_cache_max;
	int64_t skus_max;
	int64_t lookups_unknown_rate;
	int64_t publish_timeout_ms;
	/* Signed payments (issue 48, item 3): the payment key ring's file; the page Pay sends a
	 * buyer to (a demo's payment provider stub) */
	char payment_secret_file[FS_CONF_STR_MAX];
	char payment_checkout_url[256];
	/* buyers are proven (issue 48, item 2; src/gateway/auth.h) */
	char auth_mode[8]; /* "jwt" or "off" */
	char auth_jwt_keys[FS_CONF_STR_MAX];
	char auth_jwt_pubkeys[FS_CONF_STR_MAX];
	char auth_jwt_audience[256];
	int64_t auth_jwt_leeway_s;

	/* flashsale top only (src/cli/top.c) */
	char top_metrics[FS_CONF_STR_MAX];

	/* kafka.* keys, in file order, without the prefix */
	struct {
		char key[128];
		char value[FS_CONF_STR_MAX];
	} kafka[FS_CONF_PASSTHROUGH_MAX];
	int kafka_len;
};

/* Fills defaults. */
void fs_config_defaults(struct fs_config *c);
/* Reads a file; on error returns -EINVAL/-errno and writes "file:line: reason" to err. */
int fs_config_load_file(struct fs_config *c, const char *path, char err[FS_CONF_ERR_MAX]);
/* Applies FLASHSALE_KAFKA, FLASHSALE_PG and FLASHSALE_PG_GATEWAY when set; -EINVAL (and err) if one
 * is too long. */
int fs_config_apply_env(struct fs_config *c, char err[FS_CONF_ERR_MAX]);
/* Sets one key as the program itself hands it in (secrets allowed); source names where it
 * came from for errors. */
int fs_config_set(struct fs_config *c, const char *key, const char *value, const char *source,
		  char err[FS_CONF_ERR_MAX]);
/* Sets one key from --set's "KEY=VALUE": a secret is refused (see above). */
int fs_config_set_kv(struct fs_config *c, const char *kv, char err[FS_CONF_ERR_MAX]);
/* Prints every key with its type, bounds, default and doc (for --help and the docs). */
void fs_config_describe(FILE *out);
/* The same as a markdown table (docs/reference/configuration.md is generated from it). */
void fs_config_describe_markdown(FILE *out);

#endif
