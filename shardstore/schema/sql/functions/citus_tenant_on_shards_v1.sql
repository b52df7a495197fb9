-- The two settings a distributed store needs; each returns whether it changed something.
-- rls_tenant_v2(), which the policies call on the shards, reads the reference table of role
-- bindings there: a nested query Citus refuses unless the function allows it (and then it
-- is a plain call, not inlined).
CREATE OR REPLACE FUNCTION shardstore.citus_tenant_on_shards_v1()
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc
                WHERE oid = 'shardstore.rls_tenant_v2()'::regprocedure
                  AND 'citus.allow_nested_distributed_execution=on' = ANY (proconfig)) THEN
        RETURN false;
    END IF;
    ALTER FUNCTION shardstore.rls_tenant_v2() SET citus.allow_nested_distributed_execution = on;
    RETURN true;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.citus_tenant_on_shards_v1() FROM PUBLIC;
