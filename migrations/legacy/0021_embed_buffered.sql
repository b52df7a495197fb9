-- 0021: buffered turns are embedded too (docs/architecture.md, "Search": "Buffered turns").
--
-- Until now only folded chunks were embedded (fold_v1 queues them in embed_queue), so a
-- turn still in turn_buffer was not found by search. With one vector per turn a turn's
-- windows depend on its text only, so they can be written while it is buffered, under the
-- chunk_seq / chunk_start its chunk will be folded with, and stay valid after the fold.
--
-- Nothing is added to the append path: the embedding pass finds buffered turns by reading
-- turn_buffer itself, from a per-session watermark (embed_marks.upto: "every buffered turn
-- below upto had its vectors when the mark was written"). The truth is chunk_vectors: a
-- turn is embedded when a window with its first_turn_seq exists in its chunk; both the
-- buffered path and the queue path embed only the turns that have none. So a fold (or any
-- other chunk writer) keeps queueing the chunk exactly as before, and the worker, finding
-- every turn of it embedded, drops the queue row without running the model.
--
--   * embed_marks: the watermark, a registered session table with turn column `upto`, so
--     a rewind to N <= upto, a range purge, retention and a session purge delete it (the
--     next pass re-reads the session's buffered turns from 0; those with vectors are
--     skipped).
--   * chunk_vectors is registered by turn (first_turn_seq) instead of by chunk: a window is
--     one turn (plan_windows), so a rewind, a range purge and retention of buffered turns
--     delete exactly the windows of the turns they erase, buffered or folded, and keep the
--     others (the rewritten chunk is queued again and costs no model call).
--   * vec_claim_v2: the queue claim of vec_claim_v1 returning only the envelopes of turns
--     without vectors, plus units of buffered turns (vec_buffered_turns_v1).
--   * vec_store_v2: stores windows by turn, only for turns that are still there (buffered,
--     or folded meanwhile: same turn_seq and time) and still have none.
--   * vec_configure_v2: a reset (reembed) also clears the watermarks.

-- 1. the watermark
CREATE TABLE shardstore.embed_marks (
    session_id uuid PRIMARY KEY,
    tenant_id  text NOT NULL,
    upto       bigint NOT NULL,
    marked_at  timestamptz NOT NULL
);
SELECT shardstore.register_session_table_v1('shardstore.embed_marks', turn_column => 'upto',
    tenant_column => 'tenant_id', purge_order => 61,
    note => 'embedding watermark: buffered turns below upto were embedded (a hint, no text)');

-- 2. vectors belong to turns (each window is one turn's)
-- windows spanning several turns (none are written since one window per turn) would outlive
-- a rewind of their later turns: drop them and embed their chunks again
INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
SELECT DISTINCT v.session_id, v.chunk_seq, v.chunk_start, now(), v.tenant_id
  FROM shardstore.chunk_vectors v WHERE v.first_turn_seq <> v.last_turn_seq
ON CONFLICT DO NOTHING;
DELETE FROM shardstore.chunk_vectors v WHERE v.first_turn_seq <> v.last_turn_seq;
SELECT shardstore.register_session_table_v1('shardstore.chunk_vectors', turn_column => 'first_turn_seq',
    tenant_column => 'tenant_id',
    note => 'one embedding per window of a turn (embeddings can be inverted back to text)');

-- 3. a session's buffered turns that have no vectors, turn_seq in [p_from, p_to), with the
-- chunk_start their chunk is (or will be) folded with: the open chunk's from the session
-- head, a chunk flushed while open from chunk_map, else its first buffered turn's time
-- (fold_sealed_v1's rule). Envelopes as fold_v1 writes them.
CREATE FUNCTION shardstore.vec_buffered_turns_v1(p_session uuid, p_from bigint, p_to bigint)
RETURNS TABLE (r_chunk_seq bigint, r_chunk_start timestamptz, r_turn_seq bigint, r_envelope jsonb)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    s       record;
    c       record;
    v_start timestamptz;
BEGIN
    SELECT x.open_chunk_seq, x.open_chunk_start INTO s FROM shardstore.sessions x
     WHERE x.session_id = p_session AND x.purged_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR c IN SELECT b.chunk_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session AND b.turn_seq >= p_from
                AND (p_to IS NULL OR b.turn_seq < p_to)
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        v_start := NULL;
        IF c.chunk_seq = s.open_chunk_seq THEN
            v_start := s.open_chunk_start;
        END IF;
        IF v_start IS NULL THEN
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session AND m.chunk_seq = c.chunk_seq;
        END IF;
        IF v_start IS NULL THEN
            SELECT min(b.created_at) INTO v_start FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session AND b.chunk_seq = c.chunk_seq;
        END IF;
        RETURN QUERY
            SELECT b.chunk_seq, v_start, b.turn_seq,
                   CASE WHEN b.idempotency_key IS NULL
                        THEN jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                'at', b.created_at, 'm', b.message)
                        ELSE jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                'at', b.created_at, 'k', b.idempotency_key,
                                                'm', b.message)
                   END
              FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session AND b.chunk_seq = c.chunk_seq
               AND b.turn_seq >= p_from AND (p_to IS NULL OR b.turn_seq < p_to)
               AND NOT EXISTS (SELECT 1 FROM shardstore.chunk_vectors v
                                WHERE v.session_id = p_session AND v.chunk_seq = c.chunk_seq
                                  AND v.chunk_start = v_start AND v.first_turn_seq = b.turn_seq)
             ORDER BY b.turn_seq;
    END LOOP;
END
$$;

-- the lock a worker holds on a session's embedding (a transaction-level advisory lock:
-- tried, never waited for, gone with the worker's transaction or connection)
CREATE FUNCTION shardstore.vec_session_lock_v1(p_session uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN pg_try_advisory_xact_lock(hashtextextended('shardstore.embed:' || p_session::text, 0));
END
$$;

-- 4. the claim. Units, at most p_limit: first queued chunks (kind 'q', locked FOR UPDATE
-- SKIP LOCKED as in vec_claim_v1; r_chunk_text holds only the envelopes of turns without
-- vectors, '[]' when every turn has them; r_found false for a chunk that vanished), then
-- buffered turns (kind 'b', one unit per chunk of a session whose embedding lock this
-- worker got; r_mark: the watermark to record once they are stored; a session whose
-- buffered turns all have vectors already gives one unit with r_chunk_seq NULL, to move
-- its watermark). Vectors of a chunk written under another chunk_start in the same
-- partition (a buffered chunk whose first turns retention removed before the fold) count
-- as its own: vec_store_v2 moves them.
CREATE FUNCTION shardstore.vec_claim_v2(p_session uuid, p_limit integer)
RETURNS TABLE (r_kind text, r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamptz,
               r_first_turn_seq bigint, r_turn_count integer, r_found boolean,
               r_chunk_text text, r_mark bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    c          record;
    u          record;
    v_got      integer := 0;
    v_interval interval;
    v_origin   timestamptz;
    v_upto     bigint;
    v_max      bigint;
    v_units    integer;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    SELECT x.partition_interval, x.partition_origin INTO v_interval, v_origin FROM shardstore.config x;
    FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start FROM shardstore.embed_queue x
              WHERE p_session IS NULL OR x.session_id = p_session
              ORDER BY x.queued_at
              LIMIT p_limit * 4 + 16 LOOP
        PERFORM 1 FROM shardstore.embed_queue q
          WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
            AND q.chunk_start = c.chunk_start
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        r_kind := 'q';
        r_session_id := c.session_id;
        r_chunk_seq := c.chunk_seq;
        r_chunk_start := c.chunk_start;
        r_first_turn_seq := NULL;
        r_turn_count := NULL;
        r_chunk_text := NULL;
        r_mark := NULL;
        -- EXECUTE plans with the values known, so both scans prune to one partition
        EXECUTE 'SELECT h.first_turn_seq, h.turn_count,
                        coalesce((SELECT jsonb_agg(e.v ORDER BY e.o)
                                    FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS e(v, o)
                                   WHERE NOT EXISTS (
                                         SELECT 1 FROM shardstore.chunk_vectors x
                                          WHERE x.session_id = $1 AND x.chunk_seq = $2
                                            AND x.chunk_start >= $4 AND x.chunk_start <= $3
                                            AND x.first_turn_seq = (e.v->>''s'')::bigint)),
                                 ''[]'')::text
                   FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
           INTO r_first_turn_seq, r_turn_count, r_chunk_text
          USING c.session_id, c.chunk_seq, c.chunk_start, date_bin(v_interval, c.chunk_start, v_origin);
        r_found := r_turn_count IS NOT NULL;
        RETURN NEXT;
        v_got := v_got + 1;
        IF v_got >= p_limit THEN
            RETURN;
        END IF;
    END LOOP;
    -- buffered turns at or above their session's watermark
    FOR c IN SELECT DISTINCT b.session_id FROM shardstore.turn_buffer b
               LEFT JOIN shardstore.embed_marks m ON m.session_id = b.session_id
              WHERE (p_session IS NULL OR b.session_id = p_session)
                AND b.turn_seq >= coalesce(m.upto, 0)
              LIMIT (p_limit - v_got) * 4 + 16 LOOP
        CONTINUE WHEN NOT shardstore.vec_session_lock_v1(c.session_id);
        SELECT m.upto INTO v_upto FROM shardstore.embed_marks m WHERE m.session_id = c.session_id;
        v_upto := coalesce(v_upto, 0);
        SELECT max(b.turn_seq) INTO v_max FROM shardstore.turn_buffer b WHERE b.session_id = c.session_id;
        CONTINUE WHEN v_max IS NULL OR v_max < v_upto;
        v_units := 0;
        FOR u IN SELECT t.r_chunk_seq AS chunk_seq, t.r_chunk_start AS chunk_start,
                        jsonb_agg(t.r_envelope ORDER BY t.r_turn_seq)::text AS envelopes
                   FROM shardstore.vec_buffered_turns_v1(c.session_id, v_upto, v_max + 1) t
                  GROUP BY t.r_chunk_seq, t.r_chunk_start ORDER BY t.r_chunk_seq LOOP
            r_kind := 'b';
            r_session_id := c.session_id;
            r_chunk_seq := u.chunk_seq;
            r_chunk_start := u.chunk_start;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_found := true;
            r_chunk_text := u.envelopes;
            r_mark := v_max + 1;
            RETURN NEXT;
            v_units := v_units + 1;
        END LOOP;
        IF v_units = 0 THEN
            r_kind := 'b';
            r_session_id := c.session_id;
            r_chunk_seq := NULL;
            r_chunk_start := NULL;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_found := true;
            r_chunk_text := '[]';
            r_mark := v_max + 1;
            RETURN NEXT;
        END IF;
        v_got := v_got + greatest(v_units, 1);
        EXIT WHEN v_got >= p_limit;
    END LOOP;
END
$$;

-- 5. the store. Per unit (kind, session, chunk, chunk_start; for 'q' the version read): a
-- 'q' chunk is written only if it still has that version, is not held by a fold or purge
-- and its session is live (else it stays queued; a vanished one loses its queue row), and
-- then loses its queue row; a 'b' unit needs its session live and not held by a rewind,
-- purge or batch append (FOR KEY SHARE SKIP LOCKED: none can start until this commits),
-- and each of its turns still there: in the buffer (not held by a fold or retention) or
-- folded meanwhile into the same chunk with the same time, else the turn is passed over.
-- Every unit needs the session's embedding lock (vec_session_lock_v1). Windows are written
-- only for turns that have none, numbered after the chunk's last window. Afterwards each
-- session of a 'b' unit whose buffered turns below r_mark all have vectors gets that
-- watermark. Windows: w_unit (1-based unit index), turn_seq, time, vector text.
-- Returns (units stored, units left for a later batch).
CREATE FUNCTION shardstore.vec_store_v2(
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
            UPDATE shardstore.chunk_vectors v
               SET chunk_start = u_start[i], window_no = v.window_no + v_next
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

-- 6. a reset (reembed, or the first model) drops every vector: the watermarks go first (a
-- worker holding a session's rows is waited for before chunk_vectors is locked, the order
-- the worker takes them in), then vec_configure_v1 does the rest
CREATE FUNCTION shardstore.vec_configure_v2(p_model text, p_dimension integer,
                                            p_window_tokens integer, p_reset boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_reset OR NOT EXISTS (SELECT 1 FROM shardstore.embedding_config) THEN
        DELETE FROM shardstore.embed_marks;
    END IF;
    RETURN shardstore.vec_configure_v1(p_model, p_dimension, p_window_tokens, p_reset);
END
$$;
