-- Adds (or widens) an owner's reference to a 'ready' artifact of p_tenant. The owner is
-- checked first and held FOR KEY SHARE to commit: a checkpoint of the tenant (its session
-- looked up unlocked, on any shard, when not given; the ref takes the checkpoint's turn), a
-- turn below its session's next_turn_seq, or a trajectory's session; a turn's or trajectory's
-- session must be the tenant's ('no_owner') and not purged ('purged'). Other owner types
-- name no session or turn. Then the artifact row is updated (unmarked, ever_referenced,
-- required OR-ed): a sweep holding it is waited for, and 'missing' is returned when no ready
-- row is left. The ref is upserted (required OR-ed, the later expiry, NULL: never), and a ref
-- naming a session links the session to the artifact in artifact_links for good (the link
-- stays when the ref goes). Returns 'ok'. The clock is a variable: Citus refuses
-- clock_timestamp() in DML.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_v1(p_tenant text, p_artifact uuid, p_owner_type text, p_owner_id text, p_session uuid, p_turn bigint, p_required boolean, p_expires timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_session uuid := p_session;
    v_turn    bigint := p_turn;
    v_next    bigint;
    v_tenant  text;
    v_purged  boolean;
    v_now     timestamptz;
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
    v_now := clock_timestamp();
    INSERT INTO shardstore.artifact_refs AS r
           (tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq,
            required_for_resume, expires_at, created_at)
    VALUES (p_tenant, p_artifact, p_owner_type, p_owner_id, v_session, v_turn, p_required,
            p_expires, v_now)
    ON CONFLICT (tenant_id, artifact_id, owner_type, owner_id) DO UPDATE
       SET required_for_resume = r.required_for_resume OR EXCLUDED.required_for_resume,
           expires_at = CASE WHEN r.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                             ELSE greatest(r.expires_at, EXCLUDED.expires_at) END;
    IF v_session IS NOT NULL THEN
        -- the session (checked above to be this tenant's, and locked) is linked for good
        INSERT INTO shardstore.artifact_links (tenant_id, session_id, artifact_id, linked_at)
        VALUES (p_tenant, v_session, p_artifact, v_now)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN 'ok';
END
$function$;
