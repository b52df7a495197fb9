-- Up to p_batch artifacts in state 'deleting' (of p_tenant, or of every tenant when NULL),
-- ordered by (tenant, artifact), with each row's sha256: the caller derives the object's key
-- from (tenant, sha256) itself and never uses the stored object_key, which a tenant role can
-- write. Reads only, no lock. PL/pgSQL because Citus cannot plan a LANGUAGE sql function's
-- parameters.
CREATE OR REPLACE FUNCTION shardstore.artifacts_deleting_v2(p_tenant text, p_batch integer)
 RETURNS TABLE(r_tenant text, r_artifact uuid, r_backend text, r_sha256 text, r_size bigint)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
        SELECT a.tenant_id, a.artifact_id, a.backend, a.sha256, a.size_bytes
          FROM shardstore.artifacts a
         WHERE a.state = 'deleting' AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
         ORDER BY a.tenant_id, a.artifact_id
         LIMIT p_batch;
END
$function$;
