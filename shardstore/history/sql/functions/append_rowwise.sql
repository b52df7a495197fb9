CREATE OR REPLACE FUNCTION shardstore.append_rowwise(p_session_id uuid, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_sealed boolean;
    v_now    timestamptz;
    v_bucket timestamptz;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    record;
    v_dirty  boolean := false;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    -- turns of one session never go back in time, even if the server clock does
    v_now := greatest(statement_timestamp(), s.last_turn_at);
    v_bucket := date_bin(p_interval, v_now, p_origin);
    FOR i IN 1 .. v_n LOOP
        IF p_keys[i] IS NOT NULL THEN
            SELECT k.turn_seq, k.chunk_seq, k.tokens INTO v_key
              FROM shardstore.turn_keys k
             WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i];
            IF FOUND THEN
                r_turn_seq := v_key.turn_seq; r_chunk_seq := v_key.chunk_seq;
                r_tokens := v_key.tokens; r_duplicate := true; r_sealed := false;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> v_bucket) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_now;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
                tenant_id)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_now, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1), s.tenant_id);
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_now,
                    s.tenant_id);
        END IF;
        r_turn_seq := s.next_turn_seq; r_chunk_seq := s.open_chunk_seq;
        r_tokens := p_tokens[i]; r_duplicate := false; r_sealed := coalesce(v_sealed, false);
        RETURN NEXT;
        v_sealed := false;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_dirty := true;
    END LOOP;
    IF v_dirty THEN
        UPDATE shardstore.sessions
           SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
               open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
               open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
         WHERE session_id = p_session_id;
    END IF;
END
$function$;
