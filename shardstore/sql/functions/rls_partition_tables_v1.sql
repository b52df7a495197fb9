CREATE OR REPLACE FUNCTION shardstore.rls_partition_tables_v1()
 RETURNS SETOF regclass
 LANGUAGE sql
 STABLE
AS $function$ SELECT r_table FROM shardstore.rls_partition_tables_v2() $function$;
