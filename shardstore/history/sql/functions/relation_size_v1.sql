-- The size of a table on disk (table, TOAST, indexes), wherever its rows are: on Citus the
-- coordinator's copy of a distributed table is empty and its shards hold the rows.
CREATE OR REPLACE FUNCTION shardstore.relation_size_v1(p_rel regclass)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_size bigint;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT citus_total_relation_size($1) FROM pg_dist_partition WHERE logicalrelid = $1'
           INTO v_size USING p_rel;
    END IF;
    RETURN coalesce(v_size, pg_total_relation_size(p_rel));
END
$function$;
