-- 0022: less disk per payload byte (docs/architecture.md "Disk"). No new table.
--
-- 1. append_v1 (the batch path: append_turns, the importers' append_op, checkpoint and
--    LangGraph appends of several turns) writes each chunk that a batch both STARTS and
--    SEALS straight into agent_history, instead of into turn_buffer for a fold to delete
--    again. The rows of such a chunk used to be inserted, deleted a moment later and left
--    as dead space that VACUUM makes reusable but does not give back (after bulk builds
--    turn_buffer held 0.64 bytes per payload byte, beside agent_history's 0.53). A direct
--    chunk is written exactly as fold_v1 writes a chunk's first fold: the envelopes
--    {"s","t","b","at","k"?,"m"} in turn order, chunk_start = its first turn's time (the
--    batch's time), chunk_end = its last, the chunk_map row, and what fold_v1 queues: one
--    embed_queue row and one summary_queue row (queued_at = the transaction's now(),
--    ON CONFLICT DO NOTHING), and the turn_text windows of every turn. Only the turns of
--    the chunk open before the batch (when it already held turns) and of the chunk left
--    open at its end go into turn_buffer, as before; the former is folded by the caller's
--    fold_sealed_v1 as before (r_sealed is unchanged). So the stored layout is the one the
--    old path produced after its folds, and a reader's snapshot sees the batch whole or
--    not at all (one transaction). Rules, results, duplicates and locks are 0017's.
--    The turn_buffer rows are inserted in one statement after the chunker's loop instead
--    of one per turn (turn_keys rows stay inline: a key repeated later in the batch must
--    find them).
--
-- 2. turn_text stores stripped tsvectors (no positions): text_rank_v1 uses only `@@` with
--    single-lexeme queries and length() (the number of lexemes), both unchanged by strip(),
--    so every ranking is the same; the column is ~35% smaller. The subquery computes the
--    tsvector once per window (OFFSET 0; the pulled-up form evaluated to_tsvector twice,
--    in the filter and in the output). Rows written before this migration keep their
--    positions (same rankings; `UPDATE shardstore.turn_text SET tsv = strip(tsv)` then
--    VACUUM shrinks them, at the cost of rewriting the table).
--
-- 3. turn_text's GIN indexes get gin_pending_list_limit = 256 kB (default 4 MB): the
--    pending list's pages are recycled inside the index after it is merged, not returned,
--    so each of the 16 partitions kept up to 4 MB of it (0.62 vs 0.37 bytes per payload
--    byte for the index at 10,000 turns). New partitions of the index are not made (the
--    table is HASH partitioned once, in 0012).

CREATE OR REPLACE FUNCTION shardstore.text_windows_v1(p_config regconfig, p_message jsonb)
RETURNS TABLE (r_window integer, r_tsv tsvector)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    WITH t AS (
        SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string')
    SELECT w.i, w.tsv
      FROM t, LATERAL (SELECT g.i, strip(to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000))) AS tsv
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i)
                       OFFSET 0) w
     WHERE t.txt IS NOT NULL AND t.txt <> '' AND w.tsv <> ''::tsvector
$$;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT i.inhrelid::regclass AS idx
               FROM pg_inherits i
              WHERE i.inhparent = 'shardstore.turn_text_tsv'::regclass LOOP
        EXECUTE format('ALTER INDEX %s SET (gin_pending_list_limit = 256)', r.idx);
    END LOOP;
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
