-- 0038: buffered turns get their full-text windows from a pass, not from every search
-- (issue 14; docs/architecture.md "Round 6").
--
-- Why. Text search indexes every buffered turn of its scope on the fly (text_windows_v1:
-- to_tsvector, ~0.23 ms per 1.4 kB turn), and since 0035 an active session keeps up to
-- default_tail_turns more turns buffered. A tenant with 100 active sessions of 30 turns
-- (2,980 buffered turns) took 410 ms per text search against 15 ms once the same turns were
-- folded (benchmarks/bench_text_buffered.py): the cost grows with the tenant's active
-- sessions, and is paid again by every search.
--
-- What. text_index_buffered_v1(session) writes the windows of the session's buffered turns
-- that have none into turn_text, as fold_v1 would write them (same rows: the windows are a
-- function of the message and the configuration). The store runs it after each fold of a
-- seal (the chunks a fold keeps for tail() are indexed then) and maintain() runs it for
-- every session with unindexed buffered turns. text_rank_v1 reads a buffered turn's windows
-- from turn_text when they are there and indexes only the others on the fly; fold_v1 does
-- not index a turn again that already has windows. The invariant of 0012 ("a turn is in
-- turn_buffer or in turn_text, never both, never neither") becomes: every folded turn has
-- its windows in turn_text; a buffered turn has them in turn_text or, until a pass reaches
-- it, nowhere (it is indexed when searched). Every path that removes a buffered turn
-- already deletes turn_text rows by turn (rewind from the cut, range purges below it,
-- retention up to the newest expired turn, purges and text reconfiguration everything).
--
-- Races. The pass holds the session row FOR KEY SHARE (rewinds, purges and batch appends
-- take FOR UPDATE: they wait for it, or it for them) and the buffer rows it indexes FOR KEY
-- SHARE SKIP LOCKED: a row a fold is moving, or retention is deleting, is skipped (the fold
-- indexes it; retention's row locks exclude the pass the same way), so the pass never
-- writes windows for a turn that a committed statement removed, and never waits on a row
-- lock (no deadlock with a fold that deletes rows in another order). The rows are locked
-- by a plain per-session SELECT ... FOR KEY SHARE SKIP LOCKED (a router query on Citus, as
-- retention's), then read again for the insert.

-- As in 0027, except that a buffered turn with windows in turn_text is not indexed on the fly.
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
    -- the scope: N, and every buffered window not indexed yet (on the fly, as fold_v1
    -- would; text_index_buffered_v1 writes the others into turn_text, read below)
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
                       AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                        WHERE t.session_id = x.session_id
                                          AND t.turn_seq = x.turn_seq)
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
                   AND x.created_at >= v_since AND x.created_at < v_until
                   AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                    WHERE t.session_id = x.session_id
                                      AND t.turn_seq = x.turn_seq)) b,
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

-- As in 0036, except that a moved turn with windows already in turn_text is not indexed again.
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
         -- a turn text_index_buffered_v1 indexed while it was buffered is not indexed again
         WHERE NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                            WHERE t.session_id = m.session_id AND t.turn_seq = m.turn_seq)
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

-- The windows of a session's buffered turns that have none, written as fold_v1 writes them.
-- Returns the number of turns indexed (0: none left, text indexing off, or the session is
-- gone or purged).
CREATE FUNCTION shardstore.text_index_buffered_v1(p_session_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    v_config regconfig := shardstore.text_config_v1();
    s        shardstore.sessions%ROWTYPE;
    v_seqs   bigint[] := '{}';
    v_n      integer;
    k        record;
BEGIN
    IF v_config IS NULL THEN
        RETURN 0;  -- text indexing is off (0026)
    END IF;
    SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR KEY SHARE;
    IF NOT FOUND OR s.purged_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    -- the turns to index, locked (a plain router query per session, as retention's)
    FOR k IN SELECT b.turn_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id
                AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                 WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq)
                FOR KEY SHARE SKIP LOCKED LOOP
        v_seqs := v_seqs || k.turn_seq;
    END LOOP;
    IF cardinality(v_seqs) = 0 THEN
        RETURN 0;
    END IF;
    WITH texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT b.session_id, b.turn_seq, w.r_window, b.chunk_seq, s.tenant_id, s.agent_id,
               b.created_at, w.r_tsv
          FROM shardstore.turn_buffer b,
               LATERAL shardstore.text_windows_v1(v_config, b.message) w
         WHERE b.session_id = p_session_id AND b.turn_seq = ANY (v_seqs)
        ON CONFLICT DO NOTHING
        RETURNING turn_seq
    )
    SELECT count(DISTINCT x.turn_seq) INTO v_n FROM texted x;
    RETURN v_n;
END
$$;

-- Sessions with buffered turns that have no windows (maintain's pass), oldest turn first,
-- with how many such turns each holds; none while text indexing is off.
CREATE FUNCTION shardstore.text_unindexed_sessions_v1(p_limit integer)
RETURNS TABLE (r_session_id uuid, r_turns bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF shardstore.text_config_v1() IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.session_id, count(*)
      FROM shardstore.turn_buffer b
     WHERE NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                        WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq)
     GROUP BY b.session_id
     ORDER BY min(b.created_at), b.session_id
     LIMIT p_limit;
END
$$;
