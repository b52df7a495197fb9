-- Un-indexes turns p_first..p_last of (p_session, p_chunk) whose copy record is being deleted:
-- their turn_text rows go, and the chunk's summary (it may tell of erased turns); the chunk
-- is queued for a summary again when it still exists in agent_history at p_start. Called by
-- the functions that delete copy records (no trigger: Citus distributes no table with one).
CREATE OR REPLACE FUNCTION shardstore.fork_copy_unindexed(p_session uuid, p_chunk bigint, p_start timestamp with time zone, p_first bigint, p_last bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM shardstore.turn_text t
     WHERE t.session_id = p_session AND t.chunk_seq = p_chunk
       AND t.turn_seq BETWEEN p_first AND p_last;
    DELETE FROM shardstore.chunk_summaries c
     WHERE c.session_id = p_session AND c.chunk_seq = p_chunk;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, statement_timestamp(), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
    ON CONFLICT DO NOTHING;
END
$function$;
