-- Full-text search: the p_n best turns for p_query, each scored by its best window (BM25, a
-- query lexeme counted once per window, k1 1.2, b 0.75, length in lexemes), in a scope: one
-- live session and its fork lineage (p_session; p_tenant and p_agent, when given, must match
-- it), or a tenant's live sessions (of p_agent when given); turns created in [p_since,
-- p_until); N is the scope's number of turns. Candidates: the buffered turns without windows
-- yet, windowed on the fly as fold_chunk would; the newest p_sample folded windows (a fork's
-- own, then each ancestor's inherited part), of which only those sharing a query lexeme are
-- kept; and, for each lexeme rare in that sample (its df scaled to N at most p_cap), every
-- folded window holding it unless more than p_cap do. A common lexeme adds candidates only
-- from the sample, its df the sample's estimate; a rare one's df is counted over the
-- candidates; a scope that fits in the sample is ranked exactly. A window is read as its length
-- and a bitmask of the query lexemes it holds (text_mask_sql, text_mask), never as a vector.
-- r_cover: the share of the query's weight (the sum of its lexemes' idf, a lexeme no window
-- holds at df 0) that the turn's best window holds, 0 to 1: 1 for a window holding every
-- query lexeme; hybrid search weighs a text hit by it (shardstore/search/text.py, fuse).
-- Reads only, without the writers' lock (text_config_read_v1). One statement per lineage
-- segment: Citus plans no LATERAL subquery over a function's rows. Design: docs/search.md.
CREATE OR REPLACE FUNCTION shardstore.text_rank_v2(p_session uuid, p_tenant text, p_agent text, p_since timestamp with time zone, p_until timestamp with time zone, p_query text, p_n integer, p_sample integer, p_cap integer)
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint, r_score double precision, r_cover double precision)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_cfg    regconfig := shardstore.text_config_read_v1();  -- a reader: no lock
    v_since  timestamptz := coalesce(p_since, '-infinity');
    v_until  timestamptz := coalesce(p_until, 'infinity');
    v_lex    text[];
    v_h      integer[];  -- the query's lexeme hashes, in v_lex's order
    v_df     float8[] := '{}';
    v_n      float8;
    g        record;
    -- candidate windows, one array per column
    c_sid    uuid[] := '{}';
    c_turn   bigint[] := '{}';
    c_win    integer[] := '{}';
    c_chunk  bigint[] := '{}';
    c_len    integer[] := '{}';  -- the window's number of lexemes
    c_mask   varbit[] := '{}';   -- bit i - 1 set: the window holds the query's lexeme i
    v_smp    varbit[];
    v_mask   text;       -- text_mask_sql over x.tsv for this query
    v_buffered integer;  -- buffered windows (every one of them is in c_*)
    a_sid    uuid[];
    a_turn   bigint[];
    a_win    integer[];
    a_chunk  bigint[];
    a_len    integer[];
    a_mask   varbit[];
    v_folded integer := 0;
    v_sample integer;
    v_left   integer;
    v_hits   integer;
    v_est    float8;
    v_exact  boolean;
    i        integer;
BEGIN
    SELECT array_agg(x.l ORDER BY x.l), array_agg(hashtext(x.l) ORDER BY x.l)
      INTO v_lex, v_h
      FROM (SELECT DISTINCT z.l
              FROM unnest(tsvector_to_array(to_tsvector(v_cfg, p_query))) AS z(l)) x;
    IF v_lex IS NULL THEN
        RETURN;
    END IF;
    v_mask := shardstore.text_mask_sql('x.tsv', v_h);
    -- the scope: N, and every buffered window not indexed yet (on the fly, as fold_chunk
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
                   array_agg(b.chunk_seq), array_agg(cardinality(w.r_tsv)),
                   array_agg(shardstore.text_mask(w.r_tsv, v_h))
              INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask
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
                   LATERAL shardstore.text_windows(v_cfg, b.message) w;
            IF a_sid IS NOT NULL THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
            END IF;
        END LOOP;
        a_sid := NULL; a_turn := NULL; a_win := NULL; a_chunk := NULL; a_len := NULL; a_mask := NULL;
    ELSE
        SELECT sum(s.next_turn_seq) INTO v_n FROM shardstore.sessions s
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent);
        SELECT array_agg(b.session_id), array_agg(b.turn_seq), array_agg(w.r_window),
               array_agg(b.chunk_seq), array_agg(cardinality(w.r_tsv)),
               array_agg(shardstore.text_mask(w.r_tsv, v_h))
          INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask
          FROM (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.message
                  FROM shardstore.sessions s
                  JOIN shardstore.turn_buffer x ON x.session_id = s.session_id
                 WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
                   AND (p_agent IS NULL OR s.agent_id = p_agent)
                   AND x.created_at >= v_since AND x.created_at < v_until
                   AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                    WHERE t.session_id = x.session_id
                                      AND t.turn_seq = x.turn_seq)) b,
               LATERAL shardstore.text_windows(v_cfg, b.message) w;
    END IF;
    v_n := greatest(coalesce(v_n, 0), 1);
    c_sid := c_sid || coalesce(a_sid, '{}'); c_turn := c_turn || coalesce(a_turn, '{}');
    c_win := c_win || coalesce(a_win, '{}'); c_chunk := c_chunk || coalesce(a_chunk, '{}');
    c_len := c_len || coalesce(a_len, '{}'); c_mask := c_mask || coalesce(a_mask, '{}');
    v_buffered := cardinality(c_mask);
    -- the sample (of it only the windows sharing a lexeme with the query are kept; the rest
    -- count in its size): the newest folded windows (a fork's own, then each ancestor's inherited part)
    IF p_session IS NOT NULL THEN
        FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) ORDER BY r_depth LOOP
            v_left := p_sample + 1 - v_folded;
            EXIT WHEN v_left <= 0;
            EXECUTE format(
                'SELECT array_agg(x.session_id) FILTER (WHERE x.tsv && $8),
                        array_agg(x.turn_seq) FILTER (WHERE x.tsv && $8),
                        array_agg(x.window_no) FILTER (WHERE x.tsv && $8),
                        array_agg(x.chunk_seq) FILTER (WHERE x.tsv && $8),
                        array_agg(cardinality(x.tsv)) FILTER (WHERE x.tsv && $8),
                        array_agg(%s) FILTER (WHERE x.tsv && $8), count(*)
                   FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                           FROM shardstore.turn_text t
                          WHERE t.session_id = $1 AND t.turn_seq <= $2
                            AND t.chunk_seq >= $3 AND t.chunk_seq < $4
                            AND t.created_at >= $5 AND t.created_at < $6
                          ORDER BY t.turn_seq DESC, t.window_no DESC
                          LIMIT $7) x', v_mask)
              INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
              USING g.r_session_id, coalesce(g.r_turn_hi, 9223372036854775807), g.r_chunk_lo,
                    coalesce(g.r_chunk_hi, 9223372036854775807), v_since, v_until, v_left, v_h;
            IF a_sid IS NOT NULL THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
            END IF;
            v_folded := v_folded + v_hits;
        END LOOP;
    ELSE
        EXECUTE format(
            'SELECT array_agg(x.session_id) FILTER (WHERE x.tsv && $6),
                    array_agg(x.turn_seq) FILTER (WHERE x.tsv && $6),
                    array_agg(x.window_no) FILTER (WHERE x.tsv && $6),
                    array_agg(x.chunk_seq) FILTER (WHERE x.tsv && $6),
                    array_agg(cardinality(x.tsv)) FILTER (WHERE x.tsv && $6),
                    array_agg(%s) FILTER (WHERE x.tsv && $6), count(*)
               FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                       FROM shardstore.turn_text t
                      WHERE t.tenant_id = $1 AND ($2::text IS NULL OR t.agent_id = $2)
                        AND t.created_at >= $3 AND t.created_at < $4
                      ORDER BY t.created_at DESC, t.session_id DESC, t.turn_seq DESC, t.window_no DESC
                      LIMIT $5) x', v_mask)
          INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
          USING p_tenant, p_agent, v_since, v_until, p_sample + 1, v_h;
        IF a_sid IS NOT NULL THEN
            c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
            c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
        END IF;
        v_folded := v_hits;
    END IF;
    -- one more than p_sample read: the sample holds the whole scope when it came back short
    v_exact := v_folded <= p_sample;
    v_smp := c_mask;  -- the sample's matching windows: rare lexemes' windows join c_* below
    v_sample := greatest(v_buffered + v_folded, 1);
    FOR i IN 1 .. cardinality(v_lex) LOOP
        IF v_exact THEN
            v_df := array_append(v_df, NULL::float8);  -- counted over the candidates
            CONTINUE;
        END IF;
        SELECT count(*) INTO v_hits FROM unnest(v_smp) AS x(mask) WHERE get_bit(x.mask, i - 1) = 1;
        v_est := v_hits::float8 / v_sample * v_n;
        IF v_est > p_cap THEN
            v_df := array_append(v_df, v_est);
            CONTINUE;
        END IF;
        -- rare in the sample: every folded window holding it, unless more than p_cap do
        IF p_session IS NOT NULL THEN
            a_sid := '{}'; a_turn := '{}'; a_win := '{}'; a_chunk := '{}'; a_len := '{}';
            a_mask := '{}';
            v_hits := 0;
            FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) ORDER BY r_depth LOOP
                DECLARE
                    b_sid uuid[]; b_turn bigint[]; b_win integer[]; b_chunk bigint[];
                    b_len integer[]; b_mask varbit[]; b_n integer;
                BEGIN
                    EXECUTE format(
                        'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                                array_agg(x.chunk_seq), array_agg(cardinality(x.tsv)),
                                array_agg(%s), count(*)
                           FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                                   FROM shardstore.turn_text t
                                  WHERE t.session_id = $1 AND t.tsv @> $2
                                    AND t.turn_seq <= $3 AND t.chunk_seq >= $4 AND t.chunk_seq < $5
                                    AND t.created_at >= $6 AND t.created_at < $7
                                  LIMIT $8) x', v_mask)
                      INTO b_sid, b_turn, b_win, b_chunk, b_len, b_mask, b_n
                      USING g.r_session_id, ARRAY[v_h[i]], coalesce(g.r_turn_hi, 9223372036854775807),
                            g.r_chunk_lo, coalesce(g.r_chunk_hi, 9223372036854775807),
                            v_since, v_until, p_cap + 1 - v_hits;
                    IF b_n > 0 THEN
                        a_sid := a_sid || b_sid; a_turn := a_turn || b_turn; a_win := a_win || b_win;
                        a_chunk := a_chunk || b_chunk; a_len := a_len || b_len;
                        a_mask := a_mask || b_mask;
                        v_hits := v_hits + b_n;
                    END IF;
                END;
                EXIT WHEN v_hits > p_cap;
            END LOOP;
        ELSE
            EXECUTE format(
                'SELECT array_agg(x.session_id), array_agg(x.turn_seq), array_agg(x.window_no),
                        array_agg(x.chunk_seq), array_agg(cardinality(x.tsv)),
                        array_agg(%s), count(*)
                   FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                           FROM shardstore.turn_text t
                          WHERE t.tenant_id = $1 AND ($2::text IS NULL OR t.agent_id = $2)
                            AND t.tsv @> $3 AND t.created_at >= $4 AND t.created_at < $5
                          LIMIT $6) x', v_mask)
              INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
              USING p_tenant, p_agent, ARRAY[v_h[i]], v_since, v_until, p_cap + 1;
        END IF;
        IF v_hits > p_cap THEN
            -- common after all: the sample's estimate, at least what was seen
            v_df := array_append(v_df, greatest(v_est, p_cap + 1));
        ELSE
            v_df := array_append(v_df, NULL::float8);
            IF v_hits > 0 THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
            END IF;
        END IF;
    END LOOP;
    RETURN QUERY SELECT * FROM shardstore.text_rank_score(
        c_sid, c_turn, c_win, c_chunk, c_len, c_mask, v_df, cardinality(v_h), v_n, p_n);
END
$function$;
