-- Creates a fork of p_source at turn p_at (NULL: its last turn now; -1: nothing inherited)
-- or at checkpoint p_checkpoint's position, as session p_new with the source's owners and
-- p_metadata. O(1) in the history length: one session row; the lineage is read at read
-- time. The source row is held FOR SHARE, so a rewind, purge or append of the source waits
-- for the fork or is seen by it. Returns a status instead of raising (the client raises
-- the typed error; nothing is written): ok, not_found, purged, no_checkpoint, below,
-- past_end, exists. r_turns: the source's turn count.
CREATE OR REPLACE FUNCTION shardstore.fork_v1(p_source uuid, p_at bigint, p_checkpoint uuid, p_new uuid, p_metadata jsonb)
 RETURNS TABLE(r_status text, r_at bigint, r_turns bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_at    bigint;
    v_owner uuid;
    v_chunk bigint;
    v_n     integer;
    v_link_at bigint;  -- the last turn the fork's link inherits
BEGIN
    SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_source FOR SHARE;
    IF NOT FOUND THEN
        r_status := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    r_turns := s.next_turn_seq;
    IF s.purged_at IS NOT NULL THEN
        r_status := 'purged';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_checkpoint IS NOT NULL THEN
        SELECT c.turn_seq INTO v_at FROM shardstore.checkpoints c
         WHERE c.session_id = p_source AND c.checkpoint_id = p_checkpoint;
        IF NOT FOUND THEN
            r_status := 'no_checkpoint';
            RETURN NEXT;
            RETURN;
        END IF;
    ELSE
        v_at := coalesce(p_at, s.next_turn_seq - 1);
    END IF;
    r_at := v_at;
    IF v_at < -1 THEN
        r_status := 'below';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_at >= s.next_turn_seq THEN
        r_status := 'past_end';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT o.r_owner, o.r_chunk_seq INTO v_owner, v_chunk
      FROM shardstore.fork_chunk_of_v1(p_source, v_at) o;
    v_link_at := v_at;
    IF v_owner IS NULL THEN
        -- the turn at the fork point is gone (erased with a purged fork in the lineage), but
        -- older turns of the view may remain: the fork inherits those
        SELECT o.r_owner, o.r_chunk_seq, o.r_turn_at INTO v_owner, v_chunk, v_link_at
          FROM shardstore.fork_below(p_source, v_at) o;
    END IF;
    INSERT INTO shardstore.sessions AS x
           (session_id, tenant_id, subject_id, agent_id, metadata, next_turn_seq, open_chunk_seq,
            last_turn_at, fork_parent, fork_at, fork_chunk, first_turn_seq)
    VALUES (p_new, s.tenant_id, s.subject_id, s.agent_id, p_metadata, v_at + 1,
            coalesce(v_chunk + 1, 0), s.last_turn_at, v_owner,
            CASE WHEN v_owner IS NOT NULL THEN v_link_at END, v_chunk + 1,
            least(s.first_turn_seq, v_at + 1))
    ON CONFLICT (session_id) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    r_status := CASE WHEN v_n = 1 THEN 'ok' ELSE 'exists' END;
    RETURN NEXT;
END
$function$;
