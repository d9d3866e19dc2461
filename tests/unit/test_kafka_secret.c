/* test_kafka_secret.c: kafka.sasl.password.file (src/io/kafka.c): the password is read from a
 * file of this user's of mode 0600 and handed to librdkafka as sasl.password; a file others
 * may read, a link, an empty or a multi-line file is refused at start, naming the file. */
#include "check.h"
#include "io/config.h"
#include "io/kafka.h"

#include <fcntl.h>
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

static void test_read_secret(void)
{
	char out[64], err[512];
	CHECK_CTX("a 0600 file: the password, its line's end dropped");
	CHECK(fs_kafka_read_secret(put("ok", "s3cret-pw\r\n", 0600), out, sizeof out, err,
				   sizeof err) == 0);
	CHECK_STR(out, "s3cret-pw");
	CHECK_CTX("0400 is fine too");
	CHECK(fs_kafka_read_secret(put("ro", "pw", 0400), out, sizeof out, err, sizeof err) == 0);
	static const struct {
		const char *name, *text;
		mode_t mode;
		const char *why;
	} bad[] = {
		{"group", "pw\n", 0640, "mode 0600 (it is 0640"},
		{"world", "pw\n", 0604, "mode 0600 (it is 0604"},
		{"empty", "\n", 0600, "must hold the secret alone"},
		{"twolines", "pw\nmore\n", 0600, "must hold the secret alone"},
		{"long", "0123456789012345678901234567890123456789012345678901234567890123456789",
		 0600, "too long"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("refused: %s", bad[i].name);
		const char *p = put(bad[i].name, bad[i].text, bad[i].mode);
		CHECK(fs_kafka_read_secret(p, out, sizeof out, err, sizeof err) < 0);
		CHECK(strstr(err, p) != NULL);
		CHECK(strstr(err, bad[i].why) != NULL);
	}
	CHECK_CTX("a symbolic link is refused (O_NOFOLLOW)");
	char link[600];
	snprintf(link, sizeof link, "%s/link", dir);
	CHECK(symlink(put("target", "pw", 0600), link) == 0);
	CHECK(fs_kafka_read_secret(link, out, sizeof out, err, sizeof err) < 0);
	CHECK_CTX("a missing file");
	CHECK(fs_kafka_read_secret("/nonexistent/pw", out, sizeof out, err, sizeof err) < 0);
	CHECK(strstr(err, "/nonexistent/pw") != NULL);
}

/* Through the configuration: sasl.password set from the file, for consumers and producers
 * alike (and kafka.producer.sasl.password.file for producers only); a bad file fails the
 * handle's configuration with the key's name. */
static void test_conf(void)
{
	struct fs_config c;
	char err[512], v[128];
	size_t n = sizeof v;
	fs_config_defaults(&c);
	CHECK(fs_config_set(&c, "kafka.sasl.password.file", put("conf", "from-file\n", 0600),
			    "test", err) == 0);
	rd_kafka_conf_t *k = fs_kafka_conf(&c, RD_KAFKA_CONSUMER, NULL, err, sizeof err);
	CHECK(k != NULL);
	if (k) {
		CHECK(rd_kafka_conf_get(k, "sasl.password", v, &n) == RD_KAFKA_CONF_OK);
		CHECK_STR(v, "from-file");
		rd_kafka_conf_destroy(k);
	}
	fs_config_defaults(&c);
	CHECK(fs_config_set(&c, "kafka.producer.sasl.password.file", put("open", "pw\n", 0644),
			    "test", err) == 0);
	CHECK_CTX("a consumer ignores the producer's key");
	k = fs_kafka_conf(&c, RD_KAFKA_CONSUMER, NULL, err, sizeof err);
	CHECK(k != NULL);
	if (k)
		rd_kafka_conf_destroy(k);
	CHECK_CTX("the producer refuses the file");
	CHECK(fs_kafka_conf(&c, RD_KAFKA_PRODUCER, NULL, err, sizeof err) == NULL);
	CHECK(strstr(err, "kafka.producer.sasl.password.file: ") == err);
	CHECK(strstr(err, "mode 0600 (it is 0644") != NULL);
}

int main(int argc, char **argv)
{
	(void)check_parse_args(argc, argv);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_read_secret();
	test_conf();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_done("test_kafka_secret");
}
