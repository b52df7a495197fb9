-- fold_sealed_v2's body (0035), its buffer scans bounded below by p_from_turn
CREATE OR REPLACE FUNCTION shardstore.fold_sealed(p_session_id uuid, p_keep_turns integer, p_from_turn bigint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_open   bigint;
    v_newer  bigint;
    v_upto   bigint;   -- sealed chunks below this chunk_seq are folded
    v_moved  integer := 0;
    v_start  timestamptz;
    c        record;
BEGIN
    SELECT open_chunk_seq, open_turns INTO v_open, v_newer FROM shardstore.sessions
     WHERE session_id = p_session_id
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_upto := v_open;
    IF coalesce(p_keep_turns, 0) > 0 THEN
        FOR c IN SELECT b.chunk_seq, count(*) AS turns
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.turn_seq >= p_from_turn
                    AND b.chunk_seq < v_open
                  GROUP BY b.chunk_seq ORDER BY b.chunk_seq DESC LOOP
            EXIT WHEN v_newer >= p_keep_turns;
            v_upto := c.chunk_seq;
            v_newer := v_newer + c.turns;
        END LOOP;
    END IF;
    FOR c IN SELECT b.chunk_seq, min(b.created_at) AS first_at
               FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id AND b.turn_seq >= p_from_turn
                AND b.chunk_seq < v_upto
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        -- a chunk flushed while it was open already has its start (and partition) recorded
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = c.chunk_seq;
        v_moved := v_moved + shardstore.fold_chunk(p_session_id, c.chunk_seq, coalesce(v_start, c.first_at));
    END LOOP;
    RETURN v_moved;
END
$function$;
