-- ledger-outbox SQLite schema, version 1 (docs/ARCHITECTURE.md#data-model).

-- The outbox: insert-only. SQLite's single writer makes position order equal commit
-- order. A plain rowid key (max + 1) never reuses a committed position because the
-- triggers below forbid DELETE; AUTOINCREMENT would cost one more page per commit.
CREATE TABLE outbox_events (
    position   INTEGER PRIMARY KEY,
    event_id   TEXT    NOT NULL UNIQUE,
    account    TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    payload    BLOB    NOT NULL,   -- the exact bytes the relay sends
    created_at INTEGER NOT NULL,   -- unix microseconds, UTC
    UNIQUE (account, sequence)
);
CREATE TRIGGER outbox_events_no_update BEFORE UPDATE ON outbox_events
BEGIN SELECT RAISE(ABORT, 'outbox_events is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_events_no_delete BEFORE DELETE ON outbox_events
BEGIN SELECT RAISE(ABORT, 'outbox_events is append-only: DELETE refused'); END;

-- No outbox_sequences counter table here (Postgres has one): SQLite's database-wide
-- write lock already serialises enqueues, so the next sequence is max(sequence) + 1
-- read from the (account, sequence) index inside the writing transaction. A rollback
-- leaves no gap, and the UNIQUE constraint is the backstop. It saves a page per commit.

-- Relay progress, kept apart from the immutable events.
CREATE TABLE relay_cursors (
    relay      TEXT    PRIMARY KEY,
    position   INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Delivery attempts: insert-only beside the outbox.
CREATE TABLE outbox_deliveries (
    id           INTEGER PRIMARY KEY,   -- rowid: never reused, since DELETE is refused
    event_id     TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('accepted', 'replayed', 'rejected', 'failed')),
    ledger_tx_id INTEGER,
    error_code   TEXT,
    detail       TEXT,
    at           INTEGER NOT NULL
);
CREATE INDEX outbox_deliveries_event ON outbox_deliveries (event_id);
CREATE TRIGGER outbox_deliveries_no_update BEFORE UPDATE ON outbox_deliveries
BEGIN SELECT RAISE(ABORT, 'outbox_deliveries is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_deliveries_no_delete BEFORE DELETE ON outbox_deliveries
BEGIN SELECT RAISE(ABORT, 'outbox_deliveries is append-only: DELETE refused'); END;

-- Consumer side: processed markers, per-account high-water marks, the gap queue.
CREATE TABLE inbox_messages (
    consumer       TEXT    NOT NULL,
    instruction_id TEXT    NOT NULL,
    account        TEXT    NOT NULL,
    sequence       INTEGER NOT NULL,
    kind           TEXT    NOT NULL,
    applied_at     INTEGER NOT NULL,
    PRIMARY KEY (consumer, instruction_id)
) WITHOUT ROWID;

CREATE TABLE inbox_accounts (
    consumer     TEXT    NOT NULL,
    account      TEXT    NOT NULL,
    last_applied INTEGER NOT NULL,
    PRIMARY KEY (consumer, account)
) WITHOUT ROWID;

CREATE TABLE inbox_held (
    consumer       TEXT    NOT NULL,
    account        TEXT    NOT NULL,
    sequence       INTEGER NOT NULL,
    instruction_id TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    payload        BLOB    NOT NULL,
    held_at        INTEGER NOT NULL,
    PRIMARY KEY (consumer, account, sequence)
) WITHOUT ROWID;

-- Reconciliation and alarm queue; one row per (source, kind, account, sequence).
CREATE TABLE exceptions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    source      TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    account     TEXT    NOT NULL,
    sequence    INTEGER NOT NULL,
    detail      TEXT    NOT NULL,
    detected_at INTEGER NOT NULL,
    UNIQUE (source, kind, account, sequence)
);
