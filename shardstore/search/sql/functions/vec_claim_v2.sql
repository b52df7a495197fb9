-- An embedding worker's claim: at most p_limit units. First queued chunks (kind 'q', oldest
-- first), each embed_queue row locked FOR UPDATE SKIP LOCKED (another worker's claim is
-- skipped, never waited for); r_chunk_text holds only the envelopes of turns without vectors,
-- '[]' when every turn has them; r_found false for a chunk that no longer exists. Then
-- buffered turns (kind 'b', from vec_buffered_turns): one unit per chunk of a session at or
-- above its watermark whose embedding lock (vec_session_lock: tried, never waited for) this
-- worker got; r_mark is the watermark to record once they are stored; a session whose
-- buffered turns all have vectors already gives one unit with r_chunk_seq NULL, to move its
-- watermark. Vectors of a chunk written under another chunk_start in the same partition (a
-- buffered chunk whose first turns retention removed before the fold) count as its own:
-- vec_store_v2 moves them.
CREATE OR REPLACE FUNCTION shardstore.vec_claim_v2(p_session uuid, p_limit integer)
 RETURNS TABLE(r_kind text, r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamp with time zone, r_first_turn_seq bigint, r_turn_count integer, r_found boolean, r_chunk_text text, r_mark bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    c          record;
    u          record;
    v_got      integer := 0;
    v_interval interval;
    v_origin   timestamptz;
    v_upto     bigint;
    v_max      bigint;
    v_units    integer;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    SELECT x.partition_interval, x.partition_origin INTO v_interval, v_origin FROM shardstore.config x;
    FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start FROM shardstore.embed_queue x
              WHERE p_session IS NULL OR x.session_id = p_session
              ORDER BY x.queued_at
              LIMIT p_limit * 4 + 16 LOOP
        PERFORM 1 FROM shardstore.embed_queue q
          WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
            AND q.chunk_start = c.chunk_start
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        r_kind := 'q';
        r_session_id := c.session_id;
        r_chunk_seq := c.chunk_seq;
        r_chunk_start := c.chunk_start;
        r_first_turn_seq := NULL;
        r_turn_count := NULL;
        r_chunk_text := NULL;
        r_mark := NULL;
        -- EXECUTE plans with the values known, so both scans prune to one partition
        EXECUTE 'SELECT h.first_turn_seq, h.turn_count,
                        coalesce((SELECT jsonb_agg(e.v ORDER BY e.o)
                                    FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS e(v, o)
                                   WHERE NOT EXISTS (
                                         SELECT 1 FROM shardstore.chunk_vectors x
                                          WHERE x.session_id = $1 AND x.chunk_seq = $2
                                            AND x.chunk_start >= $4 AND x.chunk_start <= $3
                                            AND x.first_turn_seq = (e.v->>''s'')::bigint)),
                                 ''[]'')::text
                   FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
           INTO r_first_turn_seq, r_turn_count, r_chunk_text
          USING c.session_id, c.chunk_seq, c.chunk_start, date_bin(v_interval, c.chunk_start, v_origin);
        r_found := r_turn_count IS NOT NULL;
        RETURN NEXT;
        v_got := v_got + 1;
        IF v_got >= p_limit THEN
            RETURN;
        END IF;
    END LOOP;
    -- buffered turns at or above their session's watermark
    FOR c IN SELECT DISTINCT b.session_id FROM shardstore.turn_buffer b
               LEFT JOIN shardstore.embed_marks m ON m.session_id = b.session_id
              WHERE (p_session IS NULL OR b.session_id = p_session)
                AND b.turn_seq >= coalesce(m.upto, 0)
              LIMIT (p_limit - v_got) * 4 + 16 LOOP
        CONTINUE WHEN NOT shardstore.vec_session_lock(c.session_id);
        SELECT m.upto INTO v_upto FROM shardstore.embed_marks m WHERE m.session_id = c.session_id;
        v_upto := coalesce(v_upto, 0);
        SELECT max(b.turn_seq) INTO v_max FROM shardstore.turn_buffer b WHERE b.session_id = c.session_id;
        CONTINUE WHEN v_max IS NULL OR v_max < v_upto;
        v_units := 0;
        FOR u IN SELECT t.r_chunk_seq AS chunk_seq, t.r_chunk_start AS chunk_start,
                        jsonb_agg(t.r_envelope ORDER BY t.r_turn_seq)::text AS envelopes
                   FROM shardstore.vec_buffered_turns(c.session_id, v_upto, v_max + 1) t
                  GROUP BY t.r_chunk_seq, t.r_chunk_start ORDER BY t.r_chunk_seq LOOP
            r_kind := 'b';
            r_session_id := c.session_id;
            r_chunk_seq := u.chunk_seq;
            r_chunk_start := u.chunk_start;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_found := true;
            r_chunk_text := u.envelopes;
            r_mark := v_max + 1;
            RETURN NEXT;
            v_units := v_units + 1;
        END LOOP;
        IF v_units = 0 THEN
            r_kind := 'b';
            r_session_id := c.session_id;
            r_chunk_seq := NULL;
            r_chunk_start := NULL;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_found := true;
            r_chunk_text := '[]';
            r_mark := v_max + 1;
            RETURN NEXT;
        END IF;
        v_got := v_got + greatest(v_units, 1);
        EXIT WHEN v_got >= p_limit;
    END LOOP;
END
$function$;
