-- Claims an artifact row for an object put (file or s3 backend). A new row is inserted
-- 'uploading', marked unreferenced from now: 'claimed'. An existing one is locked FOR UPDATE
-- (waiting for a sweep that holds it while it removes the object): 'ready' gives 'existing'
-- (a mark re-stamped, required_for_resume OR-ed, tokens filled); a row of another backend
-- not ready gives 'busy'; else the row is taken over ('uploading', our key): 'claimed'. A row
-- swept between the insert and the lock is inserted again, at most 5 times, then 'busy'.
-- Clocks are variables read after the row lock, not clock_timestamp() in the DML: Citus
-- refuses volatile functions there.
CREATE OR REPLACE FUNCTION shardstore.artifact_claim_v1(p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text, p_backend text, p_key text, p_tokens bigint, p_required boolean)
 RETURNS TABLE(r_status text, r_content_type text, r_size bigint, r_tokens bigint, r_required boolean, r_backend text, r_key text, r_created_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_found shardstore.artifacts%ROWTYPE;
    v_now   timestamptz;
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        v_now := clock_timestamp();
        INSERT INTO shardstore.artifacts AS a
               (tenant_id, artifact_id, sha256, size_bytes, content_type, backend, object_key,
                state, tokens, required_for_resume, created_at, unreferenced_since)
        VALUES (p_tenant, p_artifact, p_sha256, p_size, p_content_type, p_backend, p_key,
                'uploading', p_tokens, p_required, v_now, v_now)
        ON CONFLICT (tenant_id, artifact_id) DO NOTHING;
        IF FOUND THEN
            r_status := 'claimed'; r_content_type := p_content_type; r_size := p_size;
            r_tokens := p_tokens; r_required := p_required; r_backend := p_backend;
            r_key := p_key; r_created_at := v_now;
            RETURN NEXT;
            RETURN;
        END IF;
        -- waits for a sweep removing the object (it holds the row while it does)
        SELECT * INTO v_found FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
        IF FOUND THEN
            v_now := clock_timestamp();
            IF v_found.state = 'ready' THEN
                UPDATE shardstore.artifacts a
                   SET unreferenced_since = CASE WHEN a.unreferenced_since IS NULL THEN NULL
                                                 ELSE v_now END,
                       required_for_resume = a.required_for_resume OR p_required,
                       tokens = coalesce(a.tokens, p_tokens)
                 WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
                r_status := 'existing';
            ELSIF v_found.backend <> p_backend THEN
                r_status := 'busy';
            ELSE
                UPDATE shardstore.artifacts a
                   SET state = 'uploading', unreferenced_since = v_now, object_key = p_key
                 WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
                r_status := 'claimed';
            END IF;
            r_content_type := v_found.content_type; r_size := v_found.size_bytes;
            r_tokens := coalesce(v_found.tokens, p_tokens);
            r_required := v_found.required_for_resume OR p_required;
            r_backend := v_found.backend; r_key := v_found.object_key;
            r_created_at := v_found.created_at;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
    r_status := 'busy';
    RETURN NEXT;
END
$function$;
