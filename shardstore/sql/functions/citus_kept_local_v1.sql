-- Nothing is kept on the coordinator any more.
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
 RETURNS TABLE(r_table regclass, r_reason text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NULL::regclass, NULL::text WHERE false
$function$;
