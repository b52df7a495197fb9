CREATE OR REPLACE FUNCTION shardstore.artifact_has_live_ref(p_tenant text, p_artifact uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
                      AND shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume,
                                                          r.expires_at));
END
$function$;
