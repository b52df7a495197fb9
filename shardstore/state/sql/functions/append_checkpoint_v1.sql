-- An append and a checkpoint positioned at its last turn, in one call. One turn with p_fast
-- tries append_to_open_chunk; otherwise, or when that finds no row, append_v2 (same rules and
-- results). The checkpoint's key is 't:' || the last turn's key: when that turn is a
-- duplicate (a retry) the checkpoint the first append wrote is returned (NULL if it wrote
-- none) and nothing is stored. The append holds the session row, so no turn comes between it
-- and the checkpoint. Every row returned carries the checkpoint id. As for
-- append_to_open_chunk, a concurrent retry may fail the fast path with a unique violation;
-- the caller then reruns with p_fast false.
CREATE OR REPLACE FUNCTION shardstore.append_checkpoint_v1(p_session_id uuid, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_fast boolean, p_checkpoint_id uuid, p_state jsonb)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean, r_checkpoint_id uuid)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    text;
    v_seqs   bigint[] := '{}';
    v_chunks bigint[] := '{}';
    v_tokens integer[] := '{}';
    v_dups   boolean[] := '{}';
    v_seals  boolean[] := '{}';
    v_last   bigint;
    v_tenant text;
    v_now    timestamptz;
    v_seq    bigint;
    v_id     uuid;
    a        record;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_key := 't:' || p_keys[v_n];
    IF p_fast AND v_n = 1 THEN
        SELECT x.r_turn_seq, x.r_chunk_seq INTO a
          FROM shardstore.append_to_open_chunk(p_session_id, p_messages -> 0, p_tokens[1], p_bytes[1],
                                        p_keys[1], p_budget_tokens, p_budget_bytes, p_interval,
                                        p_origin) x;
        IF FOUND THEN
            v_seqs := ARRAY[a.r_turn_seq]; v_chunks := ARRAY[a.r_chunk_seq];
            v_tokens := ARRAY[p_tokens[1]]; v_dups := ARRAY[false]; v_seals := ARRAY[false];
        END IF;
    END IF;
    IF cardinality(v_seqs) = 0 THEN
        FOR a IN SELECT * FROM shardstore.append_v2(p_session_id, p_messages, p_tokens, p_bytes,
                                                    p_keys, p_budget_tokens, p_budget_bytes,
                                                    p_interval, p_origin, 0) LOOP
            v_seqs := v_seqs || a.r_turn_seq; v_chunks := v_chunks || a.r_chunk_seq;
            v_tokens := v_tokens || a.r_tokens; v_dups := v_dups || a.r_duplicate;
            v_seals := v_seals || a.r_sealed;
        END LOOP;
    END IF;
    IF v_dups[v_n] THEN
        -- a retry: the checkpoint the first append wrote, if any
        SELECT c.checkpoint_id INTO v_id FROM shardstore.checkpoints c
         WHERE c.session_id = p_session_id AND c.idempotency_key = v_key;
    ELSE
        -- the append holds the session row: no turn can come in between
        SELECT s.tenant_id, s.next_turn_seq - 1, s.last_turn_at INTO v_tenant, v_last, v_now
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
        v_seq := shardstore.checkpoint_next_seq();
        INSERT INTO shardstore.checkpoints
               (session_id, checkpoint_id, seq, tenant_id, turn_seq, idempotency_key, created_at,
                state)
        VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, v_last, v_key, v_now, p_state);
        v_id := p_checkpoint_id;
    END IF;
    FOR i IN 1 .. v_n LOOP
        r_turn_seq := v_seqs[i]; r_chunk_seq := v_chunks[i]; r_tokens := v_tokens[i];
        r_duplicate := v_dups[i]; r_sealed := v_seals[i]; r_checkpoint_id := v_id;
        RETURN NEXT;
    END LOOP;
END
$function$;
