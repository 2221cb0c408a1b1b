-- ledger-outbox SQLite schema, version 2: the Hop 2 fan-out log (docs/ARCHITECTURE.md#data-model).
--
-- The webhook intake appends the ledger's events here, one transaction per webhook
-- delivery; the fan-out loop reads them after one cursor per transport.

-- Webhook deliveries already appended (formance-webhook-id): a retried delivery is
-- recognised and stores nothing. Insert-only.
CREATE TABLE fanout_deliveries (
    delivery_id TEXT    PRIMARY KEY,
    received_at INTEGER NOT NULL    -- unix microseconds, UTC
) WITHOUT ROWID;
CREATE TRIGGER fanout_deliveries_no_update BEFORE UPDATE ON fanout_deliveries
BEGIN SELECT RAISE(ABORT, 'fanout_deliveries is append-only: UPDATE refused'); END;
CREATE TRIGGER fanout_deliveries_no_delete BEFORE DELETE ON fanout_deliveries
BEGIN SELECT RAISE(ABORT, 'fanout_deliveries is append-only: DELETE refused'); END;

-- The messages: insert-only. SQLite's single writer makes position order equal commit
-- order, so a `position > cursor` reader never skips a late commit. AUTOINCREMENT
-- never hands out a position twice, not even that of a rolled-back append.
-- dedup_key is FanoutMessage::dedup_key(): a ledger replay re-emits a transaction
-- under a new webhook id, and must not be stored twice.
CREATE TABLE fanout_messages (
    position       INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_key      TEXT    NOT NULL UNIQUE,
    instruction_id TEXT    NOT NULL,
    account        TEXT    NOT NULL,
    sequence       INTEGER NOT NULL CHECK (sequence >= 0),
    kind           TEXT    NOT NULL CHECK (kind IN ('committed', 'reverted', 'rejected')),
    ledger         TEXT    NOT NULL,
    ledger_tx_id   INTEGER,           -- NULL for a rejection notice
    traceparent    TEXT,
    tracestate     TEXT,
    payload        BLOB    NOT NULL,  -- the exact bytes every transport carries
    received_at    INTEGER NOT NULL   -- unix microseconds, UTC
);
CREATE TRIGGER fanout_messages_no_update BEFORE UPDATE ON fanout_messages
BEGIN SELECT RAISE(ABORT, 'fanout_messages is append-only: UPDATE refused'); END;
CREATE TRIGGER fanout_messages_no_delete BEFORE DELETE ON fanout_messages
BEGIN SELECT RAISE(ABORT, 'fanout_messages is append-only: DELETE refused'); END;

-- Fan-out progress per transport, kept apart from the immutable messages.
CREATE TABLE fanout_cursors (
    transport  TEXT    PRIMARY KEY,
    position   INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
