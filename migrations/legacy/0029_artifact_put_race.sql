-- 0029: a Postgres-backend put that meets a sweep deleting the same artifact.
--
-- artifact_commit_pg_v1 (0014) inserted the artifact row ON CONFLICT DO NOTHING and, on a
-- conflict, deleted its own chunks and then locked the existing row. A sweep that deleted
-- that row in between (the content was unreferenced, grace zero) left it locking nothing:
-- the function returned 'existing' with NULL columns (put_artifact failed with a TypeError
-- in tests/test_artifacts.py::test_sweep_racing_new_references_never_deletes_a_referenced_object,
-- about 1 run in 9), and its chunks were already gone. Now, as artifact_claim_v1 does for
-- object backends: lock the existing row first; if a sweep removed it, insert again (the
-- chunks are still there); the chunks are deleted only once an existing ready row is found.
CREATE OR REPLACE FUNCTION shardstore.artifact_commit_pg_v1(
    p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text,
    p_key text, p_upload uuid, p_chunk_digests text[], p_tokens bigint, p_required boolean)
RETURNS TABLE (r_status text, r_content_type text, r_size bigint, r_tokens bigint,
               r_required boolean, r_backend text, r_key text, r_created_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_bad   bigint;
    v_found shardstore.artifacts%ROWTYPE;
BEGIN
    SELECT count(*) INTO v_bad
      FROM unnest(p_chunk_digests) WITH ORDINALITY AS d(digest, ord)
      LEFT JOIN shardstore.artifact_chunks c ON c.upload_id = p_upload AND c.chunk_no = d.ord - 1
     WHERE c.data IS NULL OR encode(sha256(c.data), 'hex') <> d.digest;
    IF v_bad > 0 OR (SELECT count(*) FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload)
                    <> cardinality(p_chunk_digests) THEN
        DELETE FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload;
        r_status := 'corrupt';
        RETURN NEXT;
        RETURN;
    END IF;
    FOR attempt IN 1 .. 5 LOOP
        INSERT INTO shardstore.artifacts AS a
               (tenant_id, artifact_id, sha256, size_bytes, content_type, backend, object_key,
                state, upload_id, tokens, required_for_resume, created_at, unreferenced_since)
        VALUES (p_tenant, p_artifact, p_sha256, p_size, p_content_type, 'postgres', p_key,
                'ready', p_upload, p_tokens, p_required, clock_timestamp(), clock_timestamp())
        ON CONFLICT (tenant_id, artifact_id) DO NOTHING;
        IF FOUND THEN
            r_status := 'created'; r_content_type := p_content_type; r_size := p_size;
            r_tokens := p_tokens; r_required := p_required; r_backend := 'postgres'; r_key := p_key;
            r_created_at := clock_timestamp();
            RETURN NEXT;
            RETURN;
        END IF;
        -- waits for a sweep removing it (the sweep holds the row while it deletes)
        SELECT * INTO v_found FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
        IF FOUND THEN
            IF v_found.state <> 'ready' THEN
                -- another backend's put in flight or being swept: the caller retries
                DELETE FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload;
                r_status := 'busy';
                RETURN NEXT;
                RETURN;
            END IF;
            -- the same content is stored already: ours is not needed
            DELETE FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload;
            UPDATE shardstore.artifacts a
               SET unreferenced_since = CASE WHEN a.unreferenced_since IS NULL THEN NULL
                                             ELSE clock_timestamp() END,
                   required_for_resume = a.required_for_resume OR p_required,
                   tokens = coalesce(a.tokens, p_tokens)
             WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
            r_status := 'existing'; r_content_type := v_found.content_type;
            r_size := v_found.size_bytes; r_tokens := coalesce(v_found.tokens, p_tokens);
            r_required := v_found.required_for_resume OR p_required;
            r_backend := v_found.backend; r_key := v_found.object_key;
            r_created_at := v_found.created_at;
            RETURN NEXT;
            RETURN;
        END IF;
        -- a sweep deleted it between the insert and the lock: insert again
    END LOOP;
    DELETE FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload;
    r_status := 'busy';
    RETURN NEXT;
END
$$;
