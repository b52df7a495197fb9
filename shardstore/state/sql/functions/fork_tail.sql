-- A fork's tail (tail_v1 and tail_at_v1 call it): its turns at or below p_upto (NULL: to the
-- end) along its lineage (fork_segments_v1), newest first, each segment's chunks walked down
-- from its bound as tail_v1 walks a session's, at most p_n, stopping before p_max_tokens.
-- Reads only, no lock. It runs under tail_v1's generic plans, so each statement reads one
-- table filtered by the session (see tail_v1): a segment's newest chunk and the chunk below a
-- gap are two statements compared in PL/pgSQL, and a folded chunk is read by itself
-- (EXECUTE ... INTO) and its turns taken from the value in memory, since a join of
-- agent_history with jsonb_array_elements fails on Citus under a generic plan.
CREATE OR REPLACE FUNCTION shardstore.fork_tail(p_session_id uuid, p_upto bigint, p_n integer, p_max_tokens bigint)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamp with time zone, r_key text, r_message jsonb)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    g        record;
    v_bound  bigint;
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean;
    v_mapped   bigint;
    v_buffered bigint;
    v_chunk  jsonb;
    t        record;
BEGIN
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session_id) LOOP
        v_bound := least(g.r_turn_hi, p_upto);
        CONTINUE WHEN v_bound IS NOT NULL AND v_bound < 0;
        IF v_bound IS NULL THEN
            SELECT s.open_chunk_seq INTO v_seq FROM shardstore.sessions s
             WHERE s.session_id = g.r_session_id;
        ELSE
            SELECT b.chunk_seq INTO v_buffered FROM shardstore.turn_buffer b
             WHERE b.session_id = g.r_session_id AND b.turn_seq = v_bound;
            SELECT max(m.chunk_seq) INTO v_mapped FROM shardstore.chunk_map m
             WHERE m.session_id = g.r_session_id AND m.first_turn_seq <= v_bound
               AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi);
            v_seq := greatest(v_buffered, v_mapped);
        END IF;
        IF g.r_chunk_hi IS NOT NULL THEN
            v_seq := least(v_seq, g.r_chunk_hi - 1);
        END IF;
        v_hit := false;
        WHILE v_seq IS NOT NULL AND v_seq >= g.r_chunk_lo LOOP
            FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                       FROM shardstore.turn_buffer b
                      WHERE b.session_id = g.r_session_id AND b.chunk_seq = v_seq
                        AND (v_bound IS NULL OR b.turn_seq <= v_bound)
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
             WHERE m.session_id = g.r_session_id AND m.chunk_seq = v_seq;
            IF NOT FOUND AND NOT v_hit THEN
                SELECT max(m.chunk_seq) INTO v_mapped FROM shardstore.chunk_map m
                 WHERE m.session_id = g.r_session_id AND m.chunk_seq < v_seq;
                SELECT max(b.chunk_seq) INTO v_buffered FROM shardstore.turn_buffer b
                 WHERE b.session_id = g.r_session_id AND b.chunk_seq < v_seq;
                v_seq := greatest(v_mapped, v_buffered);
                CONTINUE;
            END IF;
            v_hit := false;
            IF FOUND THEN
                -- the chunk by itself (one table: a query Citus can plan without values),
                -- planned with its keys' values (EXECUTE ... INTO), then its turns newest
                -- first from the value in memory
                EXECUTE 'SELECT h.conversation_chunk FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
                   INTO v_chunk
                  USING g.r_session_id, v_seq, v_start;
                FOR t IN SELECT (e->>'s')::bigint AS turn_seq, (e->>'t')::integer AS tokens,
                                (e->>'at')::timestamptz AS created_at, e->>'k' AS key,
                                e->'m' AS message
                           FROM jsonb_array_elements(v_chunk) WITH ORDINALITY AS x(e, ord)
                          ORDER BY x.ord DESC LOOP
                    CONTINUE WHEN v_bound IS NOT NULL AND t.turn_seq > v_bound;
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
    END LOOP;
END
$function$;
