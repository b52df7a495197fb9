CREATE OR REPLACE FUNCTION shardstore.langgraph_copy_v1(p_source uuid, p_target uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_tenant text;
    v_done   integer;
BEGIN
    PERFORM shardstore.purge_guard(p_source);
    SELECT s.tenant_id INTO v_tenant FROM shardstore.lock_session_v1(p_target) s;
    INSERT INTO shardstore.checkpoints
           (session_id, checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id,
            idempotency_key, created_at, state, tool_calls, tool_results, metadata)
    SELECT p_target, c.checkpoint_id, shardstore.checkpoint_next_seq(), v_tenant, c.turn_seq,
           c.sub_step, c.parent_id, NULL, c.created_at, c.state, c.tool_calls, c.tool_results,
           c.metadata
      FROM (SELECT c.* FROM shardstore.checkpoints c
              JOIN shardstore.langgraph_checkpoints g
                ON g.session_id = c.session_id AND g.shard_id = c.checkpoint_id
             WHERE c.session_id = p_source ORDER BY c.seq) c;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    INSERT INTO shardstore.langgraph_checkpoints
           (session_id, checkpoint_ns, checkpoint_id, parent_id, shard_id, turn_seq, run_id,
            tenant_id)
    SELECT p_target, g.checkpoint_ns, g.checkpoint_id, g.parent_id, g.shard_id, g.turn_seq,
           g.run_id, v_tenant
      FROM shardstore.langgraph_checkpoints g WHERE g.session_id = p_source;
    INSERT INTO shardstore.langgraph_writes
           (session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value_type, value,
            task_path, turn_seq, tenant_id)
    SELECT p_target, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.channel,
           w.value_type, w.value, w.task_path, w.turn_seq, v_tenant
      FROM shardstore.langgraph_writes w WHERE w.session_id = p_source;
    RETURN v_done;
END
$function$;
