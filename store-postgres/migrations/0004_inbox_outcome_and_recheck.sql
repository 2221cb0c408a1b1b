-- The inbox tells apart "the same message again" from "the same instruction with
-- another outcome", and re-checks an instruction once it holds the account's lock.
--
-- outbox_inbox_claim_kind: like outbox_inbox_claim (same advisory lock), but returns
-- the kind the instruction was processed as (NULL when it was not), so a commit of an
-- instruction already consumed as rejected (or the reverse) is a conflict, never a
-- silent duplicate.
--
-- outbox_inbox_claim_next returns that recorded kind and looks for the instruction
-- again after locking the account's high-water mark: a worker that released this very
-- instruction out of the gap queue (releases do not take the instruction's advisory
-- lock) may have committed while this call waited for the account; without the second
-- look the redelivery reads as a stale sequence and pages someone for nothing.
CREATE FUNCTION outbox_inbox_claim_kind(consumer_name text, instruction text) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox_inbox' || chr(31) || consumer_name || chr(31) || instruction, 0));
    -- A statement after the lock: its snapshot sees what the lock's holder committed.
    RETURN (SELECT m.kind FROM inbox_messages m
            WHERE m.consumer = consumer_name AND m.instruction_id = instruction);
END
$$;

-- The result columns change, which CREATE OR REPLACE cannot do.
DROP FUNCTION outbox_inbox_claim_next(text, text, text, bigint, text);

CREATE FUNCTION outbox_inbox_claim_next(
    consumer_name text, instruction text, account_name text, seq bigint, kind_name text,
    OUT verdict text, OUT last bigint, OUT recorded_kind text,
    OUT held_instruction text, OUT held_kind text, OUT held_payload bytea)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    recorded_kind := outbox_inbox_claim_kind(consumer_name, instruction);
    IF recorded_kind IS NOT NULL THEN
        verdict := 'duplicate';
        RETURN;
    END IF;
    -- ON CONFLICT DO UPDATE locks the row and reads its latest committed version.
    INSERT INTO inbox_accounts AS a (consumer, account, last_applied)
    VALUES (consumer_name, account_name, 0)
    ON CONFLICT (consumer, account) DO UPDATE SET last_applied = a.last_applied
    RETURNING a.last_applied INTO last;
    -- The second look, under the account lock (a new statement, a new snapshot).
    SELECT m.kind INTO recorded_kind FROM inbox_messages m
    WHERE m.consumer = consumer_name AND m.instruction_id = instruction;
    IF recorded_kind IS NOT NULL THEN
        verdict := 'duplicate';
        RETURN;
    END IF;
    IF seq <> last + 1 THEN
        verdict := 'not next';
        RETURN;
    END IF;
    INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind)
    VALUES (consumer_name, instruction, account_name, seq, kind_name);
    UPDATE inbox_accounts a SET last_applied = seq
    WHERE a.consumer = consumer_name AND a.account = account_name;
    DELETE FROM inbox_held h
    WHERE h.consumer = consumer_name AND h.account = account_name AND h.sequence = seq + 1
    RETURNING h.instruction_id, h.kind, h.payload
    INTO held_instruction, held_kind, held_payload;
    verdict := 'claimed';
END
$$;
