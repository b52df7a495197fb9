-- One turn, by the cheapest path that applies: append_to_open_chunk (the turn fits the open
-- chunk), then append_seal_one (it seals the open chunk and starts the next; r_sealed true),
-- else append_v2 with a batch of one (a new session's first turn, a duplicate key, a purged or
-- missing session, Citus). Result rows as append_v2's.
CREATE OR REPLACE FUNCTION shardstore.append_one_v2(p_session_id uuid, p_message jsonb, p_tokens integer, p_bytes integer, p_key text, p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
BEGIN
    SELECT x.r_turn_seq, x.r_chunk_seq INTO r_turn_seq, r_chunk_seq
      FROM shardstore.append_to_open_chunk(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                    p_budget_tokens, p_budget_bytes, p_interval, p_origin) x;
    IF FOUND THEN
        r_tokens := p_tokens; r_duplicate := false; r_sealed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT x.r_turn_seq, x.r_chunk_seq INTO r_turn_seq, r_chunk_seq
      FROM shardstore.append_seal_one(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                         p_budget_tokens, p_budget_bytes, p_interval,
                                         p_origin) x;
    IF FOUND THEN
        r_tokens := p_tokens; r_duplicate := false; r_sealed := true;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT a.r_turn_seq, a.r_chunk_seq, a.r_tokens, a.r_duplicate, a.r_sealed
          FROM shardstore.append_v2(p_session_id, jsonb_build_array(p_message), ARRAY[p_tokens],
                                    ARRAY[p_bytes], ARRAY[p_key], p_budget_tokens, p_budget_bytes,
                                    p_interval, p_origin, 0) a;
END
$function$;
