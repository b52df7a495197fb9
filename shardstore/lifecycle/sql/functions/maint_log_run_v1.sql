-- Keeps the run log short: the newest 1,000 runs.
CREATE OR REPLACE FUNCTION shardstore.maint_log_run_v1(p_source text, p_started timestamp with time zone, p_healthy boolean, p_report jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO shardstore.maintenance_runs (source, started_at, healthy, report)
    VALUES (p_source, p_started, p_healthy, p_report)
    RETURNING run_id INTO v_id;
    DELETE FROM shardstore.maintenance_runs WHERE run_id <= v_id - 1000;
    RETURN v_id;
END
$function$;
