-- The tenant this connection may see (its role's binding in rls_role_tenants, else SET
-- [LOCAL] shardstore.tenant_id; NULL: none), as a function a policy may call without a
-- subquery (what Citus needs). rls_tenant_v1 with a SQL-standard body: names are bound when
-- it is created.
CREATE OR REPLACE FUNCTION shardstore.rls_tenant_v2()
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
BEGIN ATOMIC
 SELECT COALESCE(( SELECT b.tenant_id
            FROM shardstore.rls_role_tenants b
           WHERE (b.role_name = CURRENT_USER)), NULLIF(current_setting('shardstore.tenant_id'::text, true), ''::text)) AS "coalesce";
END;
