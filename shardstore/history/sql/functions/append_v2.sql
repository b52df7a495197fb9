-- A batch of turns for one session (and a single turn no fast path took). Locks the session
-- row FOR NO KEY UPDATE (SS404: no such session, SS410: purged). Per message: a key seen
-- before returns its turn (r_duplicate) and writes nothing; otherwise the turn takes the next
-- seq, the open chunk sealed first (r_sealed) when the turn would pass the token or byte
-- budget or falls in a later time bucket. Turn times never go back (the later of the
-- statement's time and the last turn's). Chunks the batch both started and sealed go straight
-- to agent_history (chunk_map, embed and summary queues, text windows) but the newest ones
-- holding the newest p_keep_turns turns, which stay buffered as fold_sealed would leave them;
-- every other turn goes to turn_buffer; the head is written back last.
-- Why FOR NO KEY UPDATE: folds and text passes hold the row FOR KEY SHARE while they work,
-- and FOR UPDATE would make every seal wait for them. Nothing here needs them excluded: it
-- writes only turns numbered from the head on (a fold moves only chunks below the head it
-- read; a text pass indexes committed buffer rows, which a batch never removes). Rewinds,
-- purges, flushes and imports take FOR UPDATE (lock_session_v1) and exclude all of these.
-- Measured: docs/decisions/0013-seal-lock-and-statement.md; the keep window:
-- docs/decisions/0020-batches-keep-the-tail-and-the-window-by-concatenation.md.
CREATE OR REPLACE FUNCTION shardstore.append_v2(p_session_id uuid, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_keep_turns integer)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
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
    v_upto   bigint;            -- ... and the first that stays buffered (kept or open)
    v_newer  bigint;
    v_chunk  record;
    v_queued timestamptz := now();
    v_config regconfig;
    -- the new turns, one array per column (i: the message's 0-based index in p_messages)
    a_seq    bigint[] := '{}';
    a_chunk  bigint[] := '{}';
    a_i      integer[] := '{}';
BEGIN
    -- On Citus the set-based INSERT ... SELECT FROM unnest statements below run as an
    -- INSERT ... SELECT through the coordinator (COPY into the shards), which Citus refuses
    -- under row-level security, and a delegated call cannot create a partition: take the
    -- row-by-row path there (citus.version exists where the library is loaded).
    IF current_setting('citus.version', true) IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.append_rowwise(
            p_session_id, p_messages, p_tokens, p_bytes, p_keys, p_budget_tokens,
            p_budget_bytes, p_interval, p_origin);
        RETURN;
    END IF;
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR NO KEY UPDATE;
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
    -- The newest of those stay buffered, as fold_sealed would leave them: going
    -- down from the newest sealed chunk, one is kept while the turns newer than it number
    -- fewer than p_keep_turns. Direct: v_direct .. v_upto - 1.
    v_upto := s.open_chunk_seq;
    IF coalesce(p_keep_turns, 0) > 0 THEN
        v_newer := s.open_turns;
        FOR v_chunk IN SELECT x.chunk, count(*) AS turns FROM unnest(a_chunk) AS x(chunk)
                        WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
                        GROUP BY x.chunk ORDER BY x.chunk DESC LOOP
            EXIT WHEN v_newer >= p_keep_turns;
            v_upto := v_chunk.chunk;
            v_newer := v_newer + v_chunk.turns;
        END LOOP;
    END IF;
    INSERT INTO shardstore.turn_buffer
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
            tenant_id)
    SELECT p_session_id, x.seq, x.chunk, v_now, p_tokens[x.i + 1], p_bytes[x.i + 1],
           p_keys[x.i + 1], p_messages -> x.i, s.tenant_id
      FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
     WHERE x.chunk < v_direct OR x.chunk >= v_upto;
    IF v_upto > v_direct THEN
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
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk;
        INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
        SELECT p_session_id, x.chunk, v_now, min(x.seq), s.tenant_id
          FROM unnest(a_seq, a_chunk) AS x(seq, chunk)
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk;
        -- what fold_chunk queues for a chunk it writes: embedding and a summary
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, c, v_now, v_queued, s.tenant_id
          FROM generate_series(v_direct, v_upto - 1) AS c
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, c, v_now, v_queued, s.tenant_id
          FROM generate_series(v_direct, v_upto - 1) AS c
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT p_session_id, x.seq, w.r_window, x.chunk, s.tenant_id, s.agent_id, v_now, w.r_tsv
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i),
               LATERAL shardstore.text_windows(v_config, p_messages -> x.i) w
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
     WHERE session_id = p_session_id;
END
$function$;
