CREATE OR REPLACE FUNCTION shardstore.disable_rls_v1()
 RETURNS SETOF text
 LANGUAGE sql
AS $function$ SELECT * FROM shardstore.disable_rls_v2() $function$;
REVOKE ALL ON ROUTINE shardstore.disable_rls_v1() FROM PUBLIC;
