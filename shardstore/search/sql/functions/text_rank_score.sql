-- The ranking step text_rank_v2 and text_rank_keyed_v2 share: the p_n best turns of the
-- candidate windows (one array per column; p_mask bit i - 1 set: the window holds the
-- query's lexeme i of p_lexemes), scored by BM25 (k1 1.2, b 0.75, length in lexemes, N =
-- p_turns): a lexeme's df is p_df[i] when estimated, else counted over the candidates (0 when
-- none holds it); a window holds a query lexeme once; each turn is scored by its best window.
-- r_cover: the share of the query's weight (the sum of its lexemes' idf) that window holds.
-- Candidates without any query lexeme (the sample's other windows) are none.
CREATE OR REPLACE FUNCTION shardstore.text_rank_score(p_sid uuid[], p_turn bigint[], p_win integer[], p_chunk bigint[], p_len integer[], p_mask varbit[], p_df double precision[], p_lexemes integer, p_turns double precision, p_n integer)
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint, r_score double precision, r_cover double precision)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT DISTINCT ON (x.sid, x.turn, x.win) x.sid, x.turn, x.win, x.chunk, x.len, x.mask
          FROM unnest(p_sid, p_turn, p_win, p_chunk, p_len, p_mask)
               AS x(sid, turn, win, chunk, len, mask)
         WHERE position(B'1' IN x.mask) > 0  -- the sample's other windows are no candidates
         ORDER BY x.sid, x.turn, x.win
    ), m AS MATERIALIZED (
        SELECT c.sid, c.turn, c.win, c.chunk, c.len, q.i
          FROM cand c, generate_series(1, p_lexemes) AS q(i)
         WHERE get_bit(c.mask, q.i - 1) = 1
    ), df AS MATERIALIZED (  -- materialised: the estimates are small, a rescan per row is not
        SELECT m.i, coalesce(p_df[m.i], count(DISTINCT (m.sid, m.turn))::float8) AS n
          FROM m GROUP BY m.i
    ), idf AS MATERIALIZED (  -- every query lexeme's weight; one no candidate holds: df 0
        SELECT x.i, ln(1 + greatest(p_turns - x.n, 0) / (x.n + 0.5) + 0.5 / (x.n + 0.5)) AS w
          FROM (SELECT q.i, coalesce(d.n, p_df[q.i], 0) AS n
                  FROM generate_series(1, p_lexemes) AS q(i) LEFT JOIN df d ON d.i = q.i) x
    ), total AS MATERIALIZED (
        SELECT greatest((SELECT avg(c.len) FROM cand c), 1)::float8 AS avglen,
               greatest((SELECT sum(x.w) FROM idf x), 1e-9) AS mass
    ), scored AS (
        SELECT m.sid, m.turn, m.win, m.chunk,
               sum(f.w * 2.2 / (1 + 1.2 * (0.25 + 0.75 * m.len / t.avglen))) AS score,
               sum(f.w) / t.mass AS cover
          FROM m JOIN idf f ON f.i = m.i, total t
         GROUP BY m.sid, m.turn, m.win, m.chunk, m.len, t.mass
    ), best AS (
        SELECT DISTINCT ON (sc.sid, sc.turn) sc.*
          FROM scored sc
         ORDER BY sc.sid, sc.turn, sc.score DESC, sc.win
    )
    SELECT b.sid, b.chunk, b.turn, b.score, b.cover
      FROM best b
     ORDER BY b.score DESC, b.sid, b.turn
     LIMIT p_n;
END
$function$;
