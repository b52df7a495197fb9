-- Whether row security is on for every table enable_rls_v2 covers.
CREATE OR REPLACE FUNCTION shardstore.rls_enabled_v2()
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT bool_and(c.relrowsecurity)
      FROM pg_class c
     WHERE c.oid IN (SELECT r_table FROM shardstore.rls_tables()
                     UNION ALL SELECT r_table FROM shardstore.rls_partition_tables())
$function$;
