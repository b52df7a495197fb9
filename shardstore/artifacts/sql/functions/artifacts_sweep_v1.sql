-- The sweep, one batch of up to p_batch artifacts of p_tenant (NULL: every tenant, or the
-- bound tenant under row security, named like artifacts_mark_v2 does so that Citus routes to one
-- shard): marked before now - p_grace (and not before p_since when given), with no live ref,
-- 'ready' or 'uploading' (an object-backend upload only when an hour old: a dead client's PUT
-- can still land). Candidates are read unlocked, then each is locked FOR UPDATE SKIP LOCKED
-- and checked again: a postgres-backend row is deleted with its chunks and its expired refs
-- (r_deleted), another backend's becomes 'deleting' (its object is removed by the caller).
-- Row by row because Citus has no LIMIT ... FOR UPDATE SKIP LOCKED across shards. A dry run
-- lists the candidates and changes nothing.
CREATE OR REPLACE FUNCTION shardstore.artifacts_sweep_v1(p_grace interval, p_batch integer, p_tenant text, p_since timestamp with time zone, p_dry_run boolean)
 RETURNS TABLE(r_tenant text, r_artifact uuid, r_backend text, r_key text, r_size bigint, r_deleted boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_cutoff timestamptz := statement_timestamp() - p_grace;
    c        record;
    v_row    shardstore.artifacts%ROWTYPE;
    -- under row security, the bound tenant named (see artifacts_mark_v2)
    v_tenant text := CASE WHEN p_tenant IS NULL AND row_security_active('shardstore.artifacts')
                          THEN shardstore.rls_tenant_v2() ELSE p_tenant END;
    v_all    boolean := p_tenant IS NULL AND NOT row_security_active('shardstore.artifacts');
BEGIN
    FOR c IN SELECT a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes
               FROM shardstore.artifacts a
              WHERE a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
                AND (a.state = 'ready' OR a.backend = 'postgres'
                     OR a.created_at < statement_timestamp() - interval '1 hour')
                AND (v_all OR a.tenant_id = v_tenant)
                AND (p_since IS NULL OR a.unreferenced_since >= p_since)
                AND NOT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                                 WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                                   AND shardstore.artifact_ref_live_v2(r.owner_type,
                                           r.required_for_resume, r.expires_at))
              LIMIT p_batch LOOP
        IF p_dry_run THEN
            r_tenant := c.tenant_id; r_artifact := c.artifact_id; r_backend := c.backend;
            r_key := c.object_key; r_size := c.size_bytes; r_deleted := false;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO v_row FROM shardstore.artifacts a
         WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id
           AND a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
           AND (a.state = 'ready' OR a.backend = 'postgres'
                OR a.created_at < statement_timestamp() - interval '1 hour')
           AND (p_since IS NULL OR a.unreferenced_since >= p_since)
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN shardstore.artifact_has_live_ref(c.tenant_id, c.artifact_id);
        IF v_row.backend = 'postgres' THEN
            DELETE FROM shardstore.artifacts a
             WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id;
            DELETE FROM shardstore.artifact_chunks k
             WHERE k.tenant_id = c.tenant_id AND k.upload_id = v_row.upload_id;
            -- expired refs
            DELETE FROM shardstore.artifact_refs r
             WHERE r.tenant_id = c.tenant_id AND r.artifact_id = c.artifact_id;
            r_deleted := true;
        ELSE
            UPDATE shardstore.artifacts a SET state = 'deleting'
             WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id;
            r_deleted := false;
        END IF;
        r_tenant := v_row.tenant_id; r_artifact := v_row.artifact_id; r_backend := v_row.backend;
        r_key := v_row.object_key; r_size := v_row.size_bytes;
        RETURN NEXT;
    END LOOP;
END
$function$;
