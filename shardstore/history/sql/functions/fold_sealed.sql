-- Folds a session's sealed chunks (those below the open chunk) from turn_buffer into
-- agent_history, one fold_chunk each, oldest first, but the newest ones holding the session's
-- newest p_keep_turns turns (the open chunk's turns count), which stay buffered so that a
-- tail reads buffer rows (docs/decisions/0006-folds-keep-the-tail-buffered.md). A chunk
-- flushed while open keeps the start chunk_map recorded; otherwise it starts at its first
-- buffered turn. The buffer is scanned from turn p_from_turn on: a caller that folded earlier
-- in its transaction passes its first turn, so that the dead buffer entries it left are not
-- walked. Holds the session row FOR KEY SHARE: it excludes rewinds, purges and flushes (FOR
-- UPDATE), never appends (FOR NO KEY UPDATE). Returns the number of turns moved (0 when the
-- session does not exist).
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
