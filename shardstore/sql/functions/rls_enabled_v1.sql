CREATE OR REPLACE FUNCTION shardstore.rls_enabled_v1()
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$ SELECT shardstore.rls_enabled_v2() $function$;
