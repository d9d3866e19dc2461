/* test_config.c: the configuration parser (src/io/config.c): defaults, the fixture files in
 * tests/data/config, the exact `file:line: reason` errors, --set and environment precedence. */
#include "check.h"
#include "core/core.h"
#include "io/config.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FS_TEST_DATA
#error "FS_TEST_DATA must name tests/data (set by tests/meson.build)"
#endif
#ifndef FS_SOURCE_ROOT
#error "FS_SOURCE_ROOT must name the source root (set by tests/meson.build)"
#endif

static const char *data(const char *name)
{
	static char path[4][1024];
	static int next;
	char *p = path[next++ % 4];
	snprintf(p, sizeof path[0], "%s/config/%s", FS_TEST_DATA, name);
	return p;
}

static void check_defaults(const struct fs_config *c)
{
	CHECK_STR(c->brokers, "127.0.0.1:59092");
	CHECK_STR(c->pg, "host=127.0.0.1 port=55432 dbname=flashsale user=flashsale");
	CHECK_STR(c->group, "flashsale-workers");
	CHECK_STR(c->topic_intents, "intents");
	CHECK_STR(c->topic_results, "results");
	CHECK_STR(c->topic_stock, "stock");
	CHECK_STR(c->log_level, "info");
	CHECK_INT(c->batch_max, 2000);
	CHECK_INT(c->batch_max_behind, 10000);
	CHECK_INT(c->batch_wait_ms, 1);
	CHECK_INT(c->poll_timeout_ms, 100);
	CHECK_INT(c->record_max_bytes, 4096);
	CHECK_INT(c->stats_interval_ms, 10000);
	CHECK_INT(c->retry_backoff_max_ms, 2000);
	CHECK_INT(c->flush_timeout_ms, 30000);
	CHECK_STR(c->listen, "127.0.0.1:58080");
	CHECK_STR(c->admin_token, "");
	CHECK_INT(c->http_threads, 1);
	CHECK_INT(c->http_connections_max, 16000);
	CHECK_INT(c->http_body_max, 4096);
	CHECK_INT(c->http_connection_memory, 8192);
	CHECK_INT(c->http_timeout_s, 30);
	CHECK_INT(c->http_wait_max_ms, 60000);
	CHECK_INT(c->http_heartbeat_ms, 15000);
	CHECK_INT(c->results_cache_max, 500000);
	CHECK_INT(c->publish_timeout_ms, 5000);
	CHECK_INT(c->kafka_len, 0);
}

static void test_defaults(void)
{
	struct fs_config c;
	memset(&c, 0x55, sizeof c);
	fs_config_defaults(&c);
	CHECK_CTX("%s", "defaults");
	check_defaults(&c);

	/* The shipped config file says "every value below is the default": keep it true. */
	char path[1024], err[FS_CONF_ERR_MAX] = "";
	snprintf(path, sizeof path, "%s/config/flashsale.conf", FS_SOURCE_ROOT);
	CHECK_CTX("%s", "config/flashsale.conf");
	fs_config_defaults(&c);
	if (CHECK_INT(fs_config_load_file(&c, path, err), 0))
		check_defaults(&c);
	else
		fprintf(stderr, "  %s\n", err);
	CHECK_CTX("%s", "");
}

static void test_good_file(void)
{
	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "";
	fs_config_defaults(&c);
	int rc = fs_config_load_file(&c, data("good.conf"), err);
	if (!CHECK_INT(rc, 0))
		fprintf(stderr, "  %s\n", err);
	CHECK_STR(c.brokers, "kafka-1:9092,kafka-2:9092");
	CHECK_STR(c.pg, "host=db port=5432 dbname=fs user=w options=a=b");
	CHECK_STR(c.group, "g1");
	CHECK_STR(c.topic_intents, "in");
	CHECK_STR(c.topic_results, "out");
	CHECK_STR(c.topic_stock, "st");
	CHECK_STR(c.log_level, "debug");
	CHECK_INT(c.batch_max, 10000);
	CHECK_INT(c.batch_wait_ms, 0);
	CHECK_INT(c.poll_timeout_ms, 1);
	CHECK_INT(c.record_max_bytes, 64);
	CHECK_INT(c.stats_interval_ms, 0);
	CHECK_INT(c.retry_backoff_max_ms, 60000);
	CHECK_INT(c.flush_timeout_ms, 100);
	/* kafka.* pass through without the prefix, in file order; a repeated key is replaced in
	 * place. */
	if (CHECK_INT(c.kafka_len, 3)) {
		CHECK_STR(c.kafka[0].key, "security.protocol");
		CHECK_STR(c.kafka[0].value, "ssl");
		CHECK_STR(c.kafka[1].key, "consumer.session.timeout.ms");
		CHECK_STR(c.kafka[1].value, "10000");
		CHECK_STR(c.kafka[2].key, "producer.linger.ms");
		CHECK_STR(c.kafka[2].value, "5");
	}

	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, data("no_trailing_newline.conf"), err), 0);
	CHECK_STR(c.brokers, "a:1");
}

static void test_bad_files(void)
{
	static const struct {
		const char *file;
		int line;
		const char *reason; /* NULL: only the "file:line: " prefix is pinned */
	} rows[] = {
		{"bad_unknown_key.conf", 4, "unknown key 'nope' (see --help-config)"},
		{"bad_not_integer.conf", 3, "batch.max: 'ten' is not an integer"},
		{"bad_out_of_range.conf", 6, "batch.max: 10001 is out of range [1, 10000]"},
		{"bad_missing_equals.conf", 2, "expected 'key = value'"},
		{"bad_log_level.conf", 2,
		 "log.level: 'loud' is not one of error, warn, info, debug"},
		{"bad_empty_key.conf", 2, "empty key"},
		{"bad_inline_comment.conf", 1,
		 "batch.max: '10 # an inline comment is part of the value' is not an integer"},
		{"bad_kafka_empty.conf", 1, NULL},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("config file %s", rows[i].file);
		struct fs_config c;
		char err[FS_CONF_ERR_MAX] = "", want[FS_CONF_ERR_MAX + 64];
		fs_config_defaults(&c);
		const char *path = data(rows[i].file);
		CHECK_INT(fs_config_load_file(&c, path, err), -EINVAL);
		if (rows[i].reason) {
			snprintf(want, sizeof want, "%s:%d: %s", path, rows[i].line,
				 rows[i].reason);
			CHECK_STR(err, want);
		} else {
			snprintf(want, sizeof want, "%s:%d: ", path, rows[i].line);
			CHECK(strncmp(err, want, strlen(want)) == 0);
		}
	}
	CHECK_CTX("%s", "");

	/* The file stops at the first error: lines before it applied, lines after it not. */
	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "";
	fs_config_defaults(&c);
	fs_config_load_file(&c, data("bad_unknown_key.conf"), err);
	CHECK_INT(c.batch_max, 10);

	/* A missing file. */
	fs_config_defaults(&c);
	const char *missing = data("does-not-exist.conf");
	CHECK_INT(fs_config_load_file(&c, missing, err), -ENOENT);
	char want[FS_CONF_ERR_MAX + 64];
	snprintf(want, sizeof want, "%s: %s", missing, strerror(ENOENT));
	CHECK_STR(err, want);
}

/* Files made at run time for the limits. */
static void test_generated_files(void)
{
	char path[] = "/tmp/fs-test-config-XXXXXX";
	int fd = mkstemp(path);
	if (!CHECK(fd >= 0))
		return;
	close(fd);
	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "", want[FS_CONF_ERR_MAX + 64];
	FILE *f;

	/* A 3000-character line. */
	CHECK_CTX("%s", "long line");
	f = fopen(path, "w");
	fprintf(f, "# ok\npg = ");
	for (int i = 0; i < 3000; i++)
		fputc('x', f);
	fputc('\n', f);
	fclose(f);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, path, err), -EINVAL);
	snprintf(want, sizeof want, "%s:2: line too long", path);
	CHECK_STR(err, want);

	/* A string value over the field's size; one of exactly the maximum. */
	CHECK_CTX("%s", "value too long");
	f = fopen(path, "w");
	fprintf(f, "group = ");
	for (int i = 0; i < FS_CONF_STR_MAX - 1; i++)
		fputc('g', f);
	fprintf(f, "\npg = ");
	for (int i = 0; i < FS_CONF_STR_MAX; i++)
		fputc('p', f);
	fputc('\n', f);
	fclose(f);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, path, err), -EINVAL);
	snprintf(want, sizeof want, "%s:2: pg: value too long (max %d bytes)", path,
		 FS_CONF_STR_MAX - 1);
	CHECK_STR(err, want);
	CHECK_INT(strlen(c.group), FS_CONF_STR_MAX - 1);
	CHECK_STR(c.pg, "host=127.0.0.1 port=55432 dbname=flashsale user=flashsale");

	/* 64 kafka.* keys fit, the 65th does not; repeating a present key still works. */
	CHECK_CTX("%s", "kafka.* limit");
	f = fopen(path, "w");
	for (int i = 0; i < FS_CONF_PASSTHROUGH_MAX; i++)
		fprintf(f, "kafka.k%d = v%d\n", i, i);
	fprintf(f, "kafka.k0 = again\n");
	fclose(f);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, path, err), 0);
	CHECK_INT(c.kafka_len, FS_CONF_PASSTHROUGH_MAX);
	CHECK_STR(c.kafka[0].value, "again");
	CHECK_STR(c.kafka[63].key, "k63");
	f = fopen(path, "a");
	fprintf(f, "kafka.k64 = v\n");
	fclose(f);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, path, err), -EINVAL);
	snprintf(want, sizeof want, "%s:66: too many kafka.* keys (max %d)", path,
		 FS_CONF_PASSTHROUGH_MAX);
	CHECK_STR(err, want);
	CHECK_INT(c.kafka_len, FS_CONF_PASSTHROUGH_MAX);

	/* An empty file and a file of comments only: defaults. */
	CHECK_CTX("%s", "empty file");
	f = fopen(path, "w");
	fclose(f);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, path, err), 0);
	check_defaults(&c);
	f = fopen(path, "w");
	fprintf(f, "#\n# x = y\n\n  \t\n");
	fclose(f);
	CHECK_INT(fs_config_load_file(&c, path, err), 0);
	check_defaults(&c);
	CHECK_CTX("%s", "");
	unlink(path);
}

static void test_set(void)
{
	static const struct {
		const char *key, *value;
		const char *err; /* NULL: accepted */
	} rows[] = {
		{"batch.max", "1", NULL},
		{"batch.max", "10000", NULL},
		{"batch.max", "0", "--set: batch.max: 0 is out of range [1, 10000]"},
		{"batch.max", "-1", "--set: batch.max: -1 is out of range [1, 10000]"},
		{"batch.max", "", "--set: batch.max: '' is not an integer"},
		{"batch.max", "0x10", "--set: batch.max: '0x10' is not an integer"},
		{"batch.max", "1.5", "--set: batch.max: '1.5' is not an integer"},
		{"batch.max", "99999999999999999999",
		 "--set: batch.max: '99999999999999999999' is not an integer"},
		{"record.max.bytes", "63",
		 "--set: record.max.bytes: 63 is out of range [64, 65536]"},
		{"record.max.bytes", "65537",
		 "--set: record.max.bytes: 65537 is out of range [64, 65536]"},
		{"record.max.bytes", "65536", NULL},
		{"batch.wait.ms", "1001", "--set: batch.wait.ms: 1001 is out of range [0, 1000]"},
		{"stats.interval.ms", "0", NULL},
		{"flush.timeout.ms", "99",
		 "--set: flush.timeout.ms: 99 is out of range [100, 600000]"},
		{"retry.backoff.max.ms", "9",
		 "--set: retry.backoff.max.ms: 9 is out of range [10, 60000]"},
		{"poll.timeout.ms", "0", "--set: poll.timeout.ms: 0 is out of range [1, 1000]"},
		{"log.level", "error", NULL},
		{"log.level", "warn", NULL},
		{"log.level", "debug", NULL},
		{"log.level", "info", NULL},
		{"log.level", "INFO",
		 "--set: log.level: 'INFO' is not one of error, warn, info, debug"},
		{"log.level", "", "--set: log.level: '' is not one of error, warn, info, debug"},
		{"nope", "1", "--set: unknown key 'nope' (see --help-config)"},
		{"batch_max", "1", "--set: unknown key 'batch_max' (see --help-config)"},
		{"topic_intents", "x", "--set: unknown key 'topic_intents' (see --help-config)"},
		{"", "1", "--set: unknown key '' (see --help-config)"},
		{"kafka.", "x", "--set: kafka.: key or value too long"},
		{"kafka.acks", "all", NULL},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		CHECK_CTX("--set %s=%s", rows[i].key, rows[i].value);
		struct fs_config c;
		char err[FS_CONF_ERR_MAX] = "";
		fs_config_defaults(&c);
		int rc = fs_config_set(&c, rows[i].key, rows[i].value, "--set", err);
		if (rows[i].err) {
			CHECK_INT(rc, -EINVAL);
			CHECK_STR(err, rows[i].err);
		} else {
			CHECK_INT(rc, 0);
		}
	}
	CHECK_CTX("%s", "");

	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "";
	fs_config_defaults(&c);
	CHECK_INT(fs_config_set(&c, "batch.max", "123", "--set", err), 0);
	CHECK_INT(c.batch_max, 123);
	CHECK_INT(fs_config_set(&c, "topic.results", "r2", "--set", err), 0);
	CHECK_STR(c.topic_results, "r2");
	CHECK_INT(fs_config_set(&c, "kafka.acks", "all", "--set", err), 0);
	CHECK_INT(fs_config_set(&c, "kafka.acks", "1", "--set", err), 0);
	CHECK_INT(c.kafka_len, 1);
	CHECK_STR(c.kafka[0].value, "1");
	/* A rejected integer leaves the previous value. */
	CHECK_INT(fs_config_set(&c, "batch.max", "0", "--set", err), -EINVAL);
	CHECK_INT(c.batch_max, 123);
}

/* Writes text to path with mode (the umask aside). */
static void write_mode(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	if (!CHECK(f != NULL))
		return;
	fputs(text, f);
	fclose(f);
	CHECK_INT(chmod(path, mode), 0);
}

/* Secrets (issue 48, item 6): never from a command line, only from private files, strong. */
static void test_secrets(void)
{
	static const char *const hex = "0123456789abcdef0123456789abcdef";
	char dir[] = "/tmp/fs-test-secret-XXXXXX", tok[1100], conf[1100], link[1100];
	if (!CHECK(mkdtemp(dir) != NULL))
		return;
	snprintf(tok, sizeof tok, "%s/token", dir);
	snprintf(conf, sizeof conf, "%s/flashsale.conf", dir);
	snprintf(link, sizeof link, "%s/link", dir);
	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "", want[FS_CONF_ERR_MAX + 2400], kv[1200];

	/* --set: every secret refused, whatever its strength; a plain key still set. */
	static const char *const refused[] = {"admin.token=0123456789abcdef0123456789abcdef",
					      "kafka.sasl.password=x",
					      "kafka.consumer.ssl.key.password=x",
					      "kafka.producer.sasl.oauthbearer.client.secret=x",
					      "pg=host=db password=x",
					      "gateway.pg=postgresql://u:pw@db/fs",
					      "pg=postgres://db/fs?password=x"};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		CHECK_CTX("--set %s", refused[i]);
		fs_config_defaults(&c);
		CHECK_INT(fs_config_set_kv(&c, refused[i], err), -EINVAL);
		CHECK(strstr(err, "is a secret, and a command line is readable") != NULL);
		CHECK(strstr(err, "=x") == NULL && strstr(err, hex) == NULL);
	}
	CHECK_CTX("%s", "--set");
	fs_config_defaults(&c);
	err[0] = '\0';
	CHECK_INT(fs_config_set_kv(&c, "pg=host=db passfile=/p user=password", err), 0);
	CHECK_INT(fs_config_set_kv(&c, "gateway.pg=postgresql://u@db/fs", err), 0);
	CHECK_INT(fs_config_set_kv(&c, "pg=host=db options='-c password=x'", err), 0);
	CHECK_INT(fs_config_set_kv(&c, "admin.token=", err), 0);
	CHECK_STR(err, "");
	CHECK_INT(fs_config_set_kv(&c, "admin.token=s3cret", err), -EINVAL);
	CHECK_STR(err, "--set: admin.token is a secret, and a command line is readable by every "
		       "user of the machine (/proc/PID/cmdline): put it in a file of mode 0600 "
		       "named by admin.token.file");

	/* admin.token.file: private and strong, or refused saying why (never the token). */
	CHECK_CTX("%s", "admin.token.file");
	snprintf(kv, sizeof kv, "admin.token.file=%s", tok);
	write_mode(tok, "0123456789abcdef0123456789abcdef\n", 0644);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
	snprintf(want, sizeof want,
		 "--set: admin.token.file %s: readable or writable by group or others (mode "
		 "644): chmod 600 it",
		 tok);
	CHECK_STR(err, want);
	CHECK_STR(c.admin_token, "");
	CHECK_INT(chmod(tok, 0640), 0);
	CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
	CHECK_INT(chmod(tok, 0600), 0);
	CHECK_INT(fs_config_set_kv(&c, kv, err), 0);
	CHECK_STR(c.admin_token, hex);
	CHECK_STR(c.admin_token_file, tok);
	CHECK_INT(chmod(tok, 0400), 0);
	CHECK_INT(fs_config_set_kv(&c, kv, err), 0);
	static const struct {
		const char *text, *why;
	} weak[] = {
		{"s3cret\n", "too weak: shorter than 32 characters"},
		{"0123456789abcdef0123456789abcde\n", "too weak: shorter than 32 characters"},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", "too weak: fewer than 8 different"},
		{"0123456789abcdef 0123456789abcdef\n", "too weak: only printable ASCII"},
		{"\n", "empty"},
		{"0123456789abcdef0123456789abcdef\nsecond\n", "more than one line"},
	};
	for (size_t i = 0; i < sizeof weak / sizeof weak[0]; i++) {
		CHECK_CTX("admin.token.file: %s", weak[i].why);
		write_mode(tok, weak[i].text, 0600);
		fs_config_defaults(&c);
		CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
		CHECK(strstr(err, weak[i].why) != NULL);
		CHECK(strstr(err, "s3cret") == NULL && strstr(err, "aaaaaaaa") == NULL);
		CHECK_STR(c.admin_token, "");
	}
	CHECK_CTX("%s", "admin.token.file: a symbolic link, another user's file");
	write_mode(tok, "0123456789abcdef0123456789abcdef\n", 0600);
	CHECK_INT(symlink(tok, link), 0);
	snprintf(kv, sizeof kv, "admin.token.file=%s", link);
	CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
	CHECK(strstr(err, "a symbolic link") != NULL);
	if (geteuid() == 0) {
		CHECK_INT(chown(tok, 1, (gid_t)-1), 0);
		snprintf(kv, sizeof kv, "admin.token.file=%s", tok);
		CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
		CHECK(strstr(err, "owned by uid 1, not by this process's user") != NULL);
		CHECK_INT(chown(tok, 0, (gid_t)-1), 0);
	}

	/* In a config file: only a private one may hold a secret. */
	CHECK_CTX("%s", "admin.token in a config file");
	snprintf(kv, sizeof kv, "group = g\nadmin.token = %s\n", hex);
	write_mode(conf, kv, 0644);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, conf, err), -EINVAL);
	snprintf(want, sizeof want,
		 "%s:2: admin.token is a secret, and the config file %s: readable or writable by "
		 "group or others (mode 644): chmod 600 it; or put it in a file of mode 0600 named "
		 "by admin.token.file",
		 conf, conf);
	CHECK_STR(err, want);
	CHECK_INT(chmod(conf, 0600), 0);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, conf, err), 0);
	CHECK_STR(c.admin_token, hex);
	write_mode(conf, "admin.token = s3cret\n", 0600);
	CHECK_INT(fs_config_load_file(&c, conf, err), -EINVAL);
	snprintf(want, sizeof want,
		 "%s:1: admin.token: too weak: shorter than 32 characters (128 bits as 32 hex "
		 "digits: openssl rand -hex 16)",
		 conf);
	CHECK_STR(err, want);
	write_mode(conf, "pg = host=db password=x\n", 0644);
	CHECK_INT(fs_config_load_file(&c, conf, err), -EINVAL);
	CHECK(strstr(err, ":1: pg is a secret") != NULL);

	/* Kafka's password in a private config file: passed through as it is. */
	CHECK_CTX("%s", "kafka.sasl.password in a config file");
	write_mode(conf, "kafka.sasl.password = pass word\n", 0600);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, conf, err), 0);
	if (CHECK_INT(c.kafka_len, 1)) {
		CHECK_STR(c.kafka[0].key, "sasl.password");
		CHECK_STR(c.kafka[0].value, "pass word");
	}
	CHECK_INT(chmod(conf, 0604), 0);
	CHECK_INT(fs_config_load_file(&c, conf, err), -EINVAL);
	CHECK(strstr(err, "kafka.sasl.password is a secret") != NULL);
	CHECK(strstr(err, "pass word") == NULL);
	/* kafka.ssl.key.location: librdkafka reads the key, held to the same rule. */
	CHECK_CTX("%s", "kafka.ssl.key.location");
	write_mode(tok, "-----BEGIN PRIVATE KEY-----\n", 0604);
	snprintf(kv, sizeof kv, "kafka.ssl.key.location=%s", tok);
	CHECK_INT(fs_config_set_kv(&c, kv, err), -EINVAL);
	CHECK(strstr(err, "mode 604") != NULL);
	CHECK_INT(chmod(tok, 0600), 0);
	CHECK_INT(fs_config_set_kv(&c, kv, err), 0);
	CHECK_CTX("%s", "");
	unlink(link);
	unlink(tok);
	unlink(conf);
	rmdir(dir);
}

/* defaults < file < environment < --set, applied in that order as the programs do. */
static void test_precedence(void)
{
	struct fs_config c;
	char err[FS_CONF_ERR_MAX] = "";

	unsetenv("FLASHSALE_KAFKA");
	unsetenv("FLASHSALE_PG");
	fs_config_defaults(&c);
	CHECK_INT(fs_config_apply_env(&c, err), 0);
	CHECK_STR(c.brokers, "127.0.0.1:59092");

	setenv("FLASHSALE_KAFKA", "env-kafka:1", 1);
	setenv("FLASHSALE_PG", "dbname=from-env", 1);
	fs_config_defaults(&c);
	CHECK_INT(fs_config_apply_env(&c, err), 0);
	CHECK_STR(c.brokers, "env-kafka:1");
	CHECK_STR(c.pg, "dbname=from-env");

	/* The environment beats the file, --set beats both. */
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, data("good.conf"), err), 0);
	CHECK_STR(c.brokers, "kafka-1:9092,kafka-2:9092");
	CHECK_INT(fs_config_apply_env(&c, err), 0);
	CHECK_STR(c.brokers, "env-kafka:1");
	CHECK_STR(c.pg, "dbname=from-env");
	CHECK_STR(c.group, "g1"); /* untouched by the environment */
	CHECK_INT(fs_config_set(&c, "brokers", "set-kafka:2", "--set", err), 0);
	CHECK_STR(c.brokers, "set-kafka:2");
	CHECK_STR(c.pg, "dbname=from-env");
	CHECK_INT(fs_config_set(&c, "pg", "dbname=from-set", "--set", err), 0);
	CHECK_STR(c.pg, "dbname=from-set");

	/* Only the variable that is set applies; an empty one is ignored. */
	setenv("FLASHSALE_KAFKA", "", 1);
	unsetenv("FLASHSALE_PG");
	fs_config_defaults(&c);
	CHECK_INT(fs_config_load_file(&c, data("good.conf"), err), 0);
	CHECK_INT(fs_config_apply_env(&c, err), 0);
	CHECK_STR(c.brokers, "kafka-1:9092,kafka-2:9092");
	CHECK_STR(c.pg, "host=db port=5432 dbname=fs user=w options=a=b");
	setenv("FLASHSALE_PG", "dbname=only-pg", 1);
	CHECK_INT(fs_config_apply_env(&c, err), 0);
	CHECK_STR(c.brokers, "kafka-1:9092,kafka-2:9092");
	CHECK_STR(c.pg, "dbname=only-pg");
	unsetenv("FLASHSALE_KAFKA");
	unsetenv("FLASHSALE_PG");
}

static void test_describe(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!CHECK(f != NULL))
		return;
	fs_config_describe(f);
	fclose(f);
	static const char *const names[] = {
		"brokers",
		"pg",
		"group",
		"topic.intents",
		"topic.results",
		"topic.stock",
		"log.level",
		"batch.max",
		"batch.wait.ms",
		"poll.timeout.ms",
		"record.max.bytes",
		"stats.interval.ms",
		"retry.backoff.max.ms",
		"flush.timeout.ms",
		"kafka.*",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		CHECK_CTX("describe lists %s", names[i]);
		char pat[64];
		snprintf(pat, sizeof pat, "  %s ", names[i]);
		CHECK(text && strstr(text, pat) != NULL);
	}
	CHECK_CTX("%s", "");
	CHECK(text && strstr(text, "integer 1..10000, default 2000") != NULL);
	free(text);
}

/* docs/reference/configuration.md: a header, then the key table (config.c's). */
static void config_reference(FILE *out)
{
	fprintf(out, "# Configuration\n\n"
		     "Every key of `flashsale.conf` (config/flashsale.conf lists them with their "
		     "defaults), also\nsettable with `--set KEY=VALUE` on `flashsale-worker` and "
		     "`flashsale`; `flashsale-worker\n--help-config` prints the same. Generated "
		     "from the key table in src/io/config.c by\n"
		     "`build/tests/test_config --print-config-reference > "
		     "docs/reference/configuration.md`;\n`meson test --suite unit` fails when the "
		     "two differ. Do not edit by hand.\n\n");
	fs_config_describe_markdown(out);
	fprintf(out,
		"\n## Secrets (issue 48)\n\n"
		"A secret is never given on a command line: every user of the machine can read a "
		"process's\narguments (`ps`, /proc/PID/cmdline). So `--set` refuses `admin.token`, "
		"Kafka's secret\nproperties (`kafka.sasl.password`, `kafka.ssl.key.password`, "
		"`kafka.ssl.keystore.password`,\n`kafka.sasl.oauthbearer.client.secret`, "
		"`kafka.ssl.key.pem`, also under `kafka.consumer.` and\n`kafka.producer.`) and a "
		"`pg` or `gateway.pg` connection string that carries a password; a config\nfile "
		"may "
		"hold them only if it is private. Private means: a regular file (not a symbolic "
		"link),\nowned by the user the process runs as (its effective uid: another user, "
		"even root, could\nreplace it), that group and others may not read, write or run "
		"(mode 0600 or 0400).\n\n"
		"- `admin.token.file = PATH` reads the admin token from the private file PATH (its "
		"one line); the\n  path itself may be given with `--set`. Kafka's password: "
		"`kafka.sasl.password.file` (issue 48,\n  item 4), or `kafka.sasl.password` in a "
		"private config file.\n"
		"- A Postgres password goes in libpq's password file (`passfile=` in the "
		"connection "
		"string, or\n  ~/.pgpass; libpq itself ignores one that group or others can "
		"read).\n"
		"- `kafka.ssl.key.location` (a private key librdkafka reads) must name a private "
		"file too.\n"
		"- `payment.secret.file` (the payment provider's key ring) and `admission.keys` "
		"must name private\n  files too: the gateway and the worker do not start "
		"otherwise.\n"
		"- The admin token must be at least 32 characters, printable ASCII without spaces, "
		"at "
		"least 8 of\n  them different: 32 hex digits are 128 bits (`openssl rand -hex 16 "
		">FILE`). A room's draw seed\n  (`flashsale sale open --draw-seed`) has the same "
		"rule.\n"
		"- No secret is logged or exported as a metric; errors name the file and the rule, "
		"never the\n  value.\n");
	fprintf(out,
		"\n## Bounds that are not settings\n\n"
		"Protocol constants: every worker and every replay must decide alike, so these are "
		"compiled in,\nnot configured.\n\n"
		"| bound | value | what it bounds |\n|---|---|---|\n"
		"| `FS_CART_LINES_MAX` (src/core/record.h) | %d | the lines of a cart (issue 31): "
		"more is rejected `too_many_lines` |\n"
		"| `FS_SKUS_PER_PARTITION_MAX` (src/core/core.h) | %d | the SKUs one partition "
		"holds: an `open` of one more is rejected `too_many_skus` |\n",
		FS_CART_LINES_MAX, FS_SKUS_PER_PARTITION_MAX);
}

/* The reference page says what the key table says. */
static void test_reference_page(void)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/docs/reference/configuration.md", FS_SOURCE_ROOT);
	CHECK_CTX("%s", path);
	char *want = NULL, have[65536];
	size_t want_len = 0;
	FILE *g = open_memstream(&want, &want_len);
	if (!CHECK(g != NULL))
		return;
	config_reference(g);
	fclose(g);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(have, 1, sizeof have - 1, f) : 0;
	if (f)
		fclose(f);
	have[n] = '\0';
	if (!CHECK(f != NULL && strcmp(have, want) == 0))
		fprintf(stderr, "  regenerate it: build/tests/test_config --print-config-reference "
				"> docs/reference/configuration.md\n");
	free(want);
	CHECK_CTX("%s", "");
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--print-config-reference") == 0) {
		config_reference(stdout);
		return 0;
	}
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_config");
	}
	test_defaults();
	test_reference_page();
	test_good_file();
	test_bad_files();
	test_generated_files();
	test_set();
	test_precedence();
	test_secrets();
	test_describe();
	return check_done("test_config");
}
