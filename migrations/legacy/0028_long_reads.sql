-- 0028: the newest chunks of a long session in one statement each (issue 14 goal 6).
--
-- chunks(last=N) took four statements in a snapshot transaction (session_get,
-- chunk_map_since, buffer_chunks, chunk_meta) and history(from_seq) five (session_get,
-- chunk_map_from, buffer_turns, chunk_texts per 16 chunks): the scale run read the last 10
-- chunks of a 50,000-turn session in 12 round trips, 43 ms on a loaded machine. Each call is
-- now one STABLE function (one statement: one snapshot, no transaction to open) for a
-- session that is not a fork; a fork, or a history range over more folded chunks than the
-- caller takes in one go, gets a marker row and the caller reads it the general way.
--
-- Both read the partition keys from chunk_map before touching agent_history, then read
-- agent_history by EXECUTE with those keys, planned with their values: only the partitions
-- holding the chunks are planned and locked. (A first version ran static statements under
-- force_generic_plan, as tail_v1 does: the scale run at 0.01 read the last 10 chunks in
-- 90 ms under heavy load, 5x the 12 round trips: most likely because a generic plan over
-- a partitioned table locks every partition at executor startup, pruned ones too.)

-- The chunks chunk_seq >= newest - p_last + 1 (all with p_last NULL) of a session that is
-- not a fork, oldest first, each chunk's folded and buffered parts summed (what
-- history.chunks() computes from its four statements); one row with r_fork true and nothing
-- else for a fork. SS404 / SS410 for an unknown / purged session.
CREATE FUNCTION shardstore.chunk_list_v1(p_session_id uuid, p_last bigint)
RETURNS TABLE (r_fork boolean, r_chunk_seq bigint, r_first_turn_seq bigint,
               r_turn_count integer, r_token_count bigint, r_byte_count bigint,
               r_chunk_start timestamptz, r_chunk_end timestamptz, r_is_open boolean,
               r_partition text)
LANGUAGE plpgsql
STABLE
AS $$
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
$$;

-- The turns p_lo <= turn_seq < p_hi (p_hi NULL: to the end) of a session that is not a
-- fork, as the folded chunks that hold them (r_kind 'chunk': r_chunk_seq and r_text, the
-- chunk's envelopes as JSON text, whole) and the buffered turns (r_kind 'turn'), unordered;
-- no row when the range is empty. One marker row instead, r_kind 'fork' for a fork or
-- 'long' when the range spans more than p_max_chunks folded chunks: the caller streams those
-- the general way. SS404 / SS410 for an unknown / purged session.
CREATE FUNCTION shardstore.history_range_v1(p_session_id uuid, p_lo bigint, p_hi bigint,
                                            p_max_chunks integer)
RETURNS TABLE (r_kind text, r_chunk_seq bigint, r_text text, r_turn_seq bigint,
               r_tokens integer, r_created_at timestamptz, r_key text, r_message text)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_end    bigint;
    v_from   bigint;
    v_seqs   bigint[];
    v_starts timestamptz[];
    v_n      integer;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        r_kind := 'fork';
        RETURN NEXT;
        RETURN;
    END IF;
    v_end := CASE WHEN p_hi IS NULL THEN s.next_turn_seq ELSE least(p_hi, s.next_turn_seq) END;
    IF p_lo >= v_end THEN
        RETURN;
    END IF;
    -- the folded chunk holding p_lo (or the first one left), up to the last one starting
    -- before the end: p_max_chunks + 1 at most, to tell a long range
    v_from := coalesce((SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.first_turn_seq <= p_lo), 0);
    SELECT array_agg(k.chunk_seq), array_agg(DISTINCT k.chunk_start), count(*)
      INTO v_seqs, v_starts, v_n
      FROM (SELECT m.chunk_seq, m.chunk_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session_id AND m.chunk_seq >= v_from
               AND m.first_turn_seq < v_end
             ORDER BY m.chunk_seq
             LIMIT p_max_chunks + 1) k;
    IF v_n > p_max_chunks THEN
        r_kind := 'long';
        RETURN NEXT;
        RETURN;
    END IF;
    -- EXECUTE: planned with the keys' values (as in chunk_list_v1)
    RETURN QUERY EXECUTE $q$
    SELECT 'chunk'::text, h.chunk_seq, h.conversation_chunk::text, NULL::bigint, NULL::integer,
           NULL::timestamptz, NULL::text, NULL::text
      FROM shardstore.agent_history h
     WHERE h.session_id = $1 AND h.chunk_seq = ANY ($2) AND h.chunk_start = ANY ($3)
    $q$ USING p_session_id, v_seqs, v_starts;
    RETURN QUERY
    SELECT 'turn'::text, b.chunk_seq, NULL::text, b.turn_seq, b.tokens, b.created_at,
           b.idempotency_key, b.message::text
      FROM shardstore.turn_buffer b
     WHERE b.session_id = p_session_id AND b.turn_seq >= p_lo AND b.turn_seq < v_end;
END
$$;
