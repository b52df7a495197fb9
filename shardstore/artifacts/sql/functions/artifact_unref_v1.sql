-- unref_artifact: one reference removed (true if it existed), its artifact marked when that
-- was its last live one. The artifact row is locked first, as artifact_ref_v1 locks it
-- before it writes the reference: an unref and a ref of the same pair never deadlock.
CREATE OR REPLACE FUNCTION shardstore.artifact_unref_v1(p_tenant text, p_artifact uuid, p_owner_type text, p_owner_id text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM 1 FROM shardstore.artifacts a
      WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    DELETE FROM shardstore.artifact_refs r
     WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
       AND r.owner_type = p_owner_type AND r.owner_id = p_owner_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM shardstore.artifacts_released_v1(ARRAY[p_tenant], ARRAY[p_artifact]);
    RETURN true;
END
$function$;
