/* record.h: the records of the intents topic, parsed and validated.
 *
 * A record is one Kafka message: key, payload, partition, offset, timestamp. Parsing never
 * fails hard: a record that breaks any rule comes back with kind FS_KIND_INVALID and a stable
 * reason string (see fs_reject_reason below), which the worker records as a `rejected`
 * decision. Parsing is pure (no I/O, no clock). The common shape of a record is read by a
 * small scanner without allocating; everything else goes to jansson, which allocates while it
 * parses; nothing is kept after return. Thread: any. */
#ifndef FS_RECORD_H
#define FS_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	FS_SKU_LEN_MAX = 64,
	FS_BUYER_LEN_MAX = 64,
	FS_UUID_LEN = 36,
	FS_TOKEN_LEN_MAX = 256,
	/* A payload over this size is rejected before parsing (configurable, this is the ceiling).
	 */
	FS_RECORD_BYTES_MAX = 65536,
	FS_QTY_MAX = 1000000,
	FS_STOCK_MAX = 1000000000,
	/* The longest token kept for verification: an admission token (src/core/token.h) is
	 * shorter; a longer one (up to FS_TOKEN_LEN_MAX) is accepted, and never verifies. */
	FS_TOKEN_TEXT_MAX = 160,
	/* The waiting room's open record (issue 33; src/core/room.h). */
	FS_DRAW_SEED_LEN_MAX = 64,
	FS_ADMIT_RATE_MAX = 1000000,
	FS_TOKEN_SECONDS_MAX = 86400,
};

enum fs_kind {
	FS_KIND_INVALID = 0,
	FS_KIND_BUY = 1,
	FS_KIND_CONFIRM = 2,
	FS_KIND_CANCEL = 3,
	FS_KIND_OPEN = 4,
	FS_KIND_RESTOCK = 5,
	FS_KIND_CLOSE = 6,
	FS_KIND_TICK = 7,
	/* Carts (issue 31, src/core/cart.h): a cart; a confirm or cancel that names a cart id
	 * (type confirm / cancel with cart_id); a message of the protocol between partitions
	 * (cart_reserve, cart_answer, cart_end), written by workers. */
	FS_KIND_CART = 8,
	FS_KIND_CART_CONFIRM = 9,
	FS_KIND_CART_CANCEL = 10,
	FS_KIND_CART_MSG = 11,
	/* A buyer joins a SKU's waiting room (issue 33, src/core/room.h). */
	FS_KIND_JOIN = 12,
};

/* The waiting room's draw (issue 33, src/core/room.h). */
enum fs_draw {
	FS_DRAW_RANDOM = 1, /* by a keyed hash of (seed, buyer id) */
	FS_DRAW_FIFO = 2,   /* in join order */
};

/* The most lines a cart may have: a protocol constant (the configured cart.lines.max is at
 * most this), so that every structure here is of fixed size. */
enum { FS_CART_LINES_MAX = 8 };

struct fs_cart_line {
	char sku[FS_SKU_LEN_MAX + 1];
	int64_t qty;
	int32_t part; /* the partition of the SKU (fs_partition_of) */
};

/* A cart record, parsed: the buyer's request. */
struct fs_cart_req {
	int64_t body_hash; /* the record's: a retry's is equal, another body's not */
	char cart_id[FS_UUID_LEN + 1];
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	uint32_t nlines;
	struct fs_cart_line lines[FS_CART_LINES_MAX];
};

enum fs_cart_msg_kind {
	FS_CART_RESERVE = 1, /* C -> P: hold this group for the cart's round */
	FS_CART_ANSWER = 2,  /* P -> C: the group is held, or refused (which line, why) */
	FS_CART_END = 3,     /* C -> P: commit, release or confirm the group of a round */
};

enum fs_cart_action {
	FS_CART_COMMIT = 1,  /* pending -> held (the cart is held) */
	FS_CART_RELEASE = 2, /* pending or held -> released (refused, cancelled, expired) */
	FS_CART_CONFIRM = 3, /* held -> sold */
};

/* One protocol message. The group's lines travel with the reserve; `line` numbers are the
 * cart's (0-based), so that an answer names the line the buyer sent. */
struct fs_cart_msg {
	int kind;	/* enum fs_cart_msg_kind */
	int64_t origin; /* the offset of the record whose step sent it (not on the wire) */
	/* The Kafka key it goes with: the cart id to C, one of the group's SKUs to P (the
	 * partitioning rule then puts it on its partition). */
	char key[FS_SKU_LEN_MAX + 1];
	char cart_id[FS_UUID_LEN + 1];
	int32_t round; /* 1: the cart's own; 2, 3, ...: a late confirm's */
	int32_t coord; /* C */
	int32_t part;  /* P: the group's partition (the reserve's and end's destination) */
	/* reserve */
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	uint32_t nlines;
	struct {
		char sku[FS_SKU_LEN_MAX + 1];
		int64_t qty;
		int32_t line;
	} lines[FS_CART_LINES_MAX];
	/* answer */
	bool held;
	int outcome;	    /* a refusal's enum fs_outcome: sold_out, limit_exceeded, ... */
	const char *reason; /* static string or NULL */
	int32_t line;	    /* the refused line (-1: none) */
	int64_t hold_ms;    /* held: the shortest hold_ms of the group's SKUs */
	/* end */
	int action; /* enum fs_cart_action */
};

/* One parsed record. Fixed-size, no pointers into the message: safe to keep after the
 * message is destroyed. */
struct fs_record {
	enum fs_kind kind;
	int32_t partition;
	int64_t offset;
	int64_t ts_ms; /* the record's timestamp (LogAppendTime on the intents topic) */

	bool has_intent; /* intent_id is a valid UUID (also set on some invalid records) */
	char intent_id[FS_UUID_LEN + 1]; /* canonical lower-case form */
	char sku[FS_SKU_LEN_MAX + 1];
	char buyer_id[FS_BUYER_LEN_MAX + 1];
	int64_t qty; /* buy: units; open: stock; restock: units added */

	/* open only */
	int64_t per_buyer_limit;
	int64_t max_qty;
	int64_t hold_ms;
	int64_t opens_at_ms;  /* 0: open from the open record on */
	int64_t closes_at_ms; /* 0: no end */

	union {
		/* buy: its token (token.present), kept when it is at most FS_TOKEN_TEXT_MAX
		 * bytes (a longer one is token.too_long: accepted, never verified) */
		struct {
			bool present, too_long;
			char text[FS_TOKEN_TEXT_MAX + 1];
			/* The verdict fs_batch_needs_lookup found at clock_ms (verdict 0: none
			 * yet), which the core takes instead of verifying again at that clock. */
			int8_t verdict;
			int64_t verdict_clock;
		} token;
		/* open: the waiting room (admission.rate_per_s > 0: the sale needs admission) */
		struct {
			int64_t rate_per_s, token_ms;
			int draw; /* enum fs_draw (src/core/room.h) */
			char seed[FS_DRAW_SEED_LEN_MAX + 1];
		} admission;
	} u;

	/* FNV-1a 64 of the fields that define the intent (kind, sku, buyer, qty; not the token,
	 * which is not verified yet, so that a retry with a refreshed one is a repeat), masked to
	 * 63 bits so that it fits a signed bigint. Equal for a verbatim retry, different for the
	 * same intent id with another body (a conflict). Zero for invalid records. */
	int64_t body_hash;

	/* The partitioning rule (fs_partition_of) for a keyed record, when the limits name the
	 * partition count: the partition the record belongs on; -1 for a record without a key
	 * or when not checked. */
	int32_t route;
	/* On the wrong partition (route != partition) and to be forwarded there, not decided here
	 * (limits.misrouted_reject unset). The rest of the record is parsed as usual. */
	bool misrouted;

	const char *reject_reason; /* static string, set iff kind == FS_KIND_INVALID */
	/* The kind it had before the store refused it (fs_item_refuse): a refused cart_reserve
	 * still answers its coordinator (issue 47, item 5). 0 otherwise. */
	enum fs_kind refused_kind;
};

struct fs_record_limits {
	size_t bytes_max;  /* payload size cap, <= FS_RECORD_BYTES_MAX */
	bool jansson_only; /* skip the flat-object scanner (tests compare the two paths) */
	/* The intents topic's partition count, as recorded for the topic (0: the rule is not
	 * checked). A keyed record whose rule partition is not its own is misrouted: forwarded
	 * (rec.misrouted), or with misrouted_reject rejected `wrong_partition`. */
	int32_t partitions;
	bool misrouted_reject;
	/* Cart records (cart, a confirm or cancel naming a cart id, the protocol's messages) are
	 * read; else they are rejected bad_type, as before carts. */
	bool carts;
};

/* Parses one message. Always fills *out (partition/offset/ts from the arguments). Returns 0
 * for a valid record, -EINVAL for an invalid one (out->reject_reason says why). */
int fs_record_parse(const struct fs_record_limits *limits, const void *key, size_t key_len,
		    const void *payload, size_t payload_len, int32_t partition, int64_t offset,
		    int64_t ts_ms, struct fs_record *out);

/* What a cart record or a protocol message holds beyond struct fs_record (which is copied
 * per item and stays small): its lines, or the message. */
struct fs_record_ext {
	struct fs_cart_req cart;
	struct fs_cart_msg msg;
};

/* fs_record_parse, keeping a cart's lines or a message in *ext (NULL: validated, not kept). */
int fs_record_parse_ext(const struct fs_record_limits *limits, const void *key, size_t key_len,
			const void *payload, size_t payload_len, int32_t partition, int64_t offset,
			int64_t ts_ms, struct fs_record *out, struct fs_record_ext *ext);

const char *fs_kind_name(enum fs_kind kind);

/* The partitioning rule of the intents topic: Kafka's Java default partitioner for a keyed
 * record, toPositive(murmur2(key)) % partitions (librdkafka's murmur2 / murmur2_random for a
 * non-empty key). fs_murmur2 is Kafka's Utils.murmur2 (seed 0x9747b28c), as an unsigned
 * value; fs_partition_of returns -1 for an empty key or partitions < 1. */
uint32_t fs_murmur2(const void *key, size_t len);
int32_t fs_partition_of(const void *key, size_t len, int32_t partitions);
/* True if the rule names another partition than the record's own (misrouted, in either
 * mode: forwarded, or rejected wrong_partition). */
static inline bool fs_record_off_route(const struct fs_record *r)
{
	return r->route >= 0 && r->route != r->partition;
}
/* The rule's name, as results and messages give it. */
#define FS_PARTITIONER_NAME "murmur2"

/* True if the payload has the common shape that fs_record_parse reads without jansson (one
 * object of plain string, integer and null members); for tests and tools. */
bool fs_record_is_flat(const void *payload, size_t payload_len);

/* Validators shared with the CLI so that it refuses what the worker would reject. */
bool fs_sku_valid(const char *sku);
bool fs_buyer_valid(const char *buyer);
/* Parses a UUID in any case into the canonical lower-case form; false if not a UUID. */
bool fs_uuid_canon(const char *in, char out[FS_UUID_LEN + 1]);
/* A time-ordered (version 7) id: unix_ms in the first 48 bits, then 74 bits of r1 and r2 (the
 * caller's randomness). How the client library and the load generator mint intent ids. */
void fs_uuid_v7(int64_t unix_ms, uint64_t r1, uint64_t r2, char out[FS_UUID_LEN + 1]);
/* The time in ms of a canonical version-7 id (of the RFC variant), when it was minted by the
 * minter's clock; -1 for any other id. */
int64_t fs_uuid_v7_ms(const char *canon);

#endif
