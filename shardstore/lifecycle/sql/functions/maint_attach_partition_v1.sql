-- Attaches the table made by maint_prepare_partition (creating it if missing), waiting at
-- most p_lock_timeout for the SHARE UPDATE EXCLUSIVE lock on agent_history (which inserts do
-- not conflict with). Returns true when the partition is attached (by this call or before),
-- false when the lock wait timed out: the caller retries after a pause.
CREATE OR REPLACE FUNCTION shardstore.maint_attach_partition_v1(p_lower timestamp with time zone, p_upper timestamp with time zone, p_lock_timeout interval)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_name     text := shardstore.maint_prepare_partition(p_lower, p_upper);
    v_attached boolean;
BEGIN
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached THEN
        RETURN true;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
    BEGIN
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I'
                       ' FOR VALUES FROM (%L) TO (%L)', v_name, p_lower, p_upper);
    EXCEPTION
        WHEN lock_not_available THEN
            RETURN false;
        WHEN OTHERS THEN
            -- a writer attached it while this call waited: fine; anything else is an error
            SELECT c.relispartition INTO v_attached
              FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
            IF v_attached IS NOT TRUE THEN
                RAISE;
            END IF;
    END;
    RETURN true;
END
$function$;
