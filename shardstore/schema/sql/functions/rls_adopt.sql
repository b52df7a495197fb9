-- Gives a newly registered table the state of row security the other session tables have
-- (on, and FORCEd, if it is on for them), and grants to every role that holds privileges on
-- them but does not own them (the tenant roles) those of its tenant_grants the role holds
-- there (a role that may only read the session tables may only read this one).
CREATE OR REPLACE FUNCTION shardstore.rls_adopt(p_table regclass)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
        FOR p IN SELECT * FROM shardstore.rls_partition_tables() x WHERE x.r_parent = p_table LOOP
            PERFORM shardstore.rls_install_policy(p.r_table, p_table);
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
$function$;
REVOKE ALL ON ROUTINE shardstore.rls_adopt(regclass) FROM PUBLIC;
