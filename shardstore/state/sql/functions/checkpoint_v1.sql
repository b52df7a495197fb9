-- Writes a checkpoint positioned at the session's last committed turn. A key seen before
-- returns the first checkpoint (r_status 'duplicate', with its content) and stores nothing,
-- even if the content differs; an unknown parent returns r_status 'no_parent' and stores
-- nothing. SS404 / SS410 for an unknown / purged session (purge_guard: a purge either
-- runs after this commits, and removes it, or is seen).
CREATE OR REPLACE FUNCTION shardstore.checkpoint_v1(p_session_id uuid, p_checkpoint_id uuid, p_key text, p_state jsonb, p_tool_calls jsonb, p_tool_results jsonb, p_sub_step integer, p_parent_id uuid, p_metadata jsonb)
 RETURNS TABLE(r_status text, r_checkpoint_id uuid, r_turn_seq bigint, r_sub_step integer, r_parent_id uuid, r_created_at timestamp with time zone, r_state jsonb, r_tool_calls jsonb, r_tool_results jsonb, r_metadata jsonb)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_tenant text;
    v_turn   bigint;
    v_now    timestamptz := statement_timestamp();
    v_seq    bigint;
    v_done   bigint;
BEGIN
    PERFORM shardstore.purge_guard(p_session_id);
    IF p_key IS NOT NULL THEN
        RETURN QUERY
            SELECT 'duplicate'::text, c.checkpoint_id, c.turn_seq, c.sub_step, c.parent_id,
                   c.created_at, c.state, c.tool_calls, c.tool_results, c.metadata
              FROM shardstore.checkpoints c
             WHERE c.session_id = p_session_id AND c.idempotency_key = p_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF p_parent_id IS NOT NULL THEN
        -- held until commit: keep_checkpoints cannot remove the parent meanwhile
        PERFORM 1 FROM shardstore.checkpoints c
          WHERE c.session_id = p_session_id AND c.checkpoint_id = p_parent_id FOR KEY SHARE;
        IF NOT FOUND THEN
            r_status := 'no_parent';
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    SELECT s.tenant_id, s.next_turn_seq - 1 INTO v_tenant, v_turn
      FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    v_seq := shardstore.checkpoint_next_seq();
    INSERT INTO shardstore.checkpoints
           (session_id, checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id,
            idempotency_key, created_at, state, tool_calls, tool_results, metadata)
    VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, v_turn, p_sub_step, p_parent_id,
            p_key, v_now, p_state, p_tool_calls, p_tool_results, coalesce(p_metadata, '{}'))
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done = 0 THEN
        -- a concurrent call with the same key committed first
        RETURN QUERY
            SELECT 'duplicate'::text, c.checkpoint_id, c.turn_seq, c.sub_step, c.parent_id,
                   c.created_at, c.state, c.tool_calls, c.tool_results, c.metadata
              FROM shardstore.checkpoints c
             WHERE c.session_id = p_session_id AND c.idempotency_key = p_key;
        RETURN;
    END IF;
    r_status := 'created'; r_checkpoint_id := p_checkpoint_id; r_turn_seq := v_turn;
    r_created_at := v_now;
    RETURN NEXT;
END
$function$;
