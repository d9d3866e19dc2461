/* test_kafka_secret.c: kafka.sasl.password.file (src/io/kafka.c): the password is read from a
 * private file (io/secret.h's rule) and handed to librdkafka as sasl.password, for consumers
 * and producers, or one side only with the kafka.consumer./kafka.producer. prefixes; a file
 * others may read, a link, an empty or a two-line file fails the handle's configuration,
 * naming the key and the file. */
#include "check.h"
#include "io/config.h"
#include "io/kafka.h"

#include <sys/stat.h>

static char dir[] = "/tmp/test_kafka_secret.XXXXXX";

/* Writes a file under dir with the text and mode; returns its path (static storage). */
static const char *put(const char *name, const char *text, mode_t mode)
{
	static char path[4][512];
	static int next;
	char *p = path[next++ % 4];
	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
	chmod(p, mode);
	return p;
}

/* The configuration with one key set; a consumer's (or producer's) librdkafka configuration,
 * or NULL with err. */
static rd_kafka_conf_t *conf_with(const char *key, const char *path, rd_kafka_type_t type,
				  char err[512])
{
	struct fs_config c;
	fs_config_defaults(&c);
	CHECK(fs_config_set(&c, key, path, "test", err) == 0);
	return fs_kafka_conf(&c, type, NULL, err, 512);
}

static void test_ok(void)
{
	char err[512], v[128];
	size_t n = sizeof v;
	CHECK_CTX("a 0600 file: the password, its line's end dropped");
	rd_kafka_conf_t *k = conf_with("kafka.sasl.password.file", put("ok", "from-file\r\n", 0600),
				       RD_KAFKA_CONSUMER, err);
	CHECK(k != NULL);
	if (k) {
		CHECK(rd_kafka_conf_get(k, "sasl.password", v, &n) == RD_KAFKA_CONF_OK);
		CHECK_STR(v, "from-file");
		rd_kafka_conf_destroy(k);
	}
	CHECK_CTX("0400 is private too");
	k = conf_with("kafka.sasl.password.file", put("ro", "pw\n", 0400), RD_KAFKA_PRODUCER, err);
	CHECK(k != NULL);
	if (k)
		rd_kafka_conf_destroy(k);
}

static void test_refused(void)
{
	static const struct {
		const char *name, *text;
		mode_t mode;
		const char *why;
	} bad[] = {
		{"group", "SeCrEt\n", 0640, "(mode 640): chmod 600 it"},
		{"world", "SeCrEt\n", 0604, "(mode 604): chmod 600 it"},
		{"empty", "\n", 0600, "empty"},
		{"twolines", "SeCrEt\nmore\n", 0600, "more than one line"},
	};
	char err[512];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("refused: %s", bad[i].name);
		const char *p = put(bad[i].name, bad[i].text, bad[i].mode);
		CHECK(conf_with("kafka.sasl.password.file", p, RD_KAFKA_CONSUMER, err) == NULL);
		CHECK(strstr(err, "kafka.sasl.password.file") != NULL);
		CHECK(strstr(err, p) != NULL);
		CHECK(strstr(err, bad[i].why) != NULL);
		CHECK(strstr(err, "pw") == NULL ||
		      strstr(err, "/pw") != NULL); /* never the secret */
	}
	CHECK_CTX("a symbolic link is refused");
	char link[600];
	snprintf(link, sizeof link, "%s/link", dir);
	CHECK(symlink(put("target", "pw", 0600), link) == 0);
	CHECK(conf_with("kafka.sasl.password.file", link, RD_KAFKA_CONSUMER, err) == NULL);
	CHECK_CTX("a missing file");
	CHECK(conf_with("kafka.sasl.password.file", "/nonexistent/x", RD_KAFKA_CONSUMER, err) ==
	      NULL);
	CHECK(strstr(err, "/nonexistent/x") != NULL);
	CHECK_CTX("kafka.producer.: a consumer ignores it, the producer refuses the file");
	const char *open = put("open", "pw\n", 0644);
	rd_kafka_conf_t *k =
		conf_with("kafka.producer.sasl.password.file", open, RD_KAFKA_CONSUMER, err);
	CHECK(k != NULL);
	if (k)
		rd_kafka_conf_destroy(k);
	CHECK(conf_with("kafka.producer.sasl.password.file", open, RD_KAFKA_PRODUCER, err) == NULL);
	CHECK(strstr(err, "kafka.producer.sasl.password.file") != NULL);
}

int main(int argc, char **argv)
{
	(void)check_parse_args(argc, argv);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_ok();
	test_refused();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_done("test_kafka_secret");
}
