-- Fork (shardstore/state/fork.py); the work is done by fork_v1 and the fork_* helpers in
-- sql/functions/.

-- name: fork
SELECT r_status AS status, r_at AS at, r_turns AS turns
  FROM shardstore.fork_v1(%s, %s, %s, %s, %s::jsonb);

-- name: fork_segments
-- the segments a session's history is read from, newest first (fork_segments_v1)
SELECT r_session_id AS session_id, r_chunk_lo AS chunk_lo, r_chunk_hi AS chunk_hi,
       r_turn_hi AS turn_hi
  FROM shardstore.fork_segments_v1(%s);

-- name: fork_chunk_part
-- one inherited chunk's counts and end over its turns <= the bound (folded and buffered parts)
WITH env AS (
    SELECT (x.e->>'t')::bigint AS tokens,
           coalesce((x.e->>'b')::bigint, octet_length((x.e->'m')::text)) AS bytes,
           (x.e->>'s')::bigint AS s, (x.e->>'at')::timestamptz AS at
      FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS x(e)
     WHERE h.session_id = %(sid)s AND h.chunk_seq = %(seq)s
       AND h.chunk_start = %(start)s::timestamptz
    UNION ALL
    SELECT b.tokens, b.bytes, b.turn_seq, b.created_at FROM shardstore.turn_buffer b
     WHERE b.session_id = %(sid)s AND b.chunk_seq = %(seq)s)
SELECT min(s) AS first_turn_seq, count(*)::int AS turn_count, sum(tokens)::bigint AS token_count,
       sum(bytes)::bigint AS byte_count, min(at) AS chunk_start, max(at) AS chunk_end
  FROM env WHERE s <= %(upto)s;
