-- Commits a put to the postgres backend. The upload's chunks (named by tenant and upload, so
-- they are read on their shard and only the digests travel) must match p_chunk_digests
-- (numbered 0..n-1, sha256 of each, computed here); else they are deleted and the result is
-- 'corrupt'. Then the row is inserted 'ready', unreferenced since now ('created'); when the
-- content is stored already, the row is locked FOR UPDATE (waiting for a sweep that holds it
-- while deleting), our chunks are dropped, and the result is 'existing' (the row touched: a
-- mark re-stamped, required_for_resume OR-ed, tokens filled) or 'busy' when the row is not
-- 'ready'. A row swept between the insert and the lock is inserted again, at most 5 times,
-- then 'busy'. Clocks are variables, not clock_timestamp() in the DML: Citus refuses it.
CREATE OR REPLACE FUNCTION shardstore.artifact_commit_pg_v1(p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text, p_key text, p_upload uuid, p_chunk_digests text[], p_tokens bigint, p_required boolean)
 RETURNS TABLE(r_status text, r_content_type text, r_size bigint, r_tokens bigint, r_required boolean, r_backend text, r_key text, r_created_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_digests text[];
    v_nos     integer[];
    v_found   shardstore.artifacts%ROWTYPE;
    v_now     timestamptz;
BEGIN
    SELECT coalesce(array_agg(encode(sha256(c.data), 'hex') ORDER BY c.chunk_no), '{}'),
           coalesce(array_agg(c.chunk_no ORDER BY c.chunk_no), '{}')
      INTO v_digests, v_nos
      FROM shardstore.artifact_chunks c
     WHERE c.tenant_id = p_tenant AND c.upload_id = p_upload;
    IF v_digests IS DISTINCT FROM p_chunk_digests
       OR v_nos IS DISTINCT FROM ARRAY(SELECT g::integer
                                         FROM generate_series(0, cardinality(p_chunk_digests) - 1) g) THEN
        DELETE FROM shardstore.artifact_chunks c
         WHERE c.tenant_id = p_tenant AND c.upload_id = p_upload;
        r_status := 'corrupt';
        RETURN NEXT;
        RETURN;
    END IF;
    FOR attempt IN 1 .. 5 LOOP
        v_now := clock_timestamp();
        INSERT INTO shardstore.artifacts AS a
               (tenant_id, artifact_id, sha256, size_bytes, content_type, backend, object_key,
                state, upload_id, tokens, required_for_resume, created_at, unreferenced_since)
        VALUES (p_tenant, p_artifact, p_sha256, p_size, p_content_type, 'postgres', p_key,
                'ready', p_upload, p_tokens, p_required, v_now, v_now)
        ON CONFLICT (tenant_id, artifact_id) DO NOTHING;
        IF FOUND THEN
            r_status := 'created'; r_content_type := p_content_type; r_size := p_size;
            r_tokens := p_tokens; r_required := p_required; r_backend := 'postgres'; r_key := p_key;
            r_created_at := v_now;
            RETURN NEXT;
            RETURN;
        END IF;
        -- waits for a sweep removing it (the sweep holds the row while it deletes)
        SELECT * INTO v_found FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
        IF FOUND THEN
            DELETE FROM shardstore.artifact_chunks c
             WHERE c.tenant_id = p_tenant AND c.upload_id = p_upload;
            IF v_found.state <> 'ready' THEN
                -- another backend's put in flight or being swept: the caller retries
                r_status := 'busy';
                RETURN NEXT;
                RETURN;
            END IF;
            -- the same content is stored already: ours is not needed
            v_now := clock_timestamp();
            UPDATE shardstore.artifacts a
               SET unreferenced_since = CASE WHEN a.unreferenced_since IS NULL THEN NULL
                                             ELSE v_now END,
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
    DELETE FROM shardstore.artifact_chunks c WHERE c.tenant_id = p_tenant AND c.upload_id = p_upload;
    r_status := 'busy';
    RETURN NEXT;
END
$function$;
