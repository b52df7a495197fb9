-- The chunk of a session's view that holds turn p_turn, and the session owning it; no row
-- when no stored chunk holds it (a turn removed by retention or a range purge).
CREATE OR REPLACE FUNCTION shardstore.fork_chunk_of_v1(p_session_id uuid, p_turn bigint)
 RETURNS TABLE(r_owner uuid, r_chunk_seq bigint)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    g     record;
    v_seq bigint;
BEGIN
    IF p_turn IS NULL OR p_turn < 0 THEN
        RETURN;
    END IF;
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session_id) LOOP
        CONTINUE WHEN g.r_turn_hi IS NOT NULL AND g.r_turn_hi < p_turn;
        SELECT greatest(
                   (SELECT b.chunk_seq FROM shardstore.turn_buffer b
                     WHERE b.session_id = g.r_session_id AND b.turn_seq = p_turn),
                   (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                     WHERE m.session_id = g.r_session_id AND m.first_turn_seq <= p_turn
                       AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)))
          INTO v_seq;
        IF v_seq IS NOT NULL AND v_seq >= g.r_chunk_lo
           AND (g.r_chunk_hi IS NULL OR v_seq < g.r_chunk_hi) THEN
            r_owner := g.r_session_id;
            r_chunk_seq := v_seq;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
END
$function$;
