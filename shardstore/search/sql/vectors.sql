-- Embeddings and vector search (shardstore/search/embedding.py, docs/search.md).

-- name: vec_config_get
SELECT model, dimension, window_tokens FROM shardstore.embedding_config;

-- name: vec_configure
-- a reset (or the first model) also clears the buffered-turn watermarks
SELECT shardstore.vec_configure_v2(%s, %s, %s, %s)::text;

-- name: vec_requeue_all
INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, tenant_id)
SELECT h.session_id, h.chunk_seq, h.chunk_start, h.tenant_id FROM shardstore.agent_history h
ON CONFLICT DO NOTHING;

-- name: vec_counts
SELECT (SELECT count(*) FROM shardstore.chunk_vectors),
       (SELECT count(DISTINCT (session_id, chunk_seq)) FROM shardstore.chunk_vectors),
       (SELECT count(*) FROM shardstore.embed_queue);

-- The turns of one window range of each hit chunk, as stored envelopes (jsonb text): the
-- folded part from agent_history and, for a chunk still (partly) buffered, its turns in
-- turn_buffer (one snapshot: a turn is in exactly one of them).
-- name: vec_hit_turns
-- the hits' turns stored in chunks (one array per hit); vec_hit_buffer gives those still in
-- the buffer. Two statements, each a join of the hit list with one table: Citus refused the
-- one statement with a correlated UNION ALL over both ("complex joins are only supported
-- when all distributed tables are co-located and joined on their distribution columns").
-- The chunk's row is found through chunk_map, never by the start a vector row was stored
-- under: a buffered turn's windows are stored under the start its chunk was expected to
-- fold with, and a range purge or retention that removes the chunk's first buffered turns
-- moves the fold to a later start (the embed pass moves the windows after; until then the
-- hit must still find its turns). chunk_map joined on session_id like the rest.
SELECT x.i, (SELECT jsonb_agg(e.v ORDER BY e.ord)
               FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS e(v, ord)
              WHERE (e.v->>'s')::bigint BETWEEN x.lo AND x.hi)::text
  FROM unnest(%s::integer[], %s::uuid[], %s::bigint[], %s::bigint[], %s::bigint[])
       AS x(i, session_id, chunk_seq, lo, hi)
  JOIN shardstore.chunk_map cm ON cm.session_id = x.session_id AND cm.chunk_seq = x.chunk_seq
  JOIN shardstore.agent_history h
    ON h.session_id = cm.session_id AND h.chunk_seq = cm.chunk_seq
   AND h.chunk_start = cm.chunk_start;

-- name: vec_hit_buffer
-- a chunk's turns newer than its folded part are in the buffer: one envelope per row
SELECT x.i, b.turn_seq,
       (CASE WHEN b.idempotency_key IS NULL
             THEN jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                     'at', b.created_at, 'm', b.message)
             ELSE jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                     'at', b.created_at, 'k', b.idempotency_key, 'm', b.message)
        END)::text
  FROM unnest(%s::integer[], %s::uuid[], %s::bigint[], %s::bigint[], %s::bigint[])
       AS x(i, session_id, chunk_seq, lo, hi)
  JOIN shardstore.turn_buffer b
    ON b.session_id = x.session_id AND b.chunk_seq = x.chunk_seq
   AND b.turn_seq BETWEEN x.lo AND x.hi;

-- name: vec_hit_epochs
-- the rewind epochs of the hits' sessions, read in the hits' snapshot (an encrypted store checks
-- each sealed turn's epoch against them; one statement for every session of the hits)
SELECT s.session_id, s.rewind_epochs
  FROM shardstore.sessions s
 WHERE s.session_id = ANY(%s::uuid[]);

-- Session scope, exact: every window of the session is compared (the MATERIALIZED scan has
-- no ORDER BY, so no HNSW index can stand in), then the best window of each chunk.
-- name: vec_search_exact
WITH w AS MATERIALIZED (
    SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq, v.last_turn_seq,
           v.embedding <=> %(q)s::halfvec AS dist
      FROM shardstore.chunk_vectors v
      -- a fork's windows are its own and those of the turns it inherits (fork_segments_v1)
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
SELECT r.session_id, r.chunk_seq, r.chunk_start, r.first_turn_seq, r.last_turn_seq, r.dist
  FROM (SELECT w.*, row_number() OVER (PARTITION BY w.chunk_seq, w.chunk_start
                                       ORDER BY w.dist, w.first_turn_seq) AS rn
          FROM w) r
 WHERE r.rn = 1
 ORDER BY r.dist, r.chunk_seq
 LIMIT %(n)s;

-- Per-transaction settings of a tenant search: iterative scan keeps a filtered HNSW scan
-- going until enough rows pass the filter; strict order keeps each partition's output
-- sorted, so the MergeAppend across partitions merges them correctly.
-- name: vec_search_settings
-- vec_search_settings_v2 uses SET LOCAL, which Citus sends on to the shards
SELECT shardstore.vec_search_settings_v2(%s, %s);

-- A tenant's vectors in the search's time window, counted up to a cap: one range scan of
-- chunk_vectors_tenant (index only, once VACUUM marked the pages visible) in the tenant's
-- one leaf. An upper bound of the rows the search filters (agent and first/last_at are
-- not in the index).
-- name: vec_tenant_rows
SELECT count(*) FROM (
    SELECT 1 FROM shardstore.chunk_vectors v
     WHERE v.tenant_id = %(tenant)s::text
       AND v.chunk_start >= coalesce(%(since_floor)s::timestamptz, '-infinity')
       AND v.chunk_start < coalesce(%(until)s::timestamptz, 'infinity')
     LIMIT %(cap)s) x;

-- the planner's statistics of the tenant's leaf (vec_tenant_leaf_v1)
-- name: vec_tenant_leaf
SELECT r_leaf_rows, r_share FROM shardstore.vec_tenant_leaf_v1(%s);

-- Tenant scope, exact (a tenant with few vectors in the window): every window of the
-- tenant is compared; the MATERIALIZED scan has no ORDER BY, so no HNSW index can stand in.
-- name: vec_search_tenant_exact
WITH w AS MATERIALIZED (
    SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq, v.last_turn_seq,
           v.embedding <=> %(q)s::halfvec AS dist
      FROM shardstore.chunk_vectors v
     WHERE v.tenant_id = %(tenant)s::text
       AND (%(agent)s::text IS NULL OR v.agent_id = %(agent)s::text)
       AND v.chunk_start >= coalesce(%(since_floor)s::timestamptz, '-infinity')
       AND v.chunk_start < coalesce(%(until)s::timestamptz, 'infinity')
       AND v.last_at >= coalesce(%(since)s::timestamptz, '-infinity')
       AND v.first_at < coalesce(%(until)s::timestamptz, 'infinity'))
SELECT w.* FROM w ORDER BY w.dist, w.session_id, w.chunk_seq, w.first_turn_seq LIMIT %(n)s;

-- Tenant scope: nearest windows through the HNSW index of the tenant's leaf.
-- name: vec_search_ann
SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq, v.last_turn_seq,
       v.embedding <=> %(q)s::halfvec AS dist
  FROM shardstore.chunk_vectors v
 WHERE v.tenant_id = %(tenant)s::text
   AND (%(agent)s::text IS NULL OR v.agent_id = %(agent)s::text)
   AND v.chunk_start >= coalesce(%(since_floor)s::timestamptz, '-infinity')
   AND v.chunk_start < coalesce(%(until)s::timestamptz, 'infinity')
   AND v.last_at >= coalesce(%(since)s::timestamptz, '-infinity')
   AND v.first_at < coalesce(%(until)s::timestamptz, 'infinity')
 ORDER BY v.embedding <=> %(q)s::halfvec
 LIMIT %(n)s;
