-- Makes Citus create p_fn on every node; with p_argument, delegates its calls to the
-- worker holding that argument's session (colocated with shardstore.sessions).
CREATE OR REPLACE FUNCTION shardstore.citus_distribute_function_v1(p_fn regprocedure, p_argument text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_argument IS NULL THEN
        EXECUTE 'SELECT create_distributed_function($1)' USING p_fn;
    ELSE
        EXECUTE 'SELECT create_distributed_function($1, $2, colocate_with => ''shardstore.sessions'')'
          USING p_fn, p_argument;
    END IF;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.citus_distribute_function_v1(regprocedure,text) FROM PUBLIC;
