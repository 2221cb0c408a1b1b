-- ledger-outbox SQLite schema, version 4: retention equal to the ledger's
-- (docs/ARCHITECTURE.md#data-model, P9; README.md "Retention").
--
-- One retention policy per database (insert-only; the latest row is in force), and
-- retention permits: the retention job writes one, in the same transaction, before it
-- removes one whole expired UTC day of one table family. Every DELETE of a record
-- table is refused unless a permit covers the row's day, and the database grants a
-- permit only for a day past the current policy's retention, so neither a bug nor a
-- hurried operator removes a record early, and every removal leaves its permit behind.
--
-- Days are UTC: [start, start + 86400000000) in unix microseconds, like every
-- timestamp of this schema. Times below compare with the database's own clock.

CREATE TABLE outbox_retention_policies (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    keep_seconds         INTEGER CHECK (keep_seconds > 0),          -- NULL: forever
    ledger_keeps_seconds INTEGER CHECK (ledger_keeps_seconds > 0),  -- NULL: forever
    set_by               TEXT    NOT NULL CHECK (set_by <> ''),
    set_at               INTEGER NOT NULL,                          -- unix microseconds, UTC
    -- Never shorter than the ledger's: forever under a ledger that keeps forever.
    CHECK (keep_seconds IS NULL
           OR (ledger_keeps_seconds IS NOT NULL AND keep_seconds >= ledger_keeps_seconds))
);
CREATE TRIGGER outbox_retention_policies_no_update BEFORE UPDATE ON outbox_retention_policies
BEGIN SELECT RAISE(ABORT, 'outbox_retention_policies is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_retention_policies_no_delete BEFORE DELETE ON outbox_retention_policies
BEGIN SELECT RAISE(ABORT, 'outbox_retention_policies is append-only: DELETE refused'); END;

-- family: outbox (outbox_events + outbox_deliveries, by the event's created_at),
-- fanout (fanout_messages + fanout_deliveries, by received_at), fanout_dead_letters
-- (the dead letters and replay requests of one destination and account, up to the end
-- of the day of the group's newest record), inbox (inbox_messages, by applied_at),
-- exceptions (by detected_at).
CREATE TABLE outbox_retention_permits (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    family       TEXT    NOT NULL
                 CHECK (family IN ('outbox', 'fanout', 'fanout_dead_letters', 'inbox', 'exceptions')),
    period_start INTEGER NOT NULL CHECK (period_start % 86400000000 = 0),
    period_end   INTEGER NOT NULL,
    destination  TEXT,
    account      TEXT,
    policy_id    INTEGER NOT NULL,   -- the outbox_retention_policies row it applies
    rows         INTEGER NOT NULL CHECK (rows >= 0),
    granted_by   TEXT    NOT NULL,
    granted_at   INTEGER NOT NULL,
    CHECK (period_end = period_start + 86400000000),
    CHECK ((family = 'fanout_dead_letters') = (destination IS NOT NULL AND account IS NOT NULL))
);
CREATE INDEX outbox_retention_permits_by_day ON outbox_retention_permits (family, period_start);
CREATE TRIGGER outbox_retention_permits_past_retention BEFORE INSERT ON outbox_retention_permits
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_policies p
    WHERE p.id = NEW.policy_id
      AND p.id = (SELECT max(id) FROM outbox_retention_policies)
      AND p.keep_seconds IS NOT NULL
      AND NEW.period_end <= (CAST(strftime('%s', 'now') AS INTEGER) - p.keep_seconds) * 1000000)
BEGIN SELECT RAISE(ABORT, 'outbox_retention_permits: refused: the day is not past the retention of the current policy'); END;
CREATE TRIGGER outbox_retention_permits_no_update BEFORE UPDATE ON outbox_retention_permits
BEGIN SELECT RAISE(ABORT, 'outbox_retention_permits is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_retention_permits_no_delete BEFORE DELETE ON outbox_retention_permits
BEGIN SELECT RAISE(ABORT, 'outbox_retention_permits is append-only: DELETE refused'); END;

-- The highest sequence of each account whose events retention removed. enqueue numbers
-- an account's next event after max(its stored events, this), so an account whose old
-- days left never starts again at 1 (consumers would take it for a duplicate). Only
-- ever raised.
CREATE TABLE outbox_retired_sequences (
    account       TEXT    PRIMARY KEY,
    last_sequence INTEGER NOT NULL CHECK (last_sequence >= 1)
) WITHOUT ROWID;
CREATE TRIGGER outbox_retired_sequences_only_up BEFORE UPDATE ON outbox_retired_sequences
WHEN NEW.last_sequence < OLD.last_sequence OR NEW.account <> OLD.account
BEGIN SELECT RAISE(ABORT, 'outbox_retired_sequences is append-only: lowering refused'); END;
CREATE TRIGGER outbox_retired_sequences_no_delete BEFORE DELETE ON outbox_retired_sequences
BEGIN SELECT RAISE(ABORT, 'outbox_retired_sequences is append-only: DELETE refused'); END;

-- The DELETE triggers of versions 1 to 3 refused every DELETE; now a permit of the
-- row's family and day lets the retention job through. UPDATE stays refused.
DROP TRIGGER outbox_events_no_delete;
CREATE TRIGGER outbox_events_no_delete BEFORE DELETE ON outbox_events
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'outbox' AND p.period_start = OLD.created_at - OLD.created_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'outbox_events is append-only: DELETE refused (no retention permit covers the row)'); END;

-- A delivery record leaves with its event: it is removed while the event still exists.
DROP TRIGGER outbox_deliveries_no_delete;
CREATE TRIGGER outbox_deliveries_no_delete BEFORE DELETE ON outbox_deliveries
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_events e JOIN outbox_retention_permits p
        ON p.family = 'outbox' AND p.period_start = e.created_at - e.created_at % 86400000000
    WHERE e.event_id = OLD.event_id)
BEGIN SELECT RAISE(ABORT, 'outbox_deliveries is append-only: DELETE refused (no retention permit covers the row)'); END;

DROP TRIGGER fanout_messages_no_delete;
CREATE TRIGGER fanout_messages_no_delete BEFORE DELETE ON fanout_messages
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'fanout' AND p.period_start = OLD.received_at - OLD.received_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'fanout_messages is append-only: DELETE refused (no retention permit covers the row)'); END;

DROP TRIGGER fanout_deliveries_no_delete;
CREATE TRIGGER fanout_deliveries_no_delete BEFORE DELETE ON fanout_deliveries
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'fanout' AND p.period_start = OLD.received_at - OLD.received_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'fanout_deliveries is append-only: DELETE refused (no retention permit covers the row)'); END;

DROP TRIGGER fanout_dead_letters_no_delete;
CREATE TRIGGER fanout_dead_letters_no_delete BEFORE DELETE ON fanout_dead_letters
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'fanout_dead_letters' AND p.destination = OLD.destination
      AND p.account = OLD.account AND OLD.dead_lettered_at < p.period_end)
BEGIN SELECT RAISE(ABORT, 'fanout_dead_letters is append-only: DELETE refused (no retention permit covers the row)'); END;

DROP TRIGGER fanout_replay_requests_no_delete;
CREATE TRIGGER fanout_replay_requests_no_delete BEFORE DELETE ON fanout_replay_requests
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'fanout_dead_letters' AND p.destination = OLD.destination
      AND p.account = OLD.account AND OLD.requested_at < p.period_end)
BEGIN SELECT RAISE(ABORT, 'fanout_replay_requests is append-only: DELETE refused (no retention permit covers the row)'); END;

-- The processed markers and the exception queue were insert-once by convention; now
-- the database says so too.
CREATE TRIGGER inbox_messages_no_update BEFORE UPDATE ON inbox_messages
BEGIN SELECT RAISE(ABORT, 'inbox_messages is append-only: UPDATE refused'); END;
CREATE TRIGGER inbox_messages_no_delete BEFORE DELETE ON inbox_messages
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'inbox' AND p.period_start = OLD.applied_at - OLD.applied_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'inbox_messages is append-only: DELETE refused (no retention permit covers the row)'); END;

CREATE TRIGGER exceptions_no_update BEFORE UPDATE ON exceptions
BEGIN SELECT RAISE(ABORT, 'exceptions is append-only: UPDATE refused'); END;
CREATE TRIGGER exceptions_no_delete BEFORE DELETE ON exceptions
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'exceptions' AND p.period_start = OLD.detected_at - OLD.detected_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'exceptions is append-only: DELETE refused (no retention permit covers the row)'); END;
