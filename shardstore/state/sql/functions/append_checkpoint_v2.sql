-- One turn and a checkpoint at it, the form append_turn(..., checkpoint=state) sends: scalar
-- arguments (no arrays to build and unpack), the turn through append_one_v2 (one round trip
-- even when it seals), one row back. The checkpoint's key is 't:' || the turn's key: a
-- duplicate turn stores nothing and returns the first checkpoint's id (NULL if that append
-- wrote none); a failing checkpoint insert rolls the turn back. The append holds the session
-- row, so the head read after it is this turn's. A concurrent retry of the key fails the fast
-- path's turn_keys insert (unique violation) and the client reruns through
-- append_checkpoint_v1 with p_fast false. Batches use append_checkpoint_v1.
CREATE OR REPLACE FUNCTION shardstore.append_checkpoint_v2(p_session_id uuid, p_message jsonb, p_tokens integer, p_bytes integer, p_key text, p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_checkpoint_id uuid, p_state jsonb)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean, r_checkpoint_id uuid)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_key    text := 't:' || p_key;
    v_tenant text;
    v_now    timestamptz;
    v_seq    bigint;
BEGIN
    SELECT a.r_turn_seq, a.r_chunk_seq, a.r_tokens, a.r_duplicate, a.r_sealed
      INTO r_turn_seq, r_chunk_seq, r_tokens, r_duplicate, r_sealed
      FROM shardstore.append_one_v2(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                    p_budget_tokens, p_budget_bytes, p_interval, p_origin) a;
    IF r_duplicate THEN
        -- a retry: the checkpoint the first append wrote, if any (NULL key: none)
        SELECT c.checkpoint_id INTO r_checkpoint_id FROM shardstore.checkpoints c
         WHERE c.session_id = p_session_id AND c.idempotency_key = v_key;
    ELSE
        -- the append holds the session row: its head is this turn's
        SELECT s.tenant_id, s.last_turn_at INTO v_tenant, v_now
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
        v_seq := shardstore.checkpoint_next_seq();
        INSERT INTO shardstore.checkpoints
               (session_id, checkpoint_id, seq, tenant_id, turn_seq, idempotency_key, created_at,
                state)
        VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, r_turn_seq, v_key, v_now, p_state);
        r_checkpoint_id := p_checkpoint_id;
    END IF;
    RETURN NEXT;
END
$function$;
