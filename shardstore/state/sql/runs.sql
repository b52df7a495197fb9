-- Runs (shardstore/state/runs.py): the writers are the functions run_open_v1 / run_update_v1;
-- every statement returns a run's columns by name (awaiting and metadata as JSON text, read
-- by jsoncodec), the writers an outcome beside them.

-- name: run_open
SELECT f.r_outcome AS outcome, (f.r_run).session_id, (f.r_run).run_id, (f.r_run).tenant_id,
       (f.r_run).framework, (f.r_run).thread_key, (f.r_run).status,
       (f.r_run).awaiting::text AS awaiting, (f.r_run).awaiting_since, (f.r_run).steps,
       (f.r_run).usd_cost, (f.r_run).error, (f.r_run).metadata::text AS metadata,
       (f.r_run).created_at, (f.r_run).updated_at, (f.r_run).closed_at
  FROM shardstore.run_open_v1(%s, %s, %s, %s, %s::jsonb) f;

-- name: run_update
SELECT f.r_outcome AS outcome, (f.r_run).session_id, (f.r_run).run_id, (f.r_run).tenant_id,
       (f.r_run).framework, (f.r_run).thread_key, (f.r_run).status,
       (f.r_run).awaiting::text AS awaiting, (f.r_run).awaiting_since, (f.r_run).steps,
       (f.r_run).usd_cost, (f.r_run).error, (f.r_run).metadata::text AS metadata,
       (f.r_run).created_at, (f.r_run).updated_at, (f.r_run).closed_at
  FROM shardstore.run_update_v1(%s, %s, %s::jsonb, %s, %s, %s, %s) f;

-- name: run_get
SELECT session_id, run_id, tenant_id, framework, thread_key, status, awaiting::text AS awaiting,
       awaiting_since, steps, usd_cost, error, metadata::text AS metadata, created_at,
       updated_at, closed_at
  FROM shardstore.runs
 WHERE run_id = %s
 ORDER BY created_at, session_id
 LIMIT 1;

-- name: run_list_awaiting
-- a tenant's runs waiting on a human: a range scan of the partial index runs_awaiting
SELECT r.session_id, r.run_id, r.tenant_id, r.framework, r.thread_key, r.status,
       r.awaiting::text AS awaiting, r.awaiting_since, r.steps, r.usd_cost, r.error,
       r.metadata::text AS metadata, r.created_at, r.updated_at, r.closed_at
  FROM shardstore.runs r
 WHERE r.tenant_id = %(tenant)s::text AND r.status = 'awaiting_human'
   AND (%(framework)s::text IS NULL OR r.framework = %(framework)s::text)
   AND (%(session)s::uuid IS NULL OR r.session_id = %(session)s::uuid)
 ORDER BY r.awaiting_since, r.created_at DESC, r.run_id
 LIMIT %(limit)s;

-- name: run_list
-- every other listing, sent unprepared so that it is planned with its values: a session's
-- runs through the primary key, a tenant's through runs_tenant_status, else a scan
SELECT r.session_id, r.run_id, r.tenant_id, r.framework, r.thread_key, r.status,
       r.awaiting::text AS awaiting, r.awaiting_since, r.steps, r.usd_cost, r.error,
       r.metadata::text AS metadata, r.created_at, r.updated_at, r.closed_at
  FROM shardstore.runs r
 WHERE (%(session)s::uuid IS NULL OR r.session_id = %(session)s::uuid)
   AND (%(tenant)s::text IS NULL OR r.tenant_id = %(tenant)s::text)
   AND (%(status)s::text IS NULL OR r.status = %(status)s::text)
   AND (%(framework)s::text IS NULL OR r.framework = %(framework)s::text)
 ORDER BY r.awaiting_since, r.created_at DESC, r.run_id
 LIMIT %(limit)s;
