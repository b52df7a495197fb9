-- The LangGraph checkpointer's get_tuple in one round trip.
--
-- langgraph_get_v1 reads, in one statement and so one snapshot (a STABLE function's
-- queries all see the snapshot of the statement that calls it), what would otherwise take a
-- repeatable-read transaction of three statements: the checkpoint (the one named, else the
-- newest of its namespace), its pending writes in LangGraph's order, and the session's head
-- (the turn count, the last append's time, whether it was purged, and the first turn still
-- stored along its lineage, as the lg_head statement computes it). The saver answers from
-- its copy of the session's turns when that copy's head is the one read here; otherwise it
-- reads the turns in a snapshot of its own (the uncommon path: a saver that has not seen the
-- thread yet, or another writer moved the session).
--
-- No row: the session does not exist. A row with r_checkpoint_id NULL: no such checkpoint.
CREATE OR REPLACE FUNCTION shardstore.langgraph_get_v1(p_session_id uuid, p_ns text, p_checkpoint_id text)
 RETURNS TABLE(r_turns bigint, r_last_at timestamp with time zone, r_purged boolean, r_first bigint, r_checkpoint_id text, r_parent_id text, r_state text, r_metadata text, r_task_ids text[], r_channels text[], r_types text[], r_values bytea[])
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    SELECT s.next_turn_seq, s.last_turn_at, s.purged_at IS NOT NULL
      INTO r_turns, r_last_at, r_purged
      FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_checkpoint_id IS NULL THEN
        SELECT g.checkpoint_id, g.parent_id, c.state::text, c.metadata::text
          INTO r_checkpoint_id, r_parent_id, r_state, r_metadata
          FROM shardstore.langgraph_checkpoints g
          JOIN shardstore.checkpoints c
            ON c.session_id = g.session_id AND c.checkpoint_id = g.shard_id
         WHERE g.session_id = p_session_id AND g.checkpoint_ns = p_ns
         ORDER BY g.checkpoint_id DESC
         LIMIT 1;
    ELSE
        SELECT g.checkpoint_id, g.parent_id, c.state::text, c.metadata::text
          INTO r_checkpoint_id, r_parent_id, r_state, r_metadata
          FROM shardstore.langgraph_checkpoints g
          JOIN shardstore.checkpoints c
            ON c.session_id = g.session_id AND c.checkpoint_id = g.shard_id
         WHERE g.session_id = p_session_id AND g.checkpoint_ns = p_ns
           AND g.checkpoint_id = p_checkpoint_id;
    END IF;
    IF r_checkpoint_id IS NULL THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT array_agg(w.task_id ORDER BY w.task_path, w.task_id, w.idx),
           array_agg(w.channel ORDER BY w.task_path, w.task_id, w.idx),
           array_agg(w.value_type ORDER BY w.task_path, w.task_id, w.idx),
           array_agg(w.value ORDER BY w.task_path, w.task_id, w.idx)
      INTO r_task_ids, r_channels, r_types, r_values
      FROM shardstore.langgraph_writes w
     WHERE w.session_id = p_session_id AND w.checkpoint_ns = p_ns
       AND w.checkpoint_id = r_checkpoint_id;
    -- range purges and retention remove a prefix of the turns: the saver's copy of them
    -- starts at the first turn still stored
    SELECT coalesce(min(f.first), r_turns) INTO r_first
      FROM (SELECT (SELECT m.first_turn_seq FROM shardstore.chunk_map m
                     WHERE m.session_id = g.r_session_id AND m.chunk_seq >= g.r_chunk_lo
                       AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)
                     ORDER BY m.chunk_seq LIMIT 1) AS first
              FROM shardstore.fork_segments_v1(p_session_id) g
            UNION ALL
            SELECT (SELECT min(b.turn_seq) FROM shardstore.turn_buffer b
                     WHERE b.session_id = g.r_session_id AND b.chunk_seq >= g.r_chunk_lo
                       AND (g.r_chunk_hi IS NULL OR b.chunk_seq < g.r_chunk_hi)
                       AND (g.r_turn_hi IS NULL OR b.turn_seq <= g.r_turn_hi))
              FROM shardstore.fork_segments_v1(p_session_id) g) f;
    RETURN NEXT;
END
$function$;
