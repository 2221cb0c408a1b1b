-- ledger-outbox PostgreSQL schema, version 5: the fan-out's dead letters.
--
-- A message a destination refused for good is recorded here and parks its account at
-- that destination; the account's later messages are recorded behind it, so the
-- destination's cursor can pass them and the other accounts keep flowing. A replay
-- request releases the account: the fan-out loop re-publishes its recorded messages
-- in order. Both tables are insert-only (the triggers of version 1); the replay's
-- progress is a cursor (`fanout_cursors`, named `<destination>@replayed:<account>`).
--
-- Ids come from identity columns: each destination has one writer (its fan-out loop),
-- so its ids increase in the order it recorded them. No foreign keys: they would make
-- TRUNCATE fail on the key before the append-only trigger refuses it, and the loop
-- writes a position only after reading its message.

CREATE TABLE fanout_dead_letters (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination      text        NOT NULL,  -- the publisher's name (its cursor's name)
    position         bigint      NOT NULL CHECK (position > 0),  -- a fanout_messages position
    account          text        NOT NULL,
    sequence         bigint      NOT NULL CHECK (sequence >= 0),
    instruction_id   text        NOT NULL,
    reason           text        NOT NULL CHECK (reason IN ('refused', 'set_aside')),
    error            text        NOT NULL,  -- the destination's answer, or the refusal it waits behind
    dead_lettered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fanout_dead_letters_by_account
    ON fanout_dead_letters (destination, account, position);
CREATE TRIGGER fanout_dead_letters_append_only BEFORE UPDATE OR DELETE ON fanout_dead_letters
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('fanout_dead_letters');
CREATE TRIGGER fanout_dead_letters_no_truncate BEFORE TRUNCATE ON fanout_dead_letters
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('fanout_dead_letters');

-- refusal_id: the account's latest refusal when the request was made; a refusal
-- recorded later (the replay was refused again) needs a new request.
CREATE TABLE fanout_replay_requests (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination  text        NOT NULL,
    account      text        NOT NULL,
    refusal_id   bigint      NOT NULL,  -- a fanout_dead_letters id
    requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fanout_replay_requests_by_destination
    ON fanout_replay_requests (destination, id);
CREATE TRIGGER fanout_replay_requests_append_only BEFORE UPDATE OR DELETE ON fanout_replay_requests
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('fanout_replay_requests');
CREATE TRIGGER fanout_replay_requests_no_truncate BEFORE TRUNCATE ON fanout_replay_requests
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('fanout_replay_requests');
