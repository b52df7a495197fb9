-- Tenant isolation with Row-Level Security (shardstore/rls.py, docs/security.md). The
-- policies and switches are the functions of migrations 0004 and 0006 (the registry).

-- name: rls_enable
SELECT t FROM shardstore.enable_rls_v2(%s) AS t;

-- name: rls_disable
SELECT t FROM shardstore.disable_rls_v2() AS t;

-- name: rls_enabled
SELECT coalesce(shardstore.rls_enabled_v2(), false);

-- name: rls_grant_tenant_role
SELECT shardstore.grant_tenant_role_v2(%s::text::regrole, %s);

-- name: rls_set_tenant
SELECT set_config('shardstore.tenant_id', %s, false);

-- name: rls_current_tenant
SELECT shardstore.rls_tenant_v1();

-- name: rls_store_binding
-- what connect_tenant() needs to bind a store: the connection's tenant setting, whether the
-- role is bound (the policies then read the binding, on the shards too), and whether the
-- store is distributed (a session-level setting does not reach the shards there)
SELECT nullif(current_setting('shardstore.tenant_id', true), ''),
       EXISTS (SELECT 1 FROM shardstore.rls_role_tenants b WHERE b.role_name = current_user),
       shardstore.is_distributed_v1('shardstore.sessions');

-- name: rls_bind_tenant
-- the tenant for the rest of this transaction (SET LOCAL: Citus sends it on to the shards)
SELECT shardstore.rls_bind_tenant_v1(%s);

-- name: rls_rebind_tenant
-- a store given a tenant-scoped connection (shardstore.connect(conn)) on Citus: the
-- connection's own session-level tenant, SET LOCAL for this transaction so that it reaches
-- the shards; without one nothing is bound (the store sees nothing, as the policies say)
SELECT shardstore.rls_bind_tenant_v1(t)
  FROM nullif(current_setting('shardstore.tenant_id', true), '') AS t
 WHERE t IS NOT NULL;
