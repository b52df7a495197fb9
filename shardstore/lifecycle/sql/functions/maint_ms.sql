-- A lock timeout as the text SET lock_timeout takes (whole milliseconds, at least 1).
CREATE OR REPLACE FUNCTION shardstore.maint_ms(p_timeout interval)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT greatest(1, round(extract(epoch FROM p_timeout) * 1000))::bigint || 'ms' $function$;
