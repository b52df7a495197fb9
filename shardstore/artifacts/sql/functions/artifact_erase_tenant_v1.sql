-- After its sessions are purged, a tenant purge erases every artifact of the tenant: the
-- references that name no session (business outputs, trajectories of no session) are
-- deleted and every artifact queued. Returns how many were queued.
CREATE OR REPLACE FUNCTION shardstore.artifact_erase_tenant_v1(p_tenant text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n bigint;
BEGIN
    DELETE FROM shardstore.artifact_refs r WHERE r.tenant_id = p_tenant AND r.session_id IS NULL;
    INSERT INTO shardstore.artifact_erasures (tenant_id, artifact_id, queued_at)
    SELECT a.tenant_id, a.artifact_id, clock_timestamp()
      FROM shardstore.artifacts a WHERE a.tenant_id = p_tenant
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$function$;
