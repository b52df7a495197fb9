-- A session's turns at or below p_upto, newest first: at most p_n, stopping before the turn
-- that would pass p_max_tokens; none when p_upto < 0; SS404 for an unknown or purged session;
-- a fork's is fork_tail. Walks down from the chunk holding p_upto: buffered turns, then the
-- folded chunk's envelopes, jumping gaps. Reads only, no lock. It runs with the default plan
-- cache mode, under which Citus plans each call with its values, so its one-statement gap
-- lookup (two scalar subqueries) works there.
CREATE OR REPLACE FUNCTION shardstore.tail_at_v1(p_session_id uuid, p_upto bigint, p_n integer, p_max_tokens bigint)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamp with time zone, r_key text, r_message jsonb)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean := false;
    t        record;
BEGIN
    PERFORM 1 FROM shardstore.sessions s WHERE s.session_id = p_session_id AND s.purged_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF p_upto < 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM shardstore.sessions s
                WHERE s.session_id = p_session_id AND s.fork_parent IS NOT NULL) THEN
        RETURN QUERY SELECT * FROM shardstore.fork_tail(p_session_id, p_upto, p_n, p_max_tokens);
        RETURN;
    END IF;
    SELECT greatest(
               (SELECT b.chunk_seq FROM shardstore.turn_buffer b
                 WHERE b.session_id = p_session_id AND b.turn_seq = p_upto),
               (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                 WHERE m.session_id = p_session_id AND m.first_turn_seq <= p_upto))
      INTO v_seq;
    WHILE v_seq IS NOT NULL AND v_seq >= 0 LOOP
        FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq = v_seq AND b.turn_seq <= p_upto
                  ORDER BY b.turn_seq DESC LOOP
            IF (p_n IS NOT NULL AND v_count >= p_n)
               OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                RETURN;
            END IF;
            r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
            r_created_at := t.created_at; r_key := t.key; r_message := t.message;
            RETURN NEXT;
            v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            v_hit := true;
        END LOOP;
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = v_seq;
        IF NOT FOUND AND NOT v_hit THEN
            SELECT greatest(
                       (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.chunk_seq < v_seq),
                       (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                         WHERE b.session_id = p_session_id AND b.chunk_seq < v_seq))
              INTO v_seq;
            CONTINUE;
        END IF;
        v_hit := false;
        IF FOUND THEN
            FOR t IN EXECUTE
                'SELECT (e->>''s'')::bigint AS turn_seq, (e->>''t'')::integer AS tokens,
                        (e->>''at'')::timestamptz AS created_at, e->>''k'' AS key, e->''m'' AS message
                   FROM shardstore.agent_history h,
                        jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                  ORDER BY x.ord DESC'
                USING p_session_id, v_seq, v_start LOOP
                CONTINUE WHEN t.turn_seq > p_upto;
                IF (p_n IS NOT NULL AND v_count >= p_n)
                   OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                    RETURN;
                END IF;
                r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
                r_created_at := t.created_at; r_key := t.key; r_message := t.message;
                RETURN NEXT;
                v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            END LOOP;
        END IF;
        v_seq := v_seq - 1;
    END LOOP;
END
$function$;
