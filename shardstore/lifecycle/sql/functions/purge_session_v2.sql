-- purge_session_data, and the artifacts the session ever referenced (its links and its
-- references, read under the session lock that every reference naming the session waits
-- for) queued for erasure in the same transaction. Only rows of the session's own tenant
-- are read: a row a tenant wrote naming another tenant's session queues nothing there.
CREATE OR REPLACE FUNCTION shardstore.purge_session_v2(p_session_id uuid, p_dry_run boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_tenant text;
    v_now    timestamptz;
BEGIN
    IF p_dry_run THEN
        RETURN shardstore.purge_session_data(p_session_id, true);
    END IF;
    SELECT x.tenant_id INTO v_tenant FROM shardstore.sessions x
     WHERE x.session_id = p_session_id FOR UPDATE;
    IF FOUND THEN
        v_now := clock_timestamp();
        INSERT INTO shardstore.artifact_erasures (tenant_id, artifact_id, queued_at)
        SELECT v_tenant, x.artifact_id, v_now
          FROM (SELECT l.artifact_id FROM shardstore.artifact_links l
                 WHERE l.tenant_id = v_tenant AND l.session_id = p_session_id
                UNION
                SELECT r.artifact_id FROM shardstore.artifact_refs r
                 WHERE r.tenant_id = v_tenant AND r.session_id = p_session_id) x
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN shardstore.purge_session_data(p_session_id, false);
END
$function$;
