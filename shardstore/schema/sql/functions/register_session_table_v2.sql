-- Registers a table whose rows belong to sessions (or updates its registration) in
-- table_registry, installs its tenant policy and adopts it into the RLS switches, so that
-- purges delete its rows with their sessions, turns or chunks (purge_rows) and tenant roles
-- get tenant_grants on it. Checks (SQLSTATE 22023): a table, not a partition; rows belong to
-- turns or to chunks, not both; chunk_start_column only with chunk_column; column types
-- (session uuid, turn and chunk bigint or integer, chunk start timestamptz, tenant text);
-- tenant and session columns NOT NULL, except that session_nullable lets the session column
-- be NULL (a row tied to no session, which no session purge matches), and then tenant_column
-- is required, which the policy compares. Operators only (not granted to PUBLIC).
CREATE OR REPLACE FUNCTION shardstore.register_session_table_v2(table_name regclass, session_column name DEFAULT 'session_id'::name, turn_column name DEFAULT NULL::name, chunk_column name DEFAULT NULL::name, chunk_start_column name DEFAULT NULL::name, tenant_column name DEFAULT NULL::name, purge_order integer DEFAULT NULL::integer, note text DEFAULT NULL::text, purge_rows boolean DEFAULT true, tenant_grants text DEFAULT 'SELECT, INSERT, UPDATE, DELETE'::text, session_nullable boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    v_rel  regclass := register_session_table_v2.table_name;
    v_null boolean := register_session_table_v2.session_nullable;
    v_kind "char";
    v_part boolean;
    c      record;
BEGIN
    SELECT k.relkind, k.relispartition INTO v_kind, v_part FROM pg_class k WHERE k.oid = v_rel;
    IF v_kind NOT IN ('r', 'p') OR v_part THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not a table (or is a partition: register its parent)', v_rel);
    END IF;
    IF register_session_table_v2.turn_column IS NOT NULL AND register_session_table_v2.chunk_column IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: rows belong to turns or to chunks, not both', v_rel);
    END IF;
    IF register_session_table_v2.chunk_start_column IS NOT NULL AND register_session_table_v2.chunk_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: chunk_start_column needs chunk_column', v_rel);
    END IF;
    IF v_null AND register_session_table_v2.tenant_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: a NULLable session column needs tenant_column', v_rel);
    END IF;
    FOR c IN
        SELECT x.what, x.col, x.types, a.atttypid::regtype::text AS found, a.attnotnull AS notnull
          FROM (VALUES ('session_column', register_session_table_v2.session_column, '{uuid}'::text[]),
                       ('turn_column', register_session_table_v2.turn_column, '{bigint,integer}'),
                       ('chunk_column', register_session_table_v2.chunk_column, '{bigint,integer}'),
                       ('chunk_start_column', register_session_table_v2.chunk_start_column,
                        '{"timestamp with time zone"}'),
                       ('tenant_column', register_session_table_v2.tenant_column, '{text}')) AS x(what, col, types)
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
        IF NOT c.notnull AND (c.what = 'tenant_column' OR (c.what = 'session_column' AND NOT v_null)) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s.%I (%s) must be NOT NULL', v_rel, c.col, c.what);
        END IF;
    END LOOP;
    INSERT INTO shardstore.table_registry AS r
           (table_name, kind, session_column, turn_column, chunk_column, chunk_start_column,
            tenant_column, position, purge_rows, rls, tenant_grants, note, session_nullable)
    VALUES (v_rel, 'session', register_session_table_v2.session_column,
            register_session_table_v2.turn_column, register_session_table_v2.chunk_column,
            register_session_table_v2.chunk_start_column, register_session_table_v2.tenant_column,
            coalesce(register_session_table_v2.purge_order, 100), register_session_table_v2.purge_rows,
            true, register_session_table_v2.tenant_grants, register_session_table_v2.note, v_null)
    ON CONFLICT (table_name) DO UPDATE
       SET kind = 'session', session_column = EXCLUDED.session_column,
           turn_column = EXCLUDED.turn_column, chunk_column = EXCLUDED.chunk_column,
           chunk_start_column = EXCLUDED.chunk_start_column, tenant_column = EXCLUDED.tenant_column,
           position = coalesce(register_session_table_v2.purge_order, r.position),
           purge_rows = EXCLUDED.purge_rows, rls = true, tenant_grants = EXCLUDED.tenant_grants,
           note = coalesce(EXCLUDED.note, r.note), session_nullable = EXCLUDED.session_nullable;
    PERFORM shardstore.rls_install_policy(v_rel, v_rel);
    PERFORM shardstore.rls_adopt(v_rel);
END
$function$;
REVOKE ALL ON ROUTINE shardstore.register_session_table_v2(regclass,name,name,name,name,name,integer,text,boolean,text,boolean) FROM PUBLIC;
