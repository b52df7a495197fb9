CREATE OR REPLACE FUNCTION shardstore.langgraph_put_writes_v1(p_session_id uuid, p_ns text, p_checkpoint_id text, p_task_id text, p_task_path text, p_idx integer[], p_channels text[], p_types text[], p_values bytea[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_turn   bigint;
    v_done   integer;
    v_tenant text;
BEGIN
    PERFORM shardstore.purge_guard(p_session_id);
    SELECT s.tenant_id INTO v_tenant FROM shardstore.sessions s
     WHERE s.session_id = p_session_id;
    SELECT g.turn_seq INTO v_turn FROM shardstore.langgraph_checkpoints g
     WHERE g.session_id = p_session_id AND g.checkpoint_ns = p_ns
       AND g.checkpoint_id = p_checkpoint_id;
    INSERT INTO shardstore.langgraph_writes AS w
           (session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value_type, value,
            task_path, turn_seq, tenant_id)
    SELECT p_session_id, p_ns, p_checkpoint_id, p_task_id, x.idx, x.channel, x.typ, x.val,
           p_task_path, coalesce(v_turn, -1), v_tenant
      FROM unnest(p_idx, p_channels, p_types, p_values) AS x(idx, channel, typ, val)
    ON CONFLICT (session_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
       SET channel = EXCLUDED.channel, value_type = EXCLUDED.value_type,
           value = EXCLUDED.value, task_path = EXCLUDED.task_path
     WHERE EXCLUDED.idx < 0;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    RETURN v_done;
END
$function$;
