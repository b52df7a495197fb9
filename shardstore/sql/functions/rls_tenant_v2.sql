-- 3. the connection's tenant, as a function a policy may call without a subquery
CREATE OR REPLACE FUNCTION shardstore.rls_tenant_v2()
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
BEGIN ATOMIC
 SELECT COALESCE(( SELECT b.tenant_id
            FROM shardstore.rls_role_tenants b
           WHERE (b.role_name = CURRENT_USER)), NULLIF(current_setting('shardstore.tenant_id'::text, true), ''::text)) AS "coalesce";
END;
