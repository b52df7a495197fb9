CREATE OR REPLACE FUNCTION shardstore.artifact_lock_delete_v1(p_tenant text, p_artifact uuid)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_state text;
BEGIN
    SELECT a.state INTO v_state FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    RETURN coalesce(v_state = 'deleting', false);
END
$function$;
