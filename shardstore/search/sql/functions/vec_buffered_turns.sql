-- For the embedding of buffered turns (vec_claim_v2): a session's buffered turns with
-- turn_seq in [p_from, p_to) (p_to NULL: no upper bound) that have no vector yet, in turn
-- order, each as the envelope fold_chunk will write, with the chunk_start its chunk is (or
-- will be) folded at: the open chunk's from the session head, a chunk flushed while open from
-- chunk_map, else its first buffered turn's time (the starts fold_sealed and flush_v1 use).
-- With vectors of sealed turns switched off (vec_sealed_vectors_v1, read only when the range
-- holds a sealed turn, under its shared lock) sealed turns are not listed: they count as
-- embedded, so the session's watermark moves past them. No row for a purged or missing
-- session. Reads only; no row lock.
CREATE OR REPLACE FUNCTION shardstore.vec_buffered_turns(p_session uuid, p_from bigint, p_to bigint)
 RETURNS TABLE(r_chunk_seq bigint, r_chunk_start timestamp with time zone, r_turn_seq bigint, r_envelope jsonb)
 LANGUAGE plpgsql
AS $function$
DECLARE
    s       record;
    c       record;
    v_start timestamptz;
    v_sealed boolean := true;
BEGIN
    SELECT x.open_chunk_seq, x.open_chunk_start INTO s FROM shardstore.sessions x
     WHERE x.session_id = p_session AND x.purged_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                WHERE b.session_id = p_session AND b.turn_seq >= p_from
                  AND (p_to IS NULL OR b.turn_seq < p_to) AND b.message ? 'ss_enc') THEN
        v_sealed := shardstore.vec_sealed_vectors_v1();
    END IF;
    FOR c IN SELECT b.chunk_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session AND b.turn_seq >= p_from
                AND (p_to IS NULL OR b.turn_seq < p_to)
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        v_start := NULL;
        IF c.chunk_seq = s.open_chunk_seq THEN
            v_start := s.open_chunk_start;
        END IF;
        IF v_start IS NULL THEN
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session AND m.chunk_seq = c.chunk_seq;
        END IF;
        IF v_start IS NULL THEN
            SELECT min(b.created_at) INTO v_start FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session AND b.chunk_seq = c.chunk_seq;
        END IF;
        RETURN QUERY
            SELECT b.chunk_seq, v_start, b.turn_seq,
                   CASE WHEN b.idempotency_key IS NULL
                        THEN jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                'at', b.created_at, 'm', b.message)
                        ELSE jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                'at', b.created_at, 'k', b.idempotency_key,
                                                'm', b.message)
                   END
              FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session AND b.chunk_seq = c.chunk_seq
               AND b.turn_seq >= p_from AND (p_to IS NULL OR b.turn_seq < p_to)
               AND (v_sealed OR NOT b.message ? 'ss_enc')
               AND NOT EXISTS (SELECT 1 FROM shardstore.chunk_vectors v
                                WHERE v.session_id = p_session AND v.chunk_seq = c.chunk_seq
                                  AND v.chunk_start = v_start AND v.first_turn_seq = b.turn_seq)
             ORDER BY b.turn_seq;
    END LOOP;
END
$function$;
