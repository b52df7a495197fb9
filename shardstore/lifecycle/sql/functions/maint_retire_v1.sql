-- Renames a detached (expired) partition table agent_history_pX to agent_history_rX, so that
-- no writer can re-attach it (ensure_partition_v1 looks for the p name) while it is archived
-- and dropped. Returns the new name; a table already renamed is returned as is.
CREATE OR REPLACE FUNCTION shardstore.maint_retire_v1(p_name text, p_lock_timeout interval)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_new  text;
    v_part boolean;
BEGIN
    IF p_name LIKE 'agent_history\_r%' THEN
        RETURN p_name;
    END IF;
    IF p_name NOT LIKE 'agent_history\_p%' THEN
        RAISE EXCEPTION 'not a partition table name: %', p_name;
    END IF;
    v_new := 'agent_history_r' || substr(p_name, length('agent_history_p') + 1);
    SELECT c.relispartition INTO v_part
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', p_name));
    IF v_part IS NULL THEN
        IF to_regclass(format('shardstore.%I', v_new)) IS NOT NULL THEN
            RETURN v_new;
        END IF;
        RAISE EXCEPTION 'table shardstore.% does not exist', p_name;
    END IF;
    IF v_part THEN
        RAISE EXCEPTION 'shardstore.% is still a partition of agent_history', p_name;
    END IF;
    IF to_regclass(format('shardstore.%I', v_new)) IS NOT NULL THEN
        -- an earlier retired copy of the same range still waits for its archive: that one
        -- goes first (the next run retires this one)
        RAISE EXCEPTION 'shardstore.% is still waiting to be archived and dropped', v_new;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
    EXECUTE format('ALTER TABLE shardstore.%I RENAME TO %I', p_name, v_new);
    RETURN v_new;
END
$function$;
