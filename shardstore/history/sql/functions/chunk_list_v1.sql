-- The chunks chunk_seq >= newest - p_last + 1 (all with p_last NULL) of a session that is
-- not a fork, oldest first, each chunk's folded and buffered parts summed (what
-- history.chunks() computes from its four statements); one row with r_fork true and nothing
-- else for a fork. SS404 / SS410 for an unknown / purged session.
CREATE OR REPLACE FUNCTION shardstore.chunk_list_v1(p_session_id uuid, p_last bigint)
 RETURNS TABLE(r_fork boolean, r_chunk_seq bigint, r_first_turn_seq bigint, r_turn_count integer, r_token_count bigint, r_byte_count bigint, r_chunk_start timestamp with time zone, r_chunk_end timestamp with time zone, r_is_open boolean, r_partition text)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    s          shardstore.sessions%ROWTYPE;
    v_newest   bigint;
    v_first    bigint;
    v_seqs     bigint[];
    v_starts   timestamptz[];
    v_interval interval;
    v_origin   timestamptz;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        r_fork := true;
        RETURN NEXT;
        RETURN;
    END IF;
    v_newest := CASE WHEN s.open_turns > 0 THEN s.open_chunk_seq ELSE s.open_chunk_seq - 1 END;
    v_first := CASE WHEN p_last IS NULL THEN 0 ELSE greatest(0, v_newest - p_last + 1) END;
    IF v_newest < v_first THEN
        RETURN;
    END IF;
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    SELECT c.partition_interval, c.partition_origin INTO v_interval, v_origin FROM shardstore.config c;
    SELECT array_agg(m.chunk_seq), array_agg(DISTINCT m.chunk_start) INTO v_seqs, v_starts
      FROM shardstore.chunk_map m
     WHERE m.session_id = p_session_id AND m.chunk_seq >= v_first AND m.chunk_seq <= v_newest;
    -- EXECUTE: planned with the keys' values, so only their partitions are planned and
    -- locked (a generic plan over agent_history locks every partition at each call)
    RETURN QUERY EXECUTE $q$
    WITH f AS (
        SELECT h.chunk_seq, h.first_turn_seq, h.turn_count, h.token_count, h.byte_count,
               h.chunk_start, h.chunk_end
          FROM shardstore.agent_history h
         WHERE h.session_id = $1 AND h.chunk_seq = ANY ($2) AND h.chunk_start = ANY ($3)
    ), b AS (
        SELECT t.chunk_seq, min(t.turn_seq) AS first_turn_seq, count(*)::integer AS turn_count,
               sum(t.tokens)::bigint AS token_count, sum(t.bytes)::bigint AS byte_count,
               min(t.created_at) AS chunk_start, max(t.created_at) AS chunk_end
          FROM shardstore.turn_buffer t
         WHERE t.session_id = $1 AND t.chunk_seq >= $4 AND t.chunk_seq <= $5
         GROUP BY t.chunk_seq
    )
    SELECT false,
           coalesce(f.chunk_seq, b.chunk_seq),
           coalesce(f.first_turn_seq, b.first_turn_seq),
           coalesce(f.turn_count, 0) + coalesce(b.turn_count, 0),
           coalesce(f.token_count, 0) + coalesce(b.token_count, 0),
           coalesce(f.byte_count, 0) + coalesce(b.byte_count, 0),
           coalesce(f.chunk_start, b.chunk_start),
           coalesce(b.chunk_end, f.chunk_end),
           $6 > 0 AND coalesce(f.chunk_seq, b.chunk_seq) = $7,
           CASE WHEN f.chunk_seq IS NOT NULL
                THEN shardstore.maint_partition_name_v1(date_bin($8, f.chunk_start, $9))
           END
      FROM f FULL JOIN b ON b.chunk_seq = f.chunk_seq
     ORDER BY 2
    $q$ USING p_session_id, v_seqs, v_starts, v_first, v_newest, s.open_turns,
              s.open_chunk_seq, v_interval, v_origin;
END
$function$;
