-- flashsale schema. Postgres is the truth (DESIGN.md section 3). Idempotent: safe to apply again.
-- One database serves one intents topic and one consumer group's decisions.

-- One row per (consumer group, topic, partition): where the worker goes on from. The batch
-- transaction moves next_offset with a compare-and-set; that is the fence against stale workers.
CREATE TABLE IF NOT EXISTS partitions (
    grp            text   NOT NULL,
    topic          text   NOT NULL,
    part           int    NOT NULL,
    -- next record to decide; -1: none decided yet, start at the beginning of the log
    next_offset    bigint NOT NULL DEFAULT -1,
    -- offset of the first record ever decided here (-1: none)
    first_offset   bigint NOT NULL DEFAULT -1,
    -- results were delivered for every record below this offset (-1: none known)
    replied_offset bigint NOT NULL DEFAULT -1,
    -- the partition's log clock: the largest record timestamp seen, in ms
    clock_ms       bigint NOT NULL DEFAULT 0,
    -- record counts by class: they add up to the records decided (audit, INV-2)
    n_records      bigint NOT NULL DEFAULT 0,
    n_fresh        bigint NOT NULL DEFAULT 0,
    n_repeats      bigint NOT NULL DEFAULT 0,
    n_conflicts    bigint NOT NULL DEFAULT 0,
    n_invalid      bigint NOT NULL DEFAULT 0,
    n_sale         bigint NOT NULL DEFAULT 0,
    n_ticks        bigint NOT NULL DEFAULT 0,
    n_batches      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (grp, topic, part),
    CHECK (next_offset >= -1),
    CHECK (replied_offset <= next_offset)
);
-- Written by every batch's compare-and-set: which commit attempt moved the offset last. After
-- a connection died with COMMIT in flight, "next_offset is my batch's end" could also mean
-- that another worker committed the same range; the token tells.
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS commit_token text;

-- The SKUs on sale and their counters. The CHECKs are the backstop of INV-1.
CREATE TABLE IF NOT EXISTS skus (
    sku             text     PRIMARY KEY,
    part            int      NOT NULL,
    status          text     NOT NULL CHECK (status IN ('open', 'closed')),
    supply          bigint   NOT NULL,  -- initial stock + restocks
    available       bigint   NOT NULL,
    held            bigint   NOT NULL,
    sold            bigint   NOT NULL,  -- confirmed
    per_buyer_limit int      NOT NULL CHECK (per_buyer_limit >= 1),
    max_qty         int      NOT NULL CHECK (max_qty >= 1),
    hold_ms         bigint   NOT NULL CHECK (hold_ms >= 1000),
    opens_at_ms     bigint   NOT NULL DEFAULT 0,
    closes_at_ms    bigint   NOT NULL DEFAULT 0,
    CHECK (available >= 0),
    CHECK (held >= 0),
    CHECK (sold >= 0),
    CHECK (available + held + sold = supply)
);

-- One row per decided intent id and record kind (buy, confirm, cancel): the dedupe key. A
-- repeated id is answered from here; body_hash tells a verbatim retry from a conflict. A
-- confirm or cancel answered unknown_intent is kept under its kind + 10, so that it does not
-- use up the id: the right one after it takes effect (src/core/batch.h, FS_KEY_UNMATCHED); so
-- is a buy refused for its admission token (11: the same id with a valid token is decided on
-- its merits, issue 47 item 1).
-- The key includes the partition: the dedupe is scoped to the partition's log (issue 28, item
-- 6), so that the same id on buys of two SKUs that live on two partitions is decided by each
-- alone, whatever the timing, as a replay of either log decides it (docs/DESIGN-NOTES.md).
-- The worker writes new rows of decisions, reservations and buyers with COPY in its binary
-- format (src/io/store.c), each field as its column's exact type: changing a column's type here
-- means changing its writer there.
CREATE TABLE IF NOT EXISTS decisions (
    intent_id     uuid     NOT NULL,
    kind          smallint NOT NULL,   -- 1 buy, 2 confirm, 3 cancel; 12, 13 one that found no hold; 11 a token refusal
    body_hash     bigint   NOT NULL,
    part          int      NOT NULL,
    off           bigint   NOT NULL,
    sku           text     NOT NULL,
    buyer_id      text,
    qty           bigint   NOT NULL,
    outcome       text     NOT NULL,
    reason        text,
    expires_at_ms bigint,
    decided_at_ms bigint   NOT NULL,
    PRIMARY KEY (intent_id, kind, part)
);
-- The primary key is the only index: every other one is paid by every decision of every
-- batch. No index on (sku, outcome): it doubled the cost of the batch insert (4.5 -> 9 ms for
-- 600 rows, measured). No index on (part, off): it was a quarter of the WAL the decisions
-- write (30.2 -> 22.8 MB for 100,000 sold-out decisions), a quarter to a third of their
-- commit time; the worker never reads decisions by offset, and the offline readers (audit,
-- replay --compare) scan.
DROP INDEX IF EXISTS decisions_sku_outcome;
DROP INDEX IF EXISTS decisions_part_off;

-- One row per hold: the unit(s) a buyer won, and what became of them.
CREATE TABLE IF NOT EXISTS reservations (
    intent_id     uuid   NOT NULL,
    sku           text   NOT NULL,
    buyer_id      text   NOT NULL,
    qty           bigint NOT NULL CHECK (qty >= 1),
    status        text   NOT NULL CHECK (status IN ('held', 'confirmed', 'cancelled', 'expired')),
    expires_at_ms bigint NOT NULL,
    part          int    NOT NULL,
    off           bigint NOT NULL,
    PRIMARY KEY (intent_id, part)
);
-- No index on (sku, status): no query reads holds by SKU and status (the audit groups over the
-- whole table), and every hold paid for it: S2-sized runs (20,000 winners) spent 5-24% less in
-- their transactions without it.
DROP INDEX IF EXISTS reservations_sku_status;
-- A database from before the keys named the partition: rekey it (once; a no-op after).
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
        AND a.attnum = ANY (i.indkey) WHERE i.indrelid = 'decisions'::regclass
        AND i.indisprimary AND a.attname = 'part') = 0 THEN
        ALTER TABLE decisions DROP CONSTRAINT decisions_pkey,
            ADD PRIMARY KEY (intent_id, kind, part);
    END IF;
    IF (SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
        AND a.attnum = ANY (i.indkey) WHERE i.indrelid = 'reservations'::regclass
        AND i.indisprimary AND a.attname = 'part') = 0 THEN
        ALTER TABLE reservations DROP CONSTRAINT reservations_pkey,
            ADD PRIMARY KEY (intent_id, part);
    END IF;
END
$$;
-- The hold lifecycle: a hold ends confirmed, cancelled or expired, at a point of the log.
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS late boolean NOT NULL DEFAULT false;
-- the partition clock when the hold left `held`, and the record whose arrival ended it
-- (for an expiry: the record that moved the clock past expires_at_ms)
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS ended_at_ms bigint;
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS ended_off bigint;
-- Holds that ended, by the record that ended them: answering expiries again after a restart
-- (store.c) reads a partition's range of them. Partial: a new hold has no end yet, so it costs
-- this index nothing until it ends.
DROP INDEX IF EXISTS reservations_part_ended;
CREATE INDEX IF NOT EXISTS reservations_ended ON reservations (part, ended_off)
    WHERE ended_off IS NOT NULL;

-- What the store refused for good that was no record's own (issue 47, item 5;
-- docs/DESIGN-NOTES.md "The batch protocol"): a rule the worker cannot know of refused a row
-- written by a hold's expiry (round 0: the hold, intent_id, stays held, out of the expiry
-- clock, until a confirm or a cancel ends it; off is the record whose clock it was due at), or
-- by a waiting cart group's units taken when another record woke it (round >= 1: the group of
-- cart intent_id in that round was refused store_refused instead, at record off). The worker
-- and the replay read these rows as part of the log's decisions.
CREATE TABLE IF NOT EXISTS store_refusals (
    part      int    NOT NULL,
    off       bigint NOT NULL,
    intent_id uuid   NOT NULL,
    round     int    NOT NULL DEFAULT 0,
    PRIMARY KEY (part, intent_id, round)
);

-- Units per buyer and SKU, held + confirmed (the per-buyer limit counts these).
CREATE TABLE IF NOT EXISTS buyers (
    sku      text   NOT NULL,
    buyer_id text   NOT NULL,
    units    bigint NOT NULL CHECK (units >= 0),
    PRIMARY KEY (sku, buyer_id)
);

-- Records that could not be read as a valid intent (bad JSON, missing fields, wrong key ...),
-- with the reason and the intent id when one could be read. A row covers the offsets off to
-- off_end: a run of consecutive bad records of one batch with the same reason and no intent
-- id is one row, so that a poison flood costs a few rows, not one per record.
CREATE TABLE IF NOT EXISTS rejects (
    part      int    NOT NULL,
    off       bigint NOT NULL,
    intent_id uuid,
    reason    text   NOT NULL,
    PRIMARY KEY (part, off)
);
ALTER TABLE rejects ADD COLUMN IF NOT EXISTS off_end bigint;
UPDATE rejects SET off_end = off WHERE off_end IS NULL;
ALTER TABLE rejects ALTER COLUMN off_end SET NOT NULL;
DO $$ BEGIN
    ALTER TABLE rejects ADD CONSTRAINT rejects_range CHECK (off_end >= off AND
        (intent_id IS NULL OR off_end = off));
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- The sale's own records (open, restock, close), applied exactly once each.
CREATE TABLE IF NOT EXISTS sale_log (
    part    int    NOT NULL,
    off     bigint NOT NULL,
    kind    smallint NOT NULL,  -- 4 open, 5 restock, 6 close
    sku     text   NOT NULL,
    amount  bigint NOT NULL,    -- open: stock; restock: units added; close: 0
    outcome text   NOT NULL,
    reason  text,
    PRIMARY KEY (part, off)
);

-- Raises an error when a guard of the batch transaction does not hold, so that the pipelined
-- transaction aborts instead of committing the rest (a zero-row UPDATE is not an error).
-- SQLSTATE FSCAS: the offset compare-and-set failed (another worker owns the partition);
-- FSMIS: Postgres and the worker's memory disagree (reload and redo the batch).
CREATE OR REPLACE FUNCTION fs_assert(ok boolean, code text, what text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION '%', what USING ERRCODE = code;
    END IF;
    RETURN 1;
END
$$;

-- Records that arrived on the wrong partition of the intents topic (the partitioning rule:
-- Kafka's Java default, toPositive(murmur2(key)) % partitions) and were forwarded, key and
-- payload unchanged, to the partition the rule names, once their batch committed: that
-- partition decides them (and dedupes a second copy after a crash). One row per original
-- offset; the intent id and kind when the record named them.
CREATE TABLE IF NOT EXISTS forwards (
    part      int      NOT NULL,
    off       bigint   NOT NULL,
    to_part   int      NOT NULL CHECK (to_part >= 0),
    intent_id uuid,
    kind      smallint,           -- as decisions.kind; NULL for a record that names none
    PRIMARY KEY (part, off),
    CHECK (to_part <> part)
);
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS n_forwarded bigint NOT NULL DEFAULT 0;
-- Offsets below next_offset that hold no record a consumer is given: the markers that end
-- Kafka transactions, and the records of aborted ones (issue 28, item 9). With them the
-- record counters add up to the offsets decided: n_records + n_gaps = next - first.
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS n_gaps bigint NOT NULL DEFAULT 0;

-- The partitioning rule's inputs, recorded at a worker's first start for the intents topic:
-- the partition count (growing the topic would move SKUs away from their state) and what is
-- done with a misrouted record (a replay must decide alike). A worker whose topic or
-- configuration disagrees refuses to start.
CREATE TABLE IF NOT EXISTS topics (
    topic      text PRIMARY KEY,
    partitions int  NOT NULL CHECK (partitions >= 1),
    misrouted  text NOT NULL CHECK (misrouted IN ('forward', 'reject'))
);
-- The record size cap (record.max.bytes) decides too_large: recorded with the rule. NULL on a
-- row from before it was: the next worker's value is recorded then.
ALTER TABLE topics ADD COLUMN IF NOT EXISTS record_max_bytes int
    CHECK (record_max_bytes BETWEEN 64 AND 65536);

-- Carts (issue 31): all or nothing over SKUs on several partitions, decided by a protocol of
-- records between partitions (docs/DESIGN-NOTES.md, "Carts across partitions"; the code is
-- src/core/cart.c). Every row below is the worker's memory of the protocol, written in the
-- batch's transaction; the rows of one partition are its alone.
-- A cart at its coordinator (the partition of its cart id): its lines, where its round is,
-- and its answers.
CREATE TABLE IF NOT EXISTS carts (
    cart_id       uuid    NOT NULL,
    part          int     NOT NULL,
    buyer_id      text    NOT NULL,
    body_hash     bigint  NOT NULL,
    lines         jsonb   NOT NULL,   -- [{"sku", "qty", "part"}], in the cart's order
    state         text    NOT NULL CHECK (state IN ('reserving', 'held', 'confirmed', 'refused',
                      'cancelled', 'expired', 'late_round', 'confirmed_late', 'refund_required')),
    round         int     NOT NULL CHECK (round >= 1),
    at            int     NOT NULL,   -- the group in flight while a round is under way
    cancel_asked  boolean NOT NULL,
    hold_ms       bigint  NOT NULL,
    expires_at_ms bigint  NOT NULL,   -- 0 until held
    off           bigint  NOT NULL,   -- the cart record's offset
    outcome       text,               -- a refusal's (the cart's or a late round's)
    reason        text,
    line          int,
    answer        text,               -- the cart record's answer once given
    answer_reason text,
    PRIMARY KEY (cart_id, part)
);
-- A cart's group (its lines on one partition) at that partition, per round.
CREATE TABLE IF NOT EXISTS cart_groups (
    cart_id  uuid   NOT NULL,
    round    int    NOT NULL,
    part     int    NOT NULL,
    coord    int    NOT NULL,
    buyer_id text   NOT NULL,
    lines    jsonb  NOT NULL,   -- [{"sku", "qty", "line"}]
    state    text   NOT NULL CHECK (state IN ('waiting', 'pending', 'held', 'sold', 'released',
                 'refused')),
    off      bigint NOT NULL,   -- the reserve's offset: waiting groups go in this order
    PRIMARY KEY (cart_id, round, part)
);
-- The outbox: what a batch's cart steps owe once it committed, under the record whose step
-- made it: protocol messages for other partitions (to the intents topic, partition to_part,
-- under msg_key) and carts' results (to the results topic). Sent after the commit, and again
-- after a crash for every row at or above the partition's replied offset.
CREATE TABLE IF NOT EXISTS cart_out (
    part     int    NOT NULL,
    off      bigint NOT NULL,
    seq      int    NOT NULL,
    to_topic text   NOT NULL CHECK (to_topic IN ('intents', 'results')),
    to_part  int,               -- intents only
    msg_key  text   NOT NULL,
    payload  json   NOT NULL,   -- json, not jsonb: the record's text as written
    PRIMARY KEY (part, off, seq),
    CHECK ((to_topic = 'intents') = (to_part IS NOT NULL))
);
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS n_carts bigint NOT NULL DEFAULT 0;
-- A cart group's lines one per row: what the audit adds to the reservations when it counts a
-- SKU's held and sold units and a buyer's (a group pending or held holds its lines' units, a
-- sold one has sold them).
CREATE OR REPLACE VIEW cart_lines AS
    SELECT g.cart_id, g.round, g.part, g.coord, g.buyer_id, g.state, l.sku, l.qty, l.line
    FROM cart_groups g, jsonb_to_recordset(g.lines) AS l(sku text, qty bigint, line int);
-- The gateway reads a cart's results it does not hold in memory from the outbox, by cart id
-- (src/gateway/lookup.c): one index entry per result row, none per protocol message.
CREATE INDEX IF NOT EXISTS cart_out_results ON cart_out (msg_key) WHERE to_topic = 'results';

-- The waiting room (issue 33; src/core/room.h, docs/DESIGN-NOTES.md "The waiting room"). A
-- sale's admission, from its open record: admit_rate 0 when it needs none.
ALTER TABLE skus ADD COLUMN IF NOT EXISTS admit_rate bigint NOT NULL DEFAULT 0;
ALTER TABLE skus ADD COLUMN IF NOT EXISTS token_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE skus ADD COLUMN IF NOT EXISTS draw text CHECK (draw IN ('random', 'fifo'));
ALTER TABLE skus ADD COLUMN IF NOT EXISTS draw_seed text;
-- One row per buyer who joined a SKU's room: the join's record and clock, whether it came
-- before the draw (early), and its admission: the slot (admitted_ms, the token's not-before),
-- the clock when it was decided and the record that moved the clock there. The queue's order
-- is not stored: it is a function of these rows and the sale's seed (room.c's draw), which a
-- worker that loads them computes again.
CREATE TABLE IF NOT EXISTS room_joins (
    sku         text    NOT NULL,
    buyer_id    text    NOT NULL,
    part        int     NOT NULL,
    off         bigint  NOT NULL,
    joined_ms   bigint  NOT NULL,
    early       boolean NOT NULL,
    admitted_ms bigint,
    decided_ms  bigint,
    decided_off bigint,
    PRIMARY KEY (sku, buyer_id),
    CHECK ((admitted_ms IS NULL) = (decided_ms IS NULL) AND (admitted_ms IS NULL) = (decided_off IS NULL))
);
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS n_joins bigint NOT NULL DEFAULT 0;
-- The admitted buyer's token as the worker's admission result gave it (issue 47 item 1): a
-- gateway or client that missed the result hands out this one, never a token of its own.
ALTER TABLE room_joins ADD COLUMN IF NOT EXISTS token text;
-- The tick that minted that token and its clock (issue 47 item 4): the admission's, or a later
-- tick's that re-minted it after a gap (docs/DESIGN-NOTES.md, "After an outage"); the token
-- ends at minted_ms + the sale's token_ms. NULL in rows written before: the admission's.
ALTER TABLE room_joins ADD COLUMN IF NOT EXISTS minted_ms bigint;
ALTER TABLE room_joins ADD COLUMN IF NOT EXISTS minted_off bigint;
