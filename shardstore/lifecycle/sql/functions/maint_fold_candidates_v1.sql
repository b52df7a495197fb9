-- Sessions with buffered turns to fold: not purged, and either idle since before p_before or
-- holding turns of an already sealed chunk (chunk_seq below the open one) buffered before
-- p_before. Reads only; takes no row lock. PL/pgSQL because Citus cannot plan a LANGUAGE sql
-- function's parameters.
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
