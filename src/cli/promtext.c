/* promtext.c: the Prometheus text format reader (see promtext.h). */
#include "cli/promtext.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line being read: p moves from the line's start towards end. */
struct cursor {
	const char *start, *p, *end;
	char *err;
};

__attribute__((format(printf, 2, 3))) static int bad(struct cursor *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, PROMTEXT_ERR_MAX, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ASCII only: the format's names are, and <ctype.h> would follow the locale. */
static bool letter(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static bool digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

static void skip_blanks(struct cursor *c)
{
	while (c->p < c->end && blank(*c->p))
		c->p++;
}

/* A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, colon true) or a label name (no colon). */
static int read_name(struct cursor *c, char out[PROMTEXT_NAME_MAX], bool colon, const char *what)
{
	size_t n = 0;
	while (c->p < c->end &&
	       (letter(*c->p) || (colon && *c->p == ':') || (n > 0 && digit(*c->p)))) {
		if (n + 1 >= PROMTEXT_NAME_MAX)
			return bad(c, "%s longer than %d bytes", what, PROMTEXT_NAME_MAX - 1);
		out[n++] = *c->p++;
	}
	out[n] = '\0';
	if (n == 0)
		return bad(c, "expected a %s at column %td", what, c->p - c->start + 1);
	return 0;
}

/* A label value after its opening quote, through its closing quote, unescaped. */
static int read_value(struct cursor *c, char out[PROMTEXT_VALUE_MAX])
{
	size_t n = 0;
	for (;;) {
		if (c->p >= c->end)
			return bad(c, "%s", "a label value without its closing quote");
		char ch = *c->p++;
		if (ch == '"')
			break;
		if (ch == '\\') {
			char e = c->p < c->end ? *c->p++ : '\0';
			if (e == 'n')
				ch = '\n';
			else if (e == '\\' || e == '"')
				ch = e;
			else if (e >= 0x20 && e < 0x7f)
				return bad(c, "unknown escape \\%c in a label value", e);
			else
				return bad(c, "%s", "unknown escape in a label value");
		}
		if (n + 1 >= PROMTEXT_VALUE_MAX)
			return bad(c, "a label value longer than %d bytes", PROMTEXT_VALUE_MAX - 1);
		out[n++] = ch;
	}
	out[n] = '\0';
	return 0;
}

/* One label, name="value", into the sample's next slot. */
static int read_label(struct cursor *c, struct promtext_sample *s)
{
	if (s->n_labels == PROMTEXT_LABELS_MAX)
		return bad(c, "more than %d labels", PROMTEXT_LABELS_MAX);
	struct promtext_label *l = &s->labels[s->n_labels];
	int rc = read_name(c, l->name, false, "label name");
	if (rc < 0)
		return rc;
	skip_blanks(c);
	if (c->p >= c->end || *c->p != '=')
		return bad(c, "expected = after label %s", l->name);
	c->p++;
	skip_blanks(c);
	if (c->p >= c->end || *c->p != '"')
		return bad(c, "expected a quoted value for label %s", l->name);
	c->p++;
	rc = read_value(c, l->value);
	if (rc < 0)
		return rc;
	for (int i = 0; i < s->n_labels; i++)
		if (strcmp(s->labels[i].name, l->name) == 0)
			return bad(c, "label %s twice", l->name);
	s->n_labels++;
	return 0;
}

/* {label="value",...}, after the metric name; its opening brace is at c->p. */
static int read_labels(struct cursor *c, struct promtext_sample *s)
{
	c->p++;
	for (;;) {
		skip_blanks(c);
		if (c->p < c->end && *c->p == '}') /* also after a trailing comma, and {} */
			break;
		int rc = read_label(c, s);
		if (rc < 0)
			return rc;
		skip_blanks(c);
		if (c->p < c->end && *c->p == ',') {
			c->p++;
			continue;
		}
		if (c->p >= c->end || *c->p != '}')
			return bad(c, "expected , or } after label %s",
				   s->labels[s->n_labels - 1].name);
		break;
	}
	c->p++;
	return 0;
}

/* The next blank-delimited token, NUL-terminated in out. */
static int read_token(struct cursor *c, char out[PROMTEXT_NUMBER_MAX], const char *what)
{
	size_t n = 0;
	while (c->p < c->end && !blank(*c->p)) {
		if (n + 1 >= PROMTEXT_NUMBER_MAX)
			return bad(c, "%s longer than %d bytes", what, PROMTEXT_NUMBER_MAX - 1);
		out[n++] = *c->p++;
	}
	out[n] = '\0';
	return n ? 0 : bad(c, "expected a %s", what);
}

/* A sample's value: +Inf, -Inf, NaN as the format spells them, else a decimal float (no
 * hexadecimal, no "inf" or "nan" of other spellings: strtod would take those). */
static int read_number(struct cursor *c, double *out)
{
	char tok[PROMTEXT_NUMBER_MAX];
	int rc = read_token(c, tok, "value");
	if (rc < 0)
		return rc;
	if (strcmp(tok, "+Inf") == 0 || strcmp(tok, "-Inf") == 0) {
		*out = tok[0] == '+' ? INFINITY : -INFINITY;
		return 0;
	}
	if (strcmp(tok, "NaN") == 0) {
		*out = NAN;
		return 0;
	}
	for (const char *q = tok; *q; q++)
		if (!digit(*q) && *q != '.' && *q != 'e' && *q != 'E' && *q != '+' && *q != '-')
			return bad(c, "value '%s' is not a number", tok);
	char *end;
	*out = strtod(tok, &end);
	if (end == tok || *end)
		return bad(c, "value '%s' is not a number", tok);
	return 0;
}

static int read_timestamp(struct cursor *c, struct promtext_sample *s)
{
	char tok[PROMTEXT_NUMBER_MAX];
	int rc = read_token(c, tok, "timestamp");
	if (rc < 0)
		return rc;
	char *end;
	errno = 0;
	long long v = strtoll(tok, &end, 10);
	if (errno || end == tok || *end || !(digit(tok[0]) || tok[0] == '-'))
		return bad(c, "timestamp '%s' is not an integer", tok);
	s->has_timestamp = true;
	s->timestamp_ms = v;
	return 0;
}

int promtext_line(const char *line, size_t len, struct promtext_sample *out,
		  char err[PROMTEXT_ERR_MAX])
{
	struct cursor c = {line, line, line + len, err};
	if (len > PROMTEXT_LINE_MAX)
		return bad(&c, "a line longer than %d bytes", PROMTEXT_LINE_MAX);
	if (memchr(line, '\0', len))
		return bad(&c, "%s", "a NUL byte");
	skip_blanks(&c);
	if (c.p == c.end || *c.p == '#')
		return 0;
	out->n_labels = 0;
	out->has_timestamp = false;
	int rc = read_name(&c, out->name, true, "metric name");
	if (rc < 0)
		return rc;
	const char *name_end = c.p;
	skip_blanks(&c); /* "name {" as "name{", as Prometheus's own parser takes it */
	if (c.p < c.end && *c.p == '{') {
		rc = read_labels(&c, out);
		if (rc < 0)
			return rc;
		name_end = c.p;
		skip_blanks(&c);
	}
	if (c.p == name_end || c.p == c.end)
		return bad(&c, "expected a blank and a value after %s", out->name);
	rc = read_number(&c, &out->value);
	skip_blanks(&c);
	if (rc == 0 && c.p < c.end)
		rc = read_timestamp(&c, out);
	skip_blanks(&c);
	if (rc == 0 && c.p < c.end)
		rc = bad(&c, "unexpected text after the sample of %s", out->name);
	return rc < 0 ? rc : 1;
}

int promtext_parse(const char *text, size_t len, promtext_fn fn, void *ctx,
		   char err[PROMTEXT_ERR_MAX])
{
	struct promtext_sample s;
	size_t at = 0;
	for (long lineno = 1; at < len; lineno++) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
		char why[PROMTEXT_ERR_MAX];
		int rc = promtext_line(text + at, n, &s, why);
		if (rc < 0) {
			snprintf(err, PROMTEXT_ERR_MAX, "line %ld: %.120s", lineno, why);
			return rc;
		}
		if (rc == 1 && (rc = fn(&s, ctx)) != 0)
			return rc;
		at += n + 1;
	}
	return 0;
}

const char *promtext_label(const struct promtext_sample *s, const char *name)
{
	for (int i = 0; i < s->n_labels; i++)
		if (strcmp(s->labels[i].name, name) == 0)
			return s->labels[i].value;
	return NULL;
}
