-- Artifacts: statements by name, see shardstore/artifacts/ and docs/artifacts.md.

-- name: artifact_chunk_put
INSERT INTO shardstore.artifact_chunks (upload_id, chunk_no, tenant_id, data)
VALUES (%s, %s, %s, %s);

-- name: artifact_commit_pg
SELECT r_status AS status, r_content_type AS content_type, r_size AS size_bytes,
       r_tokens AS tokens, r_required AS required_for_resume, r_backend AS backend,
       r_key AS object_key, r_created_at AS created_at
  FROM shardstore.artifact_commit_pg_v1(%s, %s, %s, %s, %s, %s, %s, %s::text[], %s, %s);

-- name: artifact_claim
SELECT r_status AS status, r_content_type AS content_type, r_size AS size_bytes,
       r_tokens AS tokens, r_required AS required_for_resume, r_backend AS backend,
       r_key AS object_key, r_created_at AS created_at
  FROM shardstore.artifact_claim_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: artifact_lock_upload
SELECT shardstore.artifact_lock_upload_v1(%s, %s);

-- name: artifact_mark_ready
SELECT shardstore.artifact_mark_ready_v1(%s, %s);

-- name: artifact_ref
SELECT shardstore.artifact_ref_v1(%s, %s, %s, %s, %s, %s, %s, %s);

-- name: artifact_ref_many
SELECT shardstore.artifact_ref_many_v1(%s, %s::uuid[], %s, %s::text[], %s, %s::bigint[],
                                       %s::boolean[]);

-- name: artifact_unref
-- the reference removed, its artifact marked if that was its last live one
SELECT shardstore.artifact_unref_v1(%s, %s, %s, %s);

-- name: artifact_get
SELECT a.tenant_id, a.artifact_id, a.sha256, a.size_bytes, a.content_type, a.backend,
       a.object_key, a.state, a.upload_id, a.tokens, a.required_for_resume, a.schema_version,
       a.created_at, a.unreferenced_since
  FROM shardstore.artifacts a
 WHERE a.tenant_id = %s AND a.artifact_id = %s;

-- name: artifact_chunk_count
SELECT count(*) FROM shardstore.artifact_chunks c WHERE c.tenant_id = %s AND c.upload_id = %s;

-- name: artifact_chunk_get
SELECT c.data FROM shardstore.artifact_chunks c
 WHERE c.tenant_id = %s AND c.upload_id = %s AND c.chunk_no = %s;

-- name: artifact_list
-- a tenant's artifacts, newest first, with how many live refs each has
SELECT a.tenant_id, a.artifact_id, a.sha256, a.size_bytes, a.content_type, a.backend,
       a.object_key, a.state, a.tokens, a.required_for_resume, a.schema_version, a.created_at,
       a.unreferenced_since,
       (SELECT count(*) FROM shardstore.artifact_refs r
         WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
           AND shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume,
                                               r.expires_at)) AS live_refs
  FROM shardstore.artifacts a
 WHERE a.tenant_id = %(tenant)s
   AND (%(state)s::text IS NULL OR a.state = %(state)s::text)
 ORDER BY a.created_at DESC, a.artifact_id
 LIMIT %(limit)s::bigint;

-- name: artifact_refs_of
SELECT r.artifact_id, r.owner_type, r.owner_id, r.session_id, r.turn_seq,
       r.required_for_resume, r.expires_at, r.created_at
  FROM shardstore.artifact_refs r
 WHERE r.tenant_id = %s AND r.artifact_id = %s
 ORDER BY r.owner_type, r.owner_id;

-- name: artifact_turn_refs
SELECT r.turn_seq, r.artifact_id
  FROM shardstore.artifact_refs r
 WHERE r.session_id = %s AND r.owner_type = 'turn' AND r.turn_seq = ANY (%s::bigint[]);

-- name: artifact_checkpoint_refs
SELECT a.tenant_id, a.artifact_id, a.sha256, a.size_bytes, a.content_type, a.backend,
       a.object_key, a.state, a.tokens, r.required_for_resume, a.schema_version
  FROM shardstore.artifact_refs r
  JOIN shardstore.artifacts a ON a.tenant_id = r.tenant_id AND a.artifact_id = r.artifact_id
 WHERE r.session_id = %s AND r.owner_type = 'checkpoint' AND r.owner_id = %s
 ORDER BY a.artifact_id;

-- name: artifact_session_tenant
SELECT s.tenant_id, s.purged_at IS NOT NULL AS purged FROM shardstore.sessions s
 WHERE s.session_id = %s;

-- name: artifact_session_refs
-- the artifacts a session's refs name (a session purge marks these after it)
SELECT DISTINCT r.artifact_id FROM shardstore.artifact_refs r
 WHERE r.tenant_id = %s AND r.session_id = %s;

-- name: artifacts_released
SELECT shardstore.artifacts_released_v1(%s::text[], %s::uuid[]);

-- name: artifacts_mark
-- one tenant's artifacts, or every tenant's (NULL)
SELECT r_marked AS marked, r_cleared AS cleared FROM shardstore.artifacts_mark_v2(%s, %s);

-- name: artifacts_sweep
SELECT r_tenant AS tenant_id, r_artifact AS artifact_id, r_backend AS backend,
       r_key AS object_key, r_size AS size_bytes, r_deleted AS deleted
  FROM shardstore.artifacts_sweep_v1(make_interval(secs => %s), %s, %s, %s, %s);

-- name: artifacts_deleting
-- with the sha256: the object's key is derived from (tenant, sha256), never read
SELECT r_tenant AS tenant_id, r_artifact AS artifact_id, r_backend AS backend,
       r_sha256 AS sha256, r_size AS size_bytes
  FROM shardstore.artifacts_deleting_v2(%s, %s);

-- name: artifact_erasures
SELECT r_tenant AS tenant_id, r_artifact AS artifact_id
  FROM shardstore.artifact_erasures_v1(%s, %s);

-- name: artifact_erase
SELECT r_status AS status, r_backend AS backend, r_size AS size_bytes
  FROM shardstore.artifact_erase_v1(%s, %s);

-- name: artifact_erase_tenant
SELECT shardstore.artifact_erase_tenant_v1(%s);

-- name: artifact_lock_delete
SELECT shardstore.artifact_lock_delete_v1(%s, %s);

-- name: artifact_forget
SELECT shardstore.artifact_forget_v1(%s, %s);

-- name: artifact_clock
SELECT clock_timestamp();

-- name: artifact_checkpoint_session
-- the session of a checkpoint (encryption: an artifact it owns is sealed under that
-- session's key)
SELECT c.session_id FROM shardstore.checkpoints c
 WHERE c.tenant_id = %s AND c.checkpoint_id = %s;
