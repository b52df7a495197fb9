-- Grants a tenant role what the store needs: USAGE on the schema, each registered table's
-- tenant_grants (table_registry), SELECT on the view turns, EXECUTE on every function of the
-- schema but the operators' (the RLS switches, this one, policy install and adoption, table
-- registration); with p_tenant, binds the role to that tenant in rls_role_tenants (replacing
-- an earlier binding). Safe to run again. Operators only (not granted to PUBLIC).
CREATE OR REPLACE FUNCTION shardstore.grant_tenant_role_v2(p_role regrole, p_tenant text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    r record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA shardstore TO %s', p_role);
    FOR r IN SELECT x.table_name, x.tenant_grants FROM shardstore.table_registry x
              WHERE x.tenant_grants IS NOT NULL ORDER BY x.table_name::text LOOP
        EXECUTE format('GRANT %s ON %s TO %s', r.tenant_grants, r.table_name, p_role);
    END LOOP;
    EXECUTE format('GRANT SELECT ON shardstore.turns TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA shardstore TO %s', p_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION'
                   ' shardstore.enable_rls_v2(boolean), shardstore.disable_rls_v2(),'
                   ' shardstore.grant_tenant_role_v2(regrole, text),'
                   ' shardstore.rls_install_policy(regclass, regclass),'
                   ' shardstore.rls_adopt(regclass),'
                   ' shardstore.register_session_table_v2(regclass, name, name, name, name, name,'
                   ' integer, text, boolean, text, boolean),'
                   ' shardstore.register_global_table_v1(regclass, text, boolean, text)'
                   ' FROM %s', p_role);
    IF p_tenant IS NOT NULL THEN
        INSERT INTO shardstore.rls_role_tenants (role_name, tenant_id)
        VALUES (p_role::text, p_tenant)
        ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id;
    END IF;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.grant_tenant_role_v2(regrole,text) FROM PUBLIC;
