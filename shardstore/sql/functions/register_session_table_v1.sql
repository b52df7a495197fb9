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
CREATE OR REPLACE FUNCTION shardstore.register_session_table_v1(table_name regclass, session_column name DEFAULT 'session_id'::name, turn_column name DEFAULT NULL::name, chunk_column name DEFAULT NULL::name, chunk_start_column name DEFAULT NULL::name, tenant_column name DEFAULT NULL::name, purge_order integer DEFAULT NULL::integer, note text DEFAULT NULL::text, purge_rows boolean DEFAULT true, tenant_grants text DEFAULT 'SELECT, INSERT, UPDATE, DELETE'::text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
$function$;
REVOKE ALL ON ROUTINE shardstore.register_session_table_v1(regclass,name,name,name,name,name,integer,text,boolean,text) FROM PUBLIC;
