-- Where a session's history lives along its fork chain: one row per session that holds some
-- of it, the session itself first (depth 0, no upper bounds), then each ancestor that still
-- contributes, up to 100,000 levels. r_chunk_lo is that session's first own chunk (its
-- fork_chunk, 0 for a root); r_chunk_hi and r_turn_hi are the lowest fork_chunk and fork_at
-- of the sessions below it on the path (its chunks and turns below those). Reads only.
-- PL/pgSQL, a loop with one single-session lookup per ancestor, because Citus plans neither a
-- LANGUAGE sql function with parameters nor a recursive CTE across sessions.
CREATE OR REPLACE FUNCTION shardstore.fork_segments_v1(p_session_id uuid)
 RETURNS TABLE(r_session_id uuid, r_chunk_lo bigint, r_chunk_hi bigint, r_turn_hi bigint, r_depth integer)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    cur     record;
    v_sid   uuid := p_session_id;
    v_lo    bigint;
    v_hi    bigint;
    v_thi   bigint;
    v_depth integer := 0;
BEGIN
    LOOP
        SELECT s.session_id, s.fork_chunk, s.fork_parent, s.fork_at INTO cur
          FROM shardstore.sessions s WHERE s.session_id = v_sid;
        EXIT WHEN NOT FOUND;
        v_lo := coalesce(cur.fork_chunk, 0);
        IF v_depth = 0 OR (v_lo < v_hi AND v_thi >= 0) THEN
            r_session_id := cur.session_id; r_chunk_lo := v_lo; r_chunk_hi := v_hi;
            r_turn_hi := v_thi; r_depth := v_depth;
            RETURN NEXT;
        END IF;
        EXIT WHEN cur.fork_parent IS NULL OR v_depth >= 100000;
        -- least() ignores NULLs: the tightest bound along the path
        v_hi := least(v_hi, cur.fork_chunk);
        v_thi := least(v_thi, cur.fork_at);
        v_sid := cur.fork_parent;
        v_depth := v_depth + 1;
    END LOOP;
END
$function$;
