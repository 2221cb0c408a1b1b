-- ledger-outbox SQLite schema: the reconciliation checks' own records (issue 13;
-- docs/ARCHITECTURE.md, "Reconciliation and exceptions"). Numbered 0006 to keep step
-- with the migration set being written beside it; the runner counts files in order
-- (`PRAGMA user_version`), not by their numbers.

-- How far a completeness check has got on each side, per check name. Mutable like a
-- relay cursor and under the same rule: each side moves only forward (the upsert in
-- store-sqlite/src/reconcile/completeness.rs keeps the later of the saved and the
-- given value, side by side). position holds the store's own Position bytes, whose
-- byte order (BLOB comparison is memcmp) is commit order.
CREATE TABLE reconcile_checkpoints (
    name      TEXT    PRIMARY KEY,
    ledger_tx INTEGER CHECK (ledger_tx >= 0),   -- NULL: no ledger transaction read yet
    position  BLOB,                             -- NULL: no outbox event checked yet
    saved_at  INTEGER NOT NULL                  -- unix microseconds, UTC
) WITHOUT ROWID;

-- Every ledger transaction carrying outbox metadata that a check read, as read:
-- event_id is the metadata text (it may not even be a valid id). Insert-once: the
-- first record of a (name, transaction) stands. Append-only; not a retention family
-- yet: no permit lets a row go, so the DELETE trigger refuses every one.
CREATE TABLE reconcile_seen (
    name      TEXT    NOT NULL,
    ledger_tx INTEGER NOT NULL CHECK (ledger_tx >= 0),
    event_id  TEXT    NOT NULL,
    reference TEXT,
    seen_at   INTEGER NOT NULL,                 -- unix microseconds, UTC
    PRIMARY KEY (name, ledger_tx)
) WITHOUT ROWID;
CREATE INDEX reconcile_seen_event ON reconcile_seen (name, event_id);
CREATE INDEX reconcile_seen_reference ON reconcile_seen (name, reference);
CREATE TRIGGER reconcile_seen_no_update BEFORE UPDATE ON reconcile_seen
BEGIN SELECT RAISE(ABORT, 'reconcile_seen is append-only: UPDATE refused'); END;
CREATE TRIGGER reconcile_seen_no_delete BEFORE DELETE ON reconcile_seen
BEGIN SELECT RAISE(ABORT, 'reconcile_seen is append-only: DELETE refused'); END;

-- The sequence check pages through the processed markers in (consumer, account,
-- sequence, instruction_id) order; the primary key is (consumer, instruction_id).
CREATE INDEX inbox_messages_by_sequence ON inbox_messages (consumer, account, sequence, instruction_id);
