/* config.c: configuration table and parser (see config.h). */
#include "io/config.h"

#include "io/secret.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <sys/stat.h>

enum type { T_STR, T_INT };

struct key {
	const char *name;
	enum type type;
	size_t offset;
	size_t size; /* strings: buffer size */
	int64_t min, max;
	const char *def;
	const char *doc;
};

#define STR(field, def, doc)                                                                       \
	{                                                                                          \
#field, T_STR, offsetof(struct fs_config, field),                                  \
			sizeof(((struct fs_config *)0)->field), 0, 0, def, doc                     \
	}
#define INT(field, lo, hi, def, doc)                                                               \
	{                                                                                          \
#field, T_INT, offsetof(struct fs_config, field), 0, lo, hi, def, doc              \
	}

/* The table. Names use dots in the file: topic_intents is written topic.intents. */
static const struct key keys[] = {
	STR(brokers, "127.0.0.1:59092",
	    "Kafka bootstrap servers (host:port,...). Environment FLASHSALE_KAFKA overrides."),
	STR(pg, "host=127.0.0.1 port=55432 dbname=flashsale user=flashsale",
	    "libpq connection string of the flashsale database. Environment FLASHSALE_PG "
	    "overrides."),
	STR(group, "flashsale-workers", "Consumer group of the workers."),
	STR(topic_intents, "intents", "Topic of buy intents and sale records (key = SKU)."),
	STR(topic_results, "results", "Topic the worker publishes one result per record to."),
	STR(topic_stock, "stock", "Compacted topic of per-SKU stock (the web tier's flag)."),
	STR(log_level, "info", "error, warn, info or debug (a line per batch transaction)."),
	STR(misrouted, "forward",
	    "What the worker does with a keyed record on the wrong partition of the intents topic "
	    "(the rule: Kafka's Java default, murmur2 of the key): forward (re-publish it to the "
	    "right partition once its batch commits; it is decided there) or reject (answer it "
	    "`rejected`, reason wrong_partition, naming the expected partition). Recorded for the "
	    "topic at the first start: a worker configured otherwise refuses to start."),
	INT(batch_max, 1, 10000, "2000", "Records per partition batch (one transaction each)."),
	INT(batch_max_behind, 1, 10000, "10000",
	    "Records per batch while the worker is far behind: while a batch and the records "
	    "waiting in the consumer's queue are at least this many together, the batch grows "
	    "past batch.max up to this many (fewer, larger transactions drain a backlog sooner). "
	    "At or below batch.max: no effect."),
	INT(batch_wait_ms, 0, 1000, "1",
	    "How long a partial batch may wait for more records while they keep coming (it is "
	    "decided once a poll comes back empty); up to ten times that while more are queued."),
	INT(commit_overlap, 0, 2, "2",
	    "2: up to two batch transactions in flight, each on its own thread and connection: a "
	    "partition's next full batch is decided on top of the one in flight and its rows sent "
	    "while that one commits; 1: one in flight, the next records read and parsed "
	    "meanwhile; 0: in line."),
	INT(poll_timeout_ms, 1, 1000, "100", "Consumer poll timeout when nothing is pending."),
	INT(record_max_bytes, 64, 65536, "4096",
	    "Payload size cap, checked before parsing; larger records are rejected too_large. "
	    "Recorded for the topic at the first start: a worker with another value refuses."),
	INT(stats_interval_ms, 0, 3600000, "10000", "Interval of the stats log line (0: off)."),
	INT(retry_backoff_max_ms, 10, 60000, "2000",
	    "Longest wait between retries after a Postgres or Kafka fault."),
	INT(tick_interval_ms, 100, 600000, "1000",
	    "How long a partition with a due hold may stay idle before the worker appends a tick "
	    "record to it (the bound on how late an expiry is)."),
	INT(dedupe_cache_max, 1, 10000000, "200000",
	    "Committed decisions a worker keeps per partition to answer repeats without a "
	    "Postgres lookup (about 160 bytes each; when full it starts again)."),
	INT(flush_timeout_ms, 100, 600000, "30000",
	    "How long shutdown and revoke wait for results to be delivered."),
	STR(trace_batches, "",
	    "A file the worker appends one line to per batch once its results are delivered: "
	    "the wall-clock moments (microseconds) it was read, decided, handed to a committer, "
	    "sent, committed, answered and delivered (docs/reference/operations.md: Where a "
	    "batch's time goes). Empty: off. For measuring (scripts/bench's S13), not for "
	    "production: the file grows without bound."),
	INT(admission_tick_ms, 10, 600000, "100",
	    "How often the worker appends a tick record to a partition whose waiting room has "
	    "a buyer's slot (or its draw) due, busy or idle, once it has read the partition to "
	    "its end (issue 33; issue 47: a room admits at ticks only): the bound on how late an "
	    "admission is published after its slot, at the cost of up to 1000 / this tick "
	    "records a second on an admitting partition. Above 1000 a room admits slower than "
	    "its rate (the schedule catches up by at most 1 s after a gap)."),
	STR(admission_keys, "",
	    "The waiting room's key ring (issue 33): a file of `KID SECRET` lines (SECRET 64 to "
	    "128 hex digits) and an optional `sign KID` line, mode 0600; the worker signs "
	    "admission tokens with it and verifies buys' tokens, the gateway checks them at the "
	    "edge (docs/reference/operations.md: The waiting room's keys). Keep a retired key in "
	    "the file: a replay verifies the tokens of the past with it. Empty: no key ring, and "
	    "a sale that needs admission is refused at its open record (no_key_ring)."),
	STR(metrics_listen, "",
	    "ADDR:PORT of the metrics endpoint (GET /metrics in Prometheus's text format, GET "
	    "/healthz; docs/reference/metrics.md), for the worker and the gateway alike: an IPv4 "
	    "address, or [IPv6]; port 0 takes a free port, logged at start. Empty: off (a "
	    "listening port is opt-in, and two processes on one host need two ports)."),
	STR(listen, "127.0.0.1:58080",
	    "(gateway) ADDR:PORT the HTTP front door listens on: an IPv4 address, or [IPv6]; "
	    "loopback by default (put a TLS proxy in front to serve the public). Port 0: any "
	    "free port, logged at start."),
	STR(admin_token, "",
	    "(gateway) Bearer token of the sale administration endpoints (open, restock, "
	    "close); empty: those endpoints are off (403). A secret: refused on --set, and in a "
	    "config file unless that file is private (mode 0600 or stricter, owned by the "
	    "process's user); prefer admin.token.file. At least 32 characters, printable ASCII "
	    "without spaces, at least 8 different (32 hex digits: 128 bits)."),
	STR(admin_token_file, "",
	    "(gateway) A file holding the admin token (its one line; e.g. `openssl rand -hex 16 "
	    ">FILE`), read when the key is set: a regular file owned by the process's user, mode "
	    "0600 or stricter, or start-up stops. Sets admin.token."),
	STR(auth_mode, "jwt",
	    "(gateway) How buyers are proven (issue 48): `jwt`, a buyer is the `sub` of a verified "
	    "`Authorization: Bearer` JSON Web Token (auth.jwt.keys, auth.jwt.pubkeys); `off`, "
	    "whoever the body or path names (a demo's or a test's: refused at start unless "
	    "`listen` is a loopback address, and warned of)."),
	STR(auth_jwt_keys, "",
	    "(gateway) HS256 keys of the buyers' tokens: a file of `KID SECRET` lines (SECRET 64 "
	    "to 128 hex digits; the key ring's format, admission.keys), mode 0600; a token's "
	    "`kid` picks its key (docs/reference/security.md)."),
	STR(auth_jwt_pubkeys, "",
	    "(gateway) Public keys of the buyers' tokens, so that the shop keeps its signing key: "
	    "a file of blocks, a `kid KID` line then a PEM public key (`openssl pkey -pubout`): "
	    "P-256 for ES256, Ed25519 for EdDSA; not writable by group or others."),
	STR(auth_jwt_audience, "",
	    "(gateway) When set, a buyer's token must name it in `aud` (a string or an array)."),
	INT(auth_jwt_leeway_s, 0, 300, "30",
	    "(gateway) Clock skew allowed on a token's exp, nbf and iat, in seconds."),
	STR(gateway_pg, "",
	    "(gateway) libpq connection string of the gateway's own read-only role (it only "
	    "reads decisions, carts and rooms): scripts/services makes `flashsale_gateway`, "
	    "SELECT only. Environment FLASHSALE_PG_GATEWAY overrides. Empty: pg, and the "
	    "gateway warns when that role may write. Either way its sessions are read-only "
	    "(default_transaction_read_only) and named flashsale-gateway (application_name, "
	    "unless the connection string names them)."),
	INT(http_threads, 1, 64, "1",
	    "(gateway) Threads serving HTTP connections (each an epoll loop; a waiting "
	    "connection costs none)."),
	INT(http_connections_max, 16, 1000000, "16000",
	    "(gateway) Open connections served; above it a request is answered 503 with "
	    "Retry-After and its connection closed (64 more are accepted for that answer, the "
	    "rest refused at accept)."),
	INT(http_body_max, 256, 65536, "4096",
	    "(gateway) Largest request body, in bytes; a larger one is answered 413."),
	INT(http_connection_memory, 4096, 1048576, "8192",
	    "(gateway) libmicrohttpd's memory per connection, in bytes: a request's headers and "
	    "the answer's must fit in it (a request with more is answered 431); it is most of "
	    "what a waiting connection costs."),
	INT(http_timeout_s, 1, 3600, "30",
	    "(gateway) A connection with no traffic for this long is closed (a slow or stuck "
	    "client; a long-poll or an event stream waiting for a result is not idle)."),
	INT(http_wait_max_ms, 0, 600000, "60000",
	    "(gateway) Longest long-poll (?wait=SECONDS, Prefer: wait=N); longer asks are cut "
	    "to it."),
	INT(http_heartbeat_ms, 100, 600000, "15000",
	    "(gateway) How often an idle event stream gets a comment line, so that proxies keep "
	    "it open."),
	INT(http_request_deadline_s, 1, 3600, "30",
	    "(gateway) A request's line, headers and body must all be in within this many "
	    "seconds of its connection's accept or of the end of the previous answer on it, "
	    "else the connection is closed: a client trickling its request (one header line "
	    "every 20 s) is cut, where http.timeout.s, which every byte restarts, never would. "
	    "A long-poll or an event stream is not bounded by it once its request is in. An "
	    "idle keep-alive connection is closed after the shorter of the two."),
	INT(http_client_waits_max, 0, 1000000, "0",
	    "(gateway) Long-polls (?wait) and event streams one client address may hold open at "
	    "once; past it such a request is answered 429 with Retry-After (an IPv6 client is "
	    "its /64). 0: no cap. Behind a proxy every client has the proxy's address: leave it "
	    "0 there and cap clients at the proxy (config/nginx), or set it above what the whole "
	    "proxy holds."),
	INT(http_client_rate, 0, 1000000, "0",
	    "(gateway) Requests a second one client address may make, sustained (a token "
	    "bucket of http.client.burst); past it a request is answered 429 with Retry-After "
	    "and nothing done. /healthz and /readyz are not counted. 0: no limit. Behind a proxy "
	    "it limits the proxy as a whole: leave it 0 there and limit clients at the proxy."),
	INT(http_client_burst, 1, 1000000, "100",
	    "(gateway) Requests one client address may make at once above http.client.rate "
	    "(the token bucket's size)."),
	INT(results_cache_max, 1000, 10000000, "500000",
	    "(gateway) Results kept in memory (about 600 bytes each); older ones are read from "
	    "Postgres when asked for."),
	INT(skus_max, 1, 10000000, "100000",
	    "(gateway) SKUs the gateway follows: only SKUs the stock topic named enter (a request "
	    "naming another adds none); past it a new SKU's stock record is not kept and /readyz "
	    "answers 503 sku_table_full."),
	INT(lookups_unknown_rate, 1, 1000000, "200",
	    "(gateway) Postgres lookups per second for intent ids, carts and waiting rooms this "
	    "gateway has never seen (a token bucket holding one second's worth); past it such a "
	    "read is answered 503 busy with Retry-After. An id published or decided here never "
	    "pays it."),
	INT(publish_timeout_ms, 100, 600000, "5000",
	    "(gateway) How long a request waits for its record to be on the log (acks=all) "
	    "before it is answered 503: nothing is answered 202 that is not on the log."),
	STR(payment_secret_file, "",
	    "(gateway) The payment provider's secret(s), a file of the key ring's format (`KID "
	    "SECRET` lines, SECRET 64 to 128 hex digits), mode 0600 (refused at start otherwise): "
	    "a confirm (of a buy or a cart) is accepted only with a Flashsale-Signature made with "
	    "one of its keys over the raw body (docs/reference/http.md: Signed payments). Two "
	    "keys during a rotation. Empty: payments are off, every confirm is answered 403 "
	    "payments_disabled."),
	STR(payment_checkout_url, "",
	    "(gateway) Where the sale page's Pay sends the buyer: the payment provider's "
	    "checkout page, http(s)://HOST[:PORT][/PATH] (no query; the page adds ?intent=ID&"
	    "sku=SKU&return=PATH). The demo's is scripts/payment-stub. Empty: the page says "
	    "payments are not set up."),
	STR(top_metrics, "",
	    "(flashsale top) The metrics endpoints `flashsale top` scrapes when --metrics is not "
	    "given: URLs separated by commas, at most 16 (a URL without a scheme gets http://, "
	    "one without a path /metrics), e.g. 127.0.0.1:9464,127.0.0.1:9465 for two workers. "
	    "Empty: the stock topic only."),
};

enum { KEYS_LEN = sizeof keys / sizeof keys[0] };

static void file_name(const struct key *k, char *out, size_t n)
{
	snprintf(out, n, "%s", k->name);
	for (char *p = out; *p; p++)
		if (*p == '_')
			*p = '.';
}

/* Empty, or http(s)://HOST... of characters that need no escaping in a URL's path nor in an
 * HTML attribute (the gateway writes it into the sale page). */
static bool checkout_url_ok(const char *v)
{
	if (!*v)
		return true;
	const char *rest = strncmp(v, "https://", 8) == 0  ? v + 8
			   : strncmp(v, "http://", 7) == 0 ? v + 7
							   : NULL;
	if (!rest || !*rest || *rest == '/' || *rest == ':')
		return false;
	for (const char *p = rest; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._~:/-", *p))
			return false;
	return true;
}

static int set_key(struct fs_config *c, const struct key *k, const char *value, const char *source,
		   char err[FS_CONF_ERR_MAX])
{
	char name[64];
	file_name(k, name, sizeof name);
	char *field = (char *)c + k->offset;
	if (k->type == T_STR) {
		if (strlen(value) >= k->size) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: %s: value too long (max %zu bytes)",
				 source, name, k->size - 1);
			return -EINVAL;
		}
		if (strcmp(k->name, "log_level") == 0 && strcmp(value, "error") != 0 &&
		    strcmp(value, "warn") != 0 && strcmp(value, "info") != 0 &&
		    strcmp(value, "debug") != 0) {
			snprintf(err, FS_CONF_ERR_MAX,
				 "%s: log.level: '%s' is not one of error, warn, info, debug",
				 source, value);
			return -EINVAL;
		}
		if (strcmp(k->name, "auth_mode") == 0 && strcmp(value, "jwt") != 0 &&
		    strcmp(value, "off") != 0) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: auth.mode: '%s' is not one of jwt, off",
				 source, value);
			return -EINVAL;
		}
		if (strcmp(k->name, "misrouted") == 0 && strcmp(value, "forward") != 0 &&
		    strcmp(value, "reject") != 0) {
			snprintf(err, FS_CONF_ERR_MAX,
				 "%s: misrouted: '%s' is not one of forward, reject", source,
				 value);
			return -EINVAL;
		}
		if (strcmp(k->name, "payment_checkout_url") == 0 && !checkout_url_ok(value)) {
			snprintf(err, FS_CONF_ERR_MAX,
				 "%s: payment.checkout.url: not http(s)://HOST[:PORT][/PATH] of "
				 "A-Z a-z 0-9 . _ ~ : / -",
				 source);
			return -EINVAL;
		}
		strcpy(field, value);
		return 0;
	}
	char *end = NULL;
	errno = 0;
	long long v = strtoll(value, &end, 10);
	if (errno || end == value || *end != '\0') {
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s: '%s' is not an integer", source, name,
			 value);
		return -EINVAL;
	}
	if (v < k->min || v > k->max) {
		snprintf(err, FS_CONF_ERR_MAX,
			 "%s: %s: %lld is out of range [%" PRId64 ", %" PRId64 "]", source, name, v,
			 k->min, k->max);
		return -EINVAL;
	}
	*(int64_t *)(void *)field = v;
	return 0;
}

void fs_config_defaults(struct fs_config *c)
{
	memset(c, 0, sizeof *c);
	char err[FS_CONF_ERR_MAX];
	for (int i = 0; i < KEYS_LEN; i++)
		set_key(c, &keys[i], keys[i].def, "default", err);
}

/* Sets one key, its secrets' rules and files aside (config_set below). */
static int set_plain(struct fs_config *c, const char *key, const char *value, const char *source,
		     char err[FS_CONF_ERR_MAX])
{
	if (strncmp(key, "kafka.", 6) == 0) {
		const char *k = key + 6;
		if (!*k || strlen(k) >= sizeof c->kafka[0].key ||
		    strlen(value) >= sizeof c->kafka[0].value) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: %s: key or value too long", source,
				 key);
			return -EINVAL;
		}
		int i = 0;
		while (i < c->kafka_len && strcmp(c->kafka[i].key, k) != 0)
			i++;
		if (i == FS_CONF_PASSTHROUGH_MAX) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: too many kafka.* keys (max %d)", source,
				 FS_CONF_PASSTHROUGH_MAX);
			return -EINVAL;
		}
		strcpy(c->kafka[i].key, k);
		strcpy(c->kafka[i].value, value);
		if (i == c->kafka_len)
			c->kafka_len++;
		return 0;
	}
	for (int i = 0; i < KEYS_LEN; i++) {
		char name[64];
		file_name(&keys[i], name, sizeof name);
		if (strcmp(name, key) == 0)
			return set_key(c, &keys[i], value, source, err);
	}
	snprintf(err, FS_CONF_ERR_MAX, "%s: unknown key '%s' (see --help-config)", source, key);
	return -EINVAL;
}

/* Sets key=value after the rule on its strength (an admin token: fs_secret_weak). */
static int check_secret(struct fs_config *c, const char *key, const char *value, const char *source,
			char err[FS_CONF_ERR_MAX])
{
	const char *weak = strcmp(key, "admin.token") == 0 && *value ? fs_secret_weak(value) : NULL;
	if (weak) {
		snprintf(err, FS_CONF_ERR_MAX, "%s: admin.token: too weak: %s", source, weak);
		return -EINVAL;
	}
	return set_plain(c, key, value, source, err);
}

/* librdkafka's properties that hold a secret (as kafka.KEY, kafka.consumer.KEY or
 * kafka.producer.KEY). */
static const char *const kafka_secrets[] = {
	"sasl.password",	 "ssl.key.password",
	"ssl.keystore.password", "sasl.oauthbearer.client.secret",
	"ssl.key.pem",
};

/* The librdkafka property under a kafka.* key, without the consumer./producer. prefix. */
static const char *kafka_property(const char *key)
{
	key += 6;
	if (strncmp(key, "consumer.", 9) == 0)
		return key + 9;
	if (strncmp(key, "producer.", 9) == 0)
		return key + 9;
	return key;
}

static bool kafka_secret(const char *property, size_t len)
{
	for (size_t i = 0; i < sizeof kafka_secrets / sizeof kafka_secrets[0]; i++)
		if (strlen(kafka_secrets[i]) == len &&
		    strncmp(kafka_secrets[i], property, len) == 0)
			return true;
	return false;
}

/* A libpq conninfo with a password in it: a URI's user:password@ or ?password=, or a
 * `password = value` pair ('quoted' values skipped whole, so that a quoted "password=" inside
 * another value does not count). Not libpq's own parser (the simulator links no libpq), but
 * its grammar (libpq's "Connection Strings"). */
static bool conninfo_has_password(const char *s)
{
	if (strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0) {
		const char *auth = strstr(s, "://") + 3;
		size_t n = strcspn(auth, "/?");
		const char *at = memchr(auth, '@', n);
		return (at && memchr(auth, ':', (size_t)(at - auth))) || strstr(s, "password=");
	}
	while (*s) {
		while (isspace((unsigned char)*s))
			s++;
		const char *kw = s;
		while (*s && *s != '=' && !isspace((unsigned char)*s))
			s++;
		bool pw = (size_t)(s - kw) == 8 && strncmp(kw, "password", 8) == 0;
		while (isspace((unsigned char)*s))
			s++;
		if (*s != '=')
			return false;
		s++;
		while (isspace((unsigned char)*s))
			s++;
		const char *val = s;
		if (*s == '\'') {
			for (s++; *s && *s != '\''; s++)
				if (*s == '\\' && s[1])
					s++;
			if (*s)
				s++;
		} else {
			while (*s && !isspace((unsigned char)*s))
				s += *s == '\\' && s[1] ? 2 : 1;
		}
		if (pw && s > val && !(s - val == 2 && *val == '\''))
			return true;
	}
	return false;
}

/* Where a value comes from: the program itself (and the environment, which only the user and
 * root can read), a command line, or a config file that is private or not. */
struct origin {
	bool command_line;
	const char *not_private; /* a file: why it is not private; NULL when it is */
};

/* Whether key=value holds a secret; if so, where it belongs instead (into instead). */
static bool secret_instead(const char *key, const char *value, char *instead, size_t n)
{
	if (strcmp(key, "admin.token") == 0) {
		snprintf(instead, n, "a file of mode 0600 named by admin.token.file");
		return true;
	}
	if (strncmp(key, "kafka.", 6) == 0 &&
	    kafka_secret(kafka_property(key), strlen(kafka_property(key)))) {
		snprintf(instead, n, "a config file of mode 0600 (owned by this user)");
		return true;
	}
	if ((strcmp(key, "pg") == 0 || strcmp(key, "gateway.pg") == 0) &&
	    conninfo_has_password(value)) {
		snprintf(instead, n, "libpq's password file (passfile=, mode 0600)");
		return true;
	}
	return false;
}

/* admin.token.file=PATH: the token read from the private file PATH, set as admin.token (as
 * from a private config file). Kafka's password file is kafka.sasl.password.file, which
 * src/io/kafka.c reads (issue 48, item 4). */
static int set_token_file(struct fs_config *c, const char *key, const char *path,
			  const char *source, char err[FS_CONF_ERR_MAX])
{
	if (set_plain(c, key, path, source, err) < 0) /* the path, for the record */
		return -EINVAL;
	if (!*path)
		return 0;
	char secret[FS_CONF_STR_MAX], why[FS_CONF_ERR_MAX / 2];
	int rc = fs_secret_file_read(path, key, secret, sizeof secret, why, sizeof why);
	if (rc == 0)
		rc = check_secret(c, "admin.token", secret, source, err);
	else
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s", source, why);
	OPENSSL_cleanse(secret, sizeof secret);
	return rc < 0 ? -EINVAL : 0;
}

/* kafka.ssl.key.location names a private key librdkafka reads itself: held to the rule of
 * our own secrets' files (io/secret.h) before it is passed on. */
static int set_key_location(struct fs_config *c, const char *key, const char *path,
			    const char *source, char err[FS_CONF_ERR_MAX])
{
	struct stat st;
	char why[FS_CONF_ERR_MAX / 2];
	if (stat(path, &st) < 0) {
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s %s: %s", source, key, path, strerror(errno));
		return -EINVAL;
	}
	if (fs_secret_stat_check(&st, key, path, why, sizeof why) < 0) {
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s", source, why);
		return -EINVAL;
	}
	return set_plain(c, key, path, source, err);
}

static int config_set(struct fs_config *c, const char *key, const char *value, const char *source,
		      const struct origin *from, char err[FS_CONF_ERR_MAX])
{
	if (strcmp(key, "admin.token.file") == 0)
		return set_token_file(c, key, value, source, err);
	if (*value && strncmp(key, "kafka.", 6) == 0 &&
	    strcmp(kafka_property(key), "ssl.key.location") == 0)
		return set_key_location(c, key, value, source, err);
	char instead[200];
	bool secret = *value && secret_instead(key, value, instead, sizeof instead);
	if (secret && from->command_line) {
		snprintf(err, FS_CONF_ERR_MAX,
			 "%s: %s is a secret, and a command line is readable by every user of the "
			 "machine (/proc/PID/cmdline): put it in %s",
			 source, key, instead);
		return -EINVAL;
	}
	if (secret && from->not_private) {
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s is a secret, and %s; or put it in %s",
			 source, key, from->not_private, instead);
		return -EINVAL;
	}
	return check_secret(c, key, value, source, err);
}

int fs_config_set(struct fs_config *c, const char *key, const char *value, const char *source,
		  char err[FS_CONF_ERR_MAX])
{
	static const struct origin program = {false, NULL};
	return config_set(c, key, value, source, &program, err);
}

int fs_config_set_kv(struct fs_config *c, const char *kv, char err[FS_CONF_ERR_MAX])
{
	char buf[1024];
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof buf) {
		snprintf(err, FS_CONF_ERR_MAX, "--set %s: expected KEY=VALUE", kv);
		return -EINVAL;
	}
	memcpy(buf, kv, (size_t)(eq - kv));
	buf[eq - kv] = '\0';
	static const struct origin command_line = {true, NULL};
	return config_set(c, buf, eq + 1, "--set", &command_line, err);
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int fs_config_load_file(struct fs_config *c, const char *path, char err[FS_CONF_ERR_MAX])
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, FS_CONF_ERR_MAX, "%s: %s", path, strerror(errno));
		return -errno;
	}
	/* A file that others can read may not hold a secret (config_set); why, if it is not. */
	char why[FS_CONF_ERR_MAX / 2] = "";
	struct stat st;
	if (fstat(fileno(f), &st) == 0)
		fs_secret_stat_check(&st, "the config file", path, why, sizeof why);
	else
		snprintf(why, sizeof why, "%s", strerror(errno));
	const struct origin from = {false, *why ? why : NULL};
	char line[2048];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		lineno++;
		char source[FS_CONF_ERR_MAX / 2];
		snprintf(source, sizeof source, "%s:%d", path, lineno);
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: line too long", source);
			rc = -EINVAL;
			break;
		}
		char *s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: expected 'key = value'", source);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		if (!*key) {
			snprintf(err, FS_CONF_ERR_MAX, "%s: empty key", source);
			rc = -EINVAL;
			break;
		}
		rc = config_set(c, key, value, source, &from, err);
	}
	fclose(f);
	return rc;
}

int fs_config_apply_env(struct fs_config *c, char err[FS_CONF_ERR_MAX])
{
	const char *k = getenv("FLASHSALE_KAFKA");
	const char *p = getenv("FLASHSALE_PG");
	const char *gp = getenv("FLASHSALE_PG_GATEWAY");
	if (k && *k && fs_config_set(c, "brokers", k, "FLASHSALE_KAFKA", err) < 0)
		return -EINVAL;
	if (p && *p && fs_config_set(c, "pg", p, "FLASHSALE_PG", err) < 0)
		return -EINVAL;
	if (gp && *gp && fs_config_set(c, "gateway.pg", gp, "FLASHSALE_PG_GATEWAY", err) < 0)
		return -EINVAL;
	return 0;
}

void fs_config_describe(FILE *out)
{
	for (int i = 0; i < KEYS_LEN; i++) {
		char name[64];
		file_name(&keys[i], name, sizeof name);
		if (keys[i].type == T_INT)
			fprintf(out, "  %-22s integer %" PRId64 "..%" PRId64 ", default %s\n", name,
				keys[i].min, keys[i].max, keys[i].def);
		else
			fprintf(out, "  %-22s string, default \"%s\"\n", name, keys[i].def);
		fprintf(out, "  %-22s %s\n", "", keys[i].doc);
	}
	fprintf(out, "  %-22s passed to librdkafka as is (consumers and producers)\n", "kafka.*");
	fprintf(out,
		"  %-22s the file librdkafka's sasl.password is read from: this user's, mode "
		"0600, the password alone (docs/reference/operations.md: A secured broker)\n",
		"kafka.sasl.password.file");
	fprintf(out, "  %-22s passed to consumers only (e.g. kafka.consumer.session.timeout.ms)\n",
		"kafka.consumer.*");
	fprintf(out, "  %-22s passed to producers only (e.g. kafka.producer.linger.ms)\n",
		"kafka.producer.*");
}

/* A table cell: '|' escaped, nothing else needs it in the docs of the keys. */
static void md_cell(FILE *out, const char *text)
{
	for (const char *p = text; *p; p++) {
		if (*p == '|')
			fputc('\\', out);
		fputc(*p, out);
	}
}

void fs_config_describe_markdown(FILE *out)
{
	fprintf(out, "| key | type | default | what it does |\n|---|---|---|---|\n");
	for (int i = 0; i < KEYS_LEN; i++) {
		char name[64];
		file_name(&keys[i], name, sizeof name);
		fprintf(out, "| `%s` | ", name);
		if (keys[i].type == T_INT)
			fprintf(out, "integer, %" PRId64 " to %" PRId64 " | `%s` | ", keys[i].min,
				keys[i].max, keys[i].def);
		else
			fprintf(out, "string | `%s` | ", keys[i].def);
		md_cell(out, keys[i].doc);
		fprintf(out, " |\n");
	}
	fprintf(out,
		"| `kafka.*` | string | | passed to librdkafka as is (consumers and producers) "
		"|\n| `kafka.sasl.password.file` | string | | the file librdkafka's "
		"`sasl.password` "
		"is read from at start: a regular file of this user's, mode 0600, holding the "
		"password alone; any other is refused (docs/reference/operations.md: A secured "
		"broker) |\n| `kafka.consumer.*` | string | | passed to consumers only (e.g. "
		"`kafka.consumer.session.timeout.ms`) |\n| `kafka.producer.*` | string | | "
		"passed to producers only (e.g. `kafka.producer.linger.ms`) |\n");
}
