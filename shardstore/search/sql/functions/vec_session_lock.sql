-- the lock a worker holds on a session's embedding (a transaction-level advisory lock:
-- tried, never waited for, gone with the worker's transaction or connection)
CREATE OR REPLACE FUNCTION shardstore.vec_session_lock(p_session uuid)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN pg_try_advisory_xact_lock(hashtextextended('shardstore.embed:' || p_session::text, 0));
END
$function$;
