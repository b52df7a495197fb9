-- Creates the standalone table for [p_lower, p_upper): agent_history's columns, defaults,
-- indexes and a CHECK matching the bounds (so that ATTACH skips its validation scan).
-- Locks nothing but the new table. Does nothing when the table exists. Returns its name.
CREATE OR REPLACE FUNCTION shardstore.maint_prepare_partition(p_lower timestamp with time zone, p_upper timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_name text := shardstore.maint_partition_name_v1(p_lower);
BEGIN
    IF to_regclass(format('shardstore.%I', v_name)) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.agent_history INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)',
                           v_name);
            EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                           v_name, v_name || '_bounds', p_lower, p_upper);
        EXCEPTION WHEN duplicate_table OR unique_violation OR duplicate_object THEN
            NULL;  -- a writer (ensure_partition_v1) made it concurrently
        END;
    END IF;
    RETURN v_name;
END
$function$;
