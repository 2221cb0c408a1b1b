-- The relay's read: committed rows after a position in commit order, at most lim.
--
-- The partitions' (txid, position) indexes give that order for the price of the rows
-- returned (a Merge Append of ordered index scans that stops at the limit). But the
-- planner estimates the row comparison from its leading column alone, so rows after
-- the cursor that share one txid (a payout batch committed in one transaction) or
-- that are newer than the statistics look like almost none, and it then prefers to
-- read every row after the cursor and sort them: each read of a backlog cost the
-- whole backlog. Planned inside this function with sorting priced out, the read
-- always walks the indexes in order, whatever the statistics say. PL/pgSQL rather
-- than SQL: it keeps the plan between calls (a SQL function with SET clauses is
-- planned again on every call, which showed in the latency of small reads).
--
-- parts/part: a fleet partition's view (NULL for the whole outbox); the same hash
-- as PgStore::partition_view.
CREATE FUNCTION outbox_read_committed(
    after_txid xid8,
    after_row  bigint,
    lim        bigint,
    parts      int4,
    part       int4
) RETURNS SETOF outbox_events
LANGUAGE plpgsql STABLE
SET enable_sort = off
SET search_path FROM CURRENT
AS $$ BEGIN RETURN QUERY
    SELECT e.*
    FROM outbox_events AS e
    WHERE (e.txid, e.position) > (after_txid, after_row)
      AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
      AND (parts IS NULL OR abs(hashtextextended(e.account, 0) % parts) = part)
    ORDER BY e.txid, e.position
    LIMIT lim;
END $$;
