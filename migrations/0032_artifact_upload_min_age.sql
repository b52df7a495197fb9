-- Artifacts: an object-backend row still 'uploading' (its client claimed it, then died or
-- is still sending) is swept only once it is an hour old, whatever the grace.
--
-- Why: the client held the row's lock while it PUT the object; when it dies, Postgres
-- releases the lock at once, but a PUT whose body was already sent can still land on the
-- S3 server afterwards. A sweep that deleted the row (and the then-absent object) at once
-- left that late object with no row, which no sweep lists (seen in
-- tests/test_artifacts_crash.py with a sweep right after each kill, SeaweedFS). An hour is
-- far beyond any PUT's timeout, the same minimum age staged files get
-- (shardstore/artifacts/sweep.py STAGING_MIN_AGE_S). 'ready' rows are unchanged.

CREATE OR REPLACE FUNCTION shardstore.artifacts_sweep_v1(
    p_grace interval, p_batch integer, p_tenant text, p_since timestamptz, p_dry_run boolean)
RETURNS TABLE (r_tenant text, r_artifact uuid, r_backend text, r_key text, r_size bigint,
               r_deleted boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_cutoff timestamptz := statement_timestamp() - p_grace;
BEGIN
    IF p_dry_run THEN
        RETURN QUERY
            SELECT a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes, false
              FROM shardstore.artifacts a
             WHERE a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
               AND (a.state = 'ready' OR a.created_at < statement_timestamp() - interval '1 hour')
               AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
               AND (p_since IS NULL OR a.unreferenced_since >= p_since)
               AND NOT shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
             LIMIT p_batch;
        RETURN;
    END IF;
    RETURN QUERY
        WITH gone AS (
            DELETE FROM shardstore.artifacts a
             WHERE (a.tenant_id, a.artifact_id) IN (
                       SELECT x.tenant_id, x.artifact_id FROM shardstore.artifacts x
                        WHERE x.unreferenced_since < v_cutoff AND x.backend = 'postgres'
                          AND (p_tenant IS NULL OR x.tenant_id = p_tenant)
                          AND (p_since IS NULL OR x.unreferenced_since >= p_since)
                        LIMIT p_batch
                          FOR UPDATE SKIP LOCKED)
               AND a.unreferenced_since < v_cutoff
               AND (p_since IS NULL OR a.unreferenced_since >= p_since)
               AND NOT shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
            RETURNING a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes, a.upload_id
        ), chunks AS (
            DELETE FROM shardstore.artifact_chunks c USING gone g WHERE c.upload_id = g.upload_id
        ), dead AS (  -- expired refs, refs of removed checkpoints
            DELETE FROM shardstore.artifact_refs r USING gone g
             WHERE r.tenant_id = g.tenant_id AND r.artifact_id = g.artifact_id
        )
        SELECT g.tenant_id, g.artifact_id, g.backend, g.object_key, g.size_bytes, true FROM gone g;
    RETURN QUERY
        UPDATE shardstore.artifacts a SET state = 'deleting'
         WHERE (a.tenant_id, a.artifact_id) IN (
                   SELECT x.tenant_id, x.artifact_id FROM shardstore.artifacts x
                    WHERE x.unreferenced_since < v_cutoff AND x.backend <> 'postgres'
                      AND x.state IN ('ready', 'uploading')
                      AND (x.state = 'ready'
                           OR x.created_at < statement_timestamp() - interval '1 hour')
                      AND (p_tenant IS NULL OR x.tenant_id = p_tenant)
                      AND (p_since IS NULL OR x.unreferenced_since >= p_since)
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
           AND a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
           AND (a.state = 'ready' OR a.created_at < statement_timestamp() - interval '1 hour')
           AND (p_since IS NULL OR a.unreferenced_since >= p_since)
           AND NOT shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
        RETURNING a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes, false;
END
$$;
