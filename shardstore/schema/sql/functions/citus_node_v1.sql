-- This node's Citus group (0: the coordinator) and the active primary workers.
CREATE OR REPLACE FUNCTION shardstore.citus_node_v1(OUT r_group integer, OUT r_workers integer)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    EXECUTE 'SELECT (SELECT groupid FROM pg_dist_local_group),
                    (SELECT count(*)::int FROM pg_dist_node
                      WHERE groupid <> 0 AND noderole = ''primary'' AND isactive)'
       INTO r_group, r_workers;
END
$function$;
