-- Entry point of a fold of a session's sealed chunks: fold_sealed over the whole buffer
-- (from turn 0), keeping the chunks that hold the newest p_keep_turns turns buffered.
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v2(p_session_id uuid, p_keep_turns integer)
 RETURNS integer
 LANGUAGE sql
AS $function$
    SELECT shardstore.fold_sealed(p_session_id, p_keep_turns, 0);
$function$;
