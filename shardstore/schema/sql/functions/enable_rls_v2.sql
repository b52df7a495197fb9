-- Turns row security on (p_force: also for the tables' owner, see docs/security.md), for
-- every registered table and every partition of a registered one. Idempotent; run it again
-- if you ever granted a tenant role rights on partitions by hand. Returns the tables.
CREATE OR REPLACE FUNCTION shardstore.enable_rls_v2(p_force boolean DEFAULT false)
 RETURNS SETOF text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_tables  regclass[];
    v_tenant  boolean[];
    v_parts   regclass[];
    v_parents regclass[];
BEGIN
    -- read the lists first: the registry itself is altered below
    SELECT coalesce(array_agg(r_table), '{}'), coalesce(array_agg(r_tenant), '{}')
      INTO v_tables, v_tenant FROM shardstore.rls_tables();
    SELECT coalesce(array_agg(r_table), '{}'), coalesce(array_agg(r_parent), '{}')
      INTO v_parts, v_parents FROM shardstore.rls_partition_tables();
    FOR i IN 1 .. cardinality(v_tables) LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_tables[i]);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', v_tables[i],
                       CASE WHEN p_force AND v_tenant[i] THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT v_tables[i]::text;
    END LOOP;
    FOR i IN 1 .. cardinality(v_parts) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_policy p
                        WHERE p.polrelid = v_parts[i] AND p.polname = 'tenant_isolation') THEN
            PERFORM shardstore.rls_install_policy(v_parts[i], v_parents[i]);
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_parts[i]);
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', v_parts[i],
                       CASE WHEN p_force THEN 'FORCE' ELSE 'NO FORCE' END);
        RETURN NEXT v_parts[i]::text;
    END LOOP;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.enable_rls_v2(boolean) FROM PUBLIC;
