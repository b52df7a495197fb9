-- Rewind a session to its first p_to turns: the turns at or after p_to go (rewind_turns), a
-- fork that shares them gets its own copies first (fork_cow), a fork rewound to before its
-- fork point reads its parent's chunks again, and the artifacts of the turn and checkpoint
-- refs it deletes (those at or after p_to, read under the session lock, which every turn or
-- checkpoint reference takes too) are marked when left without a live reference. A rewind that
-- removes turns starts a new rewind epoch (sessions.rewind_epochs) in its own transaction:
-- encrypted turns are sealed for their epoch, so a ciphertext of a removed turn written back at
-- the position it freed no longer opens.
CREATE OR REPLACE FUNCTION shardstore.rewind_v3(p_session_id uuid, p_to bigint)
 RETURNS TABLE(r_status text, r_removed bigint, r_turns bigint, r_first bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_ids   uuid[];
    v_owner uuid;
    v_chunk bigint;
    v_epochs bigint[];
    v_kept  integer := 0;
    t       record;
    d       record;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    SELECT coalesce(array_agg(DISTINCT r.artifact_id), '{}') INTO v_ids
      FROM shardstore.artifact_refs r
     WHERE r.tenant_id = s.tenant_id AND r.session_id = p_session_id AND r.turn_seq >= p_to;
    IF p_to IS NULL OR p_to < 0 OR p_to >= s.next_turn_seq THEN
        -- nothing to remove: rewind_turns says why
        RETURN QUERY SELECT * FROM shardstore.rewind_turns(p_session_id, p_to);
    ELSE
        PERFORM shardstore.fork_cow(p_session_id, p_to);
        IF s.fork_parent IS NULL OR p_to > s.fork_at THEN
            SELECT * INTO r_status, r_removed, r_turns, r_first
              FROM shardstore.rewind_turns(p_session_id, p_to);
            RETURN NEXT;
            FOR d IN DELETE FROM shardstore.fork_copies f
                      WHERE f.session_id = p_session_id AND f.first_turn_seq >= p_to
                  RETURNING f.* LOOP
                PERFORM shardstore.fork_copy_unindexed(d.session_id, d.chunk_seq, d.chunk_start,
                                                       d.first_turn_seq, d.last_turn_seq);
            END LOOP;
            UPDATE shardstore.fork_copies f SET last_turn_seq = p_to - 1
             WHERE f.session_id = p_session_id AND f.last_turn_seq >= p_to;
        ELSE
            -- a fork rewound to or before its fork point: its own turns go, and it reads the
            -- chunks of whichever ancestor holds turn p_to - 1 from there on
            PERFORM shardstore.rewind_turns(p_session_id, s.fork_at + 1);
            FOR t IN SELECT * FROM shardstore.purge_targets pt
                      WHERE NOT pt.builtin AND pt.turn_column IS NOT NULL
                      ORDER BY pt.position, pt.table_name::text LOOP
                EXECUTE format('DELETE FROM %s x WHERE x.%I = $1 AND x.%I >= $2',
                               t.table_name, t.session_column, t.turn_column)
                  USING p_session_id, p_to;
            END LOOP;
            FOR d IN DELETE FROM shardstore.fork_copies f WHERE f.session_id = p_session_id
                  RETURNING f.* LOOP
                PERFORM shardstore.fork_copy_unindexed(d.session_id, d.chunk_seq, d.chunk_start,
                                                       d.first_turn_seq, d.last_turn_seq);
            END LOOP;
            SELECT o.r_owner, o.r_chunk_seq INTO v_owner, v_chunk
              FROM shardstore.fork_chunk_of_v1(p_session_id, p_to - 1) o;
            UPDATE shardstore.sessions x
               SET fork_parent = v_owner, fork_at = CASE WHEN v_owner IS NOT NULL THEN p_to - 1 END,
                   fork_chunk = v_chunk + 1, next_turn_seq = p_to,
                   open_chunk_seq = coalesce(v_chunk + 1, 0), open_chunk_start = NULL,
                   open_turns = 0, open_tokens = 0, open_bytes = 0
             WHERE x.session_id = p_session_id;
            r_status := 'ok';
            r_removed := s.next_turn_seq - p_to;
            r_turns := p_to;
            RETURN NEXT;
        END IF;
    END IF;
    IF r_status = 'ok' AND r_removed > 0 THEN
        -- a new rewind epoch: the pairs (cut, epoch) with a cut at or above p_to are no
        -- longer standing (every turn they described is gone), and turns from p_to on are
        -- written in the new epoch; the cuts ascend, so the pairs kept are a prefix
        v_epochs := s.rewind_epochs;
        WHILE v_kept < coalesce(cardinality(v_epochs), 0) AND v_epochs[v_kept + 1] < p_to LOOP
            v_kept := v_kept + 2;
        END LOOP;
        UPDATE shardstore.sessions x
           SET rewind_epochs = v_epochs[1:v_kept]
                               || ARRAY[p_to, coalesce(v_epochs[cardinality(v_epochs)], 0) + 1]
         WHERE x.session_id = p_session_id;
    END IF;
    IF cardinality(v_ids) > 0 THEN
        PERFORM shardstore.artifacts_released_v1(array_fill(s.tenant_id, ARRAY[cardinality(v_ids)]),
                                                 v_ids);
    END IF;
END
$function$;
