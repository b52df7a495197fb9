-- Chunk summaries and their queue (shardstore/context/summaries.py).

-- name: summary_queue_count
SELECT count(*)
  FROM shardstore.summary_queue q JOIN shardstore.sessions s ON s.session_id = q.session_id
 WHERE (%(session)s::uuid IS NULL OR q.session_id = %(session)s::uuid)
   AND (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s::text)
   AND s.purged_at IS NULL AND q.chunk_seq < s.open_chunk_seq;

-- Claims the oldest queued chunk no other worker holds that is sealed (before the session's
-- open chunk) and wholly folded, skipping the chunks this pass already tried; the lock
-- lasts until the worker's transaction ends (a worker that dies leaves nothing locked).
-- Each candidate is locked on its own (summary_claim_v2: one shard at a time on Citus).
-- name: summary_claim
SELECT r_session_id AS session_id, r_chunk_seq AS chunk_seq, r_chunk_start AS chunk_start,
       r_first_turn_seq AS first_turn_seq, r_turn_count AS turn_count, r_chunk_end AS chunk_end,
       r_chunk_text AS chunk_text
  FROM shardstore.summary_claim_v2(%(session)s::uuid, %(tenant)s::text,
                                   %(tried_sessions)s::uuid[], %(tried_chunks)s::bigint[]);

-- summary_insert plus the tokens of the summary's context message and the counter's name
-- name: summary_store
SELECT shardstore.summary_store_v2(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: summary_list
SELECT c.chunk_seq, c.first_turn_seq, c.last_turn_seq, c.summary AS text, c.tokens, c.model,
       c.created_at
  FROM shardstore.chunk_summaries c
 WHERE c.session_id = %s
 ORDER BY c.chunk_seq;
