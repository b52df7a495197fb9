-- 0006: one registry of the tables shardstore knows, read by purge, retention and Row-Level
-- Security alike (docs/purge.md, docs/security.md).
--
-- shardstore.table_registry has one row per table:
--   * kind 'session': a session-scoped table (every row belongs to one session). Purges and
--     retention delete its rows (unless purge_rows is false: the sessions table itself, which
--     purges tombstone); RLS gives it the policy tenant_isolation and turns row security on
--     and off with the switches. A migration adds one with ONE call:
--         SELECT shardstore.register_session_table_v1('shardstore.facts', turn_column => 'source_turn_seq');
--   * kind 'global': a table (or view) every tenant shares, with policies of its own written
--     by its migration: the switches toggle its row security when `rls`, and tenant roles get
--     `tenant_grants` on it (shardstore.register_global_table_v1).
-- shardstore.purge_targets (0002) becomes a view of the session tables that purges clear,
-- so the purge and retention functions of 0002, 0003 and 0005 read the registry unchanged,
-- and an INSERT into purge_targets (the old way to register) still registers for purges
-- (but installs no policy: use register_session_table_v1).
--
-- No SQL function names the tables it covers: the RLS switches (now *_v2; the *_v1 ones
-- call them), grant_tenant_role_v2 and the retention functions read the registry.

CREATE TABLE shardstore.table_registry (
    table_name         regclass PRIMARY KEY,
    kind               text NOT NULL DEFAULT 'session' CHECK (kind IN ('session', 'global')),
    -- session tables: how rows belong to a session, a turn or a chunk (see 0002)
    session_column     name DEFAULT 'session_id',
    turn_column        name,
    chunk_column       name,
    chunk_start_column name,
    -- the row's tenant: the policy compares it with the connection's tenant (no subquery);
    -- NULL: the policy looks the tenant up on the session row
    tenant_column      name,
    position           integer NOT NULL DEFAULT 100 CHECK (position >= 0),
    builtin            boolean NOT NULL DEFAULT false,
    purge_rows         boolean NOT NULL DEFAULT true,
    rewrite_reset      name[] NOT NULL DEFAULT '{}',
    -- whether the RLS switches turn its row security on and off
    rls                boolean NOT NULL DEFAULT true,
    -- what grant_tenant_role_v2 grants a tenant role on it (NULL: nothing)
    tenant_grants      text DEFAULT 'SELECT, INSERT, UPDATE, DELETE'
        CHECK (tenant_grants ~ '^(SELECT|INSERT|UPDATE|DELETE)(, (SELECT|INSERT|UPDATE|DELETE))*$'),
    note               text,
    registered_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'session') = (session_column IS NOT NULL)),
    CHECK (kind = 'session' OR (turn_column IS NULL AND chunk_column IS NULL AND tenant_column IS NULL
                                AND purge_rows IS NOT TRUE AND cardinality(rewrite_reset) = 0)),
    CHECK (kind = 'global' OR rls),
    CHECK (turn_column IS NULL OR chunk_column IS NULL),
    CHECK (chunk_start_column IS NULL OR chunk_column IS NOT NULL)
);

INSERT INTO shardstore.table_registry
       (table_name, session_column, turn_column, chunk_column, chunk_start_column, position,
        builtin, rewrite_reset, note)
SELECT table_name, session_column, turn_column, chunk_column, chunk_start_column, position,
       builtin, rewrite_reset, note
  FROM shardstore.purge_targets;

-- tenant roles could read the old table; they read the view now (grants below)
DROP TABLE shardstore.purge_targets;
CREATE VIEW shardstore.purge_targets AS
SELECT r.table_name, r.session_column, r.turn_column, r.chunk_column, r.chunk_start_column,
       r.position, r.builtin, r.rewrite_reset, r.note
  FROM shardstore.table_registry r
 WHERE r.kind = 'session' AND r.purge_rows;

CREATE POLICY tenant_read ON shardstore.table_registry FOR SELECT USING (true);

-- Tables row security covers, in the order the switches visit them; `tenant`: holds tenant
-- rows (FORCE applies to these only: the owner keeps writing the global tables).
CREATE FUNCTION shardstore.rls_tables_v2()
RETURNS TABLE (r_table regclass, r_tenant boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT r.table_name, r.kind = 'session'
      FROM shardstore.table_registry r
     WHERE r.rls
     ORDER BY r.kind <> 'session', r.position, r.table_name::text
$$;

-- Every table holding rows of a registered partitioned session table under its own name:
-- its partitions (attached or being detached), and tables named <parent>_p... / _r... beside
-- it (detached partitions waiting for archive, retired ones). r_parent: the registered table.
CREATE FUNCTION shardstore.rls_partition_tables_v2()
RETURNS TABLE (r_table regclass, r_parent regclass)
LANGUAGE sql
STABLE
AS $$
    SELECT x.rel, x.parent FROM (
        SELECT t.relid::regclass AS rel, r.table_name AS parent
          FROM shardstore.table_registry r
          JOIN pg_class p ON p.oid = r.table_name AND p.relkind = 'p',
               pg_partition_tree(r.table_name) t
          JOIN pg_class c ON c.oid = t.relid AND c.relkind = 'r'
         WHERE r.kind = 'session'
        UNION
        SELECT c.oid::regclass, r.table_name
          FROM shardstore.table_registry r
          JOIN pg_class p ON p.oid = r.table_name AND p.relkind = 'p'
          JOIN pg_class c ON c.relnamespace = p.relnamespace AND c.relkind = 'r'
                         AND left(c.relname, length(p.relname) + 1) = p.relname || '_'
                         AND substr(c.relname, length(p.relname) + 2) ~ '^[pr][0-9]'
         WHERE r.kind = 'session') x
     ORDER BY x.rel::text
$$;

-- (Re)creates the policy tenant_isolation on p_rel from the registry row of p_from (p_rel
-- itself, or the registered table whose partition it is): the row's tenant column compared
-- with the connection's tenant, or (no tenant column) its session's tenant. Inert until row
-- security is enabled on p_rel.
CREATE FUNCTION shardstore.rls_install_policy_v1(p_rel regclass, p_from regclass)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r      shardstore.table_registry%ROWTYPE;
    v_expr text;
BEGIN
    SELECT * INTO r FROM shardstore.table_registry x WHERE x.table_name = p_from AND x.kind = 'session';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered session table', p_from);
    END IF;
    IF r.tenant_column IS NOT NULL THEN
        v_expr := format('%I = (SELECT shardstore.rls_tenant_v1())', r.tenant_column);
    ELSE
        v_expr := format('EXISTS (SELECT 1 FROM shardstore.sessions s WHERE s.session_id = %s.%I'
                         ' AND s.tenant_id = (SELECT shardstore.rls_tenant_v1()))', p_rel, r.session_column);
    END IF;
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', p_rel);
    EXECUTE format('CREATE POLICY tenant_isolation ON %s USING (%s) WITH CHECK (%s)', p_rel, v_expr, v_expr);
END
$$;

-- Turns row security on (p_force: also for the tables' owner, see docs/security.md), for
-- every registered table and every partition of a registered one. Idempotent; run it again
-- if you ever granted a tenant role rights on partitions by hand. Returns the tables.
CREATE FUNCTION shardstore.enable_rls_v2(p_force boolean DEFAULT false)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    v_tables  regclass[];
    v_tenant  boolean[];
    v_parts   regclass[];
    v_parents regclass[];
BEGIN
    -- read the lists first: the registry itself is altered below
    SELECT coalesce(array_agg(r_table), '{}'), coalesce(array_agg(r_tenant), '{}')
      INTO v_tables, v_tenant FROM shardstore.rls_tables_v2();
    SELECT coalesce(array_agg(r_table), '{}'), coalesce(array_agg(r_parent), '{}')
      INTO v_parts, v_parents FROM shardstore.rls_partition_tables_v2();
    FOR i IN 1 .. cardinality(v_tables) LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_tables[i]);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', v_tables[i],
                       CASE WHEN p_force AND v_tenant[i] THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT v_tables[i]::text;
    END LOOP;
    FOR i IN 1 .. cardinality(v_parts) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_policy p
                        WHERE p.polrelid = v_parts[i] AND p.polname = 'tenant_isolation') THEN
            PERFORM shardstore.rls_install_policy_v1(v_parts[i], v_parents[i]);
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_parts[i]);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', v_parts[i],
                       CASE WHEN p_force THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT v_parts[i]::text;
    END LOOP;
END
$$;

-- Turns row security off everywhere enable_rls_v2 turns it on (the policies stay, inert).
CREATE FUNCTION shardstore.disable_rls_v2()
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY(SELECT r_table FROM shardstore.rls_tables_v2()
                             UNION ALL SELECT r_table FROM shardstore.rls_partition_tables_v2()) LOOP
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', t);
        RETURN NEXT t::text;
    END LOOP;
END
$$;

-- Whether row security is on for every table enable_rls_v2 covers.
CREATE FUNCTION shardstore.rls_enabled_v2()
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT bool_and(c.relrowsecurity)
      FROM pg_class c
     WHERE c.oid IN (SELECT r_table FROM shardstore.rls_tables_v2()
                     UNION ALL SELECT r_table FROM shardstore.rls_partition_tables_v2())
$$;

-- Grants a (non-owner, non-superuser) tenant role exactly what the library needs: the
-- schema (USAGE, not CREATE), each registered table's tenant_grants, and the functions but
-- the owner's (switches, grants, registration). Nothing on partitions. With p_tenant, binds
-- the role to that tenant (rls_role_tenants) so that it cannot choose another one.
CREATE FUNCTION shardstore.grant_tenant_role_v2(p_role regrole, p_tenant text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA shardstore TO %s', p_role);
    FOR r IN SELECT x.table_name, x.tenant_grants FROM shardstore.table_registry x
              WHERE x.tenant_grants IS NOT NULL ORDER BY x.table_name::text LOOP
        EXECUTE format('GRANT %s ON %s TO %s', r.tenant_grants, r.table_name, p_role);
    END LOOP;
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA shardstore TO %s', p_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v1(boolean),'
                   ' shardstore.disable_rls_v1(), shardstore.grant_tenant_role_v1(regrole, text),'
                   ' shardstore.enable_rls_v2(boolean), shardstore.disable_rls_v2(),'
                   ' shardstore.grant_tenant_role_v2(regrole, text),'
                   ' shardstore.rls_install_policy_v1(regclass, regclass),'
                   ' shardstore.rls_adopt_v1(regclass),'
                   ' shardstore.register_session_table_v1(regclass, name, name, name, name, name,'
                   ' integer, text, boolean, text),'
                   ' shardstore.register_global_table_v1(regclass, text, boolean, text)'
                   ' FROM %s', p_role);
    IF p_tenant IS NOT NULL THEN
        INSERT INTO shardstore.rls_role_tenants (role_name, tenant_id)
        VALUES (p_role::text, p_tenant)
        ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id;
    END IF;
END
$$;

-- Gives a newly registered table the state of row security the other session tables have
-- (on, and FORCEd, if it is on for them), and grants to every role that holds privileges on
-- them but does not own them (the tenant roles) those of its tenant_grants the role holds
-- there (a role that may only read the session tables may only read this one).
CREATE FUNCTION shardstore.rls_adopt_v1(p_table regclass)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r       shardstore.table_registry%ROWTYPE;
    v_on    boolean;
    v_force boolean;
    p       record;
    g       record;
BEGIN
    SELECT * INTO r FROM shardstore.table_registry x WHERE x.table_name = p_table;
    SELECT bool_or(c.relrowsecurity), bool_or(c.relforcerowsecurity) INTO v_on, v_force
      FROM shardstore.table_registry x JOIN pg_class c ON c.oid = x.table_name
     WHERE x.kind = 'session' AND x.table_name <> p_table;
    IF v_on AND r.rls THEN
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', p_table,
                       CASE WHEN v_force AND r.kind = 'session' THEN 'FORCE' ELSE 'NO FORCE' END);
        FOR p IN SELECT * FROM shardstore.rls_partition_tables_v2() x WHERE x.r_parent = p_table LOOP
            PERFORM shardstore.rls_install_policy_v1(p.r_table, p_table);
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p.r_table);
            EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', p.r_table,
                           CASE WHEN v_force THEN 'FORCE' ELSE 'NO FORCE' END);
        END LOOP;
    END IF;
    IF r.tenant_grants IS NOT NULL THEN
        FOR g IN
            SELECT a.grantee::regrole AS role,
                   string_agg(DISTINCT a.privilege_type, ', ' ORDER BY a.privilege_type) AS privs
              FROM shardstore.table_registry x
              JOIN pg_class c ON c.oid = x.table_name,
                   aclexplode(c.relacl) a
             WHERE x.kind = 'session' AND x.table_name <> p_table
               AND a.grantee <> 0 AND a.grantee <> c.relowner
               AND a.privilege_type = ANY (string_to_array(r.tenant_grants, ', '))
             GROUP BY a.grantee
        LOOP
            EXECUTE format('GRANT %s ON %s TO %s', g.privs, p_table, g.role);
        END LOOP;
    END IF;
END
$$;

-- Registers a session-scoped table with one call, for purges, retention and RLS:
--   session_column      its session id (uuid NOT NULL); every purge of a whole session and
--                       retention of an expired session delete the session's rows
--   turn_column         a turn_seq: range purges and retention delete the rows of purged turns
--   chunk_column        a chunk_seq: range purges and retention delete the rows of purged chunks
--   chunk_start_column  with chunk_column: the chunk start (prunes a table partitioned like
--                       agent_history)
--   tenant_column       a copy of the session's tenant_id (text NOT NULL): the policy compares
--                       it directly (no subquery, what Citus needs); else the policy looks the
--                       tenant up on the session row
--   purge_order         the registry's `position`: order of purge deletes (lower first; a
--                       table with a foreign key to another goes before it); default 100 (or
--                       the one registered before)
--   purge_rows          false only for tables whose rows the purge functions handle themselves
--   tenant_grants       what tenant roles may do on it
-- It installs the policy tenant_isolation (inert until enable_rls_v2; enabled at once if row
-- security is on), and grants tenant_grants to the tenant roles. Calling it again updates the
-- registration (e.g. once the table has a tenant column) and replaces the policy.
CREATE FUNCTION shardstore.register_session_table_v1(
    table_name         regclass,
    session_column     name DEFAULT 'session_id',
    turn_column        name DEFAULT NULL,
    chunk_column       name DEFAULT NULL,
    chunk_start_column name DEFAULT NULL,
    tenant_column      name DEFAULT NULL,
    purge_order        integer DEFAULT NULL,
    note               text DEFAULT NULL,
    purge_rows         boolean DEFAULT true,
    tenant_grants      text DEFAULT 'SELECT, INSERT, UPDATE, DELETE')
RETURNS void
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_rel  regclass := register_session_table_v1.table_name;
    v_kind "char";
    v_part boolean;
    c      record;
BEGIN
    SELECT k.relkind, k.relispartition INTO v_kind, v_part FROM pg_class k WHERE k.oid = v_rel;
    IF v_kind NOT IN ('r', 'p') OR v_part THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not a table (or is a partition: register its parent)', v_rel);
    END IF;
    IF register_session_table_v1.turn_column IS NOT NULL AND register_session_table_v1.chunk_column IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: rows belong to turns or to chunks, not both', v_rel);
    END IF;
    IF register_session_table_v1.chunk_start_column IS NOT NULL AND register_session_table_v1.chunk_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: chunk_start_column needs chunk_column', v_rel);
    END IF;
    FOR c IN
        SELECT x.what, x.col, x.types, a.atttypid::regtype::text AS found, a.attnotnull AS notnull
          FROM (VALUES ('session_column', register_session_table_v1.session_column, '{uuid}'::text[]),
                       ('turn_column', register_session_table_v1.turn_column, '{bigint,integer}'),
                       ('chunk_column', register_session_table_v1.chunk_column, '{bigint,integer}'),
                       ('chunk_start_column', register_session_table_v1.chunk_start_column,
                        '{"timestamp with time zone"}'),
                       ('tenant_column', register_session_table_v1.tenant_column, '{text}')) AS x(what, col, types)
          LEFT JOIN pg_attribute a ON a.attrelid = v_rel AND a.attname = x.col AND NOT a.attisdropped AND a.attnum > 0
         WHERE x.col IS NOT NULL
    LOOP
        IF c.found IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s has no column %I (%s)', v_rel, c.col, c.what);
        END IF;
        IF NOT c.found = ANY (c.types) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s.%I (%s) is %s, not %s', v_rel, c.col, c.what, c.found, array_to_string(c.types, ' or '));
        END IF;
        IF c.what IN ('session_column', 'tenant_column') AND NOT c.notnull THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s.%I (%s) must be NOT NULL', v_rel, c.col, c.what);
        END IF;
    END LOOP;
    INSERT INTO shardstore.table_registry AS r
           (table_name, kind, session_column, turn_column, chunk_column, chunk_start_column,
            tenant_column, position, purge_rows, rls, tenant_grants, note)
    VALUES (v_rel, 'session', register_session_table_v1.session_column,
            register_session_table_v1.turn_column, register_session_table_v1.chunk_column,
            register_session_table_v1.chunk_start_column, register_session_table_v1.tenant_column,
            coalesce(register_session_table_v1.purge_order, 100), register_session_table_v1.purge_rows,
            true, register_session_table_v1.tenant_grants, register_session_table_v1.note)
    ON CONFLICT (table_name) DO UPDATE
       SET kind = 'session', session_column = EXCLUDED.session_column,
           turn_column = EXCLUDED.turn_column, chunk_column = EXCLUDED.chunk_column,
           chunk_start_column = EXCLUDED.chunk_start_column, tenant_column = EXCLUDED.tenant_column,
           position = coalesce(register_session_table_v1.purge_order, r.position),
           purge_rows = EXCLUDED.purge_rows, rls = true, tenant_grants = EXCLUDED.tenant_grants,
           note = coalesce(EXCLUDED.note, r.note);
    PERFORM shardstore.rls_install_policy_v1(v_rel, v_rel);
    PERFORM shardstore.rls_adopt_v1(v_rel);
END
$$;

-- Registers a table (or view) every tenant shares. Its migration writes its policies (a
-- table with row security on and no policy shows a tenant role nothing); `rls`: the switches
-- turn its row security on and off (false for a view, or a table whose row security is
-- always on); `tenant_grants`: what tenant roles may do on it (NULL: nothing).
CREATE FUNCTION shardstore.register_global_table_v1(table_name regclass, note text DEFAULT NULL,
                                                    rls boolean DEFAULT true,
                                                    tenant_grants text DEFAULT 'SELECT')
RETURNS void
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_rel regclass := register_global_table_v1.table_name;
BEGIN
    INSERT INTO shardstore.table_registry AS r
           (table_name, kind, session_column, purge_rows, rls, tenant_grants, note)
    VALUES (v_rel, 'global', NULL, false, register_global_table_v1.rls,
            register_global_table_v1.tenant_grants, register_global_table_v1.note)
    ON CONFLICT (table_name) DO UPDATE
       SET kind = 'global', session_column = NULL, turn_column = NULL, chunk_column = NULL,
           chunk_start_column = NULL, tenant_column = NULL, purge_rows = false,
           rewrite_reset = '{}', rls = EXCLUDED.rls, tenant_grants = EXCLUDED.tenant_grants,
           note = coalesce(EXCLUDED.note, r.note);
    PERFORM shardstore.rls_adopt_v1(v_rel);
END
$$;

REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v2(boolean), shardstore.disable_rls_v2(),
    shardstore.grant_tenant_role_v2(regrole, text),
    shardstore.rls_install_policy_v1(regclass, regclass), shardstore.rls_adopt_v1(regclass),
    shardstore.register_session_table_v1(regclass, name, name, name, name, name, integer, text, boolean, text),
    shardstore.register_global_table_v1(regclass, text, boolean, text)
    FROM PUBLIC;

-- The tables so far, registered the one way. Positions and notes of the purge targets are
-- kept. sessions: tenant_id on the row (no subquery); its rows are tombstoned by purges and
-- expired by retention's own code. chunk_vectors carries tenant_id too. The others have no
-- tenant_id (adding one would change the append and fold functions): their policies look
-- the tenant up on the session row.
SELECT shardstore.register_session_table_v1('shardstore.sessions', tenant_column => 'tenant_id',
                                            purge_order => 0, purge_rows => false,
                                            note => 'one row per session; purges leave a tombstone');
SELECT shardstore.register_session_table_v1('shardstore.turn_buffer', turn_column => 'turn_seq');
SELECT shardstore.register_session_table_v1('shardstore.agent_history', chunk_column => 'chunk_seq',
                                            chunk_start_column => 'chunk_start');
SELECT shardstore.register_session_table_v1('shardstore.chunk_map', chunk_column => 'chunk_seq');
SELECT shardstore.register_session_table_v1('shardstore.turn_keys', turn_column => 'turn_seq');
SELECT shardstore.register_session_table_v1('shardstore.chunk_vectors', chunk_column => 'chunk_seq',
                                            chunk_start_column => 'chunk_start',
                                            tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.embed_queue');

-- connect() inserts the config row if missing and locks the table (LOCK ... EXCLUSIVE needs
-- UPDATE); its policies (0004) make both find or change nothing
SELECT shardstore.register_global_table_v1('shardstore.config', 'partitioning settings',
                                           tenant_grants => 'SELECT, INSERT, UPDATE');
SELECT shardstore.register_global_table_v1('shardstore.maintenance_runs', 'maintenance run log',
                                           tenant_grants => NULL);
-- policies (0005) let a tenant read and lock the model record, never change it
SELECT shardstore.register_global_table_v1('shardstore.embedding_config', 'the embedding model',
                                           tenant_grants => 'SELECT, UPDATE');
SELECT shardstore.register_global_table_v1('shardstore.table_registry', 'this registry');
SELECT shardstore.register_global_table_v1('shardstore.purge_targets',
                                           'view of the registry (0002 name)', rls => false);
SELECT shardstore.register_global_table_v1('shardstore.rls_role_tenants',
                                           'role bindings; row security always on', rls => false);
SELECT shardstore.register_global_table_v1('shardstore.schema_migrations', 'applied migrations',
                                           rls => false);

-- The switches and the grant of 0004/0005 named their tables; they now call the registry's.
CREATE OR REPLACE FUNCTION shardstore.rls_tables_v1()
RETURNS TABLE (r_table regclass, r_tenant boolean)
LANGUAGE sql
STABLE
AS $$ SELECT * FROM shardstore.rls_tables_v2() $$;

CREATE OR REPLACE FUNCTION shardstore.rls_partition_tables_v1()
RETURNS SETOF regclass
LANGUAGE sql
STABLE
AS $$ SELECT r_table FROM shardstore.rls_partition_tables_v2() $$;

CREATE OR REPLACE FUNCTION shardstore.enable_rls_v1(p_force boolean DEFAULT false)
RETURNS SETOF text
LANGUAGE sql
AS $$ SELECT * FROM shardstore.enable_rls_v2(p_force) $$;

CREATE OR REPLACE FUNCTION shardstore.disable_rls_v1()
RETURNS SETOF text
LANGUAGE sql
AS $$ SELECT * FROM shardstore.disable_rls_v2() $$;

CREATE OR REPLACE FUNCTION shardstore.rls_enabled_v1()
RETURNS boolean
LANGUAGE sql
STABLE
AS $$ SELECT shardstore.rls_enabled_v2() $$;

CREATE OR REPLACE FUNCTION shardstore.grant_tenant_role_v1(p_role regrole, p_tenant text DEFAULT NULL)
RETURNS void
LANGUAGE sql
AS $$ SELECT shardstore.grant_tenant_role_v2(p_role, p_tenant) $$;

-- Retention covers registered turn-level tables too: the rows of turns in a dropped
-- partition's chunks (maint_drop_retired_v2) and of expired buffered turns
-- (maint_expire_rows_v2); v1 covered chunk-level and session-level tables only.

-- As maint_expire_rows_v1, and the registered rows of the expired buffered turns.
CREATE FUNCTION shardstore.maint_expire_rows_v2(p_before timestamptz, p_batch integer)
RETURNS TABLE (r_sessions bigint, r_turns bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids   uuid[];
    v_sids  uuid[];
    v_upto  bigint[];
    t       record;
BEGIN
    WITH gone AS (
        DELETE FROM shardstore.sessions s
         WHERE s.session_id IN (
                   SELECT x.session_id FROM shardstore.sessions x
                    WHERE x.purged_at IS NULL
                      AND coalesce(x.last_turn_at, x.created_at) < p_before
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
           AND coalesce(s.last_turn_at, s.created_at) < p_before
        RETURNING s.session_id)
    SELECT coalesce(array_agg(session_id), '{}') INTO v_ids FROM gone;
    IF cardinality(v_ids) > 0 THEN
        DELETE FROM shardstore.turn_buffer WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.chunk_map WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.turn_keys WHERE session_id = ANY (v_ids);
        FOR t IN SELECT r.table_name, r.session_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin
                  ORDER BY r.position, r.table_name::text LOOP
            EXECUTE format('DELETE FROM %s WHERE %I = ANY ($1)', t.table_name, t.session_column)
              USING v_ids;
        END LOOP;
    END IF;
    r_sessions := cardinality(v_ids);
    WITH old AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE (b.session_id, b.turn_seq) IN (
                   SELECT x.session_id, x.turn_seq FROM shardstore.turn_buffer x
                    WHERE x.created_at < p_before
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
        RETURNING b.session_id, b.turn_seq, b.idempotency_key
    ), keys AS (
        DELETE FROM shardstore.turn_keys k USING old
         WHERE old.idempotency_key IS NOT NULL
           AND k.session_id = old.session_id AND k.idempotency_key = old.idempotency_key
    ), per AS (
        SELECT old.session_id, max(old.turn_seq) AS upto, count(*) AS n FROM old GROUP BY old.session_id
    )
    SELECT coalesce(sum(per.n), 0), coalesce(array_agg(per.session_id), '{}'),
           coalesce(array_agg(per.upto), '{}')
      INTO r_turns, v_sids, v_upto
      FROM per;
    IF cardinality(v_sids) > 0 THEN
        -- turns of a session are written in order: every turn up to the newest expired one is older
        FOR t IN SELECT r.table_name, r.session_column, r.turn_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin AND r.turn_column IS NOT NULL
                  ORDER BY r.position, r.table_name::text LOOP
            EXECUTE format('DELETE FROM %s x USING unnest($1::uuid[], $2::bigint[]) AS d(sid, upto)'
                           ' WHERE x.%I = d.sid AND x.%I <= d.upto',
                           t.table_name, t.session_column, t.turn_column)
              USING v_sids, v_upto;
        END LOOP;
    END IF;
    RETURN NEXT;
END
$$;

-- As maint_drop_retired_v1, and registered turn-level tables lose the rows of the dropped
-- chunks' turns (and of every earlier turn: a session's chunks up to the newest one in the
-- table are all older than it).
CREATE FUNCTION shardstore.maint_drop_retired_v2(p_name text, p_lock_timeout interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_rows bigint;
    t      record;
BEGIN
    IF p_name NOT LIKE 'agent\_history\_r%' THEN
        RAISE EXCEPTION 'only retired tables (agent_history_r...) are dropped, not %', p_name;
    END IF;
    IF to_regclass(format('shardstore.%I', p_name)) IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    EXECUTE format('LOCK TABLE shardstore.%I IN ACCESS EXCLUSIVE MODE', p_name);
    EXECUTE format(
        'WITH per_session AS (SELECT session_id, max(chunk_seq) AS upto, count(*) AS n
                                FROM shardstore.%I GROUP BY session_id),
              maps AS (DELETE FROM shardstore.chunk_map m USING per_session p
                        WHERE m.session_id = p.session_id AND m.chunk_seq <= p.upto),
              keys AS (DELETE FROM shardstore.turn_keys k USING per_session p
                        WHERE k.session_id = p.session_id AND k.chunk_seq <= p.upto)
         SELECT coalesce(sum(n), 0) FROM per_session', p_name) INTO v_rows;
    FOR t IN SELECT r.table_name, r.session_column, r.turn_column, r.chunk_column
               FROM shardstore.table_registry r
              WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin
                AND (r.chunk_column IS NOT NULL OR r.turn_column IS NOT NULL)
              ORDER BY r.position, r.table_name::text LOOP
        IF t.chunk_column IS NOT NULL THEN
            EXECUTE format(
                'DELETE FROM %s x USING (SELECT session_id, max(chunk_seq) AS upto
                                           FROM shardstore.%I GROUP BY session_id) d
                  WHERE x.%I = d.session_id AND x.%I <= d.upto',
                t.table_name, p_name, t.session_column, t.chunk_column);
        ELSE
            EXECUTE format(
                'DELETE FROM %s x USING (SELECT session_id, max(first_turn_seq + turn_count) AS upto
                                           FROM shardstore.%I GROUP BY session_id) d
                  WHERE x.%I = d.session_id AND x.%I < d.upto',
                t.table_name, p_name, t.session_column, t.turn_column);
        END IF;
    END LOOP;
    EXECUTE format('DROP TABLE shardstore.%I', p_name);
    RETURN v_rows;
END
$$;

-- the in-database procedure (run_maintenance) calls the v1 names: they do what v2 does
CREATE OR REPLACE FUNCTION shardstore.maint_expire_rows_v1(p_before timestamptz, p_batch integer)
RETURNS TABLE (r_sessions bigint, r_turns bigint)
LANGUAGE sql
AS $$ SELECT * FROM shardstore.maint_expire_rows_v2(p_before, p_batch) $$;

CREATE OR REPLACE FUNCTION shardstore.maint_drop_retired_v1(p_name text, p_lock_timeout interval)
RETURNS bigint
LANGUAGE sql
AS $$ SELECT shardstore.maint_drop_retired_v2(p_name, p_lock_timeout) $$;
