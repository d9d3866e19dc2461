/* test_promtext: the Prometheus text reader of `flashsale top` (src/cli/promtext.c): the
 * samples our endpoints serve (src/io/prom.c writes them: read back here), the format's other
 * forms, and hostile text (long lines, bad escapes, NUL bytes, cut lines, random bytes): an
 * error naming the line, never a crash. */
#include "check.h"
#include "cli/promtext.h"
#include "io/prom.h"

#include <errno.h>
#include <math.h>

/* Parses one line; returns promtext_line's answer, the sample in *s. */
static int one(const char *text, struct promtext_sample *s, char err[PROMTEXT_ERR_MAX])
{
	err[0] = '\0';
	return promtext_line(text, strlen(text), s, err);
}

static void test_lines(void)
{
	struct promtext_sample s;
	char err[PROMTEXT_ERR_MAX];
	CHECK_INT(one("flashsale_records_total 201", &s, err), 1);
	CHECK_STR(s.name, "flashsale_records_total");
	CHECK_INT(s.n_labels, 0);
	CHECK(s.value == 201);
	CHECK(!s.has_timestamp);
	CHECK_INT(one("flashsale_decisions_total{type=\"buy\",outcome=\"held\"} 50", &s, err), 1);
	CHECK_INT(s.n_labels, 2);
	CHECK_STR(promtext_label(&s, "type"), "buy");
	CHECK_STR(promtext_label(&s, "outcome"), "held");
	CHECK(promtext_label(&s, "partition") == NULL);
	/* Blanks around labels, a trailing comma, a timestamp, tabs. */
	CHECK_INT(one("  m { a = \"1\" , b=\"2\", }\t-3.5e2 1700000000000 ", &s, err), 1);
	CHECK_STR(s.name, "m");
	CHECK_INT(s.n_labels, 2);
	CHECK_STR(promtext_label(&s, "b"), "2");
	CHECK(s.value == -350);
	CHECK(s.has_timestamp && s.timestamp_ms == 1700000000000);
	CHECK_INT(one("m{} 1", &s, err), 1);
	CHECK_INT(s.n_labels, 0);
	CHECK_INT(one("ns:sub_metric 0", &s, err), 1);
	CHECK_STR(s.name, "ns:sub_metric");
	/* The three special values as the format spells them. */
	CHECK_INT(one("h_bucket{le=\"+Inf\"} +Inf", &s, err), 1);
	CHECK(isinf(s.value) && s.value > 0);
	CHECK_STR(promtext_label(&s, "le"), "+Inf");
	CHECK_INT(one("g -Inf", &s, err), 1);
	CHECK(isinf(s.value) && s.value < 0);
	CHECK_INT(one("g NaN", &s, err), 1);
	CHECK(isnan(s.value));
	CHECK_INT(one("g 1796408497.3269999", &s, err), 1);
	CHECK(fabs(s.value - 1796408497.327) < 1e-3);
	/* Lines without a sample. */
	CHECK_INT(one("", &s, err), 0);
	CHECK_INT(one("   \t", &s, err), 0);
	CHECK_INT(one("# HELP m A counter.", &s, err), 0);
	CHECK_INT(one("# TYPE m counter", &s, err), 0);
	CHECK_INT(one("  # a comment {\"", &s, err), 0);
}

static void test_escapes(void)
{
	struct promtext_sample s;
	char err[PROMTEXT_ERR_MAX];
	CHECK_INT(one("m{r=\"a\\\\b\\\"c\\nd\"} 1", &s, err), 1);
	CHECK_STR(promtext_label(&s, "r"), "a\\b\"c\nd");
	CHECK_INT(one("m{r=\"{},= \"} 1", &s, err), 1);
	CHECK_STR(promtext_label(&s, "r"), "{},= ");
	CHECK_INT(one("m{r=\"\"} 1", &s, err), 1);
	CHECK_STR(promtext_label(&s, "r"), "");
	/* What src/io/prom.c writes, read back. */
	struct fs_buf b = {0};
	struct fs_prom_label l[] = {{"reason", "x\\y\"z\nw"}, {"partition", "7"}};
	fs_prom_family(&b, "flashsale_x_total", "counter", "Things.");
	fs_prom_int(&b, "flashsale_x_total", l, 2, 42);
	const char *text = fs_buf_cstr(&b);
	const char *last = strrchr(text, '\n');
	const char *start = text;
	for (const char *p = text; p < last; p++)
		if (*p == '\n')
			start = p + 1;
	CHECK_INT(promtext_line(start, (size_t)(last - start), &s, err), 1);
	CHECK_STR(promtext_label(&s, "reason"), "x\\y\"z\nw");
	CHECK_STR(promtext_label(&s, "partition"), "7");
	CHECK(s.value == 42);
	fs_buf_free(&b);
}

/* Each of these is an error (-EINVAL) whose message contains the given words. */
static void test_errors(void)
{
	static const struct {
		const char *line, *why;
	} rows[] = {
		{"m{r=\"a\\x\"} 1", "unknown escape \\x"},
		{"m{r=\"a\\", "unknown escape"},
		{"m{r=\"abc} 1", "closing quote"},
		{"m{r=abc} 1", "quoted value"},
		{"m{r} 1", "expected ="},
		{"m{r=\"1\" s=\"2\"} 1", "expected , or }"},
		{"m{r=\"1\",r=\"2\"} 1", "label r twice"},
		{"m{1r=\"1\"} 1", "label name"},
		{"m{a=\"1\"", "expected , or }"},
		{"m", "expected a blank"},
		{"m{a=\"1\"}1", "expected a blank"},
		{"m ", "expected a blank and a value"},
		{"m abc", "not a number"},
		{"m 0x10", "not a number"},
		{"m inf", "not a number"},
		{"m 1.2.3", "not a number"},
		{"m 1 2 3", "unexpected text"},
		{"m 1 1.5", "not an integer"},
		{"m 1 99999999999999999999", "not an integer"},
		{"9m 1", "metric name"},
		{"{a=\"1\"} 1", "metric name"},
		{"m-x 1", "expected a blank"},
		{"m 1\r", "not a number"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct promtext_sample s;
		char err[PROMTEXT_ERR_MAX] = "";
		CHECK_CTX("%s", rows[i].line);
		CHECK_INT(one(rows[i].line, &s, err), -EINVAL);
		if (!CHECK(strstr(err, rows[i].why) != NULL))
			fprintf(stderr, "  said: %s\n", err);
	}
	CHECK_CTX("%s", "");
}

/* Bounds: a line, a name, a label value, the labels of a sample, a number. */
static void test_bounds(void)
{
	struct promtext_sample s;
	char err[PROMTEXT_ERR_MAX];
	static char line[PROMTEXT_LINE_MAX * 2];
	memset(line, 'a', sizeof line);
	CHECK_INT(promtext_line(line, PROMTEXT_LINE_MAX + 1, &s, err), -EINVAL);
	CHECK(strstr(err, "longer than 4096") != NULL);
	memcpy(line + PROMTEXT_NAME_MAX - 1, " 1", 2);
	CHECK_INT(promtext_line(line, PROMTEXT_NAME_MAX + 1, &s, err), 1); /* 127 bytes: fits */
	memset(line, 'a', sizeof line);
	memcpy(line + PROMTEXT_NAME_MAX, " 1", 2);
	CHECK_INT(promtext_line(line, PROMTEXT_NAME_MAX + 2, &s, err), -EINVAL);
	CHECK(strstr(err, "metric name longer") != NULL);
	/* A label value of 255 bytes fits, 256 does not. */
	for (int n = PROMTEXT_VALUE_MAX - 1; n <= PROMTEXT_VALUE_MAX; n++) {
		int k = snprintf(line, sizeof line, "m{v=\"%0*d\"} 1", n, 0);
		CHECK_INT(promtext_line(line, (size_t)k, &s, err),
			  n < PROMTEXT_VALUE_MAX ? 1 : -EINVAL);
	}
	int k = snprintf(line, sizeof line,
			 "m{a=\"1\",b=\"1\",c=\"1\",d=\"1\",e=\"1\",f=\"1\","
			 "g=\"1\",h=\"1\"} 1");
	CHECK_INT(promtext_line(line, (size_t)k, &s, err), 1);
	CHECK_INT(s.n_labels, PROMTEXT_LABELS_MAX);
	k = snprintf(line, sizeof line,
		     "m{a=\"1\",b=\"1\",c=\"1\",d=\"1\",e=\"1\",f=\"1\","
		     "g=\"1\",h=\"1\",i=\"1\"} 1");
	CHECK_INT(promtext_line(line, (size_t)k, &s, err), -EINVAL);
	CHECK(strstr(err, "more than 8 labels") != NULL);
	k = snprintf(line, sizeof line, "m %0*d", PROMTEXT_NUMBER_MAX, 1);
	CHECK_INT(promtext_line(line, (size_t)k, &s, err), -EINVAL);
	/* A NUL byte anywhere in a line. */
	CHECK_INT(promtext_line("m{a=\"x\0y\"} 1", 12, &s, err), -EINVAL);
	CHECK(strstr(err, "NUL") != NULL);
}

struct collect {
	int n;
	double sum;
	int stop_at;
};

static int collect(const struct promtext_sample *s, void *ctx)
{
	struct collect *c = ctx;
	c->n++;
	c->sum += s->value;
	return c->stop_at && c->n == c->stop_at ? 7 : 0;
}

static void test_parse(void)
{
	char err[PROMTEXT_ERR_MAX];
	const char *text = "# HELP a A.\n# TYPE a counter\na 1\n\nb{x=\"y\"} 2\nc 3";
	struct collect c = {0};
	CHECK_INT(promtext_parse(text, strlen(text), collect, &c, err), 0);
	CHECK_INT(c.n, 3); /* the last line without its newline counts */
	CHECK(c.sum == 6);
	c = (struct collect){.stop_at = 2};
	CHECK_INT(promtext_parse(text, strlen(text), collect, &c, err), 7);
	CHECK_INT(c.n, 2);
	/* An error names its line; the samples before it were given. */
	const char *bad = "a 1\nb 2\n# c\nd{e=\"\\q\"} 4\nf 5\n";
	c = (struct collect){0};
	CHECK_INT(promtext_parse(bad, strlen(bad), collect, &c, err), -EINVAL);
	CHECK_STR(err, "line 4: unknown escape \\q in a label value");
	CHECK_INT(c.n, 2);
	c = (struct collect){0};
	CHECK_INT(promtext_parse("", 0, collect, &c, err), 0);
	CHECK_INT(c.n, 0);
	/* A NUL byte in the text, and an endless line. */
	CHECK_INT(promtext_parse("a 1\nb\0 2\n", 9, collect, &c, err), -EINVAL);
	CHECK_STR(err, "line 2: a NUL byte");
	static char longline[1 << 20];
	memset(longline, 'x', sizeof longline);
	CHECK_INT(promtext_parse(longline, sizeof longline, collect, &c, err), -EINVAL);
	CHECK_STR(err, "line 1: a line longer than 4096 bytes");
}

/* A real histogram as the worker writes it, parsed whole. */
static void test_histogram_text(void)
{
	struct fs_prom_hist h;
	fs_prom_hist_init(&h, fs_prom_seconds_bounds, fs_prom_seconds_n);
	fs_prom_hist_observe(&h, 0.004);
	fs_prom_hist_observe(&h, 0.03);
	struct fs_buf b = {0};
	fs_prom_family(&b, "flashsale_batch_commit_seconds", "histogram", "Commits.");
	fs_prom_hist_write(&b, "flashsale_batch_commit_seconds", NULL, 0, &h);
	struct collect c = {0};
	char err[PROMTEXT_ERR_MAX];
	CHECK_INT(promtext_parse(b.data, b.len, collect, &c, err), 0);
	CHECK_INT(c.n, fs_prom_seconds_n + 1 + 2); /* the buckets, +Inf, _sum, _count */
	fs_buf_free(&b);
}

/* Random bytes and random cuts of good text: any answer but a crash (ASan watches). */
static void test_random(uint64_t seed)
{
	static const char good[] = "# TYPE m counter\nm{a=\"x\\\\\",b=\"\\n\"} 1.5 12\n"
				   "h_bucket{le=\"+Inf\"} 3\nn NaN\n";
	static const char alphabet[] = "m{}=\",\\n# \t0123456789.e+-InfNa_:\n\0\x7f\xff";
	uint64_t x = seed;
	char buf[256];
	char err[PROMTEXT_ERR_MAX];
	int errors = 0;
	for (int round = 0; round < 20000; round++) {
		size_t n = check_xorshift(&x) % sizeof buf;
		for (size_t i = 0; i < n; i++) {
			uint64_t r = check_xorshift(&x);
			buf[i] = r % 3 ? good[r % (sizeof good - 1)]
				       : alphabet[(r >> 8) % (sizeof alphabet - 1)];
		}
		struct collect c = {0};
		int rc = promtext_parse(buf, n, collect, &c, err);
		if (rc < 0)
			errors++;
		CHECK(rc == 0 || rc == -EINVAL);
	}
	CHECK(errors > 0); /* the generator does make bad text */
	struct collect c = {0};
	CHECK_INT(promtext_parse(good, sizeof good - 1, collect, &c, err), 0);
	CHECK_INT(c.n, 3);
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	uint64_t seed = check_seed(&a);
	printf("test_promtext: seed %" PRIu64 "\n", seed);
	test_lines();
	test_escapes();
	test_errors();
	test_bounds();
	test_parse();
	test_histogram_text();
	test_random(seed ? seed : 1);
	return check_done("test_promtext");
}
