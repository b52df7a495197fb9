-- 0020: a tenant store's binding travels in every transaction it runs (docs/scale-out.md
-- "Tenant scoping"). On Citus a session-level SET / set_config() of shardstore.tenant_id
-- stays on the coordinator: the policies, evaluated on the shards, see no tenant there (the
-- store of a tenant connection found nothing, its own sessions included). SET LOCAL inside
-- a transaction block is sent on to every shard query of that transaction
-- (citus.propagate_set_commands = 'local', set by `shardstore distribute`); set_config(...,
-- true) is not (Citus propagates only SET statements). So the binding is a SET LOCAL, run
-- by EXECUTE here so that the tenant is a bound parameter, never SQL text built by a client.

-- SET LOCAL shardstore.tenant_id for the rest of this transaction (a no-op outside one).
CREATE FUNCTION shardstore.rls_bind_tenant_v1(p_tenant text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' THEN
        RAISE EXCEPTION 'a tenant binding needs a non-empty tenant' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('SET LOCAL shardstore.tenant_id = %L', p_tenant);
END
$$;
