-- Claims up to p_limit queued chunks (of p_session, or any) that no other worker holds,
-- oldest first, with the chunk's version and text; the locks last until the caller's
-- transaction ends. Candidates are read without locks, then each is locked on its own with
-- SKIP LOCKED (Citus runs no FOR UPDATE across sessions); a candidate another worker holds
-- or took is passed over, so a call returns fewer chunks only when fewer are free.
CREATE OR REPLACE FUNCTION shardstore.vec_claim_v1(p_session uuid, p_limit integer)
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamp with time zone, r_first_turn_seq bigint, r_turn_count integer, r_chunk_text text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    c     record;
    v_got integer := 0;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start FROM shardstore.embed_queue x
              WHERE p_session IS NULL OR x.session_id = p_session
              ORDER BY x.queued_at
              LIMIT p_limit * 4 + 16 LOOP
        PERFORM 1 FROM shardstore.embed_queue q
          WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
            AND q.chunk_start = c.chunk_start
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        r_session_id := c.session_id;
        r_chunk_seq := c.chunk_seq;
        r_chunk_start := c.chunk_start;
        r_first_turn_seq := NULL;
        r_turn_count := NULL;
        r_chunk_text := NULL;
        -- EXECUTE plans with the values known, so the scan prunes to one partition
        EXECUTE 'SELECT h.first_turn_seq, h.turn_count, h.conversation_chunk::text
                   FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
           INTO r_first_turn_seq, r_turn_count, r_chunk_text
          USING c.session_id, c.chunk_seq, c.chunk_start;
        RETURN NEXT;
        v_got := v_got + 1;
        EXIT WHEN v_got >= p_limit;
    END LOOP;
END
$function$;
