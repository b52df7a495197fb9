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
