-- 0019: context assembly and text recall made fast, and text search through fork lineage
-- (docs/architecture.md "Context").
--
-- * chunk_summaries.message_tokens / counted_by: the tokens of the system message a context
--   renders for the summary, counted by the writing store's counter (named), so that
--   store.context() does not count every summary again; NULL for summaries written before.
--   summary_store_v2 is summary_store_v1 plus these two values.
-- * text_rank_v1: the full-text ranking with a bounded candidate set. A query lexeme that
--   is common in the scope (estimated from the scope's newest windows, or found in more
--   than p_cap folded windows) gives no candidates of its own beyond that sample of newest
--   windows, and its document frequency is the estimate; every window holding a rarer
--   lexeme is a candidate and the rare lexeme's document frequency is exact. A scope of at
--   most p_sample folded windows is scored exactly as 0012's text_search did. A session
--   scope reads its fork lineage (fork_segments_v1): the inherited turns it reads, none of
--   the ancestors' turns past the fork point.
-- * Copy-on-write copies are indexed: fork_materialise_v1 writes copied chunks straight
--   into agent_history (no fold), so the triggers on fork_copies index the copied turns in
--   turn_text (and queue the chunk for a summary); a copy erased (fork_erase_v1 deletes the
--   fork_copies row after rewriting the chunk without the origin's turns) takes its text
--   rows and the chunk's summary with it, so a GDPR purge leaves no lexeme of the erased
--   turns in any fork. Existing copies are indexed below.

ALTER TABLE shardstore.chunk_summaries
    ADD COLUMN message_tokens integer CHECK (message_tokens >= 0),
    ADD COLUMN counted_by text;

-- summary_store_v1, and when stored: the rendered message's tokens by the named counter.
CREATE FUNCTION shardstore.summary_store_v2(
    p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz, p_first bigint,
    p_count integer, p_end timestamptz, p_summary text, p_tokens integer, p_model text,
    p_message_tokens integer, p_counted_by text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
BEGIN
    v_status := shardstore.summary_store_v1(p_session_id, p_chunk_seq, p_chunk_start, p_first,
                                            p_count, p_end, p_summary, p_tokens, p_model);
    IF v_status = 'stored' THEN
        UPDATE shardstore.chunk_summaries c
           SET message_tokens = p_message_tokens, counted_by = p_counted_by
         WHERE c.session_id = p_session_id AND c.chunk_seq = p_chunk_seq;
    END IF;
    RETURN v_status;
END
$$;

-- The best-matching turns of a scope for a text query, best first (ties by session, turn),
-- at most p_n: (owner session, chunk, turn, score). The owner is the session whose row
-- holds the turn (an ancestor for a fork's inherited turn). Scoring as 0012's text_search:
-- lexemes ORed, BM25 idf (N = turns of the scope) with length normalisation over the
-- candidates, a term once per window, best window per turn. Candidates are bounded:
--   sample   the scope's p_sample newest folded windows and every buffered one;
--   common   a lexeme whose share of the sample, scaled to N, exceeds p_cap, or which more
--            than p_cap folded windows hold: candidates only from the sample, df estimated
--            (at least p_cap + 1);
--   rare     every other lexeme: every window holding it is a candidate, df exact.
-- When the sample holds every folded window of the scope, every lexeme is exact (the
-- ranking of 0012). Statements on turn_text run with their values (EXECUTE), so a rare
-- lexeme reads the GIN index and the sample reads the primary key backwards.
CREATE FUNCTION shardstore.text_rank_v1(
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
        SELECT array_agg(b.session_id), array_agg(b.turn_seq), array_agg(w.r_window),
               array_agg(b.chunk_seq), array_agg(w.r_tsv)
          INTO a_sid, a_turn, a_win, a_chunk, a_tsv
          FROM shardstore.fork_segments_v1(p_session) sg,
               -- by the primary key: the buffer table churns, a scan of it reads dead pages
               LATERAL (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.message
                          FROM shardstore.turn_buffer x
                         WHERE x.session_id = sg.r_session_id
                           AND x.turn_seq <= coalesce(sg.r_turn_hi, 9223372036854775807)
                           AND x.chunk_seq >= sg.r_chunk_lo
                           AND x.chunk_seq < coalesce(sg.r_chunk_hi, 9223372036854775807)
                           AND x.created_at >= v_since AND x.created_at < v_until
                        OFFSET 0) b,
               LATERAL shardstore.text_windows_v1(v_cfg, b.message) w;
    ELSE
        SELECT sum(s.next_turn_seq) INTO v_n FROM shardstore.sessions s
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent);
        SELECT array_agg(b.session_id), array_agg(b.turn_seq), array_agg(w.r_window),
               array_agg(b.chunk_seq), array_agg(w.r_tsv)
          INTO a_sid, a_turn, a_win, a_chunk, a_tsv
          FROM shardstore.sessions s,
               LATERAL (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.message
                          FROM shardstore.turn_buffer x
                         WHERE x.session_id = s.session_id
                           AND x.created_at >= v_since AND x.created_at < v_until
                        OFFSET 0) b,
               LATERAL shardstore.text_windows_v1(v_cfg, b.message) w
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent);
    END IF;
    v_n := greatest(coalesce(v_n, 0), 1);
    c_sid := coalesce(a_sid, '{}'); c_turn := coalesce(a_turn, '{}'); c_win := coalesce(a_win, '{}');
    c_chunk := coalesce(a_chunk, '{}'); c_tsv := coalesce(a_tsv, '{}');
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

-- Copies (fork_materialise_v1) are indexed for text search and queued for a summary; an
-- origin range widened by an upsert indexes what it adds (ON CONFLICT keeps the rest).
CREATE FUNCTION shardstore.fork_copy_text_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows_v1(shardstore.text_config_v1(), e.v->'m') w
     WHERE h.session_id = NEW.session_id AND h.chunk_seq = NEW.chunk_seq
       AND h.chunk_start = NEW.chunk_start
       AND (e.v->>'s')::bigint BETWEEN NEW.first_turn_seq AND NEW.last_turn_seq
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, h.tenant_id FROM shardstore.agent_history h
     WHERE h.session_id = NEW.session_id AND h.chunk_seq = NEW.chunk_seq
       AND h.chunk_start = NEW.chunk_start
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER fork_copy_text AFTER INSERT ON shardstore.fork_copies
    FOR EACH ROW EXECUTE FUNCTION shardstore.fork_copy_text_v1();
CREATE TRIGGER fork_copy_text_widened AFTER UPDATE ON shardstore.fork_copies
    FOR EACH ROW
    WHEN (NEW.first_turn_seq < OLD.first_turn_seq OR NEW.last_turn_seq > OLD.last_turn_seq)
    EXECUTE FUNCTION shardstore.fork_copy_text_v1();

-- A copy record deleted: fork_erase_v1 after it rewrote the chunk without the origin's turns
-- (a GDPR purge), or a rewind / range purge of the holder trimming records of turns it
-- already removed. The text rows of the range go, and the chunk's summary (it may tell of
-- erased turns), the chunk queued again when it still exists.
CREATE FUNCTION shardstore.fork_copy_gone_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM shardstore.turn_text t
     WHERE t.session_id = OLD.session_id AND t.chunk_seq = OLD.chunk_seq
       AND t.turn_seq BETWEEN OLD.first_turn_seq AND OLD.last_turn_seq;
    DELETE FROM shardstore.chunk_summaries c
     WHERE c.session_id = OLD.session_id AND c.chunk_seq = OLD.chunk_seq;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, h.tenant_id FROM shardstore.agent_history h
     WHERE h.session_id = OLD.session_id AND h.chunk_seq = OLD.chunk_seq
       AND h.chunk_start = OLD.chunk_start
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER fork_copy_gone AFTER DELETE ON shardstore.fork_copies
    FOR EACH ROW EXECUTE FUNCTION shardstore.fork_copy_gone_v1();

-- copies made before this migration: indexed, queued
INSERT INTO shardstore.turn_text
       (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
       (e.v->>'at')::timestamptz, w.r_tsv
  FROM shardstore.fork_copies f
  JOIN shardstore.agent_history h
    ON h.session_id = f.session_id AND h.chunk_seq = f.chunk_seq AND h.chunk_start = f.chunk_start
  JOIN shardstore.sessions s ON s.session_id = h.session_id,
       jsonb_array_elements(h.conversation_chunk) AS e(v),
       LATERAL shardstore.text_windows_v1(shardstore.text_config_v1(), e.v->'m') w
 WHERE (e.v->>'s')::bigint BETWEEN f.first_turn_seq AND f.last_turn_seq
ON CONFLICT DO NOTHING;
INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, tenant_id)
SELECT DISTINCT f.session_id, f.chunk_seq, f.chunk_start, f.tenant_id
  FROM shardstore.fork_copies f JOIN shardstore.sessions s ON s.session_id = f.session_id
 WHERE s.purged_at IS NULL
ON CONFLICT DO NOTHING;

-- On Citus fork_copies stays a coordinator table, as artifact_refs does (0017): the
-- triggers above index and un-index copies for text search whichever path writes or
-- deletes a copy record (copy-on-write, GDPR erase, rewinds and range purges of the
-- holder), and Citus distributes no table with a trigger. Copy records are few (one per
-- chunk copied by a copy-on-write), so the coordinator holds them at no cost.
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
RETURNS TABLE (r_table regclass, r_reason text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifact_refs'::regclass,
            'its AFTER DELETE trigger artifact_refs_gone marks released artifacts the moment '
            || 'any path (unref, purges, retention, rewind, the registry) deletes refs, and the '
            || 'artifact tables it updates are coordinator tables too'),
           ('shardstore.fork_copies'::regclass,
            'its triggers (0019) index and un-index copy-on-write copies for text search '
            || 'whichever path writes or deletes a copy record; copy records are few')
$$;
