-- ledger-outbox PostgreSQL schema, version 1 (docs/ARCHITECTURE.md, "Data model"); decisions in README.md.
--
-- Every name below is unqualified: the tables land in the first schema of the
-- migrating connection's search_path (`PgConfig::schema`), and the functions pin that
-- search_path (SET search_path FROM CURRENT) so they find their own tables whatever
-- the caller's search_path is.

-- Distinctive SQLSTATE of the append-only refusal, so error mapping never has to parse
-- a message: class "OB" is not used by PostgreSQL.
CREATE FUNCTION outbox_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'OB001',
        MESSAGE = format('%s is append-only: %s refused', TG_ARGV[0], TG_OP),
        HINT = 'old rows leave by dropping whole partitions (docs/ARCHITECTURE.md, P9)';
END
$$;

-- The first UUID v7 of a UTC day: 48 bits of unix milliseconds, then zeros. Every v7
-- id minted during that day sorts at or above it and below the next day's bound, so a
-- range partition on event_id is a time partition.
CREATE FUNCTION outbox_day_bound(day date) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (lpad(to_hex((extract(epoch FROM day) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- The outbox: insert-only.
--
-- payload is bytea, not jsonb: jsonb would normalise the bytes (key order, spacing)
-- and the ledger hashes the body under the idempotency key (docs/ARCHITECTURE.md, P5).
--
-- txid orders the commit-order-safe reader: rows are read by (txid, position) below
-- pg_snapshot_xmin, so a transaction still running can never be overtaken. enqueue
-- writes greatest(own xid, account's previous txid) rather than the bare default, so
-- that one account's rows also sort in sequence order (README: "Why txid is raised").
--
-- Partitioned by RANGE(event_id): v7 ids start with a millisecond timestamp, so
-- partitions are days, and the primary key may contain the partition key as a
-- partitioned table requires. For the same reason (account, sequence) cannot be a
-- global UNIQUE constraint: its uniqueness comes from the outbox_sequences row lock
-- that allocates each number, and the index below only serves lookups.
CREATE SEQUENCE outbox_position_seq AS bigint;

CREATE TABLE outbox_events (
    position   bigint      NOT NULL DEFAULT nextval('outbox_position_seq'),
    event_id   uuid        NOT NULL,
    account    text        NOT NULL,
    sequence   bigint      NOT NULL CHECK (sequence >= 1),
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (event_id)
) PARTITION BY RANGE (event_id);
ALTER SEQUENCE outbox_position_seq OWNED BY outbox_events.position;

CREATE INDEX outbox_events_txid_position ON outbox_events (txid, position);
CREATE INDEX outbox_events_position ON outbox_events (position);
CREATE INDEX outbox_events_account_sequence ON outbox_events (account, sequence);

-- Row triggers on a partitioned table are cloned onto every partition, present and
-- future (PostgreSQL 13+). TRUNCATE triggers are not: outbox_ensure_partitions adds one
-- to each partition it creates.
CREATE TRIGGER outbox_events_append_only BEFORE UPDATE OR DELETE ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('outbox_events');
CREATE TRIGGER outbox_events_no_truncate BEFORE TRUNCATE ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_events');

-- Per-account counter, mutable, written in the enqueuing transaction: its row lock
-- serialises one account's enqueues until commit, so numbers are gapless and
-- sequence order is commit order. last_txid is the txid written on the account's
-- latest row (see outbox_events.txid).
CREATE TABLE outbox_sequences (
    account       text   PRIMARY KEY,
    last_sequence bigint NOT NULL CHECK (last_sequence >= 1),
    last_txid     xid8   NOT NULL
);

-- Relay progress, kept apart from the immutable events. Polling relays store
-- (txid, position); a CDC relay stores the commit LSN and the row inside it.
CREATE TABLE relay_cursors (
    relay      text        PRIMARY KEY,
    position   bigint      NOT NULL,
    txid       xid8,
    lsn        pg_lsn,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Delivery attempts: insert-only beside the outbox, partitioned with the same day
-- bounds on event_id so an event and its deliveries leave together.
CREATE SEQUENCE outbox_delivery_id_seq AS bigint;

CREATE TABLE outbox_deliveries (
    id           bigint      NOT NULL DEFAULT nextval('outbox_delivery_id_seq'),
    event_id     uuid        NOT NULL,
    attempt      bigint      NOT NULL,
    outcome      text        NOT NULL CHECK (outcome IN ('accepted', 'replayed', 'rejected', 'failed')),
    ledger_tx_id bigint,
    error_code   text,
    detail       text,
    at           timestamptz NOT NULL,
    PRIMARY KEY (event_id, id)
) PARTITION BY RANGE (event_id);
ALTER SEQUENCE outbox_delivery_id_seq OWNED BY outbox_deliveries.id;

CREATE TRIGGER outbox_deliveries_append_only BEFORE UPDATE OR DELETE ON outbox_deliveries
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('outbox_deliveries');
CREATE TRIGGER outbox_deliveries_no_truncate BEFORE TRUNCATE ON outbox_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_deliveries');

-- Ids outside every daily partition (a caller-supplied id from far in the past or
-- future) land here rather than failing the payment transaction.
CREATE TABLE outbox_events_default PARTITION OF outbox_events DEFAULT;
CREATE TRIGGER outbox_events_default_no_truncate BEFORE TRUNCATE ON outbox_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_events');
CREATE TABLE outbox_deliveries_default PARTITION OF outbox_deliveries DEFAULT;
CREATE TRIGGER outbox_deliveries_default_no_truncate BEFORE TRUNCATE ON outbox_deliveries_default
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_deliveries');

-- Creates the missing daily partitions of outbox_events and outbox_deliveries for
-- from_day .. from_day + days - 1 (UTC days) and returns their names.
--
-- Idempotent and safe to run from several processes at once (a transaction-scoped
-- advisory lock serialises callers of one schema). A day whose range already has
-- rows in the DEFAULT partition is skipped with a WARNING: PostgreSQL refuses such a
-- partition, and moving the rows would need the DELETE this schema forbids.
CREATE FUNCTION outbox_ensure_partitions(from_day date, days integer)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    home   text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.oid = 'outbox_events'::regclass);
    day    date;
    lo     uuid;
    hi     uuid;
    parent text;
    part   text;
    stray  boolean;
BEGIN
    IF from_day IS NULL OR days IS NULL OR days < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('outbox_ensure_partitions: invalid range (%s, %s)', from_day, days);
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(home || '.outbox_ensure_partitions', 0));
    FOR i IN 0 .. days - 1 LOOP
        day := from_day + i;
        lo := outbox_day_bound(day);
        hi := outbox_day_bound(day + 1);
        FOREACH parent IN ARRAY ARRAY['outbox_events', 'outbox_deliveries'] LOOP
            part := parent || '_p' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(format('%I.%I', home, part)) IS NOT NULL;
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE event_id >= %L AND event_id < %L)',
                           home, parent || '_default', lo, hi)
                INTO stray;
            IF stray THEN
                RAISE WARNING '%.%: rows of % are in the DEFAULT partition; not creating the partition', home, part, day;
                CONTINUE;
            END IF;
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                           home, part, home, parent, lo, hi);
            EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change(%L)',
                           part || '_no_truncate', home, part, parent);
            RETURN NEXT part;
        END LOOP;
    END LOOP;
END
$$;

-- Consumer side: processed markers, per-account high-water marks, the gap queue.
CREATE TABLE inbox_messages (
    consumer       text        NOT NULL,
    instruction_id text        NOT NULL,
    account        text        NOT NULL,
    sequence       bigint      NOT NULL,
    kind           text        NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, instruction_id)
);

CREATE TABLE inbox_accounts (
    consumer     text   NOT NULL,
    account      text   NOT NULL,
    last_applied bigint NOT NULL,
    PRIMARY KEY (consumer, account)
);

CREATE TABLE inbox_held (
    consumer       text        NOT NULL,
    account        text        NOT NULL,
    sequence       bigint      NOT NULL,
    instruction_id text        NOT NULL,
    kind           text        NOT NULL,
    payload        bytea       NOT NULL,
    held_at        timestamptz NOT NULL,
    PRIMARY KEY (consumer, account, sequence)
);

-- Serialises deliveries of one instruction to one consumer, then says whether it was
-- processed. A plpgsql function so the check runs on a snapshot taken after the lock
-- wait (READ COMMITTED): a redelivery racing the first delivery waits for it and sees
-- it as a duplicate instead of as a stale sequence. The lock ends with the
-- consumer's transaction.
CREATE FUNCTION outbox_inbox_claim(consumer_name text, instruction text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox_inbox' || chr(31) || consumer_name || chr(31) || instruction, 0));
    RETURN EXISTS (SELECT 1 FROM inbox_messages m
                   WHERE m.consumer = consumer_name AND m.instruction_id = instruction);
END
$$;

-- Reconciliation and alarm queue; one row per (source, kind, account, sequence).
CREATE TABLE exceptions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    kind        text        NOT NULL,
    account     text        NOT NULL,
    sequence    bigint      NOT NULL,
    detail      text        NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, kind, account, sequence)
);

-- The partitions around the day of the migration; open() extends them on every start.
SELECT count(*) FROM outbox_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 9);
