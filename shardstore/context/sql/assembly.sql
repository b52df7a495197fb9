-- Context assembly (shardstore/context/assembly.py).

-- Everything a context without facts or recall needs, in one statement (one snapshot, one
-- round trip): the session's head; its newest turns within %(fetch)s tokens (tail_v1: a
-- fork's lineage included) as one JSON array [turn_seq, chunk_seq, tokens, created_at, key,
-- message], oldest first; the message of the turn before them when the first is an item
-- with a string "type" (the only kind a reasoning item may precede; Python decides); and,
-- when %(summaries)s, the summaries a plan can use, newest first, as JSON arrays
-- [chunk_seq, first_turn_seq, last_turn_seq, text, tokens, model, created_at,
-- message_tokens or null]: those ending inside the window (the chunks from the one holding
-- its first turn), then at most %(limit)s ending before it, an index range per lineage
-- segment, cut where the stored message tokens (by the counter %(counter)s; others count 0)
-- of the ones before a summary and its own pass %(bound)s (NULL: no cut). A fork reads its
-- ancestors' summaries of chunks it inherits whole (last turn within its bound). Each
-- segment's summaries are one call of ctx_summaries_v1 (Citus plans no LATERAL
-- subquery with a LIMIT over a CTE), and the session's row is read by ctx_head_v1: the
-- statement then names no distributed table and on Citus runs on the coordinator, its
-- functions' queries routed to the shard (pushed down whole, tail_v1 would query the
-- cluster from a shard, which Citus refuses).
-- name: ctx_read
WITH s AS (
    SELECT h.r_session_id AS session_id, h.r_tenant_id AS tenant_id,
           h.r_next_turn_seq AS next_turn_seq, h.r_purged AS purged
      FROM shardstore.ctx_head_v1(%(session)s) h
), t AS MATERIALIZED (
    SELECT r.* FROM s, LATERAL shardstore.tail_v1(s.session_id, NULL, %(fetch)s) r
     WHERE NOT s.purged
), lo AS (
    SELECT (SELECT min(t.r_turn_seq) FROM t) AS turn,
           coalesce((SELECT min(t.r_chunk_seq) FROM t), 9223372036854775806) AS chunk,
           (SELECT s.next_turn_seq FROM s) AS turn_count
), before AS (
    SELECT b.r_message::text AS message
      FROM t, s, lo, LATERAL shardstore.tail_at_v1(s.session_id, t.r_turn_seq - 1, 1, NULL) b
     WHERE t.r_turn_seq = lo.turn AND t.r_turn_seq > 0
       AND jsonb_typeof(t.r_message->'type') = 'string'
), segs AS MATERIALIZED (
    SELECT g.r_session_id, g.r_chunk_lo, coalesce(g.r_chunk_hi, 9223372036854775807) AS chunk_hi,
           coalesce(g.r_turn_hi, 9223372036854775807) AS turn_hi
      FROM s, LATERAL shardstore.fork_segments_v1(s.session_id) g
     WHERE %(summaries)s AND NOT s.purged
), inside AS (
    SELECT c.chunk_seq, c.first_turn_seq, c.last_turn_seq, c.summary, c.tokens, c.model,
           c.created_at, c.message_tokens, c.counted_by
      FROM segs g, lo, LATERAL shardstore.ctx_summaries_v1(
               g.r_session_id, greatest(g.r_chunk_lo, lo.chunk), g.chunk_hi, lo.turn, g.turn_hi,
               NULL) c
), older AS (
    SELECT c.* FROM segs g, lo, LATERAL shardstore.ctx_summaries_v1(
               g.r_session_id, g.r_chunk_lo, least(g.chunk_hi, lo.chunk + 1),
               -9223372036854775808, least(g.turn_hi, coalesce(lo.turn, lo.turn_count) - 1),
               %(limit)s) c
     ORDER BY c.chunk_seq DESC
     LIMIT %(limit)s
), counted AS (
    SELECT o.*, coalesce(CASE WHEN o.counted_by = %(counter)s THEN o.message_tokens END, 0) AS known
      FROM older o
), bounded AS (
    SELECT c.*, coalesce(sum(c.known) OVER (ORDER BY c.chunk_seq DESC
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                AS ahead
      FROM counted c
), chosen AS (
    SELECT i.chunk_seq, i.first_turn_seq, i.last_turn_seq, i.summary, i.tokens, i.model,
           i.created_at, i.message_tokens, i.counted_by FROM inside i
    UNION ALL
    SELECT b.chunk_seq, b.first_turn_seq, b.last_turn_seq, b.summary, b.tokens, b.model,
           b.created_at, b.message_tokens, b.counted_by
      FROM bounded b
     WHERE %(bound)s::bigint IS NULL OR b.ahead + b.known <= %(bound)s::bigint
)
SELECT s.tenant_id, s.next_turn_seq AS turn_count, s.purged,
       (SELECT json_agg(json_build_array(t.r_turn_seq, t.r_chunk_seq, t.r_tokens, t.r_created_at,
                                         t.r_key, t.r_message) ORDER BY t.r_turn_seq)
          FROM t)::text AS turns,
       (SELECT b.message FROM before b) AS before,
       (SELECT json_agg(json_build_array(c.chunk_seq, c.first_turn_seq, c.last_turn_seq, c.summary,
                                         c.tokens, c.model, c.created_at,
                                         CASE WHEN c.counted_by = %(counter)s THEN c.message_tokens END)
                        ORDER BY c.chunk_seq DESC)
          FROM chosen c)::text AS summaries
  FROM s;
