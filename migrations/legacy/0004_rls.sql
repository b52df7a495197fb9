-- 0004: optional tenant isolation with Row-Level Security (docs/security.md).
--
-- Everything here is inert until an operator calls SELECT shardstore.enable_rls_v1():
-- the policies below exist, but PostgreSQL applies a table's policies only once row
-- security is enabled on it. shardstore.disable_rls_v1() turns it off again.
--
-- The tenant of a connection is shardstore.rls_tenant_v1(): the tenant bound to the current
-- role in shardstore.rls_role_tenants if there is one (a role bound there cannot change its
-- tenant, even with raw SQL), else the setting shardstore.tenant_id (SET by the application
-- on a connection it hands to one tenant's work). Neither: NULL, and a tenant role sees
-- nothing and can write nothing.
--
-- Partitions. A query on agent_history is checked against agent_history's privileges and
-- policies only; a query that names a partition (shardstore.agent_history_p...) directly is
-- checked against the partition's. Partitions are created later, by ensure_partition_v1 and
-- maintenance, with no grants to anyone but their owner. So:
--   * shardstore.grant_tenant_role_v1(role) grants a tenant role what the library needs on the
--     named tables, never anything on a partition, and no CREATE on the schema: direct
--     partition access is refused (permission denied), for existing and future partitions;
--     a tenant role never creates a partition (premake runs as the owner: `shardstore
--     maintain`), so it never owns one;
--   * enable_rls_v1() also enables row security with the tenant policy on every existing
--     agent_history_* table, in case someone granted more by hand (defence in depth).
-- An event trigger on CREATE TABLE was not used: creating one needs a superuser, which
-- managed PostgreSQL services do not give, and this migration must run everywhere.

-- Roles whose tenant is fixed: a connection as (or SET ROLE to) such a role sees only this
-- tenant, whatever shardstore.tenant_id says.
CREATE TABLE shardstore.rls_role_tenants (
    role_name name PRIMARY KEY,
    tenant_id text NOT NULL CHECK (tenant_id <> '')
);
-- a role may read its own binding (rls_tenant_v1 runs as the caller), nothing else
ALTER TABLE shardstore.rls_role_tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY rls_role_tenants_own ON shardstore.rls_role_tenants
    FOR SELECT USING (role_name = current_user);

-- The tenant this connection may see; NULL: none.
CREATE FUNCTION shardstore.rls_tenant_v1()
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
        (SELECT b.tenant_id FROM shardstore.rls_role_tenants b WHERE b.role_name = current_user),
        nullif(current_setting('shardstore.tenant_id', true), ''))
$$;

-- The policies, one per table. `(SELECT rls_tenant_v1())` is an InitPlan: evaluated once per
-- statement, not once per row. Tables without tenant_id join their session (one primary key
-- lookup per row, itself filtered by the sessions policy).
CREATE POLICY tenant_isolation ON shardstore.sessions
    USING (tenant_id = (SELECT shardstore.rls_tenant_v1()))
    WITH CHECK (tenant_id = (SELECT shardstore.rls_tenant_v1()));

CREATE POLICY tenant_isolation ON shardstore.turn_buffer
    USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                    WHERE s.session_id = turn_buffer.session_id
                      AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
    WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = turn_buffer.session_id
                           AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())));

CREATE POLICY tenant_isolation ON shardstore.chunk_map
    USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                    WHERE s.session_id = chunk_map.session_id
                      AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
    WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = chunk_map.session_id
                           AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())));

CREATE POLICY tenant_isolation ON shardstore.turn_keys
    USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                    WHERE s.session_id = turn_keys.session_id
                      AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
    WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = turn_keys.session_id
                           AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())));

CREATE POLICY tenant_isolation ON shardstore.agent_history
    USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                    WHERE s.session_id = agent_history.session_id
                      AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
    WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = agent_history.session_id
                           AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())));

-- Global tables a tenant role reads but must not change: config (connect() locks it and
-- inserts its row if missing, so the role holds INSERT/UPDATE privileges; these policies let
-- it read, and make its writes find or change nothing), purge_targets (read by purges).
CREATE POLICY tenant_read ON shardstore.config FOR SELECT USING (true);
CREATE POLICY tenant_insert ON shardstore.config FOR INSERT WITH CHECK (true);  -- the singleton: conflicts
CREATE POLICY tenant_read ON shardstore.purge_targets FOR SELECT USING (true);

-- Tables row security covers, in the order enable/disable visit them; `tenant`: holds
-- tenant rows (FORCE applies to these only: the owner keeps writing the global tables).
CREATE FUNCTION shardstore.rls_tables_v1()
RETURNS TABLE (r_table regclass, r_tenant boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT t::regclass, k
      FROM unnest(ARRAY['shardstore.sessions', 'shardstore.turn_buffer', 'shardstore.agent_history',
                        'shardstore.chunk_map', 'shardstore.turn_keys', 'shardstore.config',
                        'shardstore.purge_targets', 'shardstore.maintenance_runs'],
                  ARRAY[true, true, true, true, true, false, false, false]) AS x(t, k)
$$;

-- Every table holding agent_history rows under its own name: attached partitions, partitions
-- being detached, detached and retired ones waiting for archive.
CREATE FUNCTION shardstore.rls_partition_tables_v1()
RETURNS SETOF regclass
LANGUAGE sql
STABLE
AS $$
    SELECT c.oid::regclass
      FROM pg_class c
     WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'
       AND c.relname ~ '^agent_history_[pr]'
     ORDER BY c.relname
$$;

-- Turns row security on (p_force: also for the tables' owner, see docs/security.md).
-- Idempotent; run it again after maintenance created partitions, if you ever granted a
-- tenant role rights on partitions by hand. Returns the tables it covered.
CREATE FUNCTION shardstore.enable_rls_v1(p_force boolean DEFAULT false)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    t regclass;
    r record;
BEGIN
    FOR r IN SELECT * FROM shardstore.rls_tables_v1() LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', r.r_table);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', r.r_table,
                       CASE WHEN p_force AND r.r_tenant THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT r.r_table::text;
    END LOOP;
    FOR t IN SELECT * FROM shardstore.rls_partition_tables_v1() LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_policy p
                        WHERE p.polrelid = t AND p.polname = 'tenant_isolation') THEN
            EXECUTE format(
                'CREATE POLICY tenant_isolation ON %s
                     USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                                     WHERE s.session_id = %s.session_id
                                       AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
                     WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                                          WHERE s.session_id = %s.session_id
                                            AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))',
                t, t, t);
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', t,
                       CASE WHEN p_force THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT t::text;
    END LOOP;
END
$$;

-- Turns row security off everywhere enable_rls_v1 turned it on (the policies stay, inert).
CREATE FUNCTION shardstore.disable_rls_v1()
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT r_table FROM shardstore.rls_tables_v1()
             UNION ALL SELECT * FROM shardstore.rls_partition_tables_v1() LOOP
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', t);
        RETURN NEXT t::text;
    END LOOP;
END
$$;

-- Whether row security is on for every table enable_rls_v1 covers.
CREATE FUNCTION shardstore.rls_enabled_v1()
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT bool_and(c.relrowsecurity)
      FROM pg_class c
     WHERE c.oid IN (SELECT r_table FROM shardstore.rls_tables_v1()
                     UNION ALL SELECT * FROM shardstore.rls_partition_tables_v1())
$$;

-- Grants a (non-owner, non-superuser) tenant role exactly what the library needs: the
-- schema (USAGE, not CREATE), the session tables, read access to config, purge_targets and
-- schema_migrations, and the functions. Nothing on partitions. With p_tenant, binds the
-- role to that tenant (rls_role_tenants) so that it cannot choose another one.
CREATE FUNCTION shardstore.grant_tenant_role_v1(p_role regrole, p_tenant text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA shardstore TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON shardstore.sessions, shardstore.turn_buffer,'
                   ' shardstore.agent_history, shardstore.chunk_map, shardstore.turn_keys TO %s', p_role);
    -- connect() inserts the config row if missing and locks the table (LOCK ... EXCLUSIVE
    -- needs UPDATE); the policies above make both find or change nothing
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON shardstore.config TO %s', p_role);
    EXECUTE format('GRANT SELECT ON shardstore.purge_targets, shardstore.schema_migrations,'
                   ' shardstore.rls_role_tenants TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA shardstore TO %s', p_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v1(boolean),'
                   ' shardstore.disable_rls_v1(), shardstore.grant_tenant_role_v1(regrole, text)'
                   ' FROM %s', p_role);
    IF p_tenant IS NOT NULL THEN
        INSERT INTO shardstore.rls_role_tenants (role_name, tenant_id)
        VALUES (p_role::text, p_tenant)
        ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id;
    END IF;
END
$$;

-- Functions are executable by PUBLIC by default; the switches are for the owner only.
REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v1(boolean), shardstore.disable_rls_v1(),
    shardstore.grant_tenant_role_v1(regrole, text) FROM PUBLIC;
