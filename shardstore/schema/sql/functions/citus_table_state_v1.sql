-- How Citus holds p_rel: r_method 'h' (hash-distributed, by r_column), 'n' (reference), 's'
-- / 'l' (other); no row when Citus does not hold it (or is not installed).
CREATE OR REPLACE FUNCTION shardstore.citus_table_state_v1(p_rel regclass)
 RETURNS TABLE(r_method text, r_column text)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT p.partmethod::text, column_to_column_name(p.logicalrelid, p.partkey)::text
           FROM pg_dist_partition p WHERE p.logicalrelid = $1'
        USING p_rel;
END
$function$;
