-- A session's newest turns, newest first: at most p_n, stopping before the turn that would
-- pass p_max_tokens (NULL: no bound); SS404 / SS410 for an unknown / purged session; a fork's
-- tail is fork_tail. Reads only, no lock (STABLE: one snapshot for all its reads). First the
-- buffer in one index scan while turn seqs run consecutive down from the newest, then chunk by
-- chunk down from where that stopped: buffered turns, then the folded chunk's newest envelopes
-- as one slice (decompressed once); a gap (chunks removed by a range purge or retention) is
-- jumped. Planned once per connection (force_generic_plan, which holds for fork_tail too):
-- Citus plans a statement with unresolved parameters only when it is a single-table query on
-- the distribution column, so every statement reads one table filtered by the session (the
-- chunk below a gap: two statements, chunk_map and turn_buffer, compared in PL/pgSQL). Why
-- the buffer scan and the slice: docs/decisions/0007-tail-reads.md. A call Citus delegated to
-- the worker holding the session reads the session row and the buffer from that worker's
-- shards directly (citus_local_shards: Citus re-plans each statement on a distributed
-- table there at ~10x a plain statement's cost; docs/decisions/0027-citus-append-and-tail.md).
CREATE OR REPLACE FUNCTION shardstore.tail_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamp with time zone, r_key text, r_message jsonb)
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean := false;
    v_below  bigint;
    v_mapped   bigint;
    v_buffered bigint;
    v_slice  jsonb;
    v_e      jsonb;
    v_last   integer;
    t        record;
    v_shard_sessions text;
    v_shard_buffer   text;
BEGIN
    -- citus.version exists where the Citus library is loaded (a GUC lookup, ~free)
    IF current_setting('citus.version', true) IS NOT NULL THEN
        SELECT x.r_sessions, x.r_buffer INTO v_shard_sessions, v_shard_buffer
          FROM shardstore.citus_local_shards(p_session_id) x;
    END IF;
    IF v_shard_sessions IS NULL THEN
        SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    ELSE
        EXECUTE format('SELECT * FROM %s WHERE session_id = $1', v_shard_sessions)
           INTO s USING p_session_id;
    END IF;
    IF s.session_id IS NULL THEN  -- not found (EXECUTE leaves FOUND as it was)
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.fork_tail(p_session_id, NULL, p_n, p_max_tokens);
        RETURN;
    END IF;
    v_seq := s.open_chunk_seq;
    -- The newest turns straight from the buffer, one index scan across chunks, while turn
    -- seqs are consecutive from the session's newest turn down (no folded or removed turn
    -- between them, so no chunk_map lookup is needed); at the first gap, or when the buffer
    -- has no more, the per-chunk walk below goes on from the chunk reached, below v_below.
    -- (the two loops differ only in the table they scan: the distributed table, or the
    -- session's shard on the worker a delegated call runs on)
    IF v_shard_buffer IS NULL THEN
        FOR t IN SELECT b.turn_seq, b.chunk_seq, b.tokens, b.created_at,
                        b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id
                  ORDER BY b.turn_seq DESC
                  LIMIT p_n LOOP
            EXIT WHEN t.turn_seq <> coalesce(v_below, s.next_turn_seq) - 1;
            IF p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens THEN
                RETURN;
            END IF;
            r_turn_seq := t.turn_seq; r_chunk_seq := t.chunk_seq; r_tokens := t.tokens;
            r_created_at := t.created_at; r_key := t.key; r_message := t.message;
            RETURN NEXT;
            v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            v_below := t.turn_seq; v_seq := t.chunk_seq; v_hit := true;
        END LOOP;
    ELSE
        FOR t IN EXECUTE format(
                   'SELECT b.turn_seq, b.chunk_seq, b.tokens, b.created_at,
                           b.idempotency_key AS key, b.message
                      FROM %s b
                     WHERE b.session_id = $1
                     ORDER BY b.turn_seq DESC
                     LIMIT $2', v_shard_buffer) USING p_session_id, p_n LOOP
            EXIT WHEN t.turn_seq <> coalesce(v_below, s.next_turn_seq) - 1;
            IF p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens THEN
                RETURN;
            END IF;
            r_turn_seq := t.turn_seq; r_chunk_seq := t.chunk_seq; r_tokens := t.tokens;
            r_created_at := t.created_at; r_key := t.key; r_message := t.message;
            RETURN NEXT;
            v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            v_below := t.turn_seq; v_seq := t.chunk_seq; v_hit := true;
        END LOOP;
    END IF;
    IF p_n IS NOT NULL AND v_count >= p_n THEN
        RETURN;
    END IF;
    WHILE v_seq >= 0 LOOP
        FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq = v_seq
                    AND (v_below IS NULL OR b.turn_seq < v_below)
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
        IF p_n IS NOT NULL AND v_count >= p_n THEN
            RETURN;  -- the window is full: no chunk_map read, no chunk read
        END IF;
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = v_seq;
        IF NOT FOUND AND NOT v_hit THEN
            -- a gap (chunks removed by a range purge or retention): jump to the next
            -- chunk that still exists, or stop
            SELECT max(m.chunk_seq) INTO v_mapped FROM shardstore.chunk_map m
             WHERE m.session_id = p_session_id AND m.chunk_seq < v_seq;
            SELECT max(b.chunk_seq) INTO v_buffered FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session_id AND b.chunk_seq < v_seq;
            v_seq := greatest(v_mapped, v_buffered);
            EXIT WHEN v_seq IS NULL;
            CONTINUE;
        END IF;
        v_hit := false;
        IF FOUND THEN
            -- the newest (p_n - v_count) envelopes only (all of them without p_n), as one
            -- in-memory array: the chunk is decompressed once, and -> by index is cheap on
            -- the slice (-> on the stored value would decompress it at every call)
            SELECT jsonb_path_query_array(
                       h.conversation_chunk, '$[last - $k to last]',
                       jsonb_build_object('k', CASE WHEN p_n IS NULL THEN 2147483647
                                                    ELSE p_n - v_count - 1 END))
              INTO v_slice
              FROM shardstore.agent_history h
             WHERE h.session_id = p_session_id AND h.chunk_seq = v_seq AND h.chunk_start = v_start;
            v_last := coalesce(jsonb_array_length(v_slice), 0) - 1;
            FOR i IN REVERSE v_last .. 0 LOOP
                v_e := v_slice -> i;
                IF (p_n IS NOT NULL AND v_count >= p_n)
                   OR (p_max_tokens IS NOT NULL AND v_tokens + (v_e->>'t')::bigint > p_max_tokens) THEN
                    RETURN;
                END IF;
                r_turn_seq := (v_e->>'s')::bigint; r_chunk_seq := v_seq;
                r_tokens := (v_e->>'t')::integer; r_created_at := (v_e->>'at')::timestamptz;
                r_key := v_e->>'k'; r_message := v_e->'m';
                RETURN NEXT;
                v_count := v_count + 1; v_tokens := v_tokens + r_tokens;
            END LOOP;
        END IF;
        v_seq := v_seq - 1;
    END LOOP;
END
$function$;
