-- Statements of shardstore's partition maintenance (shardstore.lifecycle.maintenance). The
-- partition steps are the maint_* functions in sql/functions/, shared with
-- CALL shardstore.run_maintenance(); the advisory lock, listing and
-- DETACH ... CONCURRENTLY are partition_manager's generic statements.

-- name: maint_now
SELECT now(), extract(epoch FROM partition_interval)::float8, partition_origin
  FROM shardstore.config;

-- name: maint_history_distributed
-- Citus has no DETACH ... CONCURRENTLY: retention detaches a distributed table plainly
SELECT shardstore.is_distributed_v1('shardstore.agent_history');

-- name: maint_attach
SELECT shardstore.maint_attach_partition_v1(%s, %s, make_interval(secs => %s));

-- name: maint_finalize
SELECT shardstore.maint_finalize_detach_v1(%s, make_interval(secs => %s));

-- name: maint_retire
SELECT shardstore.maint_retire_v1(%s, make_interval(secs => %s));

-- name: maint_drop_retired
SELECT shardstore.maint_drop_retired_v2(%s, make_interval(secs => %s));

-- name: maint_fold_candidates
SELECT shardstore.maint_fold_candidates_v1(%s);

-- name: maint_fold_session
SELECT shardstore.maint_fold_session_v1(%s, %s, make_interval(secs => %s));

-- name: maint_expire_rows
SELECT r_sessions, r_turns FROM shardstore.maint_expire_rows_v2(%s, %s);

-- name: maint_fork_parents
-- every session a fork names as its parent (retention may have deleted some)
SELECT DISTINCT s.fork_parent FROM shardstore.sessions s WHERE s.fork_parent IS NOT NULL;

-- name: maint_sessions_present
SELECT s.session_id FROM shardstore.sessions s WHERE s.session_id = ANY (%s::uuid[]);

-- name: maint_forget_fork_parents
-- forks of parents that are gone: their shared turns went with the parent
UPDATE shardstore.sessions s
   SET fork_parent = NULL, fork_at = NULL, fork_chunk = NULL
 WHERE s.fork_parent = ANY (%s::uuid[])
RETURNING s.session_id;

-- name: maint_count_expiring
SELECT (SELECT count(*) FROM shardstore.sessions
         WHERE purged_at IS NULL AND coalesce(last_turn_at, created_at) < %s),
       (SELECT count(*) FROM shardstore.turn_buffer WHERE created_at < %s);

-- name: maint_log_run
SELECT shardstore.maint_log_run_v1('python', %s, %s, %s::jsonb);

-- name: maint_last_run
SELECT run_id, source, started_at, finished_at, healthy, report::text
  FROM shardstore.maintenance_runs ORDER BY run_id DESC LIMIT 1;
