-- Whether a session holds sealed turns (encryption at rest) without text windows: buffered
-- ones, or folded ones in a chunk with fewer indexed turns than turns. The client's text pass
-- indexes them (shardstore/search/keyed.py). A function, so that its plan is cached and the
-- hash partitions of turn_text are pruned at run time instead of planned at every search.
CREATE OR REPLACE FUNCTION shardstore.text_sealed_pending_v1(p_session uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = p_session AND b.message ? 'ss_enc'
                      AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                       WHERE t.session_id = p_session
                                         AND t.turn_seq = b.turn_seq))
        OR EXISTS (SELECT 1 FROM shardstore.agent_history h
                    WHERE h.session_id = p_session
                      -- a chunk's JSON is read only when it lacks windows (CASE: in order)
                      AND CASE WHEN (SELECT count(DISTINCT t.turn_seq) FROM shardstore.turn_text t
                                      WHERE t.session_id = p_session
                                        AND t.chunk_seq = h.chunk_seq) < h.turn_count
                               THEN jsonb_path_exists(h.conversation_chunk, '$[*].m.ss_enc')
                               ELSE false END);
END
$function$;
