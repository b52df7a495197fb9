-- A summary worker's claim: the oldest queued chunk (p_session's, else p_tenant's sessions',
-- else any session's) that is
-- sealed and wholly folded, of a live session, that no other worker holds and this pass has
-- not tried (p_tried_sessions / p_tried_chunks), with the chunk's row (NULL columns: the chunk
-- is gone); no row when there is none. Candidates are read unlocked, oldest first, 64 at a
-- time, and each queue row is locked on its own (FOR UPDATE SKIP LOCKED: never waits) until
-- one is got; the lock is held to the caller's commit. One row at a time because Citus
-- refuses FOR UPDATE ... SKIP LOCKED over every session's shards, and failed to plan a
-- correlated unnest() of the chunks already tried ("failed to postpone qual containing
-- lateral reference").
CREATE OR REPLACE FUNCTION shardstore.summary_claim_v2(p_session uuid, p_tenant text, p_tried_sessions uuid[], p_tried_chunks bigint[])
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamp with time zone, r_first_turn_seq bigint, r_turn_count integer, r_chunk_end timestamp with time zone, r_chunk_text text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    c      record;
    v_off  bigint := 0;
    v_seen integer;
BEGIN
    LOOP
        v_seen := 0;
        FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start
                   FROM shardstore.summary_queue x
                   JOIN shardstore.sessions s ON s.session_id = x.session_id
                  WHERE (p_session IS NULL OR x.session_id = p_session)
                    AND (p_tenant IS NULL OR s.tenant_id = p_tenant)
                    AND s.purged_at IS NULL AND x.chunk_seq < s.open_chunk_seq
                    AND NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                                     WHERE b.session_id = x.session_id AND b.chunk_seq = x.chunk_seq)
                  ORDER BY x.queued_at, x.session_id, x.chunk_seq
                  LIMIT 64 OFFSET v_off LOOP
            v_seen := v_seen + 1;
            CONTINUE WHEN EXISTS (SELECT 1 FROM unnest(p_tried_sessions, p_tried_chunks) AS t(s, q)
                                   WHERE t.s = c.session_id AND t.q = c.chunk_seq);
            PERFORM 1 FROM shardstore.summary_queue q
              WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
                AND q.chunk_start = c.chunk_start
                FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another worker holds it, or it went meanwhile
            r_session_id := c.session_id;
            r_chunk_seq := c.chunk_seq;
            r_chunk_start := c.chunk_start;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_chunk_end := NULL;
            r_chunk_text := NULL;
            SELECT h.first_turn_seq, h.turn_count, h.chunk_end, h.conversation_chunk::text
              INTO r_first_turn_seq, r_turn_count, r_chunk_end, r_chunk_text
              FROM shardstore.agent_history h
             WHERE h.session_id = c.session_id AND h.chunk_seq = c.chunk_seq
               AND h.chunk_start = c.chunk_start;
            RETURN NEXT;
            RETURN;
        END LOOP;
        EXIT WHEN v_seen < 64;
        v_off := v_off + 64;
    END LOOP;
END
$function$;
