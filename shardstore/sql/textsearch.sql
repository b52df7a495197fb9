-- Full-text and hybrid search (migration 0012, shardstore/textsearch.py).

-- The best-matching turns of a scope for a text query: every folded turn window (turn_text,
-- GIN) and every buffered turn of the scope's sessions (indexed on the fly, the same way
-- fold_v1 indexes them) that shares a lexeme with the query, scored by BM25's idf and
-- length normalisation (a term counts once per window), best window per turn. The query's
-- lexemes are ORed: a question need not repeat every word of the turn. N (for idf) is the
-- turn count of the scope's sessions. At most %(n)s turns, best first, ties by position.
-- name: text_search
WITH p AS (
    SELECT shardstore.text_config_v1() AS cfg
), lex AS (
    SELECT DISTINCT x.l FROM p, unnest(tsvector_to_array(to_tsvector(p.cfg, %(q)s::text))) AS x(l)
), tq AS (
    SELECT array_agg(lex.l ORDER BY lex.l) AS lexemes,
           string_agg('''' || replace(replace(lex.l, '\', '\\'), '''', '''''') || '''', ' | '
                      ORDER BY lex.l)::tsquery AS q
      FROM lex
), scope AS MATERIALIZED (
    SELECT s.session_id, s.next_turn_seq
      FROM shardstore.sessions s
     WHERE s.purged_at IS NULL
       AND (%(session)s::uuid IS NULL OR s.session_id = %(session)s::uuid)
       AND (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s::text)
       AND (%(agent)s::text IS NULL OR s.agent_id = %(agent)s::text)
), folded AS (
    SELECT t.session_id, t.turn_seq, t.window_no, t.chunk_seq, t.tsv
      FROM shardstore.turn_text t, tq
     WHERE t.tsv @@ tq.q
       AND (%(session)s::uuid IS NULL OR t.session_id = %(session)s::uuid)
       AND (%(tenant)s::text IS NULL OR t.tenant_id = %(tenant)s::text)
       AND (%(agent)s::text IS NULL OR t.agent_id = %(agent)s::text)
       AND t.created_at >= coalesce(%(since)s::timestamptz, '-infinity')
       AND t.created_at < coalesce(%(until)s::timestamptz, 'infinity')
), buffered AS (
    SELECT b.session_id, b.turn_seq, w.r_window AS window_no, b.chunk_seq, w.r_tsv AS tsv
      FROM scope s
      JOIN shardstore.turn_buffer b ON b.session_id = s.session_id,
           p, tq, LATERAL shardstore.text_windows_v1(p.cfg, b.message) w
     WHERE w.r_tsv @@ tq.q
       AND b.created_at >= coalesce(%(since)s::timestamptz, '-infinity')
       AND b.created_at < coalesce(%(until)s::timestamptz, 'infinity')
), cand AS MATERIALIZED (
    SELECT * FROM folded UNION ALL SELECT * FROM buffered
), m AS (
    SELECT c.session_id, c.turn_seq, c.window_no, c.chunk_seq, length(c.tsv) AS len, x.l
      FROM cand c, tq, LATERAL unnest(tsvector_to_array(c.tsv)) AS x(l)
     WHERE x.l = ANY (tq.lexemes)
), df AS (
    SELECT m.l, count(DISTINCT (m.session_id, m.turn_seq))::float8 AS n FROM m GROUP BY m.l
), total AS (
    SELECT greatest((SELECT sum(s.next_turn_seq) FROM scope s), 1)::float8 AS n,
           greatest((SELECT avg(length(c.tsv)) FROM cand c), 1)::float8 AS avglen
), scored AS (
    SELECT m.session_id, m.turn_seq, m.window_no, m.chunk_seq,
           sum(ln(1 + greatest(t.n - d.n, 0) / (d.n + 0.5) + 0.5 / (d.n + 0.5))
               * 2.2 / (1 + 1.2 * (0.25 + 0.75 * m.len / t.avglen))) AS score
      FROM m JOIN df d ON d.l = m.l, total t
     GROUP BY m.session_id, m.turn_seq, m.window_no, m.chunk_seq, m.len
), best AS (
    SELECT DISTINCT ON (sc.session_id, sc.turn_seq) sc.*
      FROM scored sc
     ORDER BY sc.session_id, sc.turn_seq, sc.score DESC, sc.window_no
)
SELECT b.session_id, b.chunk_seq, b.turn_seq AS first_turn_seq, b.turn_seq AS last_turn_seq,
       b.score
  FROM best b
 ORDER BY b.score DESC, b.session_id, b.turn_seq
 LIMIT %(n)s;

-- The turns lo..hi of each hit's chunk as stored envelopes (jsonb text), from the folded
-- part and the buffer alike (a text hit may be a buffered turn).
-- name: text_hit_turns
SELECT x.i,
       (SELECT jsonb_agg(e.v ORDER BY (e.v->>'s')::bigint)
          FROM (SELECT f.v
                  FROM shardstore.chunk_map cm
                  JOIN shardstore.agent_history h
                    ON h.session_id = cm.session_id AND h.chunk_seq = cm.chunk_seq
                   AND h.chunk_start = cm.chunk_start,
                       jsonb_array_elements(h.conversation_chunk) AS f(v)
                 WHERE cm.session_id = x.session_id AND cm.chunk_seq = x.chunk_seq
                   AND (f.v->>'s')::bigint BETWEEN x.lo AND x.hi
                UNION ALL
                SELECT CASE WHEN b.idempotency_key IS NULL
                            THEN jsonb_build_object('s', b.turn_seq, 't', b.tokens,
                                                    'at', b.created_at, 'm', b.message)
                            ELSE jsonb_build_object('s', b.turn_seq, 't', b.tokens,
                                                    'at', b.created_at, 'k', b.idempotency_key,
                                                    'm', b.message)
                       END
                  FROM shardstore.turn_buffer b
                 WHERE b.session_id = x.session_id AND b.chunk_seq = x.chunk_seq
                   AND b.turn_seq BETWEEN x.lo AND x.hi) e)::text
  FROM unnest(%s::integer[], %s::uuid[], %s::bigint[], %s::bigint[], %s::bigint[])
       AS x(i, session_id, chunk_seq, lo, hi);

-- Session scope, exact: the nearest windows themselves (not the best per chunk), for
-- fusion with the text ranking (the MATERIALIZED scan keeps any HNSW index out).
-- name: vec_windows_exact
WITH w AS MATERIALIZED (
    SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq, v.last_turn_seq,
           v.embedding <=> %(q)s::halfvec AS dist
      FROM shardstore.chunk_vectors v
     WHERE v.session_id = %(session)s
       AND (%(tenant)s::text IS NULL OR v.tenant_id = %(tenant)s::text)
       AND (%(agent)s::text IS NULL OR v.agent_id = %(agent)s::text)
       AND v.chunk_start >= coalesce(%(since_floor)s::timestamptz, '-infinity')
       AND v.chunk_start < coalesce(%(until)s::timestamptz, 'infinity')
       AND v.last_at >= coalesce(%(since)s::timestamptz, '-infinity')
       AND v.first_at < coalesce(%(until)s::timestamptz, 'infinity'))
SELECT w.session_id, w.chunk_seq, w.chunk_start, w.first_turn_seq, w.last_turn_seq, w.dist
  FROM w
 ORDER BY w.dist, w.chunk_seq, w.first_turn_seq
 LIMIT %(n)s;

-- name: text_configure
SELECT shardstore.text_configure_v1(%s::regconfig);

-- name: text_config_get
SELECT shardstore.text_config_v1()::text;
