-- summary_insert, and when stored: the rendered message's tokens by the named counter.
CREATE OR REPLACE FUNCTION shardstore.summary_store_v2(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamp with time zone, p_first bigint, p_count integer, p_end timestamp with time zone, p_summary text, p_tokens integer, p_model text, p_message_tokens integer, p_counted_by text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_status text;
BEGIN
    v_status := shardstore.summary_insert(p_session_id, p_chunk_seq, p_chunk_start, p_first,
                                            p_count, p_end, p_summary, p_tokens, p_model);
    IF v_status = 'stored' THEN
        UPDATE shardstore.chunk_summaries c
           SET message_tokens = p_message_tokens, counted_by = p_counted_by
         WHERE c.session_id = p_session_id AND c.chunk_seq = p_chunk_seq;
    END IF;
    RETURN v_status;
END
$function$;
