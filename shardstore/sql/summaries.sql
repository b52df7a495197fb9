-- Chunk summaries and their queue (migration 0012, shardstore/summaries.py).

-- name: summary_queue_count
SELECT count(*)
  FROM shardstore.summary_queue q JOIN shardstore.sessions s ON s.session_id = q.session_id
 WHERE (%s::uuid IS NULL OR q.session_id = %s::uuid)
   AND s.purged_at IS NULL AND q.chunk_seq < s.open_chunk_seq;

-- Claims the oldest queued chunk no other worker holds that is sealed (before the session's
-- open chunk) and wholly folded, skipping the chunks this pass already tried; the lock
-- lasts until the worker's transaction ends (a worker that dies leaves nothing locked).
-- name: summary_claim
SELECT q.session_id, q.chunk_seq, q.chunk_start, h.first_turn_seq, h.turn_count, h.chunk_end,
       h.conversation_chunk::text AS chunk_text
  FROM (SELECT x.session_id, x.chunk_seq, x.chunk_start, x.queued_at
          FROM shardstore.summary_queue x
          JOIN shardstore.sessions s ON s.session_id = x.session_id
         WHERE (%(session)s::uuid IS NULL OR x.session_id = %(session)s::uuid)
           AND s.purged_at IS NULL AND x.chunk_seq < s.open_chunk_seq
           AND NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                            WHERE b.session_id = x.session_id AND b.chunk_seq = x.chunk_seq)
           AND NOT EXISTS (SELECT 1 FROM unnest(%(tried_sessions)s::uuid[], %(tried_chunks)s::bigint[])
                                         AS t(session_id, chunk_seq)
                            WHERE t.session_id = x.session_id AND t.chunk_seq = x.chunk_seq)
         ORDER BY x.queued_at, x.session_id, x.chunk_seq
         LIMIT 1
           FOR UPDATE OF x SKIP LOCKED) q
  LEFT JOIN shardstore.agent_history h
         ON h.session_id = q.session_id AND h.chunk_seq = q.chunk_seq AND h.chunk_start = q.chunk_start;

-- summary_store_v1 plus the tokens of the summary's context message and the counter's name
-- name: summary_store
SELECT shardstore.summary_store_v2(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: summary_list
SELECT c.chunk_seq, c.first_turn_seq, c.last_turn_seq, c.summary AS text, c.tokens, c.model,
       c.created_at
  FROM shardstore.chunk_summaries c
 WHERE c.session_id = %s
 ORDER BY c.chunk_seq;
