-- restore(n | max_tokens) and checkpoints() in one round trip each.
--
-- restore_window_v2 reads, in one statement and so one snapshot (a STABLE function's
-- queries all see the snapshot of the statement that calls it), what would otherwise take a
-- repeatable-read transaction of five statements: the session's head, the checkpoint (the
-- newest, or the one named), the window of turns up to its position (tail_at_v1, newest
-- first, as tail_window's JSON array), the message of the turn just before the window
-- (plans.trim_tail looks at it when the window opens on a Responses item), and whether
-- artifacts are linked to the checkpoint (restore() then reads them in a snapshot of its
-- own, the uncommon path), and the session's rewind epochs (an encrypted store checks each
-- sealed turn's epoch against them: read here, they cost no statement of their own).
CREATE OR REPLACE FUNCTION shardstore.restore_window_v2(p_session_id uuid, p_checkpoint_id uuid, p_n integer, p_max_tokens bigint)
 RETURNS TABLE(r_found boolean, r_turn_count bigint, r_checkpoint_id uuid, r_turn_seq bigint, r_sub_step integer, r_parent_id uuid, r_created_at timestamp with time zone, r_state text, r_tool_calls text, r_tool_results text, r_metadata text, r_window text, r_before text, r_has_artifacts boolean, r_rewind_epochs bigint[])
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_count  bigint;
    v_purged boolean;
    v_upto   bigint;
    v_first  bigint;
    c        record;
BEGIN
    SELECT s.next_turn_seq, s.purged_at IS NOT NULL, s.rewind_epochs
      INTO v_count, v_purged, r_rewind_epochs
      FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF v_purged THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF p_checkpoint_id IS NULL THEN
        SELECT k.* INTO c FROM shardstore.checkpoints k
         WHERE k.session_id = p_session_id ORDER BY k.seq DESC LIMIT 1;
    ELSE
        SELECT k.* INTO c FROM shardstore.checkpoints k
         WHERE k.session_id = p_session_id AND k.checkpoint_id = p_checkpoint_id;
        IF NOT FOUND THEN
            RETURN QUERY SELECT false, v_count, NULL::uuid, NULL::bigint, NULL::integer,
                                NULL::uuid, NULL::timestamptz, NULL::text, NULL::text,
                                NULL::text, NULL::text, NULL::text, NULL::text, false,
                                r_rewind_epochs;
            RETURN;
        END IF;
    END IF;
    v_upto := CASE WHEN c.checkpoint_id IS NULL THEN v_count - 1 ELSE c.turn_seq END;
    r_window := NULL;
    SELECT '[' || string_agg('[' || t.r_turn_seq || ',' || t.r_chunk_seq || ',' || t.r_tokens
                             || ',' || (extract(epoch FROM t.r_created_at) * 1000000)::bigint
                             || ',' || CASE WHEN t.r_key IS NULL THEN 'null'
                                            ELSE to_json(t.r_key)::text END
                             || ',' || t.r_message::text || ']', ','
                             ORDER BY t.r_turn_seq DESC) || ']',
           min(t.r_turn_seq)
      INTO r_window, v_first
      FROM shardstore.tail_at_v1(p_session_id, v_upto, p_n, p_max_tokens) t;
    r_before := NULL;
    IF v_first > 0 THEN
        SELECT t.r_message::text INTO r_before
          FROM shardstore.tail_at_v1(p_session_id, v_first - 1, 1, NULL) t;
    END IF;
    r_has_artifacts := c.checkpoint_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM shardstore.artifact_refs a
         WHERE a.session_id = p_session_id AND a.owner_type = 'checkpoint'
           AND a.owner_id = c.checkpoint_id::text);
    r_found := true;
    r_turn_count := v_count;
    r_checkpoint_id := c.checkpoint_id;
    r_turn_seq := c.turn_seq;
    r_sub_step := c.sub_step;
    r_parent_id := c.parent_id;
    r_created_at := c.created_at;
    r_state := c.state::text;
    r_tool_calls := c.tool_calls::text;
    r_tool_results := c.tool_results::text;
    r_metadata := c.metadata::text;
    RETURN NEXT;
END
$function$;
