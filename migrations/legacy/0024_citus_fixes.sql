-- 0024: two statements of this session's migrations that Citus 14.0.1 cannot run
-- (tests/test_citus.py on a coordinator + 2 workers; both run unchanged on plain PostgreSQL):
--
-- 1. vec_store_v2 (0021) moved a buffered chunk's windows to the chunk's start with an
--    UPDATE of chunk_start, the partition key of chunk_vectors: the Citus coordinator died
--    of signal 11 on it. Now copy, then delete; the same rows result.
-- 2. append_v1 (0022) writes a batch's rows with set-based INSERT ... SELECT FROM unnest,
--    which Citus runs through the coordinator as a COPY, refused under row-level security
--    ("COPY FROM not supported with row-level security"). On Citus append_v1 now calls
--    append_rowwise_v1, 0017's append_v1 unchanged under a new name (every row through the
--    buffer, one INSERT ... VALUES each, as before 0022).

CREATE OR REPLACE FUNCTION shardstore.vec_store_v2(
    u_kind text[], u_session uuid[], u_chunk bigint[], u_start timestamptz[], u_first bigint[],
    u_count integer[], u_mark bigint[],
    w_unit integer[], w_turn bigint[], w_at timestamptz[], w_vec text[],
    OUT r_stored integer, OUT r_left integer)
LANGUAGE plpgsql
AS $$
DECLARE
    i          integer;
    v_ok       boolean;
    v_n        integer;
    v_next     integer;
    v_turns    bigint[];
    v_found    boolean;
    v_in       boolean;
    v_floor    timestamptz;
    v_interval interval;
    v_origin   timestamptz;
    v_upto     bigint;
    v_pending  bigint;
    s          record;
    t          record;
    m          record;
    v_msid     uuid[] := '{}';      -- sessions of 'b' units stored, and their marks
    v_mupto    bigint[] := '{}';
    v_mtenant  text[] := '{}';
BEGIN
    r_stored := 0;
    r_left := 0;
    SELECT x.partition_interval, x.partition_origin INTO v_interval, v_origin FROM shardstore.config x;
    FOR i IN 1 .. coalesce(cardinality(u_kind), 0) LOOP
        IF u_kind[i] = 'q' THEN
            v_found := EXISTS (SELECT 1 FROM shardstore.agent_history h
                                WHERE h.session_id = u_session[i] AND h.chunk_seq = u_chunk[i]
                                  AND h.chunk_start = u_start[i]);
            IF NOT v_found THEN
                DELETE FROM shardstore.embed_queue q
                 WHERE q.session_id = u_session[i] AND q.chunk_seq = u_chunk[i]
                   AND q.chunk_start = u_start[i];
                CONTINUE;
            END IF;
            v_ok := NULL;
            SELECT true INTO v_ok FROM shardstore.agent_history h
             WHERE h.session_id = u_session[i] AND h.chunk_seq = u_chunk[i] AND h.chunk_start = u_start[i]
               AND h.first_turn_seq = u_first[i] AND h.turn_count = u_count[i]
               FOR SHARE SKIP LOCKED;
            SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
             WHERE x.session_id = u_session[i] AND x.purged_at IS NULL;
            IF v_ok IS NOT TRUE OR NOT FOUND OR NOT shardstore.vec_session_lock_v1(u_session[i]) THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            -- windows written while the chunk was buffered under an earlier start (same
            -- partition: a chunk never spans one) move to the chunk's start, renumbered
            v_floor := date_bin(v_interval, u_start[i], v_origin);
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start <= u_start[i];
            -- copied, then deleted: an UPDATE of chunk_start (the vectors' partition key)
            -- crashed the Citus 14.0.1 coordinator (signal 11) on a distributed table
            INSERT INTO shardstore.chunk_vectors
                   (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                    first_turn_seq, last_turn_seq, first_at, last_at, embedding)
            SELECT v.session_id, v.chunk_seq, u_start[i], v.window_no + v_next, v.tenant_id,
                   v.agent_id, v.first_turn_seq, v.last_turn_seq, v.first_at, v.last_at,
                   v.embedding
              FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start < u_start[i];
            DELETE FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start < u_start[i];
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i] AND v.chunk_start = u_start[i];
            SELECT array_agg(DISTINCT w.t) INTO v_turns
              FROM unnest(w_unit, w_turn) AS w(idx, t) WHERE w.idx = i;
        ELSE
            SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
             WHERE x.session_id = u_session[i] AND x.purged_at IS NULL
               FOR KEY SHARE SKIP LOCKED;
            IF NOT FOUND OR NOT shardstore.vec_session_lock_v1(u_session[i]) THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            v_turns := '{}';
            v_ok := true;
            FOR t IN SELECT DISTINCT w.t, w.at FROM unnest(w_unit, w_turn, w_at) AS w(idx, t, at)
                      WHERE w.idx = i LOOP
                PERFORM 1 FROM shardstore.turn_buffer b
                  WHERE b.session_id = u_session[i] AND b.turn_seq = t.t AND b.chunk_seq = u_chunk[i]
                    AND b.created_at = t.at
                    FOR KEY SHARE SKIP LOCKED;
                IF FOUND THEN
                    v_turns := v_turns || t.t;
                    CONTINUE;
                END IF;
                IF EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                            WHERE b.session_id = u_session[i] AND b.turn_seq = t.t
                              AND b.chunk_seq = u_chunk[i] AND b.created_at = t.at) THEN
                    v_ok := false;  -- a fold or retention holds it: a later batch decides
                    CONTINUE;
                END IF;
                EXECUTE 'SELECT EXISTS (SELECT 1 FROM shardstore.agent_history h,
                                               jsonb_array_elements(h.conversation_chunk) AS e(v)
                                         WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                                           AND (e.v->>''s'')::bigint = $4 AND (e.v->>''at'')::timestamptz = $5)'
                   INTO v_in USING u_session[i], u_chunk[i], u_start[i], t.t, t.at;
                IF v_in THEN
                    v_turns := v_turns || t.t;  -- folded meanwhile: same turn, same chunk
                END IF;
            END LOOP;
            IF NOT v_ok THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            IF NOT u_session[i] = ANY (v_msid) THEN
                v_msid := v_msid || u_session[i];
                v_mupto := v_mupto || u_mark[i];
                v_mtenant := v_mtenant || s.tenant_id;
            END IF;
            CONTINUE WHEN u_chunk[i] IS NULL;  -- a watermark only
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i] AND v.chunk_start = u_start[i];
        END IF;
        INSERT INTO shardstore.chunk_vectors
               (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                first_turn_seq, last_turn_seq, first_at, last_at, embedding)
        SELECT u_session[i], u_chunk[i], u_start[i],
               v_next + (row_number() OVER (ORDER BY w.ord))::integer - 1,
               s.tenant_id, s.agent_id, w.t, w.t, w.at, w.at, w.v::halfvec
          FROM unnest(w_unit, w_turn, w_at, w_vec) WITH ORDINALITY AS w(idx, t, at, v, ord)
         WHERE w.idx = i AND w.t = ANY (v_turns)
           AND NOT EXISTS (SELECT 1 FROM shardstore.chunk_vectors x
                            WHERE x.session_id = u_session[i] AND x.chunk_seq = u_chunk[i]
                              AND x.chunk_start = u_start[i] AND x.first_turn_seq = w.t);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF u_kind[i] = 'q' THEN
            DELETE FROM shardstore.embed_queue q
             WHERE q.session_id = u_session[i] AND q.chunk_seq = u_chunk[i] AND q.chunk_start = u_start[i];
            r_stored := r_stored + 1;
        ELSIF v_n > 0 THEN
            r_stored := r_stored + 1;
        END IF;
    END LOOP;
    -- watermarks: exact now (the session's KEY SHARE lock keeps rewinds and purges out)
    FOR i IN 1 .. cardinality(v_msid) LOOP
        SELECT x.upto INTO v_upto FROM shardstore.embed_marks x WHERE x.session_id = v_msid[i];
        CONTINUE WHEN v_upto IS NOT NULL AND v_upto >= v_mupto[i];
        SELECT count(*) INTO v_pending
          FROM shardstore.vec_buffered_turns_v1(v_msid[i], coalesce(v_upto, 0), v_mupto[i]);
        CONTINUE WHEN v_pending > 0;
        INSERT INTO shardstore.embed_marks AS x (session_id, tenant_id, upto, marked_at)
        VALUES (v_msid[i], v_mtenant[i], v_mupto[i], statement_timestamp())
        ON CONFLICT (session_id) DO UPDATE
           SET upto = greatest(x.upto, EXCLUDED.upto), marked_at = EXCLUDED.marked_at;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.append_rowwise_v1(
    p_session_id    uuid,
    p_messages      jsonb,      -- JSON array, one message per turn
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,      -- shardstore.config's, passed in to save a read per call
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_sealed boolean;
    v_now    timestamptz;
    v_bucket timestamptz;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    record;
    v_dirty  boolean := false;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    -- turns of one session never go back in time, even if the server clock does
    v_now := greatest(statement_timestamp(), s.last_turn_at);
    v_bucket := date_bin(p_interval, v_now, p_origin);
    FOR i IN 1 .. v_n LOOP
        IF p_keys[i] IS NOT NULL THEN
            SELECT k.turn_seq, k.chunk_seq, k.tokens INTO v_key
              FROM shardstore.turn_keys k
             WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i];
            IF FOUND THEN
                r_turn_seq := v_key.turn_seq; r_chunk_seq := v_key.chunk_seq;
                r_tokens := v_key.tokens; r_duplicate := true; r_sealed := false;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> v_bucket) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_now;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
                tenant_id)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_now, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1), s.tenant_id);
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_now,
                    s.tenant_id);
        END IF;
        r_turn_seq := s.next_turn_seq; r_chunk_seq := s.open_chunk_seq;
        r_tokens := p_tokens[i]; r_duplicate := false; r_sealed := coalesce(v_sealed, false);
        RETURN NEXT;
        v_sealed := false;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_dirty := true;
    END LOOP;
    IF v_dirty THEN
        UPDATE shardstore.sessions
           SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
               open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
               open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
         WHERE session_id = p_session_id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.append_v1(
    p_session_id    uuid,
    p_messages      jsonb,      -- JSON array, one message per turn
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,      -- shardstore.config's, passed in to save a read per call
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_sealed boolean;
    v_now    timestamptz;
    v_bucket timestamptz;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    record;
    v_dirty  boolean := false;
    v_c0     bigint;            -- the chunk open before the batch
    v_had    boolean;           -- ... held turns then
    v_direct bigint;            -- the first chunk that may go straight to agent_history
    v_queued timestamptz := now();
    v_config regconfig;
    -- the new turns, one array per column (i: the message's 0-based index in p_messages)
    a_seq    bigint[] := '{}';
    a_chunk  bigint[] := '{}';
    a_i      integer[] := '{}';
BEGIN
    -- On Citus the set-based INSERT ... SELECT FROM unnest statements below run as an
    -- INSERT ... SELECT through the coordinator (COPY into the shards), which Citus refuses
    -- under row-level security, and a delegated call cannot create a partition: keep the
    -- row-by-row path of 0017 there (citus.version exists where the library is loaded).
    IF current_setting('citus.version', true) IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.append_rowwise_v1(
            p_session_id, p_messages, p_tokens, p_bytes, p_keys, p_budget_tokens,
            p_budget_bytes, p_interval, p_origin);
        RETURN;
    END IF;
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    -- turns of one session never go back in time, even if the server clock does
    v_now := greatest(statement_timestamp(), s.last_turn_at);
    v_bucket := date_bin(p_interval, v_now, p_origin);
    v_c0 := s.open_chunk_seq;
    v_had := s.open_turns > 0;
    FOR i IN 1 .. v_n LOOP
        IF p_keys[i] IS NOT NULL THEN
            SELECT k.turn_seq, k.chunk_seq, k.tokens INTO v_key
              FROM shardstore.turn_keys k
             WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i];
            IF FOUND THEN
                r_turn_seq := v_key.turn_seq; r_chunk_seq := v_key.chunk_seq;
                r_tokens := v_key.tokens; r_duplicate := true; r_sealed := false;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> v_bucket) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_now;
        END IF;
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_now,
                    s.tenant_id);
        END IF;
        a_seq := a_seq || s.next_turn_seq; a_chunk := a_chunk || s.open_chunk_seq;
        a_i := a_i || (i - 1);
        r_turn_seq := s.next_turn_seq; r_chunk_seq := s.open_chunk_seq;
        r_tokens := p_tokens[i]; r_duplicate := false; r_sealed := coalesce(v_sealed, false);
        RETURN NEXT;
        v_sealed := false;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_dirty := true;
    END LOOP;
    IF NOT v_dirty THEN
        RETURN;
    END IF;
    -- Chunks v_direct .. open_chunk_seq - 1 were started and sealed by this batch. The chunk
    -- open before it is not one of them when it held turns already: buffered, or folded by
    -- a flush (chunk_map), or in the buffer though the head counts none (kept as it was).
    v_direct := v_c0;
    IF s.open_chunk_seq > v_c0 AND (
           v_had
        OR EXISTS (SELECT 1 FROM shardstore.chunk_map m
                    WHERE m.session_id = p_session_id AND m.chunk_seq = v_c0)
        OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = p_session_id AND b.chunk_seq = v_c0)) THEN
        v_direct := v_c0 + 1;
    END IF;
    INSERT INTO shardstore.turn_buffer
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
            tenant_id)
    SELECT p_session_id, x.seq, x.chunk, v_now, p_tokens[x.i + 1], p_bytes[x.i + 1],
           p_keys[x.i + 1], p_messages -> x.i, s.tenant_id
      FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
     WHERE x.chunk < v_direct OR x.chunk >= s.open_chunk_seq;
    IF s.open_chunk_seq > v_direct THEN
        -- read here, not in the statement: on Citus a shard query may not read the reference table
        v_config := shardstore.text_config_v1();
        PERFORM shardstore.ensure_partition_v1(v_now);
        INSERT INTO shardstore.agent_history
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, tenant_id, conversation_chunk)
        SELECT p_session_id, x.chunk, v_now, v_now, min(x.seq), count(*),
               sum(p_tokens[x.i + 1]), sum(p_bytes[x.i + 1]), s.tenant_id,
               jsonb_agg(
                   CASE WHEN p_keys[x.i + 1] IS NULL
                        THEN jsonb_build_object('s', x.seq, 't', p_tokens[x.i + 1],
                                                'b', p_bytes[x.i + 1], 'at', v_now,
                                                'm', p_messages -> x.i)
                        ELSE jsonb_build_object('s', x.seq, 't', p_tokens[x.i + 1],
                                                'b', p_bytes[x.i + 1], 'at', v_now,
                                                'k', p_keys[x.i + 1], 'm', p_messages -> x.i)
                   END ORDER BY x.seq)
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk;
        INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
        SELECT p_session_id, x.chunk, v_now, min(x.seq), s.tenant_id
          FROM unnest(a_seq, a_chunk) AS x(seq, chunk)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk;
        -- what fold_v1 queues for a chunk it writes: embedding and a summary
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, c, v_now, v_queued, s.tenant_id
          FROM generate_series(v_direct, s.open_chunk_seq - 1) AS c
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, c, v_now, v_queued, s.tenant_id
          FROM generate_series(v_direct, s.open_chunk_seq - 1) AS c
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT p_session_id, x.seq, w.r_window, x.chunk, s.tenant_id, s.agent_id, v_now, w.r_tsv
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i),
               LATERAL shardstore.text_windows_v1(v_config, p_messages -> x.i) w
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
     WHERE session_id = p_session_id;
END
$$;
