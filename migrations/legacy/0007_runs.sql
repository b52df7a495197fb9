-- 0007: runs, a small shadow record of each agent run in flight (shardstore/runs.py,
-- docs/architecture.md "Runs"): its framework and resume handle (thread_key), its status
-- running / awaiting_human / done / failed, what it waits for and since when, steps, cost.
--
-- Session-scoped like every table beside the history: session_id NOT NULL, every key
-- starts with it (Citus: distributed by session_id), tenant_id copied from the session so
-- that the RLS policy compares a column (no subquery). One registry call covers purges,
-- retention and Row-Level Security.
--
-- The writers are the PL/pgSQL functions below. They take the purge guard on the session
-- (shardstore.purge_guard_v1: a KEY SHARE lock, SS404 / SS410), compute now() into a
-- variable before any DML (no volatile calls inside DML on a session table), and report
-- what happened in r_outcome instead of raising, so that the client raises the typed error
-- (RunNotFound, RunClosed, RunConflict) without a savepoint:
--   'created' / 'existing' (open), 'ok' (an update), 'not_found', 'closed', 'conflict'.

CREATE TABLE shardstore.runs (
    session_id     uuid NOT NULL,
    run_id         uuid NOT NULL,
    tenant_id      text NOT NULL,
    framework      text NOT NULL,
    thread_key     text NOT NULL,
    status         text NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'awaiting_human', 'done', 'failed')),
    awaiting       jsonb,
    awaiting_since timestamptz,
    steps          bigint NOT NULL DEFAULT 0 CHECK (steps >= 0),
    usd_cost       double precision NOT NULL DEFAULT 0
        CHECK (usd_cost >= 0 AND usd_cost < 'Infinity'::double precision),
    error          text,
    metadata       jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    closed_at      timestamptz,
    PRIMARY KEY (session_id, run_id),
    CHECK ((status = 'awaiting_human') = (awaiting_since IS NOT NULL)),
    CHECK ((status = 'awaiting_human') = (awaiting IS NOT NULL)),
    CHECK ((status IN ('done', 'failed')) = (closed_at IS NOT NULL)),
    CHECK (error IS NULL OR status = 'failed')
);

-- get_run and the updates find a run by its id alone
CREATE INDEX runs_run_id ON shardstore.runs (run_id);
-- "what is waiting on a human?" per tenant, oldest first: one index range scan
CREATE INDEX runs_awaiting ON shardstore.runs (tenant_id, awaiting_since)
    WHERE status = 'awaiting_human';
-- listings by tenant and status (runs(tenant_id=..., status=...)), newest first
CREATE INDEX runs_tenant_status ON shardstore.runs (tenant_id, status, created_at);

SELECT shardstore.register_session_table_v1('shardstore.runs', tenant_column => 'tenant_id',
                                            note => 'agent runs in flight (0007)');

-- Opens a run in a live session. A run id already known (a retry of the same open) returns
-- that run when its session, framework and thread_key match ('existing'), else 'conflict'
-- with the run found. Run ids are unique: opens of one id serialise on an advisory lock.
CREATE FUNCTION shardstore.run_open_v1(p_run_id uuid, p_session_id uuid, p_framework text,
                                       p_thread_key text, p_metadata jsonb)
RETURNS TABLE (r_outcome text, r_run shardstore.runs)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := now();
    v_tenant text;
    v_row    shardstore.runs;
BEGIN
    PERFORM shardstore.purge_guard_v1(p_session_id);
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
$$;

-- Changes a run that is not closed. p_action:
--   'await'  status awaiting_human, awaiting = p_awaiting, awaiting_since = now
--   'resume' back to running (awaiting cleared); a running run is returned unchanged
--   'step'   steps += p_steps, usd_cost += p_cost
--   'close'  status p_status ('done' | 'failed'), error = p_error, closed_at = now
-- A closed run is returned unchanged with 'closed'; an unknown one gives 'not_found'.
CREATE FUNCTION shardstore.run_update_v1(p_run_id uuid, p_action text, p_awaiting jsonb,
                                         p_steps bigint, p_cost double precision,
                                         p_status text, p_error text)
RETURNS TABLE (r_outcome text, r_run shardstore.runs)
LANGUAGE plpgsql
AS $$
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
    PERFORM shardstore.purge_guard_v1(v_sid);
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
$$;
