CREATE OR REPLACE FUNCTION shardstore.rls_install_policy(p_rel regclass, p_from regclass)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    r      shardstore.table_registry%ROWTYPE;
    v_expr text;
BEGIN
    SELECT * INTO r FROM shardstore.table_registry x WHERE x.table_name = p_from AND x.kind = 'session';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered session table', p_from);
    END IF;
    IF r.tenant_column IS NOT NULL THEN
        v_expr := format('%I = shardstore.rls_tenant_v2()', r.tenant_column);
    ELSE
        v_expr := format('EXISTS (SELECT 1 FROM shardstore.sessions s WHERE s.session_id = %s.%I'
                         ' AND s.tenant_id = (SELECT shardstore.rls_tenant_v1()))', p_rel, r.session_column);
    END IF;
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', p_rel);
    EXECUTE format('CREATE POLICY tenant_isolation ON %s USING (%s) WITH CHECK (%s)', p_rel, v_expr, v_expr);
END
$function$;
REVOKE ALL ON ROUTINE shardstore.rls_install_policy(regclass,regclass) FROM PUBLIC;
