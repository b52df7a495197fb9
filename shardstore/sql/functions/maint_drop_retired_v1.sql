CREATE OR REPLACE FUNCTION shardstore.maint_drop_retired_v1(p_name text, p_lock_timeout interval)
 RETURNS bigint
 LANGUAGE sql
AS $function$ SELECT shardstore.maint_drop_retired_v2(p_name, p_lock_timeout) $function$;
