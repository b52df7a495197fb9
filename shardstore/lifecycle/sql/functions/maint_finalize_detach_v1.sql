-- Finishes a DETACH ... CONCURRENTLY that was interrupted (the partition is left "detach
-- pending": invisible to new queries, refusing inserts). Waits at most p_lock_timeout.
-- Returns true when the table is no longer a partition, false on a lock timeout.
CREATE OR REPLACE FUNCTION shardstore.maint_finalize_detach_v1(p_name text, p_lock_timeout interval)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_inherits i
                    WHERE i.inhrelid = to_regclass(format('shardstore.%I', p_name))
                      AND i.inhparent = 'shardstore.agent_history'::regclass) THEN
        RETURN true;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
    EXECUTE format('ALTER TABLE shardstore.agent_history DETACH PARTITION shardstore.%I FINALIZE', p_name);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$;
