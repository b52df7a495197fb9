-- Tenant isolation with Row-Level Security (shardstore/schema/rls.py, docs/security.md). The
-- switches are functions over the table registry (enable_rls_v2, disable_rls_v2,
-- rls_enabled_v2); the policies (rls_install_policy) compare a tenant column with
-- rls_tenant_v2(), or look the session's tenant up against rls_tenant_v1().

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
-- what a store needs to bind its tenant: the connection's tenant setting (read only for the
-- caller's one connection), and whether the role is bound (the policies then read the
-- binding, on the shards too, and the store binds nothing)
SELECT nullif(current_setting('shardstore.tenant_id', true), ''),
       EXISTS (SELECT 1 FROM shardstore.rls_role_tenants b WHERE b.role_name = current_user),
       shardstore.is_distributed_v1('shardstore.sessions');

-- name: rls_bind_tenant
-- the tenant for the rest of this transaction, on one node: a plain function call, the
-- cheapest statement that sets it (a store sends it before each transaction's first)
SELECT set_config('shardstore.tenant_id', %s, true);

-- name: rls_bind_tenant_distributed
-- the tenant for the rest of this transaction block on Citus: SET LOCAL, which Citus
-- sends on to the shards' queries (set_config() it does not)
SELECT shardstore.rls_bind_tenant_v1(%s);

