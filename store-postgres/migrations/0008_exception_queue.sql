-- ledger-outbox PostgreSQL schema, version 8: the exception queue
-- (docs/ARCHITECTURE.md, "Reconciliation and exceptions"; README.md, "Exceptions").
--
-- Every exception now names, where it applies, the event id, the ledger transaction,
-- the asset and the amounts compared, and carries a severity. It stays append-only:
-- an exception is closed by appending its resolution (who, when, why) to
-- exception_resolutions, never by changing the row.
--
-- Deduplication moves from UNIQUE (source, kind, account, sequence) to
-- UNIQUE (identity, recurrence). identity is NewException::identity() (source, kind,
-- account, sequence, event id and asset joined by U+001F); recurrence counts how often
-- the finding came back after a resolution. A raiser inserts the identity's latest
-- recurrence while it is open (ON CONFLICT DO NOTHING: an open duplicate is refused,
-- atomically, however many raise it at once) and the next one once it is resolved, so
-- a re-run never repeats an open exception and a finding that returns after its
-- resolution is a new exception.

ALTER TABLE exceptions
    ADD COLUMN severity        text,
    ADD COLUMN event_id        text,
    ADD COLUMN ledger_tx       bigint CHECK (ledger_tx >= 0),
    ADD COLUMN asset           text,
    -- Minor units, exactly: an i128 needs up to 39 digits, more than bigint holds.
    -- Whole numbers stored with scale 0 only, within the i128 range.
    ADD COLUMN ledger_amount   numeric CHECK (scale(ledger_amount) = 0
        AND ledger_amount BETWEEN -170141183460469231731687303715884105728
                              AND 170141183460469231731687303715884105727),
    ADD COLUMN provider_amount numeric CHECK (scale(provider_amount) = 0
        AND provider_amount BETWEEN -170141183460469231731687303715884105728
                                AND 170141183460469231731687303715884105727),
    ADD COLUMN identity        text,
    ADD COLUMN recurrence      integer NOT NULL DEFAULT 0 CHECK (recurrence >= 0);

-- The rows so far: no event id or asset, first occurrence, the kind's default
-- severity (ExceptionKind::default_severity), the identity as identity() builds it.
-- The append-only trigger is off for these two statements of the migration only (the
-- ALTER TABLE above holds the table's exclusive lock until the migration commits).
-- The relay's own kinds get the event id of the outbox row at their account and
-- sequence, as the relay now records it: an open one raised again after the upgrade
-- stays one finding. The identity is then built from it, as identity() builds it.
ALTER TABLE exceptions DISABLE TRIGGER exceptions_append_only;
UPDATE exceptions SET
    severity = CASE
        WHEN kind = 'rejected' THEN 'info'
        WHEN kind IN ('stopped', 'gap', 'stale_sequence', 'missing_transaction') THEN 'warning'
        ELSE 'critical'
    END,
    event_id = CASE WHEN kind IN ('rejected', 'idempotency_mismatch', 'stopped') THEN
                   (SELECT e.event_id::text FROM outbox_events e
                    WHERE e.account = exceptions.account AND e.sequence = exceptions.sequence)
               END;
UPDATE exceptions SET
    identity = source || chr(31) || kind || chr(31) || account || chr(31) || sequence::text
               || chr(31) || coalesce(event_id, '') || chr(31);
ALTER TABLE exceptions ENABLE TRIGGER exceptions_append_only;

ALTER TABLE exceptions
    ALTER COLUMN severity SET NOT NULL,
    ADD CONSTRAINT exceptions_severity_check CHECK (severity IN ('info', 'warning', 'critical')),
    ALTER COLUMN identity SET NOT NULL,
    DROP CONSTRAINT exceptions_source_kind_account_sequence_key,
    ADD CONSTRAINT exceptions_identity_recurrence_key UNIQUE (identity, recurrence);

-- `outbox audit` looks exceptions up by account and sequence; retention by day.
CREATE INDEX exceptions_by_account ON exceptions (account, sequence);
CREATE INDEX exceptions_by_detected_at ON exceptions (detected_at);

CREATE TABLE exception_resolutions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Deferred: retention removes an exception and then its resolution in one
    -- transaction (the resolution may leave only once its exception is gone).
    exception_id bigint      NOT NULL UNIQUE
                 REFERENCES exceptions (id) DEFERRABLE INITIALLY DEFERRED,
    resolved_by  text        NOT NULL CHECK (btrim(resolved_by) <> ''),
    note         text        NOT NULL CHECK (btrim(note) <> ''),
    resolved_at  timestamptz NOT NULL DEFAULT now(),
    db_role      text        NOT NULL DEFAULT current_user
);
CREATE TRIGGER exception_resolutions_append_only BEFORE UPDATE OR DELETE ON exception_resolutions
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('exception_resolutions');
CREATE TRIGGER exception_resolutions_no_truncate BEFORE TRUNCATE ON exception_resolutions
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('exception_resolutions');

-- Version 7's function with two changes: an exception leaves under a permit only once
-- it is resolved, and a resolution only once its exception is gone (which took such a
-- permit). Every other branch is unchanged.
CREATE OR REPLACE FUNCTION outbox_refuse_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    covered boolean := false;
BEGIN
    IF TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' THEN
        IF TG_ARGV[0] IN ('fanout_messages', 'fanout_deliveries') THEN
            covered := EXISTS (SELECT 1 FROM outbox_retention_permits p
                               WHERE p.family = 'fanout' AND p.period_start = outbox_utc_day(OLD.received_at));
        ELSIF TG_ARGV[0] = 'fanout_dead_letters' THEN
            covered := EXISTS (SELECT 1 FROM outbox_retention_permits p
                               WHERE p.family = 'fanout_dead_letters' AND p.destination = OLD.destination
                                 AND p.account = OLD.account AND OLD.dead_lettered_at < p.period_end);
        ELSIF TG_ARGV[0] = 'fanout_replay_requests' THEN
            covered := EXISTS (SELECT 1 FROM outbox_retention_permits p
                               WHERE p.family = 'fanout_dead_letters' AND p.destination = OLD.destination
                                 AND p.account = OLD.account AND OLD.requested_at < p.period_end);
        ELSIF TG_ARGV[0] = 'inbox_messages' THEN
            covered := EXISTS (SELECT 1 FROM outbox_retention_permits p
                               WHERE p.family = 'inbox' AND p.period_start = outbox_utc_day(OLD.applied_at));
        ELSIF TG_ARGV[0] = 'exceptions' THEN
            covered := EXISTS (SELECT 1 FROM outbox_retention_permits p
                               WHERE p.family = 'exceptions' AND p.period_start = outbox_utc_day(OLD.detected_at))
                   AND EXISTS (SELECT 1 FROM exception_resolutions r WHERE r.exception_id = OLD.id);
        ELSIF TG_ARGV[0] = 'exception_resolutions' THEN
            covered := NOT EXISTS (SELECT 1 FROM exceptions x WHERE x.id = OLD.exception_id);
        END IF;
        IF covered THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'OB001',
        MESSAGE = format('%s is append-only: %s refused', TG_ARGV[0], TG_OP),
        HINT = 'old rows leave only by retention: whole partitions, or whole expired days under a retention permit, and an exception only once resolved (docs/ARCHITECTURE.md, P9)';
END
$$;
