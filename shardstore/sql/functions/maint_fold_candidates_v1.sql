-- As in 0003, in PL/pgSQL.
CREATE OR REPLACE FUNCTION shardstore.maint_fold_candidates_v1(p_before timestamp with time zone)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
        SELECT DISTINCT b.session_id
          FROM shardstore.turn_buffer b
          JOIN shardstore.sessions s ON s.session_id = b.session_id
         WHERE s.purged_at IS NULL
           AND (s.last_turn_at < p_before OR (b.chunk_seq < s.open_chunk_seq AND b.created_at < p_before));
END
$function$;
