-- Stores a chunk's summary if the chunk is still what was summarised. 'gone': the chunk no
-- longer exists (its queue row is deleted). 'changed' (stores nothing): its first turn, count
-- or end differ, a writer holds its row (SKIP LOCKED), the session is purged or missing, the
-- chunk is not sealed yet or still has buffered turns (a fold will add to it). Else the
-- summary is upserted, the queue row deleted: 'stored'. The chunk row stays locked FOR SHARE
-- to commit, so it cannot change under the summary. The time is a variable, not now() in ON
-- CONFLICT DO UPDATE SET: Citus requires IMMUTABLE functions there.
CREATE OR REPLACE FUNCTION shardstore.summary_insert(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamp with time zone, p_first bigint, p_count integer, p_end timestamp with time zone, p_summary text, p_tokens integer, p_model text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ok     boolean;
    v_tenant text;
    v_open   bigint;
    v_now    timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM shardstore.agent_history h
                    WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq
                      AND h.chunk_start = p_chunk_start) THEN
        DELETE FROM shardstore.summary_queue q
         WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
        RETURN 'gone';
    END IF;
    SELECT true INTO v_ok FROM shardstore.agent_history h
     WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq AND h.chunk_start = p_chunk_start
       AND h.first_turn_seq = p_first AND h.turn_count = p_count AND h.chunk_end = p_end
       FOR SHARE SKIP LOCKED;
    SELECT x.tenant_id, x.open_chunk_seq INTO v_tenant, v_open FROM shardstore.sessions x
     WHERE x.session_id = p_session_id AND x.purged_at IS NULL;
    IF v_ok IS NOT TRUE OR v_tenant IS NULL OR v_open <= p_chunk_seq
       OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                   WHERE b.session_id = p_session_id AND b.chunk_seq = p_chunk_seq) THEN
        RETURN 'changed';
    END IF;
    v_now := now();
    INSERT INTO shardstore.chunk_summaries AS c
           (session_id, chunk_seq, tenant_id, chunk_start, first_turn_seq, last_turn_seq,
            summary, tokens, model, created_at)
    VALUES (p_session_id, p_chunk_seq, v_tenant, p_chunk_start, p_first, p_first + p_count - 1,
            p_summary, p_tokens, p_model, v_now)
    ON CONFLICT (session_id, chunk_seq) DO UPDATE
       SET tenant_id = EXCLUDED.tenant_id, chunk_start = EXCLUDED.chunk_start,
           first_turn_seq = EXCLUDED.first_turn_seq, last_turn_seq = EXCLUDED.last_turn_seq,
           summary = EXCLUDED.summary, tokens = EXCLUDED.tokens, model = EXCLUDED.model,
           created_at = EXCLUDED.created_at;
    DELETE FROM shardstore.summary_queue q
     WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
    RETURN 'stored';
END
$function$;
