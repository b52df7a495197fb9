-- The tenant this connection may see; NULL: none.
CREATE OR REPLACE FUNCTION shardstore.rls_tenant_v1()
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(
        (SELECT b.tenant_id FROM shardstore.rls_role_tenants b WHERE b.role_name = current_user),
        nullif(current_setting('shardstore.tenant_id', true), ''))
$function$;
