-- Tables that hold agent_history rows but are not (or no longer fully) attached to it:
-- partitions being detached (DETACH ... CONCURRENTLY pending) and detached ones waiting for
-- maintenance to archive and drop them. Queries on agent_history do not reach them, so a
-- purge clears them directly.
CREATE OR REPLACE FUNCTION shardstore.purge_detached_tables()
 RETURNS SETOF regclass
 LANGUAGE sql
 STABLE
AS $function$
    SELECT c.oid::regclass
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
     WHERE n.nspname = 'shardstore' AND c.relkind = 'r'
       AND c.relname LIKE 'agent\_history\_%'
       AND (i.inhrelid IS NULL OR i.inhdetachpending)
     ORDER BY c.oid
$function$;
