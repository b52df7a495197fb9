-- The sweep's mark phase, one batch, for p_tenant (NULL: every tenant, or the bound tenant
-- under row security, named so that Citus can route the statements to its shard). Up to
-- p_batch unmarked artifacts without a live ref are read unlocked and handed to
-- artifacts_released_v1, which locks each one on its own, checks again and marks it;
-- r_marked is how many it marked, or p_batch when the batch was full (the caller loops while
-- it gets p_batch). Then 'ready' artifacts marked but live again are unmarked (r_cleared).
CREATE OR REPLACE FUNCTION shardstore.artifacts_mark_v2(p_batch integer, p_tenant text)
 RETURNS TABLE(r_marked bigint, r_cleared bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_t text[];
    v_a uuid[];
    -- under row security a caller sees only its bound tenant's rows: naming that tenant
    -- changes no result and lets Citus route the statements to its shard (unnamed, the
    -- anti-join over policy-filtered tables is refused: "complex joins are only supported
    -- when all distributed tables are co-located and joined on their distribution columns")
    v_tenant text := CASE WHEN p_tenant IS NULL AND row_security_active('shardstore.artifacts')
                          THEN shardstore.rls_tenant_v2() ELSE p_tenant END;
    v_all    boolean := p_tenant IS NULL AND NOT row_security_active('shardstore.artifacts');
BEGIN
    SELECT coalesce(array_agg(x.tenant_id), '{}'), coalesce(array_agg(x.artifact_id), '{}')
      INTO v_t, v_a
      FROM (SELECT a.tenant_id, a.artifact_id FROM shardstore.artifacts a
             WHERE a.unreferenced_since IS NULL
               AND (v_all OR a.tenant_id = v_tenant)
               AND NOT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                                WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                                  AND shardstore.artifact_ref_live_v2(r.owner_type,
                                          r.required_for_resume, r.expires_at))
             LIMIT p_batch) x;
    r_marked := shardstore.artifacts_released_v1(v_t, v_a);
    -- the caller loops while a batch was full: a candidate found live again still counts
    IF cardinality(v_a) = p_batch AND r_marked < p_batch THEN
        r_marked := p_batch;
    END IF;
    UPDATE shardstore.artifacts a SET unreferenced_since = NULL
     WHERE a.unreferenced_since IS NOT NULL AND a.state = 'ready'
       AND (v_all OR a.tenant_id = v_tenant)
       AND EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                      AND shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume,
                                                          r.expires_at));
    GET DIAGNOSTICS r_cleared = ROW_COUNT;
    RETURN NEXT;
END
$function$;
