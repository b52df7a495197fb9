-- Registers a table (or view) every tenant shares. Its migration writes its policies (a
-- table with row security on and no policy shows a tenant role nothing); `rls`: the switches
-- turn its row security on and off (false for a view, or a table whose row security is
-- always on); `tenant_grants`: what tenant roles may do on it (NULL: nothing).
CREATE OR REPLACE FUNCTION shardstore.register_global_table_v1(table_name regclass, note text DEFAULT NULL::text, rls boolean DEFAULT true, tenant_grants text DEFAULT 'SELECT'::text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
    PERFORM shardstore.rls_adopt(v_rel);
END
$function$;
REVOKE ALL ON ROUTINE shardstore.register_global_table_v1(regclass,text,boolean,text) FROM PUBLIC;
