-- Folds all of a session's buffered turns, sealed chunks and the open one, into
-- agent_history; the open chunk stays open for more turns (used by maintenance for idle
-- sessions and by store.flush()). Returns the number of turns moved.
CREATE OR REPLACE FUNCTION shardstore.flush_v1(p_session_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_moved integer;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    v_moved := shardstore.fold_sealed(p_session_id, 0, 0);
    IF s.open_turns > 0 THEN
        v_moved := v_moved + shardstore.fold_chunk(p_session_id, s.open_chunk_seq, s.open_chunk_start);
    END IF;
    RETURN v_moved;
END
$function$;
