CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v1(r shardstore.artifact_refs)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume, r.expires_at);
END
$function$;
