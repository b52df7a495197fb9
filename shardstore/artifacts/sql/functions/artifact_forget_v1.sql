CREATE OR REPLACE FUNCTION shardstore.artifact_forget_v1(p_tenant text, p_artifact uuid)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM shardstore.artifact_refs r WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact;
    DELETE FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'deleting';
    RETURN FOUND;
END
$function$;
