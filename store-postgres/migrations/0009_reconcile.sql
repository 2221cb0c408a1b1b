-- ledger-outbox PostgreSQL schema, version 9: the reconciliation checks' own records
-- (issue 13; docs/ARCHITECTURE.md, "Reconciliation and exceptions").

-- How far a completeness check has got on each side, per check name. Mutable like a
-- relay cursor and under the same rule: each side moves only forward (the upsert in
-- store-postgres/src/reconcile/completeness.rs keeps the greater of the saved and the
-- given value, side by side). position holds the store's own Position bytes, whose
-- byte order (bytea comparison) is commit order.
CREATE TABLE reconcile_checkpoints (
    name      text        PRIMARY KEY,
    ledger_tx bigint      CHECK (ledger_tx >= 0),  -- NULL: no ledger transaction read yet
    position  bytea,                               -- NULL: no outbox event checked yet
    saved_at  timestamptz NOT NULL DEFAULT now()
);

-- Every ledger transaction carrying outbox metadata that a check read, as read:
-- event_id is the metadata text (it may not even be a valid id). Insert-once: the
-- first record of a (name, transaction) stands. Append-only through
-- outbox_refuse_change; not a retention family yet: that function lets no DELETE of
-- this table through.
CREATE TABLE reconcile_seen (
    name      text        NOT NULL,
    ledger_tx bigint      NOT NULL CHECK (ledger_tx >= 0),
    event_id  text        NOT NULL,
    reference text,
    seen_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, ledger_tx)
);
CREATE INDEX reconcile_seen_event ON reconcile_seen (name, event_id);
CREATE INDEX reconcile_seen_reference ON reconcile_seen (name, reference);
CREATE TRIGGER reconcile_seen_append_only BEFORE UPDATE OR DELETE ON reconcile_seen
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('reconcile_seen');
CREATE TRIGGER reconcile_seen_no_truncate BEFORE TRUNCATE ON reconcile_seen
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('reconcile_seen');

-- The sequence check pages through the processed markers in (consumer, account,
-- sequence, instruction_id) order, by byte ("C") order so that it is the order of the
-- core's MarkerKey whatever the database's collation; the primary key is (consumer,
-- instruction_id). Built inside the migration's transaction: on a large inbox it
-- holds writes back while it builds.
CREATE INDEX inbox_messages_by_sequence ON inbox_messages
    (consumer COLLATE "C", account COLLATE "C", sequence, instruction_id COLLATE "C");
