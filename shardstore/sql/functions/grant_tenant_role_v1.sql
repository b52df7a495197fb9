CREATE OR REPLACE FUNCTION shardstore.grant_tenant_role_v1(p_role regrole, p_tenant text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE sql
AS $function$ SELECT shardstore.grant_tenant_role_v2(p_role, p_tenant) $function$;
REVOKE ALL ON ROUTINE shardstore.grant_tenant_role_v1(regrole,text) FROM PUBLIC;
