-- Embedding of buffered turns and of queued chunks, turn by turn (vec_claim_v2,
-- vec_store_v2; one vector per turn: docs/decisions/0016-one-vector-per-turn.md).

-- Work waiting for the embedding pass: queued chunks, plus the chunks of buffered turns at
-- or above their session's watermark (of one session, when given). An upper bound: a
-- session whose watermark a rewind or purge removed counts until the next pass re-marks it.
-- name: vec_pending_count
SELECT (SELECT count(*) FROM shardstore.embed_queue q
         WHERE %(session)s::uuid IS NULL OR q.session_id = %(session)s::uuid)
     + (SELECT count(*) FROM (SELECT DISTINCT b.session_id, b.chunk_seq
                                FROM shardstore.turn_buffer b
                                LEFT JOIN shardstore.embed_marks m ON m.session_id = b.session_id
                               WHERE (%(session)s::uuid IS NULL OR b.session_id = %(session)s::uuid)
                                 AND b.turn_seq >= coalesce(m.upto, 0)) x);

-- Claims up to %s units: queued chunks (locked FOR UPDATE SKIP LOCKED), then buffered
-- turns of sessions whose embedding lock this transaction got; each with the envelopes of
-- its turns that have no vectors yet.
-- name: vec_claim_units
SELECT r_kind AS kind, r_session_id AS session_id, r_chunk_seq AS chunk_seq,
       r_chunk_start AS chunk_start, r_first_turn_seq AS first_turn_seq,
       r_turn_count AS turn_count, r_found AS found, r_chunk_text AS chunk_text, r_mark AS mark
  FROM shardstore.vec_claim_v2(%s::uuid, %s);

-- name: vec_store_units
SELECT r_stored, r_left
  FROM shardstore.vec_store_v2(%s::text[], %s::uuid[], %s::bigint[], %s::timestamptz[],
                               %s::bigint[], %s::integer[], %s::bigint[], %s::integer[],
                               %s::bigint[], %s::timestamptz[], %s::text[]);
