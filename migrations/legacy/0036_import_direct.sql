-- 0036: a JSONL import writes the chunks a batch starts and seals straight into
-- agent_history, and no fold scans a session's buffer from its first entry (issue 14 goal 6).
--
-- Why. The 10^7-turn scale run imports its 10^6-turn session in one transaction (an import
-- is all or nothing per session), 500 turns per import_turns_v1 call, each followed by
-- fold_sealed_v2. Every turn went into turn_buffer and was deleted by the fold of the next
-- call, and rows deleted by the importing transaction itself stay in the buffer's primary
-- key (session_id, turn_seq) until it ends. fold_sealed_v2 and fold_v1 find a session's
-- buffered rows by session_id alone, so each fold walked every turn imported so far: a fold
-- of one batch took ~3 s after ~50,000 turns and grew with each batch (quadratic; seen at
-- 170 turns/s and falling). The same walk happens, more slowly, to any session whose dead
-- buffer rows a long transaction elsewhere keeps from being vacuumed.
--
-- What.
--   * import_turns_v2 is import_turns_v1 with append_v1's direct path (0022): the chunks the
--     batch both starts and seals go straight into agent_history, with what fold_v1 would
--     write for them (envelopes with each turn's own created_at, chunk_start = the first
--     turn's created_at as fold_sealed chooses, chunk_end, chunk_map, embed_queue and
--     summary_queue rows, turn_text windows); only the chunk open before the batch (when it
--     held turns) and the one left open go into turn_buffer. When the batch seals the chunk
--     open before it, v2 folds it (fold_v1, at the start fold_sealed_v2 would choose), so the
--     caller folds nothing and r_sealed is false. On Citus it is import_turns_v1 (row by row,
--     the caller folds when r_sealed), as append_v1 keeps its row-wise path there.
--   * fold_v1 bounds its buffer scan below by the first turn of the newest chunk in
--     chunk_map before the one it folds (every turn of a chunk comes after every turn of an
--     earlier chunk), so the dead rows of earlier chunks are not walked. Same rows moved.
--   * ensure_partition_v1, finding the partition already attached, opens it before it
--     returns: a partition another connection attached after this transaction locked
--     agent_history is not in this backend's partition descriptor until it reads the
--     invalidation, which it does when it first locks a relation, and the insert that
--     followed failed with "no partition of relation agent_history found for row" (seen in
--     a 20,000-turn import: the importer premakes partitions on another connection).
-- The importer fills a session it created in the same transaction, so no sealed chunk other
-- than the one open before a batch is ever buffered when import_turns_v2 runs; were one
-- there, it would wait for the next fold_sealed (maintenance, a later append) as a lagging
-- fold does.

CREATE OR REPLACE FUNCTION shardstore.ensure_partition_v1(p_at timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    cfg        shardstore.config%ROWTYPE;
    v_lo       timestamptz;
    v_hi       timestamptz;
    v_name     text;
    v_attached boolean;
BEGIN
    SELECT * INTO cfg FROM shardstore.config;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS500',
            MESSAGE = 'shardstore is not initialised: connect with shardstore.connect() or run "shardstore init"';
    END IF;
    v_lo := date_bin(cfg.partition_interval, p_at, cfg.partition_origin);
    v_hi := v_lo + cfg.partition_interval;
    v_name := 'agent_history_p' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached THEN
        -- Attached by another connection after this transaction took its lock on
        -- agent_history, it may not be in this backend's partition descriptor yet: an insert
        -- would find "no partition". Invalidations are read when a relation is first locked,
        -- so open the partition (pg_relation_size: no privilege needed; on Citus the
        -- coordinator premakes partitions before any statement needs them).
        IF current_setting('citus.version', true) IS NULL THEN
            PERFORM pg_relation_size(format('shardstore.%I', v_name)::regclass);
        END IF;
        RETURN v_name;
    END IF;
    BEGIN
        IF v_attached IS NULL THEN
            EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.agent_history INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)',
                           v_name);
            EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                           v_name, v_name || '_bounds', v_lo, v_hi);
        END IF;
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN duplicate_table OR unique_violation OR duplicate_object THEN
        NULL;  -- a concurrent writer made it; checked below
    END;
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached IS NOT TRUE THEN
        -- the racing writer created the table but had not attached it yet: attach it now
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    END IF;
    RETURN v_name;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.fold_v1(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_moved  integer;
    v_first  bigint;
    v_tenant text;
    v_now    timestamptz := now();
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    v_config regconfig := shardstore.text_config_v1();
    -- no turn of this chunk precedes the first turn of an earlier chunk: the buffer's primary
    -- key is scanned from there, not from the session's first (possibly dead) entry
    v_lo     bigint := coalesce((SELECT m.first_turn_seq FROM shardstore.chunk_map m
                                  WHERE m.session_id = p_session_id AND m.chunk_seq < p_chunk_seq
                                  ORDER BY m.chunk_seq DESC LIMIT 1), 0);
BEGIN
    -- on a Citus worker (a delegated call) this finds the partition made: it never runs DDL
    -- there unless the partition is missing, which the coordinator's premake prevents
    PERFORM shardstore.ensure_partition_v1(p_chunk_start);
    WITH moved AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = p_session_id AND b.turn_seq >= v_lo AND b.chunk_seq = p_chunk_seq
        RETURNING b.*
    ), folded AS (
        INSERT INTO shardstore.agent_history AS h
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, tenant_id, conversation_chunk)
        SELECT p_session_id, p_chunk_seq, p_chunk_start, max(m.created_at), min(m.turn_seq),
               count(*), sum(m.tokens), sum(m.bytes), min(m.tenant_id),
               jsonb_agg(
                   CASE WHEN m.idempotency_key IS NULL
                        THEN jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'm', m.message)
                        ELSE jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'k', m.idempotency_key,
                                                'm', m.message)
                   END ORDER BY m.turn_seq)
          FROM moved m
        HAVING count(*) > 0
        ON CONFLICT (session_id, chunk_seq, chunk_start) DO UPDATE
           SET conversation_chunk = h.conversation_chunk || EXCLUDED.conversation_chunk,
               chunk_end   = EXCLUDED.chunk_end,
               turn_count  = h.turn_count + EXCLUDED.turn_count,
               token_count = h.token_count + EXCLUDED.token_count,
               byte_count  = h.byte_count + EXCLUDED.byte_count
        RETURNING h.turn_count, h.first_turn_seq, h.tenant_id
    ), texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT m.session_id, m.turn_seq, w.r_window, m.chunk_seq, s.tenant_id, s.agent_id,
               m.created_at, w.r_tsv
          FROM moved m
          JOIN shardstore.sessions s ON s.session_id = m.session_id,
               LATERAL shardstore.text_windows_v1(v_config, m.message) w
        ON CONFLICT DO NOTHING
    )
    SELECT f.turn_count, f.first_turn_seq, f.tenant_id INTO v_moved, v_first, v_tenant FROM folded f;
    IF v_moved IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_first, v_tenant)
    ON CONFLICT (session_id, chunk_seq) DO NOTHING;
    -- the chunk's content changed: (re-)embed it (what the trigger vec_enqueue did)
    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    RETURN v_moved;
END
$$;

-- import_turns_v1's checks and chunk rules (0015), writing as append_v1 does (0022): see the
-- header. r_sealed: sealed chunks wait in the buffer for the caller's fold (Citus only).
CREATE FUNCTION shardstore.import_turns_v2(
    p_session_id    uuid,
    p_first_seq     bigint,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_at            timestamptz[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_status text, r_index integer, r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_at     timestamptz;
    v_prev   timestamptz;
    v_limit  timestamptz := statement_timestamp() + interval '5 minutes';
    v_c0     bigint;            -- the chunk open before the batch
    v_had    boolean;           -- ... held turns then
    v_lo     bigint;            -- no buffered turn of chunk v_c0 or later lies below it
    v_direct bigint;            -- the first chunk that goes straight to agent_history
    v_start  timestamptz;
    v_queued timestamptz := now();
    v_config regconfig;
    -- the new turns, one array per column (i: the turn's 1-based index in the arguments)
    a_seq    bigint[] := '{}';
    a_chunk  bigint[] := '{}';
    a_i      integer[] := '{}';
BEGIN
    IF current_setting('citus.version', true) IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.import_turns_v1(
            p_session_id, p_first_seq, p_messages, p_tokens, p_bytes, p_keys, p_at,
            p_budget_tokens, p_budget_bytes, p_interval, p_origin);
        RETURN;
    END IF;
    s := shardstore.lock_session_v1(p_session_id);
    IF s.next_turn_seq <> p_first_seq THEN
        IF s.next_turn_seq = 0 AND s.open_chunk_seq = 0 AND s.open_turns = 0 AND p_first_seq > 0 THEN
            s.next_turn_seq := p_first_seq;
        ELSE
            r_status := 'seq'; r_index := 0; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    v_prev := s.last_turn_at;
    v_c0 := s.open_chunk_seq;
    v_had := s.open_turns > 0;
    FOR i IN 1 .. v_n LOOP
        v_at := p_at[i];
        IF v_prev IS NOT NULL AND v_at < v_prev THEN
            r_status := 'time'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_at > v_limit THEN
            r_status := 'future'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_keys[i] IS NOT NULL AND EXISTS (
               SELECT 1 FROM shardstore.turn_keys k
                WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i]) THEN
            r_status := 'key'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> date_bin(p_interval, v_at, p_origin)) THEN
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_at;
        END IF;
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_at,
                    s.tenant_id);
        END IF;
        a_seq := a_seq || s.next_turn_seq; a_chunk := a_chunk || s.open_chunk_seq;
        a_i := a_i || i;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_prev := v_at;
    END LOOP;
    v_lo := coalesce((SELECT m.first_turn_seq FROM shardstore.chunk_map m
                       WHERE m.session_id = p_session_id AND m.chunk_seq < v_c0
                       ORDER BY m.chunk_seq DESC LIMIT 1), 0);
    -- Chunks v_direct .. open_chunk_seq - 1 were started and sealed by this batch. The chunk
    -- open before it is not one of them when it held turns already: buffered, or folded by
    -- a flush (chunk_map), or in the buffer though the head counts none (append_v1's rule).
    v_direct := v_c0;
    IF s.open_chunk_seq > v_c0 AND (
           v_had
        OR EXISTS (SELECT 1 FROM shardstore.chunk_map m
                    WHERE m.session_id = p_session_id AND m.chunk_seq = v_c0)
        OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = p_session_id AND b.turn_seq >= v_lo
                      AND b.chunk_seq = v_c0)) THEN
        v_direct := v_c0 + 1;
    END IF;
    INSERT INTO shardstore.turn_buffer
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
            tenant_id)
    SELECT p_session_id, x.seq, x.chunk, p_at[x.i], p_tokens[x.i], p_bytes[x.i], p_keys[x.i],
           p_messages -> (x.i - 1), s.tenant_id
      FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
     WHERE x.chunk < v_direct OR x.chunk >= s.open_chunk_seq;
    IF s.open_chunk_seq > v_direct THEN
        -- read here, not in the statement: on Citus a shard query may not read the reference table
        v_config := shardstore.text_config_v1();
        -- a chunk lies in one partition (a turn in another seals it): one call per partition
        PERFORM shardstore.ensure_partition_v1(min(p_at[x.i]))
           FROM unnest(a_chunk, a_i) AS x(chunk, i)
          WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
          GROUP BY date_bin(p_interval, p_at[x.i], p_origin);
        INSERT INTO shardstore.agent_history
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, tenant_id, conversation_chunk)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), max(p_at[x.i]), min(x.seq), count(*),
               sum(p_tokens[x.i]), sum(p_bytes[x.i]), s.tenant_id,
               jsonb_agg(
                   CASE WHEN p_keys[x.i] IS NULL
                        THEN jsonb_build_object('s', x.seq, 't', p_tokens[x.i],
                                                'b', p_bytes[x.i], 'at', p_at[x.i],
                                                'm', p_messages -> (x.i - 1))
                        ELSE jsonb_build_object('s', x.seq, 't', p_tokens[x.i],
                                                'b', p_bytes[x.i], 'at', p_at[x.i],
                                                'k', p_keys[x.i], 'm', p_messages -> (x.i - 1))
                   END ORDER BY x.seq)
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk;
        INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), min(x.seq), s.tenant_id
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk;
        -- what fold_v1 queues for a chunk it writes: embedding and a summary
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), v_queued, s.tenant_id
          FROM unnest(a_chunk, a_i) AS x(chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), v_queued, s.tenant_id
          FROM unnest(a_chunk, a_i) AS x(chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
         GROUP BY x.chunk
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT p_session_id, x.seq, w.r_window, x.chunk, s.tenant_id, s.agent_id, p_at[x.i], w.r_tsv
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i),
               LATERAL shardstore.text_windows_v1(v_config, p_messages -> (x.i - 1)) w
         WHERE x.chunk >= v_direct AND x.chunk < s.open_chunk_seq
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_prev
     WHERE session_id = p_session_id;
    -- the batch sealed the chunk open before it: fold it at the start fold_sealed_v2 would
    -- choose (the one recorded by a flush, else its first buffered turn's time)
    IF v_direct > v_c0 THEN
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = v_c0;
        IF v_start IS NULL THEN
            SELECT min(b.created_at) INTO v_start FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session_id AND b.turn_seq >= v_lo AND b.chunk_seq = v_c0;
        END IF;
        IF v_start IS NOT NULL THEN
            PERFORM shardstore.fold_v1(p_session_id, v_c0, v_start);
        END IF;
    END IF;
    r_status := 'ok'; r_index := v_n; r_sealed := false;
    RETURN NEXT;
END
$$;
