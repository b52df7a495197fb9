CREATE OR REPLACE FUNCTION shardstore.append_v1(p_session_id uuid, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM shardstore.append_v2(p_session_id, p_messages, p_tokens, p_bytes, p_keys,
                                       p_budget_tokens, p_budget_bytes, p_interval, p_origin, 0);
$function$;
