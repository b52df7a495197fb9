-- Statements of partition maintenance (partition_manager.runner). The steps themselves are
-- the maint_*_v1 functions of migrations/0003_maintenance.sql.

-- name: maint_try_lock
SELECT pg_try_advisory_lock(%s);

-- name: maint_unlock
SELECT pg_advisory_unlock(%s);

-- name: maint_now
SELECT now(), extract(epoch FROM partition_interval)::float8, partition_origin
  FROM shardstore.config;

-- name: maint_partitions
SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending,
       pg_total_relation_size(c.oid),
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
            ELSE coalesce(pg_stat_get_live_tuples(c.oid), 0) END
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'shardstore.agent_history'::regclass;

-- name: maint_standalone
SELECT c.relname::text, pg_total_relation_size(c.oid),
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
            ELSE coalesce(pg_stat_get_live_tuples(c.oid), 0) END
  FROM pg_class c
 WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
   AND c.relname ~ '^agent_history_[pr][0-9]{8}t[0-9]{6}$';

-- name: maint_detach_pending
SELECT i.inhdetachpending
  FROM pg_inherits i
 WHERE i.inhparent = 'shardstore.agent_history'::regclass
   AND i.inhrelid = to_regclass('shardstore.' || quote_ident(%s));

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

-- name: maint_count_expiring
SELECT (SELECT count(*) FROM shardstore.sessions
         WHERE purged_at IS NULL AND coalesce(last_turn_at, created_at) < %s),
       (SELECT count(*) FROM shardstore.turn_buffer WHERE created_at < %s);

-- name: maint_get_lock_timeout
SELECT current_setting('lock_timeout');

-- name: maint_set_local_lock_timeout
SELECT set_config('lock_timeout', %s, true);

-- name: maint_set_lock_timeout
SELECT set_config('lock_timeout', %s, false);

-- name: maint_log_run
SELECT shardstore.maint_log_run_v1('python', %s, %s, %s::jsonb);

-- name: maint_last_run
SELECT run_id, source, started_at, finished_at, healthy, report::text
  FROM shardstore.maintenance_runs ORDER BY run_id DESC LIMIT 1;
