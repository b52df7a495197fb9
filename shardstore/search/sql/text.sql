-- Full-text and hybrid search (shardstore/search/text.py, docs/search.md).

-- The best-matching turns of a scope for a text query: every turn window in turn_text (folded
-- turns, and buffered ones a text pass indexed) and every other buffered turn of the scope
-- (indexed on the fly, as fold_chunk indexes them), a
-- session's fork lineage included, scored by BM25 over a bounded candidate set (see
-- text_rank_v2: a common lexeme adds candidates only from the scope's %(sample)s newest
-- windows; rarer ones add every window holding them, unless more than %(cap)s do). At most %(n)s
-- turns, best first, ties by position; session_id is the session whose row holds the turn;
-- cover the share of the query's weight the turn holds.
-- name: text_search
SELECT r.r_session_id AS session_id, r.r_chunk_seq AS chunk_seq, r.r_turn_seq AS first_turn_seq,
       r.r_turn_seq AS last_turn_seq, r.r_score AS score, r.r_cover AS cover
  FROM shardstore.text_rank_v2(%(session)s::uuid, %(tenant)s::text, %(agent)s::text,
                               %(since)s::timestamptz, %(until)s::timestamptz, %(q)s::text,
                               %(n)s::integer, %(sample)s::integer, %(cap)s::integer) r;

-- Session scope, exact: the nearest windows themselves (not the best per chunk), for
-- fusion with the text ranking (the MATERIALIZED scan keeps any HNSW index out); a fork's
-- windows are its own and those of the turns it inherits, as in vec_search_exact.
-- name: vec_windows_exact
WITH w AS MATERIALIZED (
    SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq, v.last_turn_seq,
           v.embedding <=> %(q)s::halfvec AS dist
      FROM shardstore.chunk_vectors v
      JOIN shardstore.fork_segments_v1(%(session)s) g
        ON v.session_id = g.r_session_id AND v.chunk_seq >= g.r_chunk_lo
       AND (g.r_chunk_hi IS NULL OR v.chunk_seq < g.r_chunk_hi)
       AND (g.r_turn_hi IS NULL OR v.last_turn_seq <= g.r_turn_hi)
     WHERE (%(tenant)s::text IS NULL OR v.tenant_id = %(tenant)s::text)
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
SELECT shardstore.text_config_read_v1()::text;

-- The windows of a session's buffered turns that have none; the number of
-- turns indexed.
-- name: text_index_buffered
SELECT shardstore.text_index_buffered_v1(%s);

-- Up to %s sessions with buffered turns that have no windows, oldest turn first.
-- name: text_unindexed_sessions
SELECT r_session_id, r_turns FROM shardstore.text_unindexed_sessions_v1(%s);
