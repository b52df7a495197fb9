-- The turns p_lo <= turn_seq < p_hi (p_hi NULL: to the end) of a session that is not a
-- fork, as the folded chunks that hold them (r_kind 'chunk': r_chunk_seq and r_text, the
-- chunk's envelopes as JSON text, whole) and the buffered turns (r_kind 'turn'), unordered;
-- no row when the range is empty. One marker row instead, r_kind 'fork' for a fork or
-- 'long' when the range spans more than p_max_chunks folded chunks: the caller streams those
-- the general way. SS404 / SS410 for an unknown / purged session.
CREATE OR REPLACE FUNCTION shardstore.history_range_v1(p_session_id uuid, p_lo bigint, p_hi bigint, p_max_chunks integer)
 RETURNS TABLE(r_kind text, r_chunk_seq bigint, r_text text, r_turn_seq bigint, r_tokens integer, r_created_at timestamp with time zone, r_key text, r_message text)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_end    bigint;
    v_from   bigint;
    v_seqs   bigint[];
    v_starts timestamptz[];
    v_n      integer;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        r_kind := 'fork';
        RETURN NEXT;
        RETURN;
    END IF;
    v_end := CASE WHEN p_hi IS NULL THEN s.next_turn_seq ELSE least(p_hi, s.next_turn_seq) END;
    IF p_lo >= v_end THEN
        RETURN;
    END IF;
    -- the folded chunk holding p_lo (or the first one left), up to the last one starting
    -- before the end: p_max_chunks + 1 at most, to tell a long range
    v_from := coalesce((SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.first_turn_seq <= p_lo), 0);
    SELECT array_agg(k.chunk_seq), array_agg(DISTINCT k.chunk_start), count(*)
      INTO v_seqs, v_starts, v_n
      FROM (SELECT m.chunk_seq, m.chunk_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session_id AND m.chunk_seq >= v_from
               AND m.first_turn_seq < v_end
             ORDER BY m.chunk_seq
             LIMIT p_max_chunks + 1) k;
    IF v_n > p_max_chunks THEN
        r_kind := 'long';
        RETURN NEXT;
        RETURN;
    END IF;
    -- EXECUTE: planned with the keys' values (like chunk_list_v1)
    RETURN QUERY EXECUTE $q$
    SELECT 'chunk'::text, h.chunk_seq, h.conversation_chunk::text, NULL::bigint, NULL::integer,
           NULL::timestamptz, NULL::text, NULL::text
      FROM shardstore.agent_history h
     WHERE h.session_id = $1 AND h.chunk_seq = ANY ($2) AND h.chunk_start = ANY ($3)
    $q$ USING p_session_id, v_seqs, v_starts;
    RETURN QUERY
    SELECT 'turn'::text, b.chunk_seq, NULL::text, b.turn_seq, b.tokens, b.created_at,
           b.idempotency_key, b.message::text
      FROM shardstore.turn_buffer b
     WHERE b.session_id = p_session_id AND b.turn_seq >= p_lo AND b.turn_seq < v_end;
END
$function$;
