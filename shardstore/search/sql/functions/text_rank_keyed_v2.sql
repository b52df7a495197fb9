-- text_rank_v2 for sealed turns (encryption at rest): the query comes as keyed lexeme hashes
-- (the client hashed the query's p_lexemes lexemes with each data key searched; the server
-- never sees them), key-major: key k's hash of lexeme i is p_hashes[(k - 1) * p_lexemes + i].
-- A window is read with the key of its session (p_sessions[j] uses key p_slots[j]; windows
-- of other sessions are no candidates), so each window is compared with p_lexemes hashes,
-- whatever the number of keys. Ranking and r_cover as text_rank_v2 (BM25 over the same
-- bounded candidates; N the scope's turns), except that buffered turns are not windowed on the
-- fly (the server cannot read sealed ones: the client's text pass wrote their windows before
-- the search). Reads only. Design: docs/decisions/0025-encrypted-search.md.
CREATE OR REPLACE FUNCTION shardstore.text_rank_keyed_v2(p_session uuid, p_tenant text, p_agent text, p_since timestamp with time zone, p_until timestamp with time zone, p_hashes integer[], p_lexemes integer, p_sessions uuid[], p_slots integer[], p_n integer, p_sample integer, p_cap integer)
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint, r_score double precision, r_cover double precision)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_since  timestamptz := coalesce(p_since, '-infinity');
    v_until  timestamptz := coalesce(p_until, 'infinity');
    v_nlex   integer := p_lexemes;
    v_width  integer := cardinality(p_hashes) / greatest(p_lexemes, 1);  -- keys
    v_h      integer[] := p_hashes;
    v_any    integer[];  -- lexeme i's hashes under every key
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
    v_mask   text;       -- text_mask_slot_sql over x.tsv, x.slot; $H: the hashes' parameter
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
    IF v_nlex < 1 OR v_width < 1 OR shardstore.text_config_read_v1() IS NULL THEN
        RETURN;
    END IF;
    v_mask := shardstore.text_mask_slot_sql('x.tsv', 'x.slot', v_nlex);
    -- the scope's N (its turns)
    IF p_session IS NOT NULL THEN
        SELECT s.next_turn_seq INTO v_n FROM shardstore.sessions s
         WHERE s.session_id = p_session AND s.purged_at IS NULL
           AND (p_tenant IS NULL OR s.tenant_id = p_tenant)
           AND (p_agent IS NULL OR s.agent_id = p_agent);
        IF NOT FOUND THEN
            RETURN;
        END IF;
    ELSE
        SELECT sum(s.next_turn_seq) INTO v_n FROM shardstore.sessions s
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent);
    END IF;
    v_n := greatest(coalesce(v_n, 0), 1);
    -- the sample (of it only the windows sharing a lexeme with the query are kept; the rest
    -- count in its size): the newest folded windows (a fork's own, then each ancestor's inherited part)
    IF p_session IS NOT NULL THEN
        FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session) ORDER BY r_depth LOOP
            v_left := p_sample + 1 - v_folded;
            EXIT WHEN v_left <= 0;
            EXECUTE format(
                'SELECT array_agg(x.session_id) FILTER (WHERE x.hit),
                        array_agg(x.turn_seq) FILTER (WHERE x.hit),
                        array_agg(x.window_no) FILTER (WHERE x.hit),
                        array_agg(x.chunk_seq) FILTER (WHERE x.hit),
                        array_agg(cardinality(x.tsv)) FILTER (WHERE x.hit),
                        array_agg(%s) FILTER (WHERE x.hit), count(*)
                   FROM (SELECT y.*, k.slot,  -- once a window, after the LIMIT
                                coalesce(y.tsv && $8[(k.slot - 1) * %s + 1 : k.slot * %s], false) AS hit
                           FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                           FROM shardstore.turn_text t
                          WHERE t.session_id = $1 AND t.turn_seq <= $2
                            AND t.chunk_seq >= $3 AND t.chunk_seq < $4
                            AND t.created_at >= $5 AND t.created_at < $6
                          ORDER BY t.turn_seq DESC, t.window_no DESC
                          LIMIT $7) y
                           LEFT JOIN unnest($9::uuid[], $10::integer[]) AS k(sid, slot)
                             ON k.sid = y.session_id) x', replace(v_mask, '$H', '$8'), v_nlex, v_nlex)
              INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
              USING g.r_session_id, coalesce(g.r_turn_hi, 9223372036854775807), g.r_chunk_lo,
                    coalesce(g.r_chunk_hi, 9223372036854775807), v_since, v_until, v_left, v_h,
                    p_sessions, p_slots;
            IF a_sid IS NOT NULL THEN
                c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
                c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
            END IF;
            v_folded := v_folded + v_hits;
        END LOOP;
    ELSE
        EXECUTE format(
            'SELECT array_agg(x.session_id) FILTER (WHERE x.hit),
                    array_agg(x.turn_seq) FILTER (WHERE x.hit),
                    array_agg(x.window_no) FILTER (WHERE x.hit),
                    array_agg(x.chunk_seq) FILTER (WHERE x.hit),
                    array_agg(cardinality(x.tsv)) FILTER (WHERE x.hit),
                    array_agg(%s) FILTER (WHERE x.hit), count(*)
               FROM (SELECT y.*, k.slot,  -- once a window, after the LIMIT
                            coalesce(y.tsv && $6[(k.slot - 1) * %s + 1 : k.slot * %s], false) AS hit
                       FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                       FROM shardstore.turn_text t
                      WHERE t.tenant_id = $1 AND ($2::text IS NULL OR t.agent_id = $2)
                        AND t.created_at >= $3 AND t.created_at < $4
                      ORDER BY t.created_at DESC, t.session_id DESC, t.turn_seq DESC, t.window_no DESC
                      LIMIT $5) y
                       LEFT JOIN unnest($7::uuid[], $8::integer[]) AS k(sid, slot)
                         ON k.sid = y.session_id) x', replace(v_mask, '$H', '$6'), v_nlex, v_nlex)
          INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
          USING p_tenant, p_agent, v_since, v_until, p_sample + 1, v_h, p_sessions, p_slots;
        IF a_sid IS NOT NULL THEN
            c_sid := c_sid || a_sid; c_turn := c_turn || a_turn; c_win := c_win || a_win;
            c_chunk := c_chunk || a_chunk; c_len := c_len || a_len; c_mask := c_mask || a_mask;
        END IF;
        v_folded := v_hits;
    END IF;
    -- one more than p_sample read: the sample holds the whole scope when it came back short
    v_exact := v_folded <= p_sample;
    v_smp := c_mask;  -- the sample's matching windows: rare lexemes' windows join c_* below
    v_sample := greatest(v_folded, 1);
    FOR i IN 1 .. v_nlex LOOP
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
        v_any := ARRAY(SELECT v_h[(k - 1) * v_nlex + i] FROM generate_series(1, v_width) AS k);
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
                           FROM (SELECT y.*, k.slot
                                   FROM (SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
                                           FROM shardstore.turn_text t
                                          WHERE t.session_id = $1 AND t.tsv && $2
                                            AND t.turn_seq <= $3 AND t.chunk_seq >= $4 AND t.chunk_seq < $5
                                            AND t.created_at >= $6 AND t.created_at < $7
                                          LIMIT $8) y
                                   JOIN unnest($10::uuid[], $11::integer[]) AS k(sid, slot)
                                     ON k.sid = y.session_id) x', replace(v_mask, '$H', '$9'))
                      INTO b_sid, b_turn, b_win, b_chunk, b_len, b_mask, b_n
                      USING g.r_session_id, v_any, coalesce(g.r_turn_hi, 9223372036854775807),
                            g.r_chunk_lo, coalesce(g.r_chunk_hi, 9223372036854775807),
                            v_since, v_until, p_cap + 1 - v_hits, v_h, p_sessions, p_slots;
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
                   FROM (SELECT y.*, k.slot
                           -- session by session, each with the hash of its key: one partition and
                           -- one GIN lookup a session, not one per key in every partition
                           FROM unnest($8::uuid[], $9::integer[]) AS k(sid, slot),
                                LATERAL (SELECT t.session_id, t.turn_seq, t.window_no,
                                                t.chunk_seq, t.tsv
                                           FROM shardstore.turn_text t
                                          WHERE t.session_id = k.sid AND t.tenant_id = $1
                                            AND ($2::text IS NULL OR t.agent_id = $2)
                                            AND t.tsv @> ARRAY[$7[(k.slot - 1) * %s + %s]]
                                            AND t.created_at >= $4 AND t.created_at < $5
                                          LIMIT $6) y
                          LIMIT $6) x', replace(v_mask, '$H', '$7'), v_nlex, i)
              INTO a_sid, a_turn, a_win, a_chunk, a_len, a_mask, v_hits
              USING p_tenant, p_agent, v_any, v_since, v_until, p_cap + 1, v_h, p_sessions, p_slots;
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
        c_sid, c_turn, c_win, c_chunk, c_len, c_mask, v_df, v_nlex, v_n, p_n);
END
$function$;
