/* check.h: the unit tests' assert harness. No framework: each CHECK counts one check, prints
 * file:line, the failing expression and the current context on failure, and the test ends
 * with check_done(), which prints "<name>: N checks, F failed" and returns the exit status.
 *
 * Context: CHECK_CTX(fmt, ...) names the table row or step being checked, so that a failure
 * inside a loop says which row failed. Header-only; one test binary is one translation unit.
 *
 * Known bugs: a check that exposes a bug in src/ is kept out of the default run. It runs only
 * when the binary is started with `--known-bug NAME` (see tests/meson.build, suite
 * 'known-bugs'), so the default suite stays green and the bug stays reproducible. */
#ifndef FS_TEST_CHECK_H
#define FS_TEST_CHECK_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CHECK_PRINT_MAX = 40 };

static long check_count;
static long check_failed;
static char check_ctx_buf[256];

__attribute__((format(printf, 1, 2), unused)) static void check_ctx(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(check_ctx_buf, sizeof check_ctx_buf, fmt, ap);
	va_end(ap);
}

#define CHECK_CTX(...) check_ctx(__VA_ARGS__)

/* Returns ok, so that a test can stop a row after a failed precondition. */
__attribute__((unused)) static bool check_report(bool ok, const char *file, int line,
						 const char *expr, const char *detail)
{
	check_count++;
	if (ok)
		return true;
	check_failed++;
	if (check_failed <= CHECK_PRINT_MAX) {
		fprintf(stderr, "%s:%d: FAILED: %s", file, line, expr);
		if (detail && *detail)
			fprintf(stderr, " (%s)", detail);
		if (check_ctx_buf[0])
			fprintf(stderr, " [%s]", check_ctx_buf);
		fputc('\n', stderr);
	} else if (check_failed == CHECK_PRINT_MAX + 1) {
		fprintf(stderr, "... further failures not printed\n");
	}
	return false;
}

__attribute__((unused)) static bool check_int(int64_t a, int64_t b, const char *file, int line,
					      const char *expr)
{
	char d[96];
	snprintf(d, sizeof d, "%" PRId64 " != %" PRId64, a, b);
	return check_report(a == b, file, line, expr, d);
}

__attribute__((unused)) static bool check_str(const char *a, const char *b, const char *file,
					      int line, const char *expr)
{
	bool ok = (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
	char d[200];
	snprintf(d, sizeof d, "\"%.80s\" != \"%.80s\"", a ? a : "(null)", b ? b : "(null)");
	return check_report(ok, file, line, expr, d);
}

#define CHECK(expr) check_report((expr) ? true : false, __FILE__, __LINE__, #expr, NULL)
#define CHECK_INT(a, b) check_int((int64_t)(a), (int64_t)(b), __FILE__, __LINE__, #a " == " #b)
#define CHECK_STR(a, b) check_str((a), (b), __FILE__, __LINE__, #a " == " #b)

__attribute__((unused)) static int check_done(const char *name)
{
	printf("%s: %ld checks, %ld failed\n", name, check_count, check_failed);
	fflush(stdout);
	return check_failed == 0 && check_count > 0 ? 0 : 1;
}

/* Command line shared by the test binaries: `--seed N` and `--known-bug NAME`. */
struct check_args {
	const char *known_bug; /* NULL: the default run */
	bool has_seed;
	uint64_t seed;
};

__attribute__((unused)) static struct check_args check_parse_args(int argc, char **argv)
{
	struct check_args a = {0};
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--known-bug") == 0 && i + 1 < argc) {
			a.known_bug = argv[++i];
		} else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
			a.has_seed = true;
			a.seed = strtoull(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--seed N] [--known-bug NAME]\n", argv[0]);
			exit(2);
		}
	}
	return a;
}

/* One step of the tests' pseudo-random sequence (xorshift64: a nonzero x stays nonzero). */
__attribute__((unused)) static uint64_t check_xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* The seed of a randomised test: --seed N, else FS_TEST_SEED, else the time and the pid (the
 * test prints the seed it used, so any run can be repeated). */
__attribute__((unused)) static uint64_t check_seed(const struct check_args *a)
{
	const char *env = getenv("FS_TEST_SEED");
	if (a->has_seed)
		return a->seed;
	if (env && *env)
		return strtoull(env, NULL, 0);
	return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

#endif
