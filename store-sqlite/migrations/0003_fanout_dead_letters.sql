-- ledger-outbox SQLite schema, version 3: the fan-out's dead letters.
--
-- A message a destination refused for good is recorded here and parks its account at
-- that destination; the account's later messages are recorded behind it, so the
-- destination's cursor can pass them and the other accounts keep flowing. A replay
-- request releases the account: the fan-out loop re-publishes its recorded messages
-- in order. Both tables are insert-only; the replay's progress is a cursor
-- (`fanout_cursors`, named `<destination>@replayed:<account>`).

CREATE TABLE fanout_dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    destination      TEXT    NOT NULL,  -- the publisher's name (its cursor's name)
    position         INTEGER NOT NULL CHECK (position > 0),  -- a fanout_messages position
    account          TEXT    NOT NULL,
    sequence         INTEGER NOT NULL CHECK (sequence >= 0),
    instruction_id   TEXT    NOT NULL,
    reason           TEXT    NOT NULL CHECK (reason IN ('refused', 'set_aside')),
    error            TEXT    NOT NULL,  -- the destination's answer, or the refusal it waits behind
    dead_lettered_at INTEGER NOT NULL   -- unix microseconds, UTC
);
CREATE INDEX fanout_dead_letters_by_account
    ON fanout_dead_letters (destination, account, position);
CREATE TRIGGER fanout_dead_letters_no_update BEFORE UPDATE ON fanout_dead_letters
BEGIN SELECT RAISE(ABORT, 'fanout_dead_letters is append-only: UPDATE refused'); END;
CREATE TRIGGER fanout_dead_letters_no_delete BEFORE DELETE ON fanout_dead_letters
BEGIN SELECT RAISE(ABORT, 'fanout_dead_letters is append-only: DELETE refused'); END;

-- refusal_id: the account's latest refusal when the request was made; a refusal
-- recorded later (the replay was refused again) needs a new request.
CREATE TABLE fanout_replay_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    destination  TEXT    NOT NULL,
    account      TEXT    NOT NULL,
    refusal_id   INTEGER NOT NULL,  -- a fanout_dead_letters id
    requested_at INTEGER NOT NULL
);
CREATE INDEX fanout_replay_requests_by_destination
    ON fanout_replay_requests (destination, id);
CREATE TRIGGER fanout_replay_requests_no_update BEFORE UPDATE ON fanout_replay_requests
BEGIN SELECT RAISE(ABORT, 'fanout_replay_requests is append-only: UPDATE refused'); END;
CREATE TRIGGER fanout_replay_requests_no_delete BEFORE DELETE ON fanout_replay_requests
BEGIN SELECT RAISE(ABORT, 'fanout_replay_requests is append-only: DELETE refused'); END;
