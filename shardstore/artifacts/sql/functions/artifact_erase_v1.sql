-- One queued erasure, in the caller's transaction. The artifact row is locked first (as a
-- reference locks it before writing: one committed before is seen by the liveness check
-- below, one after finds the row gone or 'deleting' and is refused), then:
--   'gone'      no such artifact;
--   'kept'      a live reference still needs it (another session's, or one of no session);
--   'deleted'   postgres backend: row, chunks and dead references deleted;
--   'deleting'  object backends: the row is 'deleting'; the caller removes the object and
--               then the row (artifact_lock_delete_v1, artifact_forget_v1), as a sweep does.
-- The entry goes in every case: what is left to do is the 'deleting' row itself.
CREATE OR REPLACE FUNCTION shardstore.artifact_erase_v1(p_tenant text, p_artifact uuid)
 RETURNS TABLE(r_status text, r_backend text, r_size bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_row shardstore.artifacts%ROWTYPE;
BEGIN
    DELETE FROM shardstore.artifact_erasures e
     WHERE e.tenant_id = p_tenant AND e.artifact_id = p_artifact;
    SELECT * INTO v_row FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    IF NOT FOUND THEN
        r_status := 'gone';
    ELSIF shardstore.artifact_has_live_ref(p_tenant, p_artifact) THEN
        r_status := 'kept';
    ELSIF v_row.backend = 'postgres' THEN
        DELETE FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
        DELETE FROM shardstore.artifact_chunks k
         WHERE k.tenant_id = p_tenant AND k.upload_id = v_row.upload_id;
        DELETE FROM shardstore.artifact_refs r
         WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact;
        r_status := 'deleted';
    ELSE
        UPDATE shardstore.artifacts a SET state = 'deleting'
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
        r_status := 'deleting';
    END IF;
    r_backend := v_row.backend;
    r_size := v_row.size_bytes;
    RETURN NEXT;
END
$function$;
