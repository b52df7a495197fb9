-- 0039: a change of the text search configuration and the writers of text windows
-- serialise, so no window of the old configuration outlives the change.
--
-- Why. text_configure_v1 (0026) updates the configuration, deletes every window and rebuilds
-- them from the folded turns, in one transaction. A writer (a fold, a text pass over the
-- buffer, an import, a fork's copy) reads the configuration when it starts; one that read it
-- before the change committed and wrote its windows after the rebuild's statements took their
-- snapshots kept windows of the old language (or windows at all, after a switch to off) that
-- nothing removed: the turn's windows no longer matched its search query's parsing.
--
-- What. text_config_v1(), which every writer of windows calls (and only writers, from this
-- migration on), takes a shared transaction-level advisory lock before it reads the
-- configuration; text_configure_v1 takes the same lock exclusively before anything else.
-- So a change waits for every writer transaction that read the old configuration to commit
-- (its rebuild then sees their chunks and deletes their windows), and a writer that starts
-- meanwhile waits at its read until the change commits, then reads the new configuration
-- (text_config_v1 is VOLATILE: its read takes a fresh snapshot after the wait). Shared locks
-- do not conflict with each other: writers never wait for writers. Readers (text_rank_v1,
-- text_unindexed_sessions_v1, the client's language query) read text_config_read_v1(), the
-- old body, without the lock: a search during a change sees the old windows until it
-- commits, as before. A writer waiting behind a change that waits for another writer which
-- waits for the first one's row lock is a soft deadlock; PostgreSQL's detector reorders the
-- lock queue (after deadlock_timeout) rather than aborting anyone.
--
-- On Citus the lock is per node: a fold delegated to a worker does not see the coordinator's
-- lock, so the race stays open there (docs/scale-out.md).

CREATE FUNCTION shardstore.text_config_read_v1()
RETURNS regconfig
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM shardstore.text_search_config)
                THEN (SELECT c.config FROM shardstore.text_search_config c)
                ELSE 'english'::regconfig END
$$;

-- For writers of windows: the configuration, read after a shared lock that a change of it
-- holds exclusively (NULL when text indexing is off).
CREATE OR REPLACE FUNCTION shardstore.text_config_v1()
RETURNS regconfig
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('shardstore.text_config', 0));
    RETURN shardstore.text_config_read_v1();
END
$$;

-- As in 0026, first waiting for every writer that read the old configuration.
CREATE OR REPLACE FUNCTION shardstore.text_configure_v1(p_config regconfig)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('shardstore.text_config', 0));
    UPDATE shardstore.text_search_config SET config = p_config, configured_at = now();
    DELETE FROM shardstore.turn_text;
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows_v1(p_config, e.v->'m') w
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
REVOKE EXECUTE ON FUNCTION shardstore.text_configure_v1(regconfig) FROM PUBLIC;

-- As in 0031, with the configuration read once (text_config_v1 is VOLATILE now: in the
-- statement it would be read again for every turn).
CREATE OR REPLACE FUNCTION shardstore.fork_copy_indexed_v1(p_session uuid, p_chunk bigint, p_start timestamptz,
                                                           p_first bigint, p_last bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_config regconfig := shardstore.text_config_v1();
BEGIN
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows_v1(v_config, e.v->'m') w
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
       AND (e.v->>'s')::bigint BETWEEN p_first AND p_last
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, statement_timestamp(), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
    ON CONFLICT DO NOTHING;
END
$$;

-- As in 0038, reading the configuration without the writers' lock (a search never waits for
-- a change of it).
CREATE OR REPLACE FUNCTION shardstore.text_rank_v1(
    p_session uuid, p_tenant text, p_agent text, p_since timestamptz, p_until timestamptz,
    p_query text, p_n integer, p_sample integer, p_cap integer)
RETURNS TABLE (r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint, r_score float8)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_cfg    regconfig := shardstore.text_config_read_v1();  -- a reader: no lock
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

-- As in 0038, a reader too.
CREATE OR REPLACE FUNCTION shardstore.text_unindexed_sessions_v1(p_limit integer)
RETURNS TABLE (r_session_id uuid, r_turns bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF shardstore.text_config_read_v1() IS NULL THEN
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
