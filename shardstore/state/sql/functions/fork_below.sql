-- Where a fork at turn p_turn of session p_session_id links when no stored chunk holds that
-- turn but older turns of the view remain (the turn was erased with a purged fork in the
-- lineage): the newest segment of the view holding a stored turn at or below p_turn, as its
-- session (r_owner), the chunk holding its newest such turn (r_chunk_seq) and the turn bound
-- the link inherits up to (r_turn_at: p_turn, or the segment's own bound when lower, so that
-- the owner's later turns never show through). No row when nothing at or below p_turn is
-- stored (a range purge or retention removed it all). Reads only.
CREATE OR REPLACE FUNCTION shardstore.fork_below(p_session_id uuid, p_turn bigint)
 RETURNS TABLE(r_owner uuid, r_chunk_seq bigint, r_turn_at bigint)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    g       record;
    v_bound bigint;
    v_seq   bigint;
BEGIN
    IF p_turn IS NULL OR p_turn < 0 THEN
        RETURN;
    END IF;
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session_id) ORDER BY r_depth LOOP
        v_bound := least(p_turn, coalesce(g.r_turn_hi, p_turn));
        SELECT greatest(
                   (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                     WHERE b.session_id = g.r_session_id AND b.turn_seq <= v_bound
                       AND b.chunk_seq >= g.r_chunk_lo
                       AND (g.r_chunk_hi IS NULL OR b.chunk_seq < g.r_chunk_hi)),
                   (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                     WHERE m.session_id = g.r_session_id AND m.first_turn_seq <= v_bound
                       AND m.chunk_seq >= g.r_chunk_lo
                       AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)))
          INTO v_seq;
        IF v_seq IS NOT NULL THEN
            r_owner := g.r_session_id;
            r_chunk_seq := v_seq;
            r_turn_at := v_bound;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
END
$function$;
