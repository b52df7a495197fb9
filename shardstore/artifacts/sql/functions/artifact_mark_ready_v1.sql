-- The last step of an object put: locks the artifact row FOR UPDATE while it is 'uploading',
-- then makes it 'ready', unreferenced since the clock read after the lock (its grace starts
-- when it becomes ready). Returns false when the row is gone or no longer uploading. The
-- clock is a variable, not clock_timestamp() in the UPDATE, because Citus refuses volatile
-- functions in DML.
CREATE OR REPLACE FUNCTION shardstore.artifact_mark_ready_v1(p_tenant text, p_artifact uuid)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM 1 FROM shardstore.artifacts a
      WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'uploading'
        FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := clock_timestamp();
    UPDATE shardstore.artifacts a SET state = 'ready', unreferenced_since = v_now
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'uploading';
    RETURN FOUND;
END
$function$;
