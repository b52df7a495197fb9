-- The first turn of a session at or after p_before (turns of a session never go back in
-- time), or its next_turn_seq when every turn is older: the cut of a purge by time. Reads
-- one chunk's turns: the newest chunk that starts before p_before (chunks before it hold
-- only older turns, chunks after it only newer ones).
CREATE OR REPLACE FUNCTION shardstore.purge_cut(p_session_id uuid, p_before timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_next  bigint;
    v_cut   bigint;
    v_seq   bigint;
    v_start timestamptz;
    v_found bigint;
BEGIN
    SELECT s.next_turn_seq INTO v_next FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_cut := v_next;
    SELECT min(b.turn_seq) INTO v_found FROM shardstore.turn_buffer b
     WHERE b.session_id = p_session_id AND b.created_at >= p_before;
    v_cut := least(v_cut, v_found);
    SELECT min(m.first_turn_seq) INTO v_found FROM shardstore.chunk_map m
     WHERE m.session_id = p_session_id AND m.chunk_start >= p_before;
    v_cut := least(v_cut, v_found);
    SELECT m.chunk_seq, m.chunk_start INTO v_seq, v_start FROM shardstore.chunk_map m
     WHERE m.session_id = p_session_id AND m.chunk_start < p_before
     ORDER BY m.chunk_seq DESC LIMIT 1;
    IF FOUND THEN
        EXECUTE 'SELECT min((x.e->>''s'')::bigint)
                   FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS x(e)
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                    AND (x.e->>''at'')::timestamptz >= $4'
           INTO v_found USING p_session_id, v_seq, v_start, p_before;
        v_cut := least(v_cut, v_found);
    END IF;
    RETURN v_cut;
END
$function$;
