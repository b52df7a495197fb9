-- Changes a run that is not closed. p_action:
--   'await'  status awaiting_human, awaiting = p_awaiting, awaiting_since = now
--   'resume' back to running (awaiting cleared); a running run is returned unchanged
--   'step'   steps += p_steps, usd_cost += p_cost
--   'close'  status p_status ('done' | 'failed'), error = p_error, closed_at = now
-- A closed run is returned unchanged with 'closed'; an unknown one gives 'not_found'.
CREATE OR REPLACE FUNCTION shardstore.run_update_v1(p_run_id uuid, p_action text, p_awaiting jsonb, p_steps bigint, p_cost double precision, p_status text, p_error text)
 RETURNS TABLE(r_outcome text, r_run shardstore.runs)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := now();
    v_sid uuid;
    v_row shardstore.runs;
BEGIN
    IF p_action NOT IN ('await', 'resume', 'step', 'close')
       OR (p_action = 'close' AND p_status IS DISTINCT FROM 'done' AND p_status IS DISTINCT FROM 'failed') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('run_update_v1: bad action %L / status %L', p_action, p_status);
    END IF;
    SELECT r.session_id INTO v_sid FROM shardstore.runs r WHERE r.run_id = p_run_id
     ORDER BY r.created_at, r.session_id LIMIT 1;
    IF NOT FOUND THEN
        r_outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    -- the session first, then the run: the order a purge takes them in
    PERFORM shardstore.purge_guard(v_sid);
    SELECT * INTO v_row FROM shardstore.runs r
     WHERE r.session_id = v_sid AND r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        r_outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_row.status IN ('done', 'failed') THEN
        r_outcome := 'closed';
        r_run := v_row;
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_action = 'await' THEN
        UPDATE shardstore.runs r
           SET status = 'awaiting_human', awaiting = p_awaiting, awaiting_since = v_now,
               updated_at = v_now
         WHERE r.session_id = v_sid AND r.run_id = p_run_id
        RETURNING * INTO v_row;
    ELSIF p_action = 'resume' THEN
        IF v_row.status = 'awaiting_human' THEN
            UPDATE shardstore.runs r
               SET status = 'running', awaiting = NULL, awaiting_since = NULL, updated_at = v_now
             WHERE r.session_id = v_sid AND r.run_id = p_run_id
            RETURNING * INTO v_row;
        END IF;
    ELSIF p_action = 'step' THEN
        UPDATE shardstore.runs r
           SET steps = r.steps + p_steps, usd_cost = r.usd_cost + p_cost, updated_at = v_now
         WHERE r.session_id = v_sid AND r.run_id = p_run_id
        RETURNING * INTO v_row;
    ELSE
        UPDATE shardstore.runs r
           SET status = p_status, error = p_error, awaiting = NULL, awaiting_since = NULL,
               closed_at = v_now, updated_at = v_now
         WHERE r.session_id = v_sid AND r.run_id = p_run_id
        RETURNING * INTO v_row;
    END IF;
    r_outcome := 'ok';
    r_run := v_row;
    RETURN NEXT;
END
$function$;
