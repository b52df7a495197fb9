-- fold_sealed_v1 (maintenance's, and a caller's of the old name) is fold_sealed_v2 keeping
-- nothing: one body for the fold loop and its lock.
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v1(p_session_id uuid)
 RETURNS integer
 LANGUAGE sql
AS $function$
    SELECT shardstore.fold_sealed_v2(p_session_id, 0);
$function$;
