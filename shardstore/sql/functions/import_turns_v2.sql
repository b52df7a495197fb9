CREATE OR REPLACE FUNCTION shardstore.import_turns_v2(p_session_id uuid, p_first_seq bigint, p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_at timestamp with time zone[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_status text, r_index integer, r_sealed boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM shardstore.import_turns_v3(p_session_id, p_first_seq, p_messages, p_tokens,
                                             p_bytes, p_keys, p_at, p_budget_tokens,
                                             p_budget_bytes, p_interval, p_origin, 0);
$function$;
