-- The agent_history partition holding a chunk that starts at p_start (the naming rule of
-- ensure_partition_v1 with shardstore.config's interval and origin).
CREATE OR REPLACE FUNCTION shardstore.partition_name(p_start timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_name text;
BEGIN
    SELECT shardstore.maint_partition_name_v1(date_bin(c.partition_interval, p_start, c.partition_origin))
      INTO v_name FROM shardstore.config c;
    RETURN v_name;
END
$function$;
