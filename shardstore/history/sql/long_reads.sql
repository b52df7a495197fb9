-- The newest chunks of a session in one statement each:
-- history.chunks() and history.history() try these first and fall back to their general
-- multi-statement paths on a marker row (a fork; a history range over many chunks).

-- name: chunk_list
SELECT r_fork AS fork, r_chunk_seq AS chunk_seq, r_first_turn_seq AS first_turn_seq,
       r_turn_count AS turn_count, r_token_count AS token_count, r_byte_count AS byte_count,
       r_chunk_start AS chunk_start, r_chunk_end AS chunk_end, r_is_open AS is_open,
       r_partition AS partition
  FROM shardstore.chunk_list_v1(%s, %s);

-- name: history_range
SELECT r_kind AS kind, r_chunk_seq AS chunk_seq, r_text AS text, r_turn_seq AS turn_seq,
       r_tokens AS tokens, r_created_at AS created_at, r_key AS idempotency_key,
       r_message AS message
  FROM shardstore.history_range_v1(%s, %s, %s, %s);
