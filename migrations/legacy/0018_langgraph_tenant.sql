-- 0018: the LangGraph tables (0016) in the distributable form of 0017 (docs/scale-out.md):
-- a tenant_id column, so that their RLS policy compares it instead of looking the session
-- up (Citus refuses a subquery in a policy), written by the functions that insert rows.

ALTER TABLE shardstore.langgraph_checkpoints ADD COLUMN tenant_id text;
ALTER TABLE shardstore.langgraph_writes ADD COLUMN tenant_id text;
UPDATE shardstore.langgraph_checkpoints g SET tenant_id = s.tenant_id
  FROM shardstore.sessions s WHERE s.session_id = g.session_id;
UPDATE shardstore.langgraph_writes w SET tenant_id = s.tenant_id
  FROM shardstore.sessions s WHERE s.session_id = w.session_id;
ALTER TABLE shardstore.langgraph_checkpoints ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.langgraph_writes ALTER COLUMN tenant_id SET NOT NULL;

-- registering again records the tenant column and reinstalls the policy without a subquery
SELECT shardstore.register_session_table_v1('shardstore.langgraph_checkpoints',
                                            turn_column => 'turn_seq', tenant_column => 'tenant_id',
                                            note => 'LangGraph checkpoint ids and namespaces');
SELECT shardstore.register_session_table_v1('shardstore.langgraph_writes',
                                            turn_column => 'turn_seq', tenant_column => 'tenant_id',
                                            note => 'LangGraph pending writes');

-- the inserting functions of 0016, unchanged but for tenant_id

CREATE OR REPLACE FUNCTION shardstore.langgraph_put_v1(
    p_session_id    uuid,
    p_ns            text,
    p_checkpoint_id text,
    p_parent_id     text,
    p_run_id        text,
    p_shard_id      uuid,
    p_expect_turns  bigint,
    p_expect_at     timestamptz,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz,
    p_state         jsonb,
    p_metadata      jsonb)
RETURNS TABLE (r_status text, r_turns bigint, r_last_at timestamptz, r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_sealed boolean := false;
    v_turns  bigint;
    v_at     timestamptz;
    v_tenant text;
    v_parent uuid;
    v_now    timestamptz := statement_timestamp();
    a        record;
BEGIN
    IF v_n > 0 THEN
        -- appends: the session row held until commit, so the head checked is the one
        -- appended to
        SELECT s.next_turn_seq, s.last_turn_at, s.tenant_id INTO v_turns, v_at, v_tenant
          FROM shardstore.lock_session_v1(p_session_id) s;
    ELSE
        PERFORM shardstore.purge_guard_v1(p_session_id);
        SELECT s.next_turn_seq, s.last_turn_at, s.tenant_id INTO v_turns, v_at, v_tenant
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    END IF;
    IF v_turns <> p_expect_turns OR v_at IS DISTINCT FROM p_expect_at THEN
        r_status := 'stale'; r_turns := v_turns; r_last_at := v_at; r_sealed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_n = 1 THEN
        SELECT x.r_turn_seq INTO a
          FROM shardstore.append_one_v1(p_session_id, p_messages -> 0, p_tokens[1], p_bytes[1],
                                        NULL, p_budget_tokens, p_budget_bytes, p_interval,
                                        p_origin) x;
        IF NOT FOUND THEN
            v_n := -1;  -- does not fit the open chunk: the general path below
        END IF;
    END IF;
    IF v_n > 1 OR v_n = -1 THEN
        FOR a IN SELECT * FROM shardstore.append_v1(p_session_id, p_messages, p_tokens, p_bytes,
                                                    array_fill(NULL::text,
                                                               ARRAY[cardinality(p_tokens)]),
                                                    p_budget_tokens, p_budget_bytes,
                                                    p_interval, p_origin) LOOP
            v_sealed := v_sealed OR a.r_sealed;
        END LOOP;
    END IF;
    IF v_n <> 0 THEN
        SELECT s.next_turn_seq, s.last_turn_at INTO v_turns, v_at
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    END IF;
    IF p_parent_id IS NOT NULL THEN
        SELECT g.shard_id INTO v_parent FROM shardstore.langgraph_checkpoints g
         WHERE g.session_id = p_session_id AND g.checkpoint_ns = p_ns
           AND g.checkpoint_id = p_parent_id;
    END IF;
    INSERT INTO shardstore.checkpoints AS c
           (session_id, checkpoint_id, seq, tenant_id, turn_seq, parent_id, created_at, state,
            metadata)
    VALUES (p_session_id, p_shard_id, shardstore.checkpoint_next_seq_v1(), v_tenant,
            v_turns - 1, v_parent, v_now, p_state, p_metadata)
    ON CONFLICT (session_id, checkpoint_id) DO UPDATE
       SET turn_seq = EXCLUDED.turn_seq, parent_id = EXCLUDED.parent_id,
           state = EXCLUDED.state, metadata = EXCLUDED.metadata;
    INSERT INTO shardstore.langgraph_checkpoints AS g
           (session_id, checkpoint_ns, checkpoint_id, parent_id, shard_id, turn_seq, run_id,
            tenant_id)
    VALUES (p_session_id, p_ns, p_checkpoint_id, p_parent_id, p_shard_id, v_turns - 1, p_run_id,
            v_tenant)
    ON CONFLICT (session_id, checkpoint_ns, checkpoint_id) DO UPDATE
       SET parent_id = EXCLUDED.parent_id, turn_seq = EXCLUDED.turn_seq,
           run_id = EXCLUDED.run_id;
    -- writes stay with their checkpoint's position
    UPDATE shardstore.langgraph_writes w SET turn_seq = v_turns - 1
     WHERE w.session_id = p_session_id AND w.checkpoint_ns = p_ns
       AND w.checkpoint_id = p_checkpoint_id AND w.turn_seq <> v_turns - 1;
    r_status := 'ok'; r_turns := v_turns; r_last_at := v_at; r_sealed := v_sealed;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.langgraph_put_writes_v1(
    p_session_id    uuid,
    p_ns            text,
    p_checkpoint_id text,
    p_task_id       text,
    p_task_path     text,
    p_idx           integer[],
    p_channels      text[],
    p_types         text[],
    p_values        bytea[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_turn   bigint;
    v_done   integer;
    v_tenant text;
BEGIN
    PERFORM shardstore.purge_guard_v1(p_session_id);
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
$$;

CREATE OR REPLACE FUNCTION shardstore.langgraph_copy_v1(p_source uuid, p_target uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_tenant text;
    v_done   integer;
BEGIN
    PERFORM shardstore.purge_guard_v1(p_source);
    SELECT s.tenant_id INTO v_tenant FROM shardstore.lock_session_v1(p_target) s;
    INSERT INTO shardstore.checkpoints
           (session_id, checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id,
            idempotency_key, created_at, state, tool_calls, tool_results, metadata)
    SELECT p_target, c.checkpoint_id, shardstore.checkpoint_next_seq_v1(), v_tenant, c.turn_seq,
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
$$;
