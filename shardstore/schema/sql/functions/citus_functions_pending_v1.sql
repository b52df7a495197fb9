-- shardstore's functions and procedures Citus does not know yet (the workers lack them).
CREATE OR REPLACE FUNCTION shardstore.citus_functions_pending_v1()
 RETURNS SETOF regprocedure
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT p.oid::regprocedure FROM pg_proc p
          WHERE p.pronamespace = ''shardstore''::regnamespace
            AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                             WHERE o.classid = ''pg_proc''::regclass AND o.objid = p.oid)
            -- a function taking or returning the row of a table kept local cannot be
            -- propagated (Citus: its dependency is not in the metadata); it runs on the
            -- coordinator, where that table is
            AND NOT EXISTS (SELECT 1 FROM shardstore.citus_kept_local_v1() k
                              JOIN pg_class c ON c.oid = k.r_table
                             WHERE c.reltype = ANY (p.proargtypes::oid[]) OR c.reltype = p.prorettype)
          ORDER BY p.oid';
END
$function$;
