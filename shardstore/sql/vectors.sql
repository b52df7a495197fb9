-- Embeddings and vector search (migration 0005).

-- name: vec_config_get
SELECT model, dimension, window_tokens FROM shardstore.embedding_config;

-- name: vec_configure
SELECT shardstore.vec_configure_v1(%s, %s, %s, %s)::text;

-- name: vec_sync_partitions
SELECT r_lo, r_hi FROM shardstore.vec_sync_partitions_v1();

-- name: vec_queue_count
SELECT count(*) FROM shardstore.embed_queue WHERE %s::uuid IS NULL OR session_id = %s::uuid;

-- Claims up to %s queued chunks that no other worker holds; the locks last until this
-- worker's transaction ends (a worker that dies leaves nothing locked). vec_claim_v1
-- locks each candidate on its own (Citus runs no FOR UPDATE across sessions).
-- name: vec_claim
SELECT r_session_id AS session_id, r_chunk_seq AS chunk_seq, r_chunk_start AS chunk_start,
       r_first_turn_seq AS first_turn_seq, r_turn_count AS turn_count, r_chunk_text AS chunk_text
  FROM shardstore.vec_claim_v1(%s::uuid, %s);

-- name: vec_store
SELECT r_stored, r_left
  FROM shardstore.vec_store_v1(%s::uuid[], %s::bigint[], %s::timestamptz[], %s::bigint[],
                               %s::integer[], %s::integer[], %s::bigint[], %s::bigint[],
                               %s::timestamptz[], %s::timestamptz[], %s::text[]);

-- name: vec_requeue_all
INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, tenant_id)
SELECT h.session_id, h.chunk_seq, h.chunk_start, h.tenant_id FROM shardstore.agent_history h
ON CONFLICT DO NOTHING;

-- name: vec_counts
SELECT (SELECT count(*) FROM shardstore.chunk_vectors),
       (SELECT count(DISTINCT (session_id, chunk_seq)) FROM shardstore.chunk_vectors),
       (SELECT count(*) FROM shardstore.embed_queue);

-- The turns of one window range of each hit chunk, as stored envelopes (jsonb text).
-- name: vec_hit_turns
SELECT x.i, (SELECT jsonb_agg(e.v ORDER BY e.ord)
               FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS e(v, ord)
              WHERE (e.v->>'s')::bigint BETWEEN x.lo AND x.hi)::text
  FROM unnest(%s::integer[], %s::uuid[], %s::bigint[], %s::timestamptz[], %s::bigint[], %s::bigint[])
       AS x(i, session_id, chunk_seq, chunk_start, lo, hi)
  JOIN shardstore.agent_history h
    ON h.session_id = x.session_id AND h.chunk_seq = x.chunk_seq AND h.chunk_start = x.chunk_start;

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
-- vec_search_settings_v1 uses SET LOCAL, which Citus sends on to the shards
SELECT shardstore.vec_search_settings_v1(%s);

-- Tenant scope: nearest windows through each partition's HNSW index.
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
