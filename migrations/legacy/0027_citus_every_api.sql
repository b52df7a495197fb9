-- 0027: every public store method runs on Citus through a tenant store (docs/scale-out.md,
-- tests/test_citus.py::test_every_public_method_tenant_bound). What failed there, and how
-- each function below differs from its previous body (only there):

-- artifact_ref_v1 (0014): a checkpoint's reference looked the checkpoint up by its id and
-- locked it FOR KEY SHARE in one statement, a lock over every shard of `checkpoints`
-- ("could not run distributed query with FOR UPDATE/SHARE commands"). Its session is now
-- found first without a lock, then the row is locked by its session (one shard). The
-- reference is still written only while the checkpoint exists: the locked read re-checks.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_v1(
    p_tenant text, p_artifact uuid, p_owner_type text, p_owner_id text, p_session uuid,
    p_turn bigint, p_required boolean, p_expires timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_session uuid := p_session;
    v_turn    bigint := p_turn;
    v_next    bigint;
    v_tenant  text;
    v_purged  boolean;
BEGIN
    IF p_owner_type = 'checkpoint' THEN
        IF v_session IS NULL THEN  -- find its session first, unlocked (any shard)
            SELECT c.session_id INTO v_session FROM shardstore.checkpoints c
             WHERE c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant;
        END IF;
        SELECT c.session_id, c.turn_seq INTO v_session, v_turn FROM shardstore.checkpoints c
         WHERE c.session_id = v_session
           AND c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant
         FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN 'no_owner';
        END IF;
    ELSIF p_owner_type = 'turn' THEN
        SELECT s.tenant_id, s.next_turn_seq, s.purged_at IS NOT NULL INTO v_tenant, v_next, v_purged
          FROM shardstore.sessions s WHERE s.session_id = v_session FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant OR v_turn >= v_next THEN
            RETURN 'no_owner';
        END IF;
        IF v_purged THEN
            RETURN 'purged';
        END IF;
    ELSE
        v_session := NULL;
        v_turn := NULL;
    END IF;
    UPDATE shardstore.artifacts a
       SET unreferenced_since = NULL, ever_referenced = true,
           required_for_resume = a.required_for_resume OR p_required
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'ready';
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    INSERT INTO shardstore.artifact_refs AS r
           (tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq,
            required_for_resume, expires_at, created_at)
    VALUES (p_tenant, p_artifact, p_owner_type, p_owner_id, v_session, v_turn, p_required,
            p_expires, clock_timestamp())
    ON CONFLICT (tenant_id, artifact_id, owner_type, owner_id) DO UPDATE
       SET required_for_resume = r.required_for_resume OR EXCLUDED.required_for_resume,
           expires_at = CASE WHEN r.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                             ELSE greatest(r.expires_at, EXCLUDED.expires_at) END;
    RETURN 'ok';
END
$$;

-- vec_store_v2 (0024): embedding as a tenant role failed on Citus ("COPY FROM not supported
-- with row-level security"): the windows of a unit were one INSERT ... SELECT FROM unnest(...)
-- with a window function, which Citus cannot route to one shard and runs through the
-- coordinator as a COPY. They are now one INSERT ... VALUES each, in a loop (0024's body
-- otherwise).
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
    v_have     bigint[];
    wr         record;
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
        -- one INSERT ... VALUES per window (Citus routes each to the session's shard; the
        -- set-based INSERT ... SELECT FROM unnest went through the coordinator as a COPY,
        -- refused under row-level security); turns already stored are read once, before
        -- (the set-based form's snapshot: several windows of one turn are all written)
        SELECT coalesce(array_agg(x.first_turn_seq), '{}') INTO v_have
          FROM shardstore.chunk_vectors x
         WHERE x.session_id = u_session[i] AND x.chunk_seq = u_chunk[i]
           AND x.chunk_start = u_start[i] AND x.first_turn_seq = ANY (v_turns);
        v_n := 0;
        FOR wr IN SELECT w.t, w.at, w.v
                    FROM unnest(w_unit, w_turn, w_at, w_vec) WITH ORDINALITY AS w(idx, t, at, v, ord)
                   WHERE w.idx = i AND w.t = ANY (v_turns) AND NOT w.t = ANY (v_have)
                   ORDER BY w.ord LOOP
            INSERT INTO shardstore.chunk_vectors
                   (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                    first_turn_seq, last_turn_seq, first_at, last_at, embedding)
            VALUES (u_session[i], u_chunk[i], u_start[i], v_next + v_n, s.tenant_id, s.agent_id,
                    wr.t, wr.t, wr.at, wr.at, wr.v::halfvec);
            v_n := v_n + 1;
        END LOOP;
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

-- summary_claim_v1 (new; the `summary_claim` statement was one SELECT): a summary worker
-- claimed its chunk with FOR UPDATE OF the queue SKIP LOCKED in a query over every session,
-- which Citus refuses across shards, and whose correlated unnest() of the chunks already
-- tried failed to plan there ("failed to postpone qual containing lateral reference"). Now
-- the candidates are read unlocked, oldest first, a page at a time, and each is locked on
-- its own (one shard) until one is got: the claim the statement made (the oldest sealed,
-- wholly folded chunk of a live session that no other worker holds and this pass has not
-- tried), with the chunk's row (NULL columns: the chunk is gone).
CREATE FUNCTION shardstore.summary_claim_v1(p_session uuid, p_tried_sessions uuid[],
                                            p_tried_chunks bigint[])
RETURNS TABLE (r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamptz,
               r_first_turn_seq bigint, r_turn_count integer, r_chunk_end timestamptz,
               r_chunk_text text)
LANGUAGE plpgsql
AS $$
DECLARE
    c      record;
    v_off  bigint := 0;
    v_seen integer;
BEGIN
    LOOP
        v_seen := 0;
        FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start
                   FROM shardstore.summary_queue x
                   JOIN shardstore.sessions s ON s.session_id = x.session_id
                  WHERE (p_session IS NULL OR x.session_id = p_session)
                    AND s.purged_at IS NULL AND x.chunk_seq < s.open_chunk_seq
                    AND NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                                     WHERE b.session_id = x.session_id AND b.chunk_seq = x.chunk_seq)
                  ORDER BY x.queued_at, x.session_id, x.chunk_seq
                  LIMIT 64 OFFSET v_off LOOP
            v_seen := v_seen + 1;
            CONTINUE WHEN EXISTS (SELECT 1 FROM unnest(p_tried_sessions, p_tried_chunks) AS t(s, q)
                                   WHERE t.s = c.session_id AND t.q = c.chunk_seq);
            PERFORM 1 FROM shardstore.summary_queue q
              WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
                AND q.chunk_start = c.chunk_start
                FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another worker holds it, or it went meanwhile
            r_session_id := c.session_id;
            r_chunk_seq := c.chunk_seq;
            r_chunk_start := c.chunk_start;
            r_first_turn_seq := NULL;
            r_turn_count := NULL;
            r_chunk_end := NULL;
            r_chunk_text := NULL;
            SELECT h.first_turn_seq, h.turn_count, h.chunk_end, h.conversation_chunk::text
              INTO r_first_turn_seq, r_turn_count, r_chunk_end, r_chunk_text
              FROM shardstore.agent_history h
             WHERE h.session_id = c.session_id AND h.chunk_seq = c.chunk_seq
               AND h.chunk_start = c.chunk_start;
            RETURN NEXT;
            RETURN;
        END LOOP;
        EXIT WHEN v_seen < 64;
        v_off := v_off + 64;
    END LOOP;
END
$$;

-- summary_store_v1 (0012): storing a summary failed on Citus ("functions used in the DO
-- UPDATE SET clause of INSERTs on distributed tables must be marked IMMUTABLE": now() in
-- ON CONFLICT DO UPDATE SET). The time is taken into a variable first and inserted; the
-- update takes EXCLUDED's (0012's body otherwise; the same time as before).
CREATE OR REPLACE FUNCTION shardstore.summary_store_v1(
    p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz, p_first bigint,
    p_count integer, p_end timestamptz, p_summary text, p_tokens integer, p_model text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ok     boolean;
    v_tenant text;
    v_open   bigint;
    v_now    timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM shardstore.agent_history h
                    WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq
                      AND h.chunk_start = p_chunk_start) THEN
        DELETE FROM shardstore.summary_queue q
         WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
        RETURN 'gone';
    END IF;
    SELECT true INTO v_ok FROM shardstore.agent_history h
     WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq AND h.chunk_start = p_chunk_start
       AND h.first_turn_seq = p_first AND h.turn_count = p_count AND h.chunk_end = p_end
       FOR SHARE SKIP LOCKED;
    SELECT x.tenant_id, x.open_chunk_seq INTO v_tenant, v_open FROM shardstore.sessions x
     WHERE x.session_id = p_session_id AND x.purged_at IS NULL;
    IF v_ok IS NOT TRUE OR v_tenant IS NULL OR v_open <= p_chunk_seq
       OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                   WHERE b.session_id = p_session_id AND b.chunk_seq = p_chunk_seq) THEN
        RETURN 'changed';
    END IF;
    v_now := now();
    INSERT INTO shardstore.chunk_summaries AS c
           (session_id, chunk_seq, tenant_id, chunk_start, first_turn_seq, last_turn_seq,
            summary, tokens, model, created_at)
    VALUES (p_session_id, p_chunk_seq, v_tenant, p_chunk_start, p_first, p_first + p_count - 1,
            p_summary, p_tokens, p_model, v_now)
    ON CONFLICT (session_id, chunk_seq) DO UPDATE
       SET tenant_id = EXCLUDED.tenant_id, chunk_start = EXCLUDED.chunk_start,
           first_turn_seq = EXCLUDED.first_turn_seq, last_turn_seq = EXCLUDED.last_turn_seq,
           summary = EXCLUDED.summary, tokens = EXCLUDED.tokens, model = EXCLUDED.model,
           created_at = EXCLUDED.created_at;
    DELETE FROM shardstore.summary_queue q
     WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
    RETURN 'stored';
END
$$;

-- ctx_summaries_v1 (new; used by the `ctx_read` statement of shardstore/sql/assembly.sql):
-- the summaries of one lineage segment a context may use, newest first: chunk_seq in
-- [p_chunk_from, p_chunk_to), last_turn_seq in [p_turn_min, p_turn_max], at most p_limit
-- (NULL: all). The statement had these as LATERAL subqueries over the segments with a
-- LIMIT, which Citus cannot plan ("Limit clause is currently unsupported when a lateral
-- subquery references a column from complex subqueries, CTEs or local tables"); as a
-- function each is one index range of one session (one shard), as tail_v1 in the same
-- statement.
CREATE FUNCTION shardstore.ctx_summaries_v1(p_session uuid, p_chunk_from bigint, p_chunk_to bigint,
                                            p_turn_min bigint, p_turn_max bigint, p_limit integer)
RETURNS TABLE (chunk_seq bigint, first_turn_seq bigint, last_turn_seq bigint, summary text,
               tokens integer, model text, created_at timestamptz, message_tokens integer,
               counted_by text)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT y.chunk_seq, y.first_turn_seq, y.last_turn_seq, y.summary, y.tokens, y.model,
           y.created_at, y.message_tokens, y.counted_by
      FROM shardstore.chunk_summaries y
     WHERE y.session_id = p_session AND y.chunk_seq >= p_chunk_from AND y.chunk_seq < p_chunk_to
       AND y.last_turn_seq >= p_turn_min AND y.last_turn_seq <= p_turn_max
     ORDER BY y.chunk_seq DESC
     LIMIT p_limit;
END
$$;

-- ctx_head_v1 (new; the first CTE of `ctx_read`): the session's row as a context needs it.
-- With the row read from `sessions` in the statement itself, Citus pushed the whole
-- statement down to the session's shard, where tail_v1 inside it would query the cluster
-- ("cannot execute a distributed query from a query on a shard"; MATERIALIZED does not
-- stop it). Read by a function, the statement names no distributed table and runs on the
-- coordinator, each of its functions' queries routed to one shard.
CREATE FUNCTION shardstore.ctx_head_v1(p_session uuid)
RETURNS TABLE (r_session_id uuid, r_tenant_id text, r_next_turn_seq bigint, r_purged boolean)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT x.session_id, x.tenant_id, x.next_turn_seq, x.purged_at IS NOT NULL
      FROM shardstore.sessions x
     WHERE x.session_id = p_session;
END
$$;

-- text_rank_v1 (0019): full-text ranking failed on Citus before it ranked anything (the
-- recall of context(), search(mode='text'/'hybrid')): its buffered windows were read by a
-- LATERAL subquery with OFFSET over fork_segments_v1()'s rows (session scope) or over
-- `sessions` (tenant scope), which Citus cannot push down ("Offset clause is currently
-- unsupported when a lateral subquery references a column from complex subqueries, CTEs
-- or local tables"). Now a session scope reads them one statement per lineage segment
-- (each one session, one shard), and a tenant scope joins `sessions` and `turn_buffer` on
-- session_id (colocated: pushed down to every shard). 0019's body otherwise.
CREATE OR REPLACE FUNCTION shardstore.text_rank_v1(
    p_session uuid, p_tenant text, p_agent text, p_since timestamptz, p_until timestamptz,
    p_query text, p_n integer, p_sample integer, p_cap integer)
RETURNS TABLE (r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint, r_score float8)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_cfg    regconfig := shardstore.text_config_v1();
    v_since  timestamptz := coalesce(p_since, '-infinity');
    v_until  timestamptz := coalesce(p_until, 'infinity');
    v_lex    text[];
    v_q      tsquery[];
    v_any    tsquery;
    v_df     float8[] := '{}';
    v_n      float8;
    g        record;
    -- candidate windows, one array per column
    c_sid    uuid[] := '{}';
    c_turn   bigint[] := '{}';
    c_win    integer[] := '{}';
    c_chunk  bigint[] := '{}';
    c_tsv    tsvector[] := '{}';
    v_smp    tsvector[];
    a_sid    uuid[];
    a_turn   bigint[];
    a_win    integer[];
    a_chunk  bigint[];
    a_tsv    tsvector[];
    v_folded integer := 0;
    v_sample integer;
    v_left   integer;
    v_hits   integer;
    v_est    float8;
    v_exact  boolean;
    i        integer;
BEGIN
    SELECT array_agg(x.l ORDER BY x.l), array_agg(x.q::tsquery ORDER BY x.l),
           string_agg(x.q, ' | ' ORDER BY x.l)::tsquery
      INTO v_lex, v_q, v_any
      FROM (SELECT y.l, '''' || replace(replace(y.l, '\', '\\'), '''', '''''') || '''' AS q
              FROM (SELECT DISTINCT z.l
                      FROM unnest(tsvector_to_array(to_tsvector(v_cfg, p_query))) AS z(l)) y) x;
    IF v_lex IS NULL THEN
        RETURN;
    END IF;
    -- the scope: N, and every buffered window (indexed on the fly as fold_v1 would)
    IF p_session IS NOT NULL THEN
        SELECT s.next_turn_seq INTO v_n FROM shardstore.sessions s
         WHERE s.session_id = p_session AND s.purged_at IS NULL
           AND (p_tenant IS NULL OR s.tenant_id = p_tenant)
           AND (p_agent IS NULL OR s.agent_id = p_agent);
        IF NOT FOUND THEN
            RETURN;
        END IF;
        -- one statement per lineage segment (one session: one shard on Citus, which plans
        -- no LATERAL subquery over a function's rows)
        FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) LOOP
            SELECT array_agg(b.session_id), array_agg(b.turn_seq), array_agg(w.r_window),
                   array_agg(b.chunk_seq), array_agg(w.r_tsv)
              INTO a_sid, a_turn, a_win, a_chunk, a_tsv
              FROM -- by the primary key: the buffer table churns, a scan of it reads dead pages
                   (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.message
                      FROM shardstore.turn_buffer x
                     WHERE x.session_id = g.r_session_id
                       AND x.turn_seq <= coalesce(g.r_turn_hi, 9223372036854775807)
                       AND x.chunk_seq >= g.r_chunk_lo
                       AND x.chunk_seq < coalesce(g.r_chunk_hi, 9223372036854775807)
                       AND x.created_at >= v_since AND x.created_at < v_until
                    OFFSET 0) b,
                   LATERAL shardstore.text_windows_v1(v_cfg, b.message) w;
            IF a_sid IS NOT NULL THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_tsv := c_tsv || a_tsv;
            END IF;
        END LOOP;
        a_sid := NULL; a_turn := NULL; a_win := NULL; a_chunk := NULL; a_tsv := NULL;
    ELSE
        SELECT sum(s.next_turn_seq) INTO v_n FROM shardstore.sessions s
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent);
        SELECT array_agg(b.session_id), array_agg(b.turn_seq), array_agg(w.r_window),
               array_agg(b.chunk_seq), array_agg(w.r_tsv)
          INTO a_sid, a_turn, a_win, a_chunk, a_tsv
          FROM (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.message
                  FROM shardstore.sessions s
                  JOIN shardstore.turn_buffer x ON x.session_id = s.session_id
                 WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
                   AND (p_agent IS NULL OR s.agent_id = p_agent)
                   AND x.created_at >= v_since AND x.created_at < v_until) b,
               LATERAL shardstore.text_windows_v1(v_cfg, b.message) w;
    END IF;
    v_n := greatest(coalesce(v_n, 0), 1);
    c_sid := c_sid || coalesce(a_sid, '{}'); c_turn := c_turn || coalesce(a_turn, '{}');
    c_win := c_win || coalesce(a_win, '{}'); c_chunk := c_chunk || coalesce(a_chunk, '{}');
    c_tsv := c_tsv || coalesce(a_tsv, '{}');
    -- the sample: the newest folded windows (a fork's own, then each ancestor's inherited part)
    IF p_session IS NOT NULL THEN
        FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) ORDER BY r_depth LOOP
            v_left := p_sample + 1 - v_folded;
            EXIT WHEN v_left <= 0;
            EXECUTE
                'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                        array_agg(x.chunk_seq), array_agg(x.tsv), count(*)
                   FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                           FROM shardstore.turn_text t
                          WHERE t.session_id = $1 AND t.turn_seq <= $2
                            AND t.chunk_seq >= $3 AND t.chunk_seq < $4
                            AND t.created_at >= $5 AND t.created_at < $6
                          ORDER BY t.turn_seq DESC, t.window_no DESC
                          LIMIT $7) x'
              INTO a_sid, a_turn, a_win, a_chunk, a_tsv, v_hits
              USING g.r_session_id, coalesce(g.r_turn_hi, 9223372036854775807), g.r_chunk_lo,
                    coalesce(g.r_chunk_hi, 9223372036854775807), v_since, v_until, v_left;
            IF v_hits > 0 THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_tsv := c_tsv || a_tsv;
                v_folded := v_folded + v_hits;
            END IF;
        END LOOP;
    ELSE
        EXECUTE
            'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                    array_agg(x.chunk_seq), array_agg(x.tsv), count(*)
               FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                       FROM shardstore.turn_text t
                      WHERE t.tenant_id = $1 AND ($2::text IS NULL OR t.agent_id = $2)
                        AND t.created_at >= $3 AND t.created_at < $4
                      ORDER BY t.created_at DESC, t.session_id DESC, t.turn_seq DESC, t.window_no DESC
                      LIMIT $5) x'
          INTO a_sid, a_turn, a_win, a_chunk, a_tsv, v_hits
          USING p_tenant, p_agent, v_since, v_until, p_sample + 1;
        IF v_hits > 0 THEN
            c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
            c_chunk := c_chunk || a_chunk; c_tsv := c_tsv || a_tsv;
            v_folded := v_hits;
        END IF;
    END IF;
    -- one more than p_sample read: the sample holds the whole scope when it came back short
    v_exact := v_folded <= p_sample;
    v_smp := c_tsv;  -- the sample alone: rare lexemes' windows join c_* below
    v_sample := greatest(cardinality(v_smp), 1);
    FOR i IN 1 .. cardinality(v_lex) LOOP
        IF v_exact THEN
            v_df := array_append(v_df, NULL::float8);  -- counted over the candidates, as 0012 did
            CONTINUE;
        END IF;
        SELECT count(*) INTO v_hits FROM unnest(v_smp) AS x(tsv) WHERE x.tsv @@ v_q[i];
        v_est := v_hits::float8 / v_sample * v_n;
        IF v_est > p_cap THEN
            v_df := array_append(v_df, v_est);
            CONTINUE;
        END IF;
        -- rare in the sample: every folded window holding it, unless more than p_cap do
        IF p_session IS NOT NULL THEN
            a_sid := '{}'; a_turn := '{}'; a_win := '{}'; a_chunk := '{}'; a_tsv := '{}';
            v_hits := 0;
            FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) ORDER BY r_depth LOOP
                DECLARE
                    b_sid uuid[]; b_turn bigint[]; b_win integer[]; b_chunk bigint[];
                    b_tsv tsvector[]; b_n integer;
                BEGIN
                    EXECUTE
                        'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                                array_agg(x.chunk_seq), array_agg(x.tsv), count(*)
                           FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                                   FROM shardstore.turn_text t
                                  WHERE t.session_id = $1 AND t.tsv @@ $2
                                    AND t.turn_seq <= $3 AND t.chunk_seq >= $4 AND t.chunk_seq < $5
                                    AND t.created_at >= $6 AND t.created_at < $7
                                  LIMIT $8) x'
                      INTO b_sid, b_turn, b_win, b_chunk, b_tsv, b_n
                      USING g.r_session_id, v_q[i], coalesce(g.r_turn_hi, 9223372036854775807),
                            g.r_chunk_lo, coalesce(g.r_chunk_hi, 9223372036854775807),
                            v_since, v_until, p_cap + 1 - v_hits;
                    IF b_n > 0 THEN
                        a_sid := a_sid || b_sid; a_turn := a_turn || b_turn; a_win := a_win || b_win;
                        a_chunk := a_chunk || b_chunk; a_tsv := a_tsv || b_tsv;
                        v_hits := v_hits + b_n;
                    END IF;
                END;
                EXIT WHEN v_hits > p_cap;
            END LOOP;
        ELSE
            EXECUTE
                'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                        array_agg(x.chunk_seq), array_agg(x.tsv), count(*)
                   FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                           FROM shardstore.turn_text t
                          WHERE t.tenant_id = $1 AND ($2::text IS NULL OR t.agent_id = $2)
                            AND t.tsv @@ $3 AND t.created_at >= $4 AND t.created_at < $5
                          LIMIT $6) x'
              INTO a_sid, a_turn, a_win, a_chunk, a_tsv, v_hits
              USING p_tenant, p_agent, v_q[i], v_since, v_until, p_cap + 1;
        END IF;
        IF v_hits > p_cap THEN
            -- common after all: the sample's estimate, at least what was seen
            v_df := array_append(v_df, greatest(v_est, p_cap + 1));
        ELSE
            v_df := array_append(v_df, NULL::float8);
            IF v_hits > 0 THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_tsv := c_tsv || a_tsv;
            END IF;
        END IF;
    END LOOP;
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT DISTINCT ON (x.sid, x.turn, x.win) x.sid, x.turn, x.win, x.chunk, x.tsv
          FROM unnest(c_sid, c_turn, c_win, c_chunk, c_tsv) AS x(sid, turn, win, chunk, tsv)
         WHERE x.tsv @@ v_any  -- the sample's other windows are no candidates
         ORDER BY x.sid, x.turn, x.win
    ), m AS MATERIALIZED (
        SELECT c.sid, c.turn, c.win, c.chunk, length(c.tsv) AS len, q.i
          FROM cand c, unnest(v_q) WITH ORDINALITY AS q(tq, i)
         WHERE c.tsv @@ q.tq
    ), df AS MATERIALIZED (  -- materialised: the estimates are small, a rescan per row is not
        SELECT m.i, coalesce(v_df[m.i], count(DISTINCT (m.sid, m.turn))::float8) AS n
          FROM m GROUP BY m.i
    ), total AS MATERIALIZED (
        SELECT greatest((SELECT avg(length(c.tsv)) FROM cand c), 1)::float8 AS avglen
    ), scored AS (
        SELECT m.sid, m.turn, m.win, m.chunk,
               sum(ln(1 + greatest(v_n - d.n, 0) / (d.n + 0.5) + 0.5 / (d.n + 0.5))
                   * 2.2 / (1 + 1.2 * (0.25 + 0.75 * m.len / t.avglen))) AS score
          FROM m JOIN df d ON d.i = m.i, total t
         GROUP BY m.sid, m.turn, m.win, m.chunk, m.len
    ), best AS (
        SELECT DISTINCT ON (sc.sid, sc.turn) sc.*
          FROM scored sc
         ORDER BY sc.sid, sc.turn, sc.score DESC, sc.win
    )
    SELECT b.sid, b.chunk, b.turn, b.score
      FROM best b
     ORDER BY b.score DESC, b.sid, b.turn
     LIMIT p_n;
END
$$;
