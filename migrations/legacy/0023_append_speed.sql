-- 0023: a faster tail (issue 14 goal 2) and cheaper checkpoint rows (issue 11).
-- (docs/architecture.md "Read path", "Checkpoints").
--
-- * tail_v1: as in 0013, except how a folded chunk is read. 0013 expanded the whole chunk
--   (jsonb_array_elements ... ORDER BY ord DESC: every envelope copied, sorted, its fields
--   extracted) to return its newest few turns; now one jsonpath slice of the chunk's newest
--   turns (`$[last - k to last]`, k = the turns still wanted; lax mode clamps it to the
--   chunk) is read into a variable, so the chunk is decompressed once and only the turns
--   returned are copied. With max_tokens alone (no n) the slice is the whole chunk, as
--   before. Same rows, same order, same stopping rules (n turns, or the next turn would
--   cross max_tokens), same gap jumps. The chunk is read by a static statement under
--   plan_cache_mode = force_generic_plan: planned once per connection, pruned to the one
--   partition at executor start (run-time pruning on the key); 0013's EXECUTE planned it
--   at every call. Server-side, tail(20) with 8 buffered turns and 12 from the newest
--   chunk: 0.56-0.63 ms (0013) -> 0.31-0.40 ms, the same with 105 partitions.

CREATE OR REPLACE FUNCTION shardstore.tail_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamptz,
               r_key text, r_message jsonb)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean := false;
    v_slice  jsonb;
    v_e      jsonb;
    v_last   integer;
    t        record;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.fork_tail_v1(p_session_id, NULL, p_n, p_max_tokens);
        RETURN;
    END IF;
    v_seq := s.open_chunk_seq;
    WHILE v_seq >= 0 LOOP
        FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq = v_seq
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
            SELECT greatest(
                       (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.chunk_seq < v_seq),
                       (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                         WHERE b.session_id = p_session_id AND b.chunk_seq < v_seq))
              INTO v_seq;
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
$$;

-- * append_one_v2: append_one_v1, and when that does not apply (the turn seals the open
--   chunk or crosses a partition boundary, the session has no open turn yet, the key is
--   known, the session is purged or missing) append_v1 for the one turn in the same call,
--   so that a seal costs one round trip instead of two (0001's client sent append_v1 after
--   append_one_v1 returned no row). Returns what append_v1 returns. A concurrent retry
--   with the same key still fails the fast path's turn_keys insert (unique violation): the
--   statement rolls back alone and the client reruns the turn through append_v1, which
--   reports the duplicate, exactly as before. append_one_v1 is unchanged (and still used
--   by append_checkpoint_v1).
CREATE FUNCTION shardstore.append_one_v2(
    p_session_id    uuid,
    p_message       jsonb,
    p_tokens        integer,
    p_bytes         integer,
    p_key           text,
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT x.r_turn_seq, x.r_chunk_seq INTO r_turn_seq, r_chunk_seq
      FROM shardstore.append_one_v1(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                    p_budget_tokens, p_budget_bytes, p_interval, p_origin) x;
    IF FOUND THEN
        r_tokens := p_tokens; r_duplicate := false; r_sealed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT a.r_turn_seq, a.r_chunk_seq, a.r_tokens, a.r_duplicate, a.r_sealed
          FROM shardstore.append_v1(p_session_id, jsonb_build_array(p_message), ARRAY[p_tokens],
                                    ARRAY[p_bytes], ARRAY[p_key], p_budget_tokens, p_budget_bytes,
                                    p_interval, p_origin) a;
END
$$;

-- * append_checkpoint_v2: append_checkpoint_v1 for ONE turn, the form append_turn(...,
--   checkpoint=state) sends: scalar arguments (no arrays to build and unpack), the turn
--   through append_one_v2 (one round trip even when it seals), one row back. Same rules:
--   the checkpoint's key is 't:' || the turn's key; a duplicate turn stores nothing and
--   returns the first checkpoint's id (NULL if that append wrote none); a failing
--   checkpoint insert rolls the turn back; a concurrent retry of the key fails the fast
--   path's turn_keys insert and the client reruns through append_checkpoint_v1 with
--   p_fast false. Batches keep append_checkpoint_v1.
CREATE FUNCTION shardstore.append_checkpoint_v2(
    p_session_id    uuid,
    p_message       jsonb,
    p_tokens        integer,
    p_bytes         integer,
    p_key           text,
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz,
    p_checkpoint_id uuid,
    p_state         jsonb)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean, r_checkpoint_id uuid)
LANGUAGE plpgsql
AS $$
DECLARE
    v_key    text := 't:' || p_key;
    v_tenant text;
    v_now    timestamptz;
    v_seq    bigint;
BEGIN
    SELECT a.r_turn_seq, a.r_chunk_seq, a.r_tokens, a.r_duplicate, a.r_sealed
      INTO r_turn_seq, r_chunk_seq, r_tokens, r_duplicate, r_sealed
      FROM shardstore.append_one_v2(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                    p_budget_tokens, p_budget_bytes, p_interval, p_origin) a;
    IF r_duplicate THEN
        -- a retry: the checkpoint the first append wrote, if any (NULL key: none)
        SELECT c.checkpoint_id INTO r_checkpoint_id FROM shardstore.checkpoints c
         WHERE c.session_id = p_session_id AND c.idempotency_key = v_key;
    ELSE
        -- the append holds the session row: its head is this turn's
        SELECT s.tenant_id, s.last_turn_at INTO v_tenant, v_now
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
        v_seq := shardstore.checkpoint_next_seq_v1();
        INSERT INTO shardstore.checkpoints
               (session_id, checkpoint_id, seq, tenant_id, turn_seq, idempotency_key, created_at,
                state)
        VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, r_turn_seq, v_key, v_now, p_state);
        r_checkpoint_id := p_checkpoint_id;
    END IF;
    RETURN NEXT;
END
$$;
