-- 0033: a trajectory reference may name the session its span served
-- (attach_payload(..., session_id=...)), so that purging the session, or its subject, or
-- its tenant, removes the reference with the session's other rows and a GDPR purge deletes
-- the payload's bytes at once (issue 13: after purge_subject no table and no backend object
-- holds the subject's bytes). Such a reference has session_id and no turn_seq (the table's
-- CHECK allows it: only turn and checkpoint references carry both); rewinds and range purges
-- delete by turn and leave it; it still expires with trajectory_retention.
--
-- artifact_ref_v1 as in 0027, and for p_owner_type 'trajectory' with a session: the session
-- must exist in the tenant and not be purged (locked FOR KEY SHARE, as a turn's reference
-- locks it, so a purge waits for the reference or the reference sees the purge).
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_v1(
    p_tenant text, p_artifact uuid, p_owner_type text, p_owner_id text, p_session uuid,
    p_turn bigint, p_required boolean, p_expires timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_session uuid := p_session;
    v_turn    bigint := p_turn;
    v_next    bigint;
    v_tenant  text;
    v_purged  boolean;
BEGIN
    IF p_owner_type = 'checkpoint' THEN
        IF v_session IS NULL THEN  -- find its session first, unlocked (any shard)
            SELECT c.session_id INTO v_session FROM shardstore.checkpoints c
             WHERE c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant;
        END IF;
        SELECT c.session_id, c.turn_seq INTO v_session, v_turn FROM shardstore.checkpoints c
         WHERE c.session_id = v_session
           AND c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant
         FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN 'no_owner';
        END IF;
    ELSIF p_owner_type = 'turn' THEN
        SELECT s.tenant_id, s.next_turn_seq, s.purged_at IS NOT NULL INTO v_tenant, v_next, v_purged
          FROM shardstore.sessions s WHERE s.session_id = v_session FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant OR v_turn >= v_next THEN
            RETURN 'no_owner';
        END IF;
        IF v_purged THEN
            RETURN 'purged';
        END IF;
    ELSIF p_owner_type = 'trajectory' AND v_session IS NOT NULL THEN
        -- a payload of a span that served this session: it goes with the session's purge
        SELECT s.tenant_id, s.purged_at IS NOT NULL INTO v_tenant, v_purged
          FROM shardstore.sessions s WHERE s.session_id = v_session FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant THEN
            RETURN 'no_owner';
        END IF;
        IF v_purged THEN
            RETURN 'purged';
        END IF;
        v_turn := NULL;
    ELSE
        v_session := NULL;
        v_turn := NULL;
    END IF;
    UPDATE shardstore.artifacts a
       SET unreferenced_since = NULL, ever_referenced = true,
           required_for_resume = a.required_for_resume OR p_required
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'ready';
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    INSERT INTO shardstore.artifact_refs AS r
           (tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq,
            required_for_resume, expires_at, created_at)
    VALUES (p_tenant, p_artifact, p_owner_type, p_owner_id, v_session, v_turn, p_required,
            p_expires, clock_timestamp())
    ON CONFLICT (tenant_id, artifact_id, owner_type, owner_id) DO UPDATE
       SET required_for_resume = r.required_for_resume OR EXCLUDED.required_for_resume,
           expires_at = CASE WHEN r.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                             ELSE greatest(r.expires_at, EXCLUDED.expires_at) END;
    RETURN 'ok';
END
$$;
