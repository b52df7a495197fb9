-- The partition table name for a lower bound (the rule of ensure_partition_v1).
CREATE OR REPLACE FUNCTION shardstore.maint_partition_name_v1(p_lower timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$ SELECT 'agent_history_p' || to_char(p_lower AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS') $function$;
