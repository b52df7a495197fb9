-- Stores the windows of a batch of embedded chunks, each chunk all or nothing. A chunk is
-- written only if it still has the version the worker embedded (first_turn_seq, turn_count),
-- its session is not purged and no fold or purge holds it now (FOR SHARE SKIP LOCKED: such a
-- chunk keeps its queue row and is embedded again later). A vanished chunk loses its queue
-- row. Returns (chunks stored, chunks left queued).
CREATE OR REPLACE FUNCTION shardstore.vec_store_v1(p_session uuid[], p_chunk bigint[], p_start timestamp with time zone[], p_first bigint[], p_count integer[], w_chunk_idx integer[], w_first bigint[], w_last bigint[], w_first_at timestamp with time zone[], w_last_at timestamp with time zone[], w_vec text[], OUT r_stored integer, OUT r_left integer)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    i       integer;
    v_ok    boolean;
    v_found boolean;
    s       record;
BEGIN
    r_stored := 0;
    r_left := 0;
    FOR i IN 1 .. coalesce(cardinality(p_session), 0) LOOP
        v_found := EXISTS (SELECT 1 FROM shardstore.agent_history h
                            WHERE h.session_id = p_session[i] AND h.chunk_seq = p_chunk[i]
                              AND h.chunk_start = p_start[i]);
        IF NOT v_found THEN
            DELETE FROM shardstore.embed_queue q
             WHERE q.session_id = p_session[i] AND q.chunk_seq = p_chunk[i] AND q.chunk_start = p_start[i];
            CONTINUE;
        END IF;
        SELECT true INTO v_ok FROM shardstore.agent_history h
         WHERE h.session_id = p_session[i] AND h.chunk_seq = p_chunk[i] AND h.chunk_start = p_start[i]
           AND h.first_turn_seq = p_first[i] AND h.turn_count = p_count[i]
           FOR SHARE SKIP LOCKED;
        SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
         WHERE x.session_id = p_session[i] AND x.purged_at IS NULL;
        IF v_ok IS NOT TRUE OR NOT FOUND THEN
            r_left := r_left + 1;
            v_ok := NULL;
            CONTINUE;
        END IF;
        v_ok := NULL;
        DELETE FROM shardstore.chunk_vectors v
         WHERE v.session_id = p_session[i] AND v.chunk_seq = p_chunk[i] AND v.chunk_start = p_start[i];
        INSERT INTO shardstore.chunk_vectors
               (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                first_turn_seq, last_turn_seq, first_at, last_at, embedding)
        SELECT p_session[i], p_chunk[i], p_start[i], (row_number() OVER (ORDER BY w.ord))::integer - 1,
               s.tenant_id, s.agent_id, w.f, w.l, w.fa, w.la, w.v::halfvec
          FROM unnest(w_chunk_idx, w_first, w_last, w_first_at, w_last_at, w_vec)
               WITH ORDINALITY AS w(idx, f, l, fa, la, v, ord)
         WHERE w.idx = i;
        DELETE FROM shardstore.embed_queue q
         WHERE q.session_id = p_session[i] AND q.chunk_seq = p_chunk[i] AND q.chunk_start = p_start[i];
        r_stored := r_stored + 1;
    END LOOP;
END
$function$;
