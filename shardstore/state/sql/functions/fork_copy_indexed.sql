-- Turns p_first..p_last of (p_session, p_chunk) at p_start were copied there (a fork's
-- copy-on-write): writes their text windows (current configuration; none when off) and
-- queues the chunk for a summary. Called by the function that writes copy records (no
-- trigger: Citus distributes no table with one). The configuration is read once, into a
-- variable: text_config_v1 is VOLATILE, so inside the statement it would run for every turn.
CREATE OR REPLACE FUNCTION shardstore.fork_copy_indexed(p_session uuid, p_chunk bigint, p_start timestamp with time zone, p_first bigint, p_last bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_config regconfig := shardstore.text_config_v1();
BEGIN
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows(v_config, e.v->'m') w
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
       AND (e.v->>'s')::bigint BETWEEN p_first AND p_last
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, statement_timestamp(), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
    ON CONFLICT DO NOTHING;
END
$function$;
