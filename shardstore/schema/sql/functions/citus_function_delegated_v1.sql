-- Whether Citus delegates calls of p_fn by one of its arguments.
CREATE OR REPLACE FUNCTION shardstore.citus_function_delegated_v1(p_fn regprocedure)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_found boolean;
BEGIN
    EXECUTE 'SELECT distribution_argument_index IS NOT NULL FROM pg_dist_object
              WHERE classid = ''pg_proc''::regclass AND objid = $1'
       INTO v_found USING p_fn;
    RETURN coalesce(v_found, false);
END
$function$;
