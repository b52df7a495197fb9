-- Opens a run in a live session. A run id already known (a retry of the same open) returns
-- that run when its session, framework and thread_key match ('existing'), else 'conflict'
-- with the run found. Run ids are unique: opens of one id serialise on an advisory lock.
CREATE OR REPLACE FUNCTION shardstore.run_open_v1(p_run_id uuid, p_session_id uuid, p_framework text, p_thread_key text, p_metadata jsonb)
 RETURNS TABLE(r_outcome text, r_run shardstore.runs)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now    timestamptz := now();
    v_tenant text;
    v_row    shardstore.runs;
BEGIN
    PERFORM shardstore.purge_guard(p_session_id);
    PERFORM pg_advisory_xact_lock(hashtextextended('shardstore.runs:' || p_run_id::text, 0));
    SELECT * INTO v_row FROM shardstore.runs r WHERE r.run_id = p_run_id
     ORDER BY r.created_at, r.session_id LIMIT 1;
    IF FOUND THEN
        r_run := v_row;
        IF v_row.session_id = p_session_id AND v_row.framework = p_framework
           AND v_row.thread_key = p_thread_key THEN
            r_outcome := 'existing';
        ELSE
            r_outcome := 'conflict';
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT s.tenant_id INTO v_tenant FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    INSERT INTO shardstore.runs AS r
           (session_id, run_id, tenant_id, framework, thread_key, status, steps, usd_cost,
            metadata, created_at, updated_at)
    VALUES (p_session_id, p_run_id, v_tenant, p_framework, p_thread_key, 'running', 0, 0,
            p_metadata, v_now, v_now)
    RETURNING * INTO v_row;
    r_outcome := 'created';
    r_run := v_row;
    RETURN NEXT;
END
$function$;
