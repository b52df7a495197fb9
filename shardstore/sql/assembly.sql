-- Context assembly (shardstore/assembly.py).

-- The newest summaries of chunks wholly before turn %s, newest first.
-- name: ctx_summaries
SELECT c.chunk_seq, c.first_turn_seq, c.last_turn_seq, c.summary AS text, c.tokens, c.model,
       c.created_at
  FROM shardstore.chunk_summaries c
 WHERE c.session_id = %s AND c.last_turn_seq < %s
 ORDER BY c.chunk_seq DESC
 LIMIT %s;
