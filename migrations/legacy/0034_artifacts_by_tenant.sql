-- 0034: the artifact tables distributed by tenant on Citus (issue 17). `artifacts`,
-- `artifact_chunks` and `artifact_refs` go by tenant_id into the colocation group of the
-- other tenant-keyed tables (facts): every statement about one tenant's artifacts runs on
-- one worker, and the sweep's snapshot argument (0014, 0033) holds there. What Citus
-- refused in the artifact functions, and how each differs from its previous body:
--   * statements reading chunks by upload_id alone (a scan of every shard): the tenant is
--     named too, and artifact_chunks' key is (tenant_id, upload_id, chunk_no);
--   * clock_timestamp() inside UPDATE (volatile functions in DML on a distributed table):
--     taken into a variable after the row is locked (the mark is still later than any
--     reference the lock waited for: the argument at the top of 0014 holds);
--   * LANGUAGE sql functions with parameters (artifact_lock_upload_v1,
--     artifact_lock_delete_v1, artifacts_deleting_v1): PL/pgSQL;
--   * a liveness function querying artifact_refs called inside statements over artifacts
--     (it would run on a shard and query a distributed table from there): a correlated
--     NOT EXISTS between the two colocated tables on tenant_id, liveness as a function of
--     the ref's columns (artifact_ref_live_v2);
--   * FOR UPDATE SKIP LOCKED with LIMIT across shards (the sweep's delete, its marking):
--     candidates read without a lock, then each row locked (SKIP LOCKED) and checked again
--     on its own, one shard at a time.
-- Every body also runs unchanged on plain PostgreSQL.

ALTER TABLE shardstore.artifact_chunks DROP CONSTRAINT artifact_chunks_pkey;
ALTER TABLE shardstore.artifact_chunks ADD PRIMARY KEY (tenant_id, upload_id, chunk_no);

-- Global (not session) tables keyed by tenant that `shardstore distribute` distributes by
-- that column, colocated with the tenant-keyed session tables (distribute.py; the
-- distributability checks cover them as they cover session tables).
CREATE FUNCTION shardstore.citus_tenant_tables_v1()
RETURNS TABLE (r_table regclass, r_column text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifacts'::regclass, 'tenant_id'),
           ('shardstore.artifact_chunks'::regclass, 'tenant_id')
$$;

-- Nothing is kept on the coordinator any more.
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
RETURNS TABLE (r_table regclass, r_reason text)
LANGUAGE sql
STABLE
AS $$
    SELECT NULL::regclass, NULL::text WHERE false
$$;

-- Whether a reference keeps its artifact alive now, from its columns (0033's rule): a
-- checkpoint's required-for-resume ref always, every ref until it expires.
CREATE FUNCTION shardstore.artifact_ref_live_v2(p_owner_type text, p_required boolean,
                                                p_expires timestamptz)
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT (p_owner_type = 'checkpoint' AND p_required)
           OR p_expires IS NULL OR p_expires > statement_timestamp()
$$;

CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v1(r shardstore.artifact_refs)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume, r.expires_at);
END
$$;

CREATE OR REPLACE FUNCTION shardstore.artifact_has_live_ref_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
                      AND shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume,
                                                          r.expires_at));
END
$$;

-- 0029's body; the chunks named by tenant and upload, verified on their shard (only the
-- digests travel), the clock in variables.
CREATE OR REPLACE FUNCTION shardstore.artifact_commit_pg_v1(
    p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text,
    p_key text, p_upload uuid, p_chunk_digests text[], p_tokens bigint, p_required boolean)
RETURNS TABLE (r_status text, r_content_type text, r_size bigint, r_tokens bigint,
               r_required boolean, r_backend text, r_key text, r_created_at timestamptz)
LANGUAGE plpgsql
AS $$
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
$$;

-- 0014's body, the clock in variables (taken after the row lock where one is held).
CREATE OR REPLACE FUNCTION shardstore.artifact_claim_v1(
    p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text,
    p_backend text, p_key text, p_tokens bigint, p_required boolean)
RETURNS TABLE (r_status text, r_content_type text, r_size bigint, r_tokens bigint,
               r_required boolean, r_backend text, r_key text, r_created_at timestamptz)
LANGUAGE plpgsql
AS $$
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
$$;

-- 0014's bodies as PL/pgSQL.
CREATE OR REPLACE FUNCTION shardstore.artifact_lock_upload_v1(p_tenant text, p_artifact uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_state text;
BEGIN
    SELECT a.state INTO v_state FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    RETURN v_state;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.artifact_lock_delete_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_state text;
BEGIN
    SELECT a.state INTO v_state FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    RETURN coalesce(v_state = 'deleting', false);
END
$$;

CREATE OR REPLACE FUNCTION shardstore.artifacts_deleting_v1(p_tenant text, p_batch integer)
RETURNS TABLE (r_tenant text, r_artifact uuid, r_backend text, r_key text, r_size bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes
          FROM shardstore.artifacts a
         WHERE a.state = 'deleting' AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
         ORDER BY a.tenant_id, a.artifact_id
         LIMIT p_batch;
END
$$;

-- Step 3 of an object put (0014): the clock taken after the row lock.
CREATE OR REPLACE FUNCTION shardstore.artifact_mark_ready_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM 1 FROM shardstore.artifacts a
      WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'uploading'
        FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := clock_timestamp();
    UPDATE shardstore.artifacts a SET state = 'ready', unreferenced_since = v_now
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'uploading';
    RETURN FOUND;
END
$$;

-- 0027's body; the reference's created_at from a variable; and a trajectory reference may
-- name the session its span served (attach_payload(..., session_id=...)), so that purging the
-- session, its subject or its tenant removes it with the session's other rows and a GDPR
-- purge deletes the payload's bytes at once (issue 13: after purge_subject no table and no
-- backend object holds the subject's bytes). Such a reference has session_id and no turn_seq
-- (the table's CHECK allows it: only turn and checkpoint references carry both); rewinds and
-- range purges delete by turn and leave it; it still expires with trajectory_retention. The
-- session must exist in the tenant and not be purged (locked FOR KEY SHARE, as a turn's
-- reference locks it, so a purge waits for the reference or the reference sees the purge).
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_v1(
    p_tenant text, p_artifact uuid, p_owner_type text, p_owner_id text, p_session uuid,
    p_turn bigint, p_required boolean, p_expires timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_session uuid := p_session;
    v_turn    bigint := p_turn;
    v_next    bigint;
    v_tenant  text;
    v_purged  boolean;
    v_now     timestamptz;
BEGIN
    IF p_owner_type = 'checkpoint' THEN
        IF v_session IS NULL THEN  -- find its session first, unlocked (any shard)
            SELECT c.session_id INTO v_session FROM shardstore.checkpoints c
             WHERE c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant;
        END IF;
        SELECT c.session_id, c.turn_seq INTO v_session, v_turn FROM shardstore.checkpoints c
         WHERE c.session_id = v_session
           AND c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant
         FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN 'no_owner';
        END IF;
    ELSIF p_owner_type = 'turn' THEN
        SELECT s.tenant_id, s.next_turn_seq, s.purged_at IS NOT NULL INTO v_tenant, v_next, v_purged
          FROM shardstore.sessions s WHERE s.session_id = v_session FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant OR v_turn >= v_next THEN
            RETURN 'no_owner';
        END IF;
        IF v_purged THEN
            RETURN 'purged';
        END IF;
    ELSIF p_owner_type = 'trajectory' AND v_session IS NOT NULL THEN
        -- a span payload of this session goes with the session's purges
        SELECT s.tenant_id, s.purged_at IS NOT NULL INTO v_tenant, v_purged
          FROM shardstore.sessions s WHERE s.session_id = v_session FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant THEN
            RETURN 'no_owner';
        END IF;
        IF v_purged THEN
            RETURN 'purged';
        END IF;
        v_turn := NULL;
    ELSE
        v_session := NULL;
        v_turn := NULL;
    END IF;
    UPDATE shardstore.artifacts a
       SET unreferenced_since = NULL, ever_referenced = true,
           required_for_resume = a.required_for_resume OR p_required
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'ready';
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    v_now := clock_timestamp();
    INSERT INTO shardstore.artifact_refs AS r
           (tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq,
            required_for_resume, expires_at, created_at)
    VALUES (p_tenant, p_artifact, p_owner_type, p_owner_id, v_session, v_turn, p_required,
            p_expires, v_now)
    ON CONFLICT (tenant_id, artifact_id, owner_type, owner_id) DO UPDATE
       SET required_for_resume = r.required_for_resume OR EXCLUDED.required_for_resume,
           expires_at = CASE WHEN r.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                             ELSE greatest(r.expires_at, EXCLUDED.expires_at) END;
    RETURN 'ok';
END
$$;

-- 0033's mark phase: candidates read without a lock (one query over every shard), each
-- marked by artifacts_released_v1 (locked, checked again, the clock after the lock); marks
-- of artifacts that have a live ref again cleared (a NULL never lets a sweep delete).
CREATE OR REPLACE FUNCTION shardstore.artifacts_mark_v2(p_batch integer, p_tenant text)
RETURNS TABLE (r_marked bigint, r_cleared bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_t text[];
    v_a uuid[];
BEGIN
    SELECT coalesce(array_agg(x.tenant_id), '{}'), coalesce(array_agg(x.artifact_id), '{}')
      INTO v_t, v_a
      FROM (SELECT a.tenant_id, a.artifact_id FROM shardstore.artifacts a
             WHERE a.unreferenced_since IS NULL
               AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
               AND NOT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                                WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                                  AND shardstore.artifact_ref_live_v2(r.owner_type,
                                          r.required_for_resume, r.expires_at))
             LIMIT p_batch) x;
    r_marked := shardstore.artifacts_released_v1(v_t, v_a);
    -- the caller loops while a batch was full: a candidate found live again still counts
    IF cardinality(v_a) = p_batch AND r_marked < p_batch THEN
        r_marked := p_batch;
    END IF;
    UPDATE shardstore.artifacts a SET unreferenced_since = NULL
     WHERE a.unreferenced_since IS NOT NULL AND a.state = 'ready'
       AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
       AND EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                      AND shardstore.artifact_ref_live_v2(r.owner_type, r.required_for_resume,
                                                          r.expires_at));
    GET DIAGNOSTICS r_cleared = ROW_COUNT;
    RETURN NEXT;
END
$$;

-- 0014's sweep, delete phase (same arguments and results). Candidates are read without a
-- lock; each is then locked on its own (SKIP LOCKED: a row a reference or a put holds is
-- left for the next sweep) with its conditions checked again in a snapshot taken after the
-- lock, so a reference committed before is seen and one after it finds the row gone (or
-- 'deleting') and is refused — the argument at the top of 0014, row by row.
-- An object backend's row still 'uploading' (its client claimed it, then died or is still
-- sending) waits an hour whatever the grace: the client held the row's lock while it PUT the
-- object; when it dies Postgres releases the lock at once, but a PUT whose body was already
-- sent can still land on the S3 server afterwards, and a sweep that deleted the row (and the
-- then-absent object) left that late object with no row, which no sweep lists (seen in
-- tests/test_artifacts_crash.py with a sweep right after each kill, SeaweedFS). An hour is
-- far beyond any PUT's timeout, the minimum age staged files get (sweep.py STAGING_MIN_AGE_S).
CREATE OR REPLACE FUNCTION shardstore.artifacts_sweep_v1(
    p_grace interval, p_batch integer, p_tenant text, p_since timestamptz, p_dry_run boolean)
RETURNS TABLE (r_tenant text, r_artifact uuid, r_backend text, r_key text, r_size bigint,
               r_deleted boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_cutoff timestamptz := statement_timestamp() - p_grace;
    c        record;
    v_row    shardstore.artifacts%ROWTYPE;
BEGIN
    FOR c IN SELECT a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes
               FROM shardstore.artifacts a
              WHERE a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
                AND (a.state = 'ready' OR a.backend = 'postgres'
                     OR a.created_at < statement_timestamp() - interval '1 hour')
                AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
                AND (p_since IS NULL OR a.unreferenced_since >= p_since)
                AND NOT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                                 WHERE r.tenant_id = a.tenant_id AND r.artifact_id = a.artifact_id
                                   AND shardstore.artifact_ref_live_v2(r.owner_type,
                                           r.required_for_resume, r.expires_at))
              LIMIT p_batch LOOP
        IF p_dry_run THEN
            r_tenant := c.tenant_id; r_artifact := c.artifact_id; r_backend := c.backend;
            r_key := c.object_key; r_size := c.size_bytes; r_deleted := false;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO v_row FROM shardstore.artifacts a
         WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id
           AND a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
           AND (a.state = 'ready' OR a.backend = 'postgres'
                OR a.created_at < statement_timestamp() - interval '1 hour')
           AND (p_since IS NULL OR a.unreferenced_since >= p_since)
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN shardstore.artifact_has_live_ref_v1(c.tenant_id, c.artifact_id);
        IF v_row.backend = 'postgres' THEN
            DELETE FROM shardstore.artifacts a
             WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id;
            DELETE FROM shardstore.artifact_chunks k
             WHERE k.tenant_id = c.tenant_id AND k.upload_id = v_row.upload_id;
            -- expired refs
            DELETE FROM shardstore.artifact_refs r
             WHERE r.tenant_id = c.tenant_id AND r.artifact_id = c.artifact_id;
            r_deleted := true;
        ELSE
            UPDATE shardstore.artifacts a SET state = 'deleting'
             WHERE a.tenant_id = c.tenant_id AND a.artifact_id = c.artifact_id;
            r_deleted := false;
        END IF;
        r_tenant := v_row.tenant_id; r_artifact := v_row.artifact_id; r_backend := v_row.backend;
        r_key := v_row.object_key; r_size := v_row.size_bytes;
        RETURN NEXT;
    END LOOP;
END
$$;
