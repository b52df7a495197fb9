-- What a sealed writer locks before it reads the data key (shardstore/encryption/turns.py),
-- held to its commit: a data-key rotation's final check takes the conflicting lock, so a
-- writer that read the key before the rotation made a new version current commits before
-- that check (which then finds its value), and one that locks after it reads the new
-- version (docs/decisions/0024-key-rotation.md).

-- name: sealed_writer_session
-- a session's owners, its row locked FOR KEY SHARE: conflicts only with the rotation's FOR
-- UPDATE, so appends (FOR NO KEY UPDATE), folds and other writers go on. Filtered by the
-- session id itself, so Citus routes it, lock included, to the session's shard.
SELECT tenant_id, subject_id, purged_at IS NOT NULL AS purged
  FROM shardstore.sessions
 WHERE session_id = %s
   FOR KEY SHARE;

-- name: sealed_writer_subject
-- a subject's fact lock taken shared, as every fact writer takes it (fact_lock); the rotation
-- of the subject's key takes it exclusively for its final check (rotation_lock_subject). An
-- advisory lock holds on one node only, so both take it on the node holding the tenant's
-- facts: the one-row join over a probe of facts filtered by the tenant is routed there by
-- Citus, lock included, also from a client connected straight to a worker; on one server it
-- is a plain lock.
SELECT pg_advisory_xact_lock_shared(
         hashtextextended(jsonb_build_array('fact-subject', %(tenant)s::text,
                                            %(subject)s::text)::text, 8))
  FROM (SELECT 1 FROM shardstore.facts f WHERE f.tenant_id = %(tenant)s LIMIT 1) AS probe
 RIGHT JOIN (VALUES (1)) AS one (v) ON true;
