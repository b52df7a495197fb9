-- Queued erasures of one tenant (NULL: every tenant the caller sees).
CREATE OR REPLACE FUNCTION shardstore.artifact_erasures_v1(p_tenant text, p_batch integer)
 RETURNS TABLE(r_tenant text, r_artifact uuid)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
        SELECT e.tenant_id, e.artifact_id FROM shardstore.artifact_erasures e
         WHERE p_tenant IS NULL OR e.tenant_id = p_tenant
         ORDER BY e.tenant_id, e.artifact_id
         LIMIT p_batch;
END
$function$;
