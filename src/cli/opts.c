/* opts.c: the option parser every flashsale command shares (see cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Options of one command, --help aside; getopt_long reports option i as OPT_VAL + i. */
enum { OPTS_MAX = 16, OPT_VAL = 256 };

void cli_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("flashsale: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

bool cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

int cli_usage(const char *usage)
{
	fputs(usage, stderr);
	return 2;
}

/* Stores one option's argument; false, with the message printed, if it is not valid. */
static bool store(const char *cmd, const struct cli_opt *o, char *arg)
{
	switch (o->kind) {
	case CLI_FLAG:
		*(bool *)o->dest = true;
		return true;
	case CLI_STR:
		*(const char **)o->dest = arg;
		return true;
	case CLI_INT:
	case CLI_SECONDS:
		if (o->kind == CLI_SECONDS) {
			/* Accept "600" and "600s"; a message shows the number without its 's'. */
			size_t n = strlen(arg);
			if (n > 1 && arg[n - 1] == 's')
				arg[n - 1] = '\0';
		}
		if (cli_int(arg, o->lo, o->hi, o->dest))
			return true;
		cli_err("%s: --%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", cmd,
			o->name, arg, o->lo, o->hi);
		return false;
	case CLI_TIMEOUT:
		if (cli_int(arg, o->lo, o->hi, o->dest))
			return true;
		cli_err("%s: --%s: '%s' is not a number of seconds", cmd, o->name, arg);
		return false;
	case CLI_RATIO: {
		char *end;
		double v = strtod(arg, &end);
		if (end == arg || *end || v < 0 || v > 1) {
			cli_err("%s: --%s: '%s' is not a number in [0, 1]", cmd, o->name, arg);
			return false;
		}
		*(double *)o->dest = v;
		return true;
	}
	}
	return false;
}

int cli_parse(int argc, char **argv, const char *usage, const struct cli_opt *spec, int pos_min,
	      int pos_max)
{
	/* The getopt_long table: spec in its order, then --help (the order of getopt's list of
	 * possibilities for an ambiguous abbreviation). */
	struct option opts[OPTS_MAX + 2];
	int n = 0;
	for (; spec[n].name; n++) {
		if (n == OPTS_MAX) {
			cli_err("%s: more than %d options", argv[0], OPTS_MAX);
			return 1;
		}
		opts[n] = (struct option){
			spec[n].name, spec[n].kind == CLI_FLAG ? no_argument : required_argument,
			NULL, OPT_VAL + n};
	}
	opts[n] = (struct option){"help", no_argument, NULL, 'h'};
	opts[n + 1] = (struct option){NULL, 0, NULL, 0};
	optind = 1; /* each command parses its own options from its own argv */
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (c < OPT_VAL || c >= OPT_VAL + n) /* getopt printed why */
			return cli_usage(usage);
		if (!store(argv[0], &spec[c - OPT_VAL], optarg))
			return 2;
	}
	int npos = argc - optind;
	if (npos < pos_min || (pos_max >= 0 && npos > pos_max))
		return cli_usage(usage);
	return -1;
}
