-- Facts (shardstore/state/facts.py): durable memory about a subject with provenance. The writers
-- are functions (fact_remember_v1, fact_forget_v1, facts_purge_subject_v1); reads name the
-- index facts_recall's prefix.

-- name: fact_remember
SELECT r_status AS status, r_detail AS detail, r_fact_id AS fact_id,
       r_valid_from AS valid_from, r_valid_to AS valid_to, r_recorded_at AS recorded_at,
       r_closed_id AS closed_id, r_value AS value
  FROM shardstore.fact_remember_v1(%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s);

-- name: fact_forget
SELECT r_fact_id AS fact_id, r_value AS value, r_confidence AS confidence,
       r_source_session_id AS source_session_id, r_source_turn_seq AS source_turn_seq,
       r_valid_from AS valid_from, r_valid_to AS valid_to, r_recorded_at AS recorded_at
  FROM shardstore.fact_forget_v1(%s, %s, %s);

-- name: fact_recall
WITH p AS (SELECT coalesce(%s::timestamptz, clock_timestamp()) AS at)
SELECT f.tenant_id, f.fact_id, f.subject, f.key, f.value::text AS value, f.confidence,
       f.source_session_id, f.source_turn_seq, f.valid_from, f.valid_to, f.recorded_at
  FROM p, shardstore.facts f
 WHERE f.tenant_id = %s AND f.subject = %s
   AND (%s::text[] IS NULL OR f.key = ANY (%s::text[]))
   AND f.valid_from <= p.at AND (f.valid_to IS NULL OR f.valid_to > p.at)
 ORDER BY f.key;

-- name: fact_history
SELECT f.tenant_id, f.fact_id, f.subject, f.key, f.value::text AS value, f.confidence,
       f.source_session_id, f.source_turn_seq, f.valid_from, f.valid_to, f.recorded_at
  FROM shardstore.facts f
 WHERE f.tenant_id = %s AND f.subject = %s AND f.key = %s
 ORDER BY f.valid_from, f.recorded_at;

-- name: facts_purge_subject
SELECT shardstore.facts_purge_subject_v1(%s, %s, %s);

-- name: facts_purge_tenant
-- every fact of a tenant, sourced or not (purge_tenant runs it after the sessions, whose
-- purges removed the sourced ones already); a dry run only counts, leaving out facts
-- sourced in live sessions (the dry runs of those sessions' purges counted them; a fact's
-- source is a session of its tenant: an uncorrelated list of them, which Citus plans, facts
-- and sessions being distributed apart). The size is taken of the returned rows: Citus
-- allows no non-immutable function in RETURNING.
WITH gone AS (
    DELETE FROM shardstore.facts f
     WHERE f.tenant_id = %(tenant)s AND NOT %(dry_run)s
    RETURNING f.*
), counted AS (
    SELECT pg_column_size(f.*) AS sz FROM shardstore.facts f
     WHERE f.tenant_id = %(tenant)s AND %(dry_run)s
       AND (f.source_session_id IS NULL
            OR f.source_session_id NOT IN (SELECT s.session_id FROM shardstore.sessions s
                                            WHERE s.tenant_id = %(tenant)s AND s.purged_at IS NULL))
)
SELECT count(*), coalesce(sum(sz), 0)::bigint
  FROM (SELECT pg_column_size(g.*) AS sz FROM gone g UNION ALL SELECT sz FROM counted) AS both_ways;

-- name: fact_source_owner
-- the session that stores a turn of a session's view: an ancestor for a turn a fork
-- inherits, else the session itself (also when no stored chunk holds the turn, so the
-- remember reports why)
SELECT coalesce((SELECT o.r_owner FROM shardstore.fork_chunk_of_v1(%(sid)s, %(seq)s) o LIMIT 1),
                %(sid)s);
