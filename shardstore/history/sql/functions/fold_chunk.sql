-- Folds one chunk: moves its buffered turns (p_session_id, p_chunk_seq) into agent_history at
-- p_chunk_start in one statement (deleted from turn_buffer, aggregated in turn order as the
-- chunk's envelopes {s, t, b, at, k, m}, appended to the chunk's row when a flush folded part
-- of it before) with the text windows of the turns not indexed yet; then the chunk_map row and
-- the chunk queued for embedding and a summary. Makes the partition if it is missing. Returns
-- the number of turns moved (0: none buffered, nothing written). Takes no session lock: its
-- callers hold the session row.
-- The turns already indexed (by a text pass over the buffer) are read into an array before
-- the statement, not joined inside it: on Citus the moved rows are an intermediate result,
-- and joining them to a second distributed table (turn_text) fails ("complex joins are only
-- supported when all distributed tables are co-located ..."). The read is one shard on Citus,
-- one hash partition of turn_text on plain PostgreSQL; a window inserted after it is still
-- caught by ON CONFLICT DO NOTHING.
CREATE OR REPLACE FUNCTION shardstore.fold_chunk(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_moved  integer;
    v_first  bigint;
    v_tenant text;
    v_now    timestamptz := now();
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    v_config regconfig := shardstore.text_config_v1();
    -- no turn of this chunk precedes the first turn of an earlier chunk: the buffer's primary
    -- key is scanned from there, not from the session's first (possibly dead) entry
    v_lo     bigint := coalesce((SELECT m.first_turn_seq FROM shardstore.chunk_map m
                                  WHERE m.session_id = p_session_id AND m.chunk_seq < p_chunk_seq
                                  ORDER BY m.chunk_seq DESC LIMIT 1), 0);
    v_indexed bigint[];
BEGIN
    -- the turns from v_lo on that already have windows, read before the statement: on Citus a
    -- modifying CTE's rows may not be joined to a second distributed table (turn_text) there
    SELECT coalesce(array_agg(DISTINCT t.turn_seq), '{}') INTO v_indexed
      FROM shardstore.turn_text t
     WHERE t.session_id = p_session_id AND t.turn_seq >= v_lo;
    -- on a Citus worker (a delegated call) this finds the partition made: it never runs DDL
    -- there unless the partition is missing, which the coordinator's premake prevents
    PERFORM shardstore.ensure_partition_v1(p_chunk_start);
    WITH moved AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = p_session_id AND b.turn_seq >= v_lo AND b.chunk_seq = p_chunk_seq
        RETURNING b.*
    ), folded AS (
        INSERT INTO shardstore.agent_history AS h
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, tenant_id, conversation_chunk)
        SELECT p_session_id, p_chunk_seq, p_chunk_start, max(m.created_at), min(m.turn_seq),
               count(*), sum(m.tokens), sum(m.bytes), min(m.tenant_id),
               jsonb_agg(
                   CASE WHEN m.idempotency_key IS NULL
                        THEN jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'm', m.message)
                        ELSE jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'k', m.idempotency_key,
                                                'm', m.message)
                   END ORDER BY m.turn_seq)
          FROM moved m
        HAVING count(*) > 0
        ON CONFLICT (session_id, chunk_seq, chunk_start) DO UPDATE
           SET conversation_chunk = h.conversation_chunk || EXCLUDED.conversation_chunk,
               chunk_end   = EXCLUDED.chunk_end,
               turn_count  = h.turn_count + EXCLUDED.turn_count,
               token_count = h.token_count + EXCLUDED.token_count,
               byte_count  = h.byte_count + EXCLUDED.byte_count
        RETURNING h.turn_count, h.first_turn_seq, h.tenant_id
    ), texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT m.session_id, m.turn_seq, w.r_window, m.chunk_seq, s.tenant_id, s.agent_id,
               m.created_at, w.r_tsv
          FROM moved m
          JOIN shardstore.sessions s ON s.session_id = m.session_id,
               LATERAL shardstore.text_windows(v_config, m.message) w
         -- a turn text_index_buffered_v1 indexed while it was buffered is not indexed again
         WHERE m.turn_seq <> ALL (v_indexed)
        ON CONFLICT DO NOTHING
    )
    SELECT f.turn_count, f.first_turn_seq, f.tenant_id INTO v_moved, v_first, v_tenant FROM folded f;
    IF v_moved IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_first, v_tenant)
    ON CONFLICT (session_id, chunk_seq) DO NOTHING;
    -- the chunk's content changed: (re-)embed it and summarise it again
    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    RETURN v_moved;
END
$function$;
