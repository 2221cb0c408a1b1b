-- The inbox's common path in one round trip (`Inbox::claim_next`): claim the
-- instruction (same advisory lock as outbox_inbox_claim), lock and read the account's
-- high-water mark, and when the message comes next, write its marker, move the mark
-- and take the held message right after it out of the gap queue. A consumer applies a
-- message in four round trips (BEGIN, this, its impact, COMMIT) instead of eight.
CREATE FUNCTION outbox_inbox_claim_next(
    consumer_name text, instruction text, account_name text, seq bigint, kind_name text,
    OUT verdict text, OUT last bigint,
    OUT held_instruction text, OUT held_kind text, OUT held_payload bytea)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF outbox_inbox_claim(consumer_name, instruction) THEN
        verdict := 'duplicate';
        RETURN;
    END IF;
    -- ON CONFLICT DO UPDATE locks the row and reads its latest committed version.
    INSERT INTO inbox_accounts AS a (consumer, account, last_applied)
    VALUES (consumer_name, account_name, 0)
    ON CONFLICT (consumer, account) DO UPDATE SET last_applied = a.last_applied
    RETURNING a.last_applied INTO last;
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
