-- Whether a session holds sealed turns (encryption at rest) without text windows: buffered
-- ones, or folded ones in a chunk with fewer indexed turns than turns. The client's text pass
-- indexes them (shardstore/search/keyed.py). A function, so that its plans are cached and the
-- partitions it reads are pruned at run time instead of planned at every search. Every search
-- of an encrypted store asks it, so its cost follows what is pending, not the session's
-- length: a buffered message is read only when its turn has no window; a folded chunk is
-- found through its chunk_map row (one partition of agent_history, as every read finds it),
-- its windows counted over its turns' range of turn_text's primary key (not every window of
-- the session once per chunk), and its JSON read only when some of its turns have none.
CREATE OR REPLACE FUNCTION shardstore.text_sealed_pending_v1(p_session uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                WHERE b.session_id = p_session
                  -- CASE: in order, the message after the index probe
                  AND CASE WHEN EXISTS (SELECT 1 FROM shardstore.turn_text t
                                         WHERE t.session_id = p_session
                                           AND t.turn_seq = b.turn_seq)
                           THEN false
                           ELSE b.message ? 'ss_enc' END) THEN
        RETURN true;
    END IF;
    -- a statement of its own: a session without folded chunks opens no partition
    IF NOT EXISTS (SELECT 1 FROM shardstore.chunk_map m WHERE m.session_id = p_session) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT 1 FROM shardstore.chunk_map m
                     JOIN shardstore.agent_history h
                       ON h.session_id = p_session AND h.chunk_seq = m.chunk_seq
                      AND h.chunk_start = m.chunk_start
                    WHERE m.session_id = p_session
                      AND CASE WHEN (SELECT count(DISTINCT t.turn_seq) FROM shardstore.turn_text t
                                      WHERE t.session_id = p_session
                                        AND t.turn_seq >= h.first_turn_seq
                                        AND t.turn_seq < h.first_turn_seq + h.turn_count)
                                    < h.turn_count
                               THEN jsonb_path_exists(h.conversation_chunk, '$[*].m.ss_enc')
                               ELSE false END);
END
$function$;
