-- As in 0006, in PL/pgSQL (Citus refused the SQL wrapper of a DDL function).
CREATE OR REPLACE FUNCTION shardstore.enable_rls_v1(p_force boolean DEFAULT false)
 RETURNS SETOF text
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM shardstore.enable_rls_v2(p_force);
END
$function$;
REVOKE ALL ON ROUTINE shardstore.enable_rls_v1(boolean) FROM PUBLIC;
