-- ledger-outbox PostgreSQL schema, version 7: retention equal to the ledger's
-- (docs/ARCHITECTURE.md, "Data model" and P9; README.md, "Partitions and retention").
--
-- One retention policy per database (insert-only; the latest row is in force). The
-- outbox still leaves by dropping whole daily partitions (DROP fires no row trigger,
-- and a row DELETE of outbox_events or outbox_deliveries stays refused outright). The
-- other record tables are not partitioned; they leave through retention permits: the
-- retention job writes one, in the same transaction, before it deletes one whole
-- expired UTC day of one table family, and outbox_refuse_change now lets a DELETE
-- through only when a permit covers the row. The database grants a permit only for a
-- day past the current policy's retention (by its own clock), so an early removal is
-- refused whoever tries it, and every removal leaves its permit behind.

CREATE TABLE outbox_retention_policies (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    keep_seconds         bigint      CHECK (keep_seconds > 0),          -- NULL: forever
    ledger_keeps_seconds bigint      CHECK (ledger_keeps_seconds > 0),  -- NULL: forever
    set_by               text        NOT NULL CHECK (btrim(set_by) <> ''),
    set_at               timestamptz NOT NULL DEFAULT now(),
    db_role              text        NOT NULL DEFAULT current_user,
    -- Never shorter than the ledger's: forever under a ledger that keeps forever.
    CHECK (keep_seconds IS NULL
           OR (ledger_keeps_seconds IS NOT NULL AND keep_seconds >= ledger_keeps_seconds))
);
CREATE TRIGGER outbox_retention_policies_append_only BEFORE UPDATE OR DELETE ON outbox_retention_policies
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('outbox_retention_policies');
CREATE TRIGGER outbox_retention_policies_no_truncate BEFORE TRUNCATE ON outbox_retention_policies
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_retention_policies');

-- The first instant of ts's UTC day.
CREATE FUNCTION outbox_utc_day(ts timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT date_trunc('day', ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

-- family: fanout (fanout_messages + fanout_deliveries, by received_at),
-- fanout_dead_letters (the dead letters and replay requests of one destination and
-- account, up to the end of the day of the group's newest record), inbox
-- (inbox_messages, by applied_at), exceptions (by detected_at).
CREATE TABLE outbox_retention_permits (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    family       text        NOT NULL
                 CHECK (family IN ('fanout', 'fanout_dead_letters', 'inbox', 'exceptions')),
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    destination  text,
    account      text,
    policy_id    bigint      NOT NULL,  -- the outbox_retention_policies row it applies
    rows         bigint      NOT NULL CHECK (rows >= 0),
    granted_by   text        NOT NULL,
    granted_at   timestamptz NOT NULL DEFAULT now(),
    db_role      text        NOT NULL DEFAULT current_user,
    CHECK (period_start = outbox_utc_day(period_start)),
    CHECK (period_end = period_start + interval '24 hours'),
    CHECK ((family = 'fanout_dead_letters') = (destination IS NOT NULL AND account IS NOT NULL))
);
CREATE INDEX outbox_retention_permits_by_day ON outbox_retention_permits (family, period_start);

CREATE FUNCTION outbox_retention_permit_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM outbox_retention_policies p
        WHERE p.id = NEW.policy_id
          AND p.id = (SELECT max(id) FROM outbox_retention_policies)
          AND p.keep_seconds IS NOT NULL
          AND NEW.period_end <= now() - p.keep_seconds * interval '1 second') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'OB002',
            MESSAGE = format('outbox_retention_permits: refused: %s day %s is not past the retention of the current policy',
                             NEW.family, NEW.period_start);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER outbox_retention_permits_past_retention BEFORE INSERT ON outbox_retention_permits
    FOR EACH ROW EXECUTE FUNCTION outbox_retention_permit_check();
CREATE TRIGGER outbox_retention_permits_append_only BEFORE UPDATE OR DELETE ON outbox_retention_permits
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('outbox_retention_permits');
CREATE TRIGGER outbox_retention_permits_no_truncate BEFORE TRUNCATE ON outbox_retention_permits
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('outbox_retention_permits');

-- Every append-only trigger calls this function. UPDATE and TRUNCATE stay refused; a
-- row DELETE of a permit-managed table passes when a permit of its family covers the
-- row. Each branch names its table's columns; PL/pgSQL plans a branch only when it
-- runs, and keeps a compiled copy per table. search_path is pinned now, so the permit
-- lookup finds this schema's table whoever deletes.
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
                               WHERE p.family = 'exceptions' AND p.period_start = outbox_utc_day(OLD.detected_at));
        END IF;
        IF covered THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'OB001',
        MESSAGE = format('%s is append-only: %s refused', TG_ARGV[0], TG_OP),
        HINT = 'old rows leave only by retention: whole partitions, or whole expired days under a retention permit (docs/ARCHITECTURE.md, P9)';
END
$$;

-- The processed markers and the exception queue were insert-once by convention; now
-- the database says so too.
CREATE TRIGGER inbox_messages_append_only BEFORE UPDATE OR DELETE ON inbox_messages
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('inbox_messages');
CREATE TRIGGER inbox_messages_no_truncate BEFORE TRUNCATE ON inbox_messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('inbox_messages');
CREATE TRIGGER exceptions_append_only BEFORE UPDATE OR DELETE ON exceptions
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('exceptions');
CREATE TRIGGER exceptions_no_truncate BEFORE TRUNCATE ON exceptions
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('exceptions');
