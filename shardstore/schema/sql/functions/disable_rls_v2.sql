-- Turns row security off everywhere enable_rls_v2 turns it on (the policies stay, inert).
CREATE OR REPLACE FUNCTION shardstore.disable_rls_v2()
 RETURNS SETOF text
 LANGUAGE plpgsql
AS $function$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY(SELECT r_table FROM shardstore.rls_tables()
                             UNION ALL SELECT r_table FROM shardstore.rls_partition_tables()) LOOP
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', t);
        RETURN NEXT t::text;
    END LOOP;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.disable_rls_v2() FROM PUBLIC;
