-- Whether Citus holds p_rel as a distributed table (false without Citus).
CREATE OR REPLACE FUNCTION shardstore.is_distributed_v1(p_rel regclass)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_found boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1)'
           INTO v_found USING p_rel;
    END IF;
    RETURN v_found;
END
$function$;
