-- the old names, keeping nothing: one body each
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v2(p_session_id uuid, p_keep_turns integer)
 RETURNS integer
 LANGUAGE sql
AS $function$
    SELECT shardstore.fold_sealed(p_session_id, p_keep_turns, 0);
$function$;
