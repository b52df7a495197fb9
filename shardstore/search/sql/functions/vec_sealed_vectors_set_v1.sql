-- Switch vectors of sealed turns (encryption at rest) on or off, in one transaction. Off
-- deletes every vector whose window holds a sealed turn (buffered or folded), after the
-- embedding batches in flight commit (the lock vec_sealed_vectors_v1 shares); later batches
-- embed no sealed turn. On, when it was off, queues every folded chunk holding a sealed turn
-- and clears the watermarks of sessions with sealed buffered turns, so that the next embedding
-- pass gives the turns skipped meanwhile their vectors (the claim takes only turns without
-- vectors, so a chunk already embedded costs a read). Both scan the sealed turns once: an
-- operator's switch, not a per-request call. Returns the number of vectors deleted (off) or
-- of chunks queued plus sessions re-marked (on). Tenant roles may not update
-- text_search_config, so they cannot call it.
CREATE OR REPLACE FUNCTION shardstore.vec_sealed_vectors_set_v1(p_on boolean)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_was      boolean;
    v_buffered bigint;
    v_folded   bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('shardstore.sealed_vectors', 0));
    SELECT c.sealed_vectors INTO v_was FROM shardstore.text_search_config c;
    UPDATE shardstore.text_search_config SET sealed_vectors = p_on;
    IF p_on THEN
        IF coalesce(v_was, true) THEN
            RETURN 0;
        END IF;
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, tenant_id)
        SELECT h.session_id, h.chunk_seq, h.chunk_start, h.tenant_id
          FROM shardstore.agent_history h
         WHERE jsonb_path_exists(h.conversation_chunk, '$[*].m.ss_enc')
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_folded = ROW_COUNT;
        DELETE FROM shardstore.embed_marks m
         WHERE EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                        WHERE b.session_id = m.session_id AND b.message ? 'ss_enc');
        GET DIAGNOSTICS v_buffered = ROW_COUNT;
        RETURN v_folded + v_buffered;
    END IF;
    DELETE FROM shardstore.chunk_vectors v
     USING shardstore.turn_buffer b
     WHERE b.session_id = v.session_id
       AND b.turn_seq BETWEEN v.first_turn_seq AND v.last_turn_seq
       AND b.message ? 'ss_enc';
    GET DIAGNOSTICS v_buffered = ROW_COUNT;
    DELETE FROM shardstore.chunk_vectors v
     USING shardstore.agent_history h, LATERAL jsonb_array_elements(h.conversation_chunk) AS e(x)
     WHERE h.session_id = v.session_id AND h.chunk_seq = v.chunk_seq
       AND (e.x ->> 's')::bigint BETWEEN v.first_turn_seq AND v.last_turn_seq
       AND e.x -> 'm' ? 'ss_enc';
    GET DIAGNOSTICS v_folded = ROW_COUNT;
    RETURN v_buffered + v_folded;
END
$function$;
