-- the in-database procedure (run_maintenance) calls the v1 names: they do what v2 does
CREATE OR REPLACE FUNCTION shardstore.maint_expire_rows_v1(p_before timestamp with time zone, p_batch integer)
 RETURNS TABLE(r_sessions bigint, r_turns bigint)
 LANGUAGE sql
AS $function$ SELECT * FROM shardstore.maint_expire_rows_v2(p_before, p_batch) $function$;
