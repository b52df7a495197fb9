-- 0040: a batch leaves the chunks holding the session's newest turns in the write buffer, as
-- a fold does since 0035 (issue 14 goal 2: tail near the floor for histories built in bulk).
--
-- Why. append_turns (append_v1) and a JSONL import (import_turns_v2) write the chunks a
-- batch starts and seals straight into agent_history (0022, 0036). After a 100-turn batch
-- the open chunk held the last few turns and tail(n=20) read the rest from the newest folded
-- chunk: one whole-chunk detoast and slice, 2.12x the floor's LIMIT 20 at 10^2 turns
-- (docs/architecture.md, round 6), where a session written turn by turn stays under 2x.
--
-- What.
--   * append_v2 and import_turns_v3 are append_v1 (0024) and import_turns_v2 (0036) with
--     p_keep_turns: of the chunks the batch starts and seals, the newest ones holding any of
--     the session's newest p_keep_turns turns (counting the open chunk's first) go into
--     turn_buffer as sealed chunks instead of agent_history, exactly the chunks
--     fold_sealed_v2(session, p_keep_turns) would leave there. append_v2 reports the seal as
--     before, so the caller's fold (background, with the same keep count) runs as after a
--     single append; import_turns_v3 folds in the statement what the keep window leaves
--     out (the chunk open before the batch, an earlier batch's kept chunks). The client
--     passes default_tail_turns. p_keep_turns 0 is the old function: append_v1 and
--     import_turns_v2 are now those calls.
--   * fold_sealed_v3(session, keep, from_turn) is fold_sealed_v2 scanning the buffer from
--     turn from_turn up: import_turns_v3 passes the first turn of the newest chunk in
--     chunk_map before the chunk open before the batch, so the long transaction of an
--     import never walks the dead rows of what its earlier batches folded (0036's reason).
--     Every chunk buffered since then lies above it: kept chunks are not in chunk_map until
--     folded. fold_sealed_v2 is fold_sealed_v3 from turn 0.
-- Cost: per batch, the kept chunks (about default_tail_turns turns, one or two chunks) are
-- written to the buffer and folded by a later fold instead of written once; the other
-- chunks of a bulk load are unchanged. On Citus nothing changes (append_v2 and
-- import_turns_v3 keep their row-wise path there, where every turn is buffered).

-- fold_sealed_v2's body (0035), its buffer scans bounded below by p_from_turn
CREATE FUNCTION shardstore.fold_sealed_v3(p_session_id uuid, p_keep_turns integer, p_from_turn bigint)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_open   bigint;
    v_newer  bigint;
    v_upto   bigint;   -- sealed chunks below this chunk_seq are folded
    v_moved  integer := 0;
    v_start  timestamptz;
    c        record;
BEGIN
    SELECT open_chunk_seq, open_turns INTO v_open, v_newer FROM shardstore.sessions
     WHERE session_id = p_session_id
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_upto := v_open;
    IF coalesce(p_keep_turns, 0) > 0 THEN
        FOR c IN SELECT b.chunk_seq, count(*) AS turns
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.turn_seq >= p_from_turn
                    AND b.chunk_seq < v_open
                  GROUP BY b.chunk_seq ORDER BY b.chunk_seq DESC LOOP
            EXIT WHEN v_newer >= p_keep_turns;
            v_upto := c.chunk_seq;
            v_newer := v_newer + c.turns;
        END LOOP;
    END IF;
    FOR c IN SELECT b.chunk_seq, min(b.created_at) AS first_at
               FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id AND b.turn_seq >= p_from_turn
                AND b.chunk_seq < v_upto
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        -- a chunk flushed while it was open already has its start (and partition) recorded
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = c.chunk_seq;
        v_moved := v_moved + shardstore.fold_v1(p_session_id, c.chunk_seq, coalesce(v_start, c.first_at));
    END LOOP;
    RETURN v_moved;
END
$$;

-- append_v1's body (0024) with the keep window: see the header
CREATE FUNCTION shardstore.append_v2(
    p_session_id    uuid,
    p_messages      jsonb,      -- JSON array, one message per turn
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,      -- shardstore.config's, passed in to save a read per call
    p_origin        timestamptz,
    p_keep_turns    integer)   -- sealed chunks holding the newest this many turns stay buffered
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
    -- The newest of those stay buffered, as fold_sealed_v2 would leave them (0035): going
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
        -- what fold_v1 queues for a chunk it writes: embedding and a summary
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
               LATERAL shardstore.text_windows_v1(v_config, p_messages -> x.i) w
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
     WHERE session_id = p_session_id;
END
$$;

-- import_turns_v2's body (0036) with the keep window and a bounded fold at the end
CREATE FUNCTION shardstore.import_turns_v3(
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
    p_origin        timestamptz,
    p_keep_turns    integer)   -- sealed chunks holding the newest this many turns stay buffered
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
    v_upto   bigint;            -- ... and the first that stays buffered (kept or open)
    v_newer  bigint;
    v_chunk  record;
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
    -- The newest of those stay buffered, as fold_sealed_v2 would leave them (0035): going
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
    SELECT p_session_id, x.seq, x.chunk, p_at[x.i], p_tokens[x.i], p_bytes[x.i], p_keys[x.i],
           p_messages -> (x.i - 1), s.tenant_id
      FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
     WHERE x.chunk < v_direct OR x.chunk >= v_upto;
    IF v_upto > v_direct THEN
        -- read here, not in the statement: on Citus a shard query may not read the reference table
        v_config := shardstore.text_config_v1();
        -- a chunk lies in one partition (a turn in another seals it): one call per partition
        PERFORM shardstore.ensure_partition_v1(min(p_at[x.i]))
           FROM unnest(a_chunk, a_i) AS x(chunk, i)
          WHERE x.chunk >= v_direct AND x.chunk < v_upto
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
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk;
        INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), min(x.seq), s.tenant_id
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk;
        -- what fold_v1 queues for a chunk it writes: embedding and a summary
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), v_queued, s.tenant_id
          FROM unnest(a_chunk, a_i) AS x(chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT p_session_id, x.chunk, min(p_at[x.i]), v_queued, s.tenant_id
          FROM unnest(a_chunk, a_i) AS x(chunk, i)
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
         GROUP BY x.chunk
        ON CONFLICT DO NOTHING;
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT p_session_id, x.seq, w.r_window, x.chunk, s.tenant_id, s.agent_id, p_at[x.i], w.r_tsv
          FROM unnest(a_seq, a_chunk, a_i) AS x(seq, chunk, i),
               LATERAL shardstore.text_windows_v1(v_config, p_messages -> (x.i - 1)) w
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_prev
     WHERE session_id = p_session_id;
    -- fold the buffered sealed chunks the keep window leaves out (the chunk open before the
    -- batch when it sealed it, an earlier batch's kept chunks), at the starts fold_sealed_v2
    -- chooses; the scan starts at v_lo, below which lie only this transaction's dead rows
    PERFORM shardstore.fold_sealed_v3(p_session_id, p_keep_turns, v_lo);
    r_status := 'ok'; r_index := v_n; r_sealed := false;
    RETURN NEXT;
END
$$;

-- the old names, keeping nothing: one body each
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v2(p_session_id uuid, p_keep_turns integer)
RETURNS integer
LANGUAGE sql
AS $$
    SELECT shardstore.fold_sealed_v3(p_session_id, p_keep_turns, 0);
$$;

CREATE OR REPLACE FUNCTION shardstore.append_v1(
    p_session_id    uuid,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE sql
AS $$
    SELECT * FROM shardstore.append_v2(p_session_id, p_messages, p_tokens, p_bytes, p_keys,
                                       p_budget_tokens, p_budget_bytes, p_interval, p_origin, 0);
$$;

CREATE OR REPLACE FUNCTION shardstore.import_turns_v2(
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
LANGUAGE sql
AS $$
    SELECT * FROM shardstore.import_turns_v3(p_session_id, p_first_seq, p_messages, p_tokens,
                                             p_bytes, p_keys, p_at, p_budget_tokens,
                                             p_budget_bytes, p_interval, p_origin, 0);
$$;
