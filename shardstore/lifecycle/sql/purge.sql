-- GDPR purge and retention (shardstore/lifecycle/purge.py): these statements plan the work
-- (which sessions, which partitions) and call the purge functions (sql/functions/purge_*.sql).

-- name: purge_session
SELECT shardstore.purge_session_v2(%s, %s);

-- name: purge_session_batch
SELECT u.sid, shardstore.purge_session_v2(u.sid, %s)
  FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(sid, ord)
 ORDER BY u.ord;

-- name: purge_range
SELECT shardstore.purge_range_v2(%s, %s, %s, %s, NULL, true);

-- name: purge_range_batch
SELECT u.sid, shardstore.purge_expired_v1(u.sid, %s, %s, %s::text[])
  FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(sid, ord)
 ORDER BY u.ord;

-- name: purge_targets
SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
  FROM shardstore.purge_targets t
  JOIN pg_class c ON c.oid = t.table_name
  JOIN pg_namespace n ON n.oid = c.relnamespace
 ORDER BY t.position, 1;

-- name: purge_subject_count
SELECT count(*) FROM shardstore.sessions
 WHERE tenant_id = %s AND subject_id = %s AND purged_at IS NULL;

-- name: purge_subject_sessions
SELECT session_id FROM shardstore.sessions
 WHERE tenant_id = %s AND subject_id = %s AND purged_at IS NULL
   AND session_id > %s
 ORDER BY session_id
 LIMIT %s;

-- name: purge_tenant_count
SELECT count(*) FROM shardstore.sessions WHERE tenant_id = %s AND purged_at IS NULL;

-- name: purge_tenant_sessions
SELECT session_id FROM shardstore.sessions
 WHERE tenant_id = %s AND purged_at IS NULL AND session_id > %s
 ORDER BY session_id
 LIMIT %s;

-- name: purge_before_count
WITH p AS (SELECT %s::timestamptz AS before, %s::text AS tenant)
SELECT count(*) FROM p, shardstore.sessions s
 WHERE s.purged_at IS NULL AND s.created_at < p.before
   AND (p.tenant IS NULL OR s.tenant_id = p.tenant)
   AND (EXISTS (SELECT 1 FROM shardstore.chunk_map m
                 WHERE m.session_id = s.session_id AND m.chunk_start < p.before)
        OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = s.session_id AND b.created_at < p.before)
        OR EXISTS (SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = s.session_id AND k.created_at < p.before));

-- name: purge_before_sessions
WITH p AS (SELECT %s::timestamptz AS before, %s::text AS tenant, %s::uuid AS after)
SELECT s.session_id FROM p, shardstore.sessions s
 WHERE s.purged_at IS NULL AND s.created_at < p.before
   AND (p.tenant IS NULL OR s.tenant_id = p.tenant)
   AND s.session_id > p.after
   AND (EXISTS (SELECT 1 FROM shardstore.chunk_map m
                 WHERE m.session_id = s.session_id AND m.chunk_start < p.before)
        OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = s.session_id AND b.created_at < p.before)
        OR EXISTS (SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = s.session_id AND k.created_at < p.before))
 ORDER BY s.session_id
 LIMIT %s;

-- name: purge_partitions
SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'shardstore.agent_history'::regclass AND NOT i.inhdetachpending
 ORDER BY c.relname;

-- name: purge_truncate_partition
SELECT shardstore.purge_truncate_partition_v1(%s, %s, %s, %s, make_interval(secs => %s));

-- name: purge_now
SELECT now();
