-- Sessions with buffered turns that have no text window yet, with how many, oldest buffered
-- turn first, at most p_limit; none while text search is off (text_config_read_v1() NULL).
-- Sealed turns (encryption at rest) do not count: the server cannot window them, the
-- client's text pass does (shardstore/search/keyed.py).
-- Reads only, no lock.
CREATE OR REPLACE FUNCTION shardstore.text_unindexed_sessions_v1(p_limit integer)
 RETURNS TABLE(r_session_id uuid, r_turns bigint)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF shardstore.text_config_read_v1() IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.session_id, count(*)
      FROM shardstore.turn_buffer b
     WHERE NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                        WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq)
       AND NOT b.message ? 'ss_enc'
     GROUP BY b.session_id
     ORDER BY min(b.created_at), b.session_id
     LIMIT p_limit;
END
$function$;
