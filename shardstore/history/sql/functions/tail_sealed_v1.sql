-- tail() of a store with encryption on (shardstore/encryption/turns.py): tail_window's JSON
-- array of the newest turns (tail_v1) and the session's rewind_epochs, which the client checks
-- every sealed turn against, from one snapshot (STABLE: tail_v1's reads and this one share the
-- statement's), in one statement instead of two. Reads only.
CREATE OR REPLACE FUNCTION shardstore.tail_sealed_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
 RETURNS TABLE(r_window text, r_epochs bigint[])
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    SELECT '[' || string_agg('[' || t.r_turn_seq || ',' || t.r_chunk_seq || ',' || t.r_tokens
                             || ',' || (extract(epoch FROM t.r_created_at) * 1000000)::bigint
                             || ',' || CASE WHEN t.r_key IS NULL THEN 'null'
                                            ELSE to_json(t.r_key)::text END
                             || ',' || t.r_message::text || ']', ',') || ']'
      INTO r_window
      FROM shardstore.tail_v1(p_session_id, p_n, p_max_tokens) AS t;
    SELECT s.rewind_epochs INTO r_epochs FROM shardstore.sessions s
     WHERE s.session_id = p_session_id;
    RETURN NEXT;
END
$function$;
