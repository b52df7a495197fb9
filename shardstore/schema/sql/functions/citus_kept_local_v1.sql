-- Registered tables that distribute() keeps on the coordinator instead of distributing, with
-- the reason: none (an empty result); the distribute statements exclude whatever it lists.
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
 RETURNS TABLE(r_table regclass, r_reason text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NULL::regclass, NULL::text WHERE false
$function$;
