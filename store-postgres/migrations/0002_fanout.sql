-- ledger-outbox PostgreSQL schema, version 2: the Hop 2 fan-out log (docs/ARCHITECTURE.md, "The two hops").
--
-- The webhook intake appends the ledger's events here, one transaction per webhook
-- delivery; the fan-out loop reads them after one cursor per transport. Names are
-- unqualified, as in version 1: the tables land in the migrating schema.

-- Webhook deliveries already appended (formance-webhook-id): a retried delivery is
-- recognised and stores nothing. Insert-only.
CREATE TABLE fanout_deliveries (
    delivery_id text        PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER fanout_deliveries_append_only BEFORE UPDATE OR DELETE ON fanout_deliveries
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('fanout_deliveries');
CREATE TRIGGER fanout_deliveries_no_truncate BEFORE TRUNCATE ON fanout_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('fanout_deliveries');

-- The messages: insert-only.
--
-- position comes from fanout_position_seq, drawn by an append while it holds the
-- schema's fan-out append lock (a transaction-scoped advisory lock, see
-- src/fanout.rs), so positions become visible in commit order and a
-- `position > cursor` reader never skips a late commit (docs/ARCHITECTURE.md, P1).
-- Rolled-back appends leave gaps; readers do not care.
--
-- payload is bytea, not jsonb: transports carry the webhook's bytes unchanged, and
-- jsonb would normalise them (key order, spacing, duplicate keys).
--
-- dedup_key is FanoutMessage::dedup_key(): a ledger replay re-emits a transaction
-- under a new webhook id, and must not be stored twice.
CREATE SEQUENCE fanout_position_seq AS bigint;

CREATE TABLE fanout_messages (
    position       bigint      PRIMARY KEY DEFAULT nextval('fanout_position_seq'),
    dedup_key      text        NOT NULL UNIQUE,
    instruction_id text        NOT NULL,
    account        text        NOT NULL,
    sequence       bigint      NOT NULL CHECK (sequence >= 0),
    kind           text        NOT NULL CHECK (kind IN ('committed', 'reverted', 'rejected')),
    ledger         text        NOT NULL,
    ledger_tx_id   bigint,               -- NULL for a rejection notice
    traceparent    text,
    tracestate     text,
    payload        bytea       NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now()
);
ALTER SEQUENCE fanout_position_seq OWNED BY fanout_messages.position;

CREATE TRIGGER fanout_messages_append_only BEFORE UPDATE OR DELETE ON fanout_messages
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('fanout_messages');
CREATE TRIGGER fanout_messages_no_truncate BEFORE TRUNCATE ON fanout_messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('fanout_messages');

-- Fan-out progress per transport, kept apart from the immutable messages.
CREATE TABLE fanout_cursors (
    transport  text        PRIMARY KEY,
    position   bigint      NOT NULL CHECK (position >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
