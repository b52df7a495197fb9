-- The artifacts (p_tenants[i], p_artifacts[i]) lost references in this transaction: each
-- one left without a live reference is marked now (its grace starts). Rows are locked one
-- by one in key order (two callers never deadlock on them), the liveness read after the
-- lock, and the mark taken after it (clock_timestamp() as a value, not in the UPDATE: Citus
-- allows no volatile function in DML on a distributed table). Returns how many it marked.
CREATE OR REPLACE FUNCTION shardstore.artifacts_released_v1(p_tenants text[], p_artifacts uuid[])
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    x   record;
    v_n bigint := 0;
    v_at timestamptz;
BEGIN
    FOR x IN SELECT DISTINCT u.t, u.a FROM unnest(p_tenants, p_artifacts) AS u(t, a)
              WHERE u.t IS NOT NULL AND u.a IS NOT NULL
              ORDER BY u.t, u.a LOOP
        PERFORM 1 FROM shardstore.artifacts a
          WHERE a.tenant_id = x.t AND a.artifact_id = x.a FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN shardstore.artifact_has_live_ref(x.t, x.a);
        v_at := clock_timestamp();
        UPDATE shardstore.artifacts a SET unreferenced_since = v_at
         WHERE a.tenant_id = x.t AND a.artifact_id = x.a;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$function$;
