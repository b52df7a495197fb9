-- Statements of the store's metrics (shardstore.integrations.metrics).

-- name: metrics_snapshot
-- Every database-derived gauge in one statement, one row, per scrape. Reads counts, ages
-- and times only (never a message, fact or payload), so an operator role needs SELECT on
-- these columns alone (docs/integrations/telemetry.md): turn_buffer.created_at,
-- embed_queue.queued_at, runs.status and awaiting_since, maintenance_runs.run_id,
-- finished_at and healthy, and config's partition_interval and partition_origin; the
-- partitions come from the catalog. Partitions ahead are counted as partition_manager's
-- plan counts them: consecutive attached partitions after the current one.
WITH cfg AS (
    SELECT partition_interval AS step,
           date_bin(partition_interval, now(), partition_origin) AS current_lower
      FROM shardstore.config
), attached AS (
    SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                         'FROM \(''([^'']+)''\) TO'))[1]::timestamptz AS lower
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'shardstore.agent_history'::regclass AND NOT i.inhdetachpending
), ahead AS (
    SELECT (SELECT min(k) - 1
              FROM generate_series(1, (SELECT count(*) FROM attached) + 1) AS k
             WHERE NOT EXISTS (SELECT 1 FROM attached a
                                WHERE a.lower = cfg.current_lower + k * cfg.step)) AS n,
           EXISTS (SELECT 1 FROM attached a WHERE a.lower = cfg.current_lower) AS current
      FROM cfg
)
SELECT (SELECT count(*) FROM shardstore.embed_queue) AS embedding_backlog,
       coalesce(ahead.n, 0) AS partitions_ahead,
       CASE WHEN ahead.current
            THEN extract(epoch FROM cfg.current_lower + (ahead.n + 1) * cfg.step - now())
            ELSE 0 END::float8 AS partitions_ahead_seconds,
       buffer.turns AS buffered_turns,
       extract(epoch FROM now() - buffer.oldest)::float8 AS oldest_buffered_age_seconds,
       awaiting.runs AS runs_awaiting_human,
       extract(epoch FROM now() - awaiting.oldest)::float8 AS oldest_awaiting_age_seconds,
       extract(epoch FROM last.finished_at)::float8 AS last_maintenance_time,
       last.healthy AS last_maintenance_healthy
-- one row even before a store's first connect() has written the config row
  FROM (SELECT count(*) AS turns, min(created_at) AS oldest
          FROM shardstore.turn_buffer) AS buffer
  LEFT JOIN cfg ON true
  LEFT JOIN ahead ON true
 CROSS JOIN (SELECT count(*) AS runs, min(awaiting_since) AS oldest
               FROM shardstore.runs WHERE status = 'awaiting_human') AS awaiting
  LEFT JOIN (SELECT finished_at, healthy FROM shardstore.maintenance_runs
              ORDER BY run_id DESC LIMIT 1) AS last ON true;

-- name: metrics_session_tenant
-- the tenant an append's session belongs to, once per session and process, for the
-- appends-by-tenant counters (only while a meter provider is set)
SELECT tenant_id FROM shardstore.sessions WHERE session_id = %s;
