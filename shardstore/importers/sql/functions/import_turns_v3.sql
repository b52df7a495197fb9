-- Imports a batch of past turns into a session, keeping their turn_seqs (from p_first_seq,
-- gap-free), created_at times and keys, under the session row's lock (lock_session_v1).
-- Refusals (r_index: the refused turn's 0-based index; turns before it may be written, and the
-- caller rolls its transaction back): 'seq' when p_first_seq does not continue the session (an
-- empty one may start past 0), 'time' when a turn is earlier than the one before, 'future'
-- when more than 5 minutes past the server's clock, 'key' when its key is used. The chunks the
-- batch starts and seals go straight to agent_history with what fold_chunk would write (each
-- turn's own time, chunk_start its first turn's), but the newest ones holding the newest
-- p_keep_turns turns stay buffered as fold_sealed leaves them; the chunk open before the batch
-- and the one left open go to turn_buffer. Then fold_sealed folds the sealed chunks the keep
-- window leaves out, scanning the buffer from v_lo: the importer fills a session in one
-- transaction, whose earlier folds leave dead entries in the buffer's primary key, and a scan
-- from the session's first entry made each batch walk all turns imported so far (quadratic:
-- docs/decisions/0019-imports-write-sealed-chunks-directly.md). r_sealed is always false.
-- Where Citus is loaded: import_turns (row by row; the caller folds when r_sealed).
CREATE OR REPLACE FUNCTION shardstore.import_turns_v3(p_session_id uuid, p_first_seq bigint, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_at timestamp with time zone[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_keep_turns integer)
 RETURNS TABLE(r_status text, r_index integer, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
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
        RETURN QUERY SELECT * FROM shardstore.import_turns(
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
    -- a flush (chunk_map), or in the buffer though the head counts none (kept as it was, as
    -- append_v2 does).
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
        -- what fold_chunk queues for a chunk it writes: embedding and a summary
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
               LATERAL shardstore.text_windows(v_config, p_messages -> (x.i - 1)) w
         WHERE x.chunk >= v_direct AND x.chunk < v_upto
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_prev
     WHERE session_id = p_session_id;
    -- fold the buffered sealed chunks the keep window leaves out (the chunk open before the
    -- batch when it sealed it, an earlier batch's kept chunks), at the starts fold_sealed
    -- chooses; the scan starts at v_lo, below which lie only this transaction's dead rows
    PERFORM shardstore.fold_sealed(p_session_id, p_keep_turns, v_lo);
    r_status := 'ok'; r_index := v_n; r_sealed := false;
    RETURN NEXT;
END
$function$;
