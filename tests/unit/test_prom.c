/* test_prom: the Prometheus text writers (src/io/prom.c) and the listen syntax of the metrics
 * endpoint (src/io/metrics.c), without a server. The live endpoints are checked with promtool
 * by the integration test 65-metrics. */
#include "check.h"
#include "io/metrics.h"
#include "io/prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>

static void test_samples(void)
{
	struct fs_buf b = {0};
	fs_prom_family(&b, "flashsale_x_total", "counter", "Things counted.");
	struct fs_prom_label l[] = {{"type", "buy"}, {"outcome", "held"}};
	fs_prom_int(&b, "flashsale_x_total", l, 2, 500);
	fs_prom_int(&b, "flashsale_x_total", NULL, 0, -3);
	CHECK_STR(fs_buf_cstr(&b), "# HELP flashsale_x_total Things counted.\n"
				   "# TYPE flashsale_x_total counter\n"
				   "flashsale_x_total{type=\"buy\",outcome=\"held\"} 500\n"
				   "flashsale_x_total -3\n");
	fs_buf_clear(&b);
	/* Label values escape backslash, double quote and newline (the format's only three). */
	struct fs_prom_label e[] = {{"reason", "a\\b\"c\nd"}};
	fs_prom_int(&b, "m", e, 1, 1);
	CHECK_STR(fs_buf_cstr(&b), "m{reason=\"a\\\\b\\\"c\\nd\"} 1\n");
	fs_buf_clear(&b);
	fs_prom_double(&b, "d", NULL, 0, 0.25);
	fs_prom_double(&b, "d", NULL, 0, INFINITY);
	fs_prom_double(&b, "d", NULL, 0, NAN);
	CHECK_STR(fs_buf_cstr(&b), "d 0.25\nd +Inf\nd NaN\n");
	fs_buf_clear(&b);
	fs_prom_one(&b, "g", "gauge", "A gauge.", 7);
	CHECK_STR(fs_buf_cstr(&b), "# HELP g A gauge.\n# TYPE g gauge\ng 7\n");
	fs_buf_free(&b);
}

static void test_histogram(void)
{
	static const double bounds[] = {0.01, 0.1, 1};
	struct fs_prom_hist h;
	fs_prom_hist_init(&h, bounds, 3);
	/* On a bound counts in that bucket (le: less or equal); above every bound in +Inf. */
	fs_prom_hist_observe(&h, 0.01);
	fs_prom_hist_observe(&h, 0.05);
	fs_prom_hist_observe(&h, 0.05);
	fs_prom_hist_observe(&h, 5);
	struct fs_buf b = {0};
	struct fs_prom_label l[] = {{"route", "buy"}};
	fs_prom_hist_write(&b, "h_seconds", l, 1, &h);
	CHECK_STR(fs_buf_cstr(&b), "h_seconds_bucket{route=\"buy\",le=\"0.01\"} 1\n"
				   "h_seconds_bucket{route=\"buy\",le=\"0.1\"} 3\n"
				   "h_seconds_bucket{route=\"buy\",le=\"1\"} 3\n"
				   "h_seconds_bucket{route=\"buy\",le=\"+Inf\"} 4\n"
				   "h_seconds_sum{route=\"buy\"} 5.1100000000000003\n"
				   "h_seconds_count{route=\"buy\"} 4\n");
	fs_buf_clear(&b);
	fs_prom_hist_init(&h, fs_prom_records_bounds, fs_prom_records_n);
	fs_prom_hist_observe(&h, 2000);
	fs_prom_hist_write(&b, "r", NULL, 0, &h);
	CHECK(strstr(fs_buf_cstr(&b), "r_bucket{le=\"1000\"} 0\nr_bucket{le=\"2000\"} 1\n") !=
	      NULL);
	CHECK(strstr(fs_buf_cstr(&b), "r_bucket{le=\"+Inf\"} 1\nr_sum 2000\nr_count 1\n") != NULL);
	/* The shared bounds ascend (Prometheus requires it) and fit the histogram. */
	for (int i = 1; i < fs_prom_seconds_n; i++)
		CHECK(fs_prom_seconds_bounds[i] > fs_prom_seconds_bounds[i - 1]);
	for (int i = 1; i < fs_prom_records_n; i++)
		CHECK(fs_prom_records_bounds[i] > fs_prom_records_bounds[i - 1]);
	CHECK(fs_prom_seconds_n <= FS_PROM_BUCKETS_MAX && fs_prom_records_n <= FS_PROM_BUCKETS_MAX);
	fs_buf_free(&b);
}

static void test_listen(void)
{
	struct sockaddr_storage sa;
	bool v6;
	char err[128];
	CHECK_INT(fs_listen_parse("127.0.0.1:9464", &sa, &v6, err, sizeof err), 0);
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&sa;
	CHECK(!v6 && s4->sin_family == AF_INET && ntohs(s4->sin_port) == 9464 &&
	      ntohl(s4->sin_addr.s_addr) == 0x7f000001);
	CHECK_INT(fs_listen_parse("[::1]:0", &sa, &v6, err, sizeof err), 0);
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&sa;
	CHECK(v6 && s6->sin6_family == AF_INET6 && ntohs(s6->sin6_port) == 0);
	const char *bad[] = {"",
			     "9464",
			     ":9464",
			     "127.0.0.1:",
			     "127.0.0.1:65536",
			     "127.0.0.1:-1",
			     "127.0.0.1:94x",
			     "localhost:9464",
			     "[::1]9464",
			     "[]:1",
			     "::1:9464"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_CTX("%s", bad[i]);
		CHECK_INT(fs_listen_parse(bad[i], &sa, &v6, err, sizeof err), -EINVAL);
		CHECK(err[0] != '\0');
	}
}

int main(int argc, char **argv)
{
	struct check_args a = check_parse_args(argc, argv);
	if (a.known_bug) {
		CHECK(!"unknown --known-bug name");
		return check_done("test_prom");
	}
	test_samples();
	test_histogram();
	test_listen();
	return check_done("test_prom");
}
