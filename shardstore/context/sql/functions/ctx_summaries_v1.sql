-- The summaries of one lineage segment a context may use (the ctx_read statement of
-- shardstore/context/sql/assembly.sql), newest first: chunk_seq in [p_chunk_from, p_chunk_to),
-- last_turn_seq in [p_turn_min, p_turn_max], at most p_limit (NULL: all). A function, not a
-- LATERAL subquery with a LIMIT over the segments, which Citus cannot plan ("Limit clause is
-- currently unsupported when a lateral subquery references a column from complex subqueries,
-- CTEs or local tables"): each call is one index range of one session (one shard), like
-- tail_v1 in the same statement.
CREATE OR REPLACE FUNCTION shardstore.ctx_summaries_v1(p_session uuid, p_chunk_from bigint, p_chunk_to bigint, p_turn_min bigint, p_turn_max bigint, p_limit integer)
 RETURNS TABLE(chunk_seq bigint, first_turn_seq bigint, last_turn_seq bigint, summary text, tokens integer, model text, created_at timestamp with time zone, message_tokens integer, counted_by text)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
    SELECT y.chunk_seq, y.first_turn_seq, y.last_turn_seq, y.summary, y.tokens, y.model,
           y.created_at, y.message_tokens, y.counted_by
      FROM shardstore.chunk_summaries y
     WHERE y.session_id = p_session AND y.chunk_seq >= p_chunk_from AND y.chunk_seq < p_chunk_to
       AND y.last_turn_seq >= p_turn_min AND y.last_turn_seq <= p_turn_max
     ORDER BY y.chunk_seq DESC
     LIMIT p_limit;
END
$function$;
