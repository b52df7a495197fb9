-- The switches and the grant of 0004/0005 named their tables; they now call the registry's.
CREATE OR REPLACE FUNCTION shardstore.rls_tables_v1()
 RETURNS TABLE(r_table regclass, r_tenant boolean)
 LANGUAGE sql
 STABLE
AS $function$ SELECT * FROM shardstore.rls_tables_v2() $function$;
