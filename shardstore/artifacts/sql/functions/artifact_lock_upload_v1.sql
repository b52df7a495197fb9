-- Locks the artifact row (p_tenant, p_artifact) FOR UPDATE for an object put and returns its
-- state (NULL when there is no row); the lock is held to the end of the caller's transaction.
-- PL/pgSQL because Citus cannot plan a LANGUAGE sql function's parameters.
CREATE OR REPLACE FUNCTION shardstore.artifact_lock_upload_v1(p_tenant text, p_artifact uuid)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_state text;
BEGIN
    SELECT a.state INTO v_state FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    RETURN v_state;
END
$function$;
