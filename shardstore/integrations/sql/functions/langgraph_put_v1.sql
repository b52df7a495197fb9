-- The LangGraph checkpointer's put: appends the checkpoint's new messages (if any) and writes
-- the checkpoint, in one call. The session head must be what the caller read (p_expect_turns
-- turns, the last at p_expect_at), else 'stale' with the actual head and nothing written. With
-- messages the session row is locked first (lock_session_v1, FOR UPDATE) so that the head
-- checked is the one appended to; without, purge_guard (KEY SHARE; SS404 / SS410). One message
-- tries append_to_open_chunk, else append_v2 (no keys). The checkpoint is upserted in
-- checkpoints (id p_shard_id, at the last turn, its parent found by LangGraph id) and in
-- langgraph_checkpoints, and its pending writes move to its position. Returns 'ok', the new
-- head and whether a chunk was sealed.
CREATE OR REPLACE FUNCTION shardstore.langgraph_put_v1(p_session_id uuid, p_ns text, p_checkpoint_id text, p_parent_id text, p_run_id text, p_shard_id uuid, p_expect_turns bigint, p_expect_at timestamp with time zone, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_state jsonb, p_metadata jsonb)
 RETURNS TABLE(r_status text, r_turns bigint, r_last_at timestamp with time zone, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
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
        PERFORM shardstore.purge_guard(p_session_id);
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
          FROM shardstore.append_to_open_chunk(p_session_id, p_messages -> 0, p_tokens[1], p_bytes[1],
                                        NULL, p_budget_tokens, p_budget_bytes, p_interval,
                                        p_origin) x;
        IF NOT FOUND THEN
            v_n := -1;  -- does not fit the open chunk: the general path below
        END IF;
    END IF;
    IF v_n > 1 OR v_n = -1 THEN
        FOR a IN SELECT * FROM shardstore.append_v2(p_session_id, p_messages, p_tokens, p_bytes,
                                                    array_fill(NULL::text,
                                                               ARRAY[cardinality(p_tokens)]),
                                                    p_budget_tokens, p_budget_bytes,
                                                    p_interval, p_origin, 0) LOOP
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
    VALUES (p_session_id, p_shard_id, shardstore.checkpoint_next_seq(), v_tenant,
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
$function$;
