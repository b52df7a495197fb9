-- Folds one candidate session. An idle session (no turn since p_before) is flushed: its
-- sealed chunks and its open chunk go to agent_history, the open chunk stays open. A session
-- that is being written to, or that got a turn since, only has its sealed chunks folded
-- (which needs no session lock). Never waits for a session lock: SKIP LOCKED, and at most
-- p_lock_timeout for anything else. Returns the number of turns moved.
CREATE OR REPLACE FUNCTION shardstore.maint_fold_session_v1(p_session_id uuid, p_before timestamp with time zone, p_lock_timeout interval)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
    PERFORM 1 FROM shardstore.sessions s
     WHERE s.session_id = p_session_id AND s.purged_at IS NULL AND s.last_turn_at < p_before
       FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN shardstore.flush_v1(p_session_id);
    END IF;
    RETURN shardstore.fold_sealed(p_session_id, 0, 0);
END
$function$;
