-- ledger-outbox SQLite schema, version 5: the exception queue
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
-- recurrence while it is open (the conflict records nothing: an open duplicate is
-- refused) and the next one once it is resolved, so a re-run never repeats an open
-- exception and a finding that returns after its resolution is a new exception.
--
-- SQLite drops a UNIQUE constraint only by rebuilding the table: the rows keep their
-- ids, and AUTOINCREMENT keeps its high-water mark, so an id retention removed is
-- never handed out again.

CREATE TABLE exceptions_v5 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    source          TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    severity        TEXT    NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    account         TEXT    NOT NULL,
    sequence        INTEGER NOT NULL,
    event_id        TEXT,
    ledger_tx       INTEGER CHECK (ledger_tx >= 0),
    asset           TEXT,
    -- Minor units as a decimal integer text: an i128 does not fit SQLite's INTEGER,
    -- and a REAL would round it. Canonical form only (no sign on zero, no leading
    -- zeros, at most 39 digits), so the text reads back as exactly the amount written.
    ledger_amount   TEXT    CHECK (ledger_amount IS NULL OR (
                        typeof(ledger_amount) = 'text'
                        AND (ledger_amount = '0' OR ledger_amount GLOB '[1-9]*' OR ledger_amount GLOB '-[1-9]*')
                        AND ltrim(ledger_amount, '-') NOT GLOB '*[^0-9]*'
                        AND length(ltrim(ledger_amount, '-')) <= 39)),
    provider_amount TEXT    CHECK (provider_amount IS NULL OR (
                        typeof(provider_amount) = 'text'
                        AND (provider_amount = '0' OR provider_amount GLOB '[1-9]*' OR provider_amount GLOB '-[1-9]*')
                        AND ltrim(provider_amount, '-') NOT GLOB '*[^0-9]*'
                        AND length(ltrim(provider_amount, '-')) <= 39)),
    detail          TEXT    NOT NULL,
    detected_at     INTEGER NOT NULL,
    identity        TEXT    NOT NULL,
    recurrence      INTEGER NOT NULL CHECK (recurrence >= 0),
    UNIQUE (identity, recurrence)
);

-- The rows so far: first occurrence, the kind's default severity
-- (ExceptionKind::default_severity), no asset, and the identity as identity() builds
-- it. The relay's own kinds (rejected, idempotency_mismatch, stopped) get the event id
-- of the outbox row at their account and sequence, as the relay now records it: an
-- open one raised again after the upgrade stays one finding.
INSERT INTO exceptions_v5 (id, source, kind, severity, account, sequence, event_id, detail,
                           detected_at, identity, recurrence)
SELECT id, source, kind, severity, account, sequence, event_id, detail, detected_at,
       source || char(31) || kind || char(31) || account || char(31) || CAST(sequence AS TEXT)
           || char(31) || coalesce(event_id, '') || char(31),
       0
FROM (SELECT x.id, x.source, x.kind,
             CASE
                 WHEN x.kind = 'rejected' THEN 'info'
                 WHEN x.kind IN ('stopped', 'gap', 'stale_sequence', 'missing_transaction') THEN 'warning'
                 ELSE 'critical'
             END AS severity,
             x.account, x.sequence,
             CASE WHEN x.kind IN ('rejected', 'idempotency_mismatch', 'stopped') THEN
                 (SELECT e.event_id FROM outbox_events e
                  WHERE e.account = x.account AND e.sequence = x.sequence)
             END AS event_id,
             x.detail, x.detected_at
      FROM exceptions x)
ORDER BY id;

-- The AUTOINCREMENT high-water mark moves with the table (RENAME carries the row).
INSERT INTO sqlite_sequence (name, seq)
SELECT 'exceptions_v5', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'exceptions_v5');
UPDATE sqlite_sequence
SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'exceptions'), 0))
WHERE name = 'exceptions_v5';

DROP TABLE exceptions;  -- its triggers go with it; they are made again below
ALTER TABLE exceptions_v5 RENAME TO exceptions;

-- `outbox audit` looks exceptions up by account and sequence.
CREATE INDEX exceptions_by_account ON exceptions (account, sequence);

CREATE TABLE exception_resolutions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Deferred: retention removes an exception and then its resolution in one
    -- transaction (the resolution may leave only once its exception is gone).
    exception_id INTEGER NOT NULL UNIQUE REFERENCES exceptions (id) DEFERRABLE INITIALLY DEFERRED,
    resolved_by  TEXT    NOT NULL CHECK (trim(resolved_by) <> ''),
    note         TEXT    NOT NULL CHECK (trim(note) <> ''),
    resolved_at  INTEGER NOT NULL   -- unix microseconds, UTC
);

CREATE TRIGGER exceptions_no_update BEFORE UPDATE ON exceptions
BEGIN SELECT RAISE(ABORT, 'exceptions is append-only: UPDATE refused'); END;
CREATE TRIGGER exceptions_no_delete BEFORE DELETE ON exceptions
WHEN NOT EXISTS (
    SELECT 1 FROM outbox_retention_permits p
    WHERE p.family = 'exceptions' AND p.period_start = OLD.detected_at - OLD.detected_at % 86400000000)
BEGIN SELECT RAISE(ABORT, 'exceptions is append-only: DELETE refused (no retention permit covers the row)'); END;
-- Whatever a permit says, an exception nobody resolved stays.
CREATE TRIGGER exceptions_open_no_delete BEFORE DELETE ON exceptions
WHEN NOT EXISTS (SELECT 1 FROM exception_resolutions r WHERE r.exception_id = OLD.id)
BEGIN SELECT RAISE(ABORT, 'exceptions is append-only: DELETE refused (the exception is open: resolve it first)'); END;

CREATE TRIGGER exception_resolutions_no_update BEFORE UPDATE ON exception_resolutions
BEGIN SELECT RAISE(ABORT, 'exception_resolutions is append-only: UPDATE refused'); END;
-- A resolution leaves with its exception: only once that row is gone, which takes a
-- retention permit for the exception's day.
CREATE TRIGGER exception_resolutions_no_delete BEFORE DELETE ON exception_resolutions
WHEN EXISTS (SELECT 1 FROM exceptions x WHERE x.id = OLD.exception_id)
BEGIN SELECT RAISE(ABORT, 'exception_resolutions is append-only: DELETE refused (its exception is still recorded)'); END;
