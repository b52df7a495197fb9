-- 0014: the artifact store (docs/architecture.md "Artifacts"): large content stored once per
-- tenant, referenced by turns, checkpoints, trajectories and business outputs.
--
-- shardstore.artifacts        one row per (tenant, content): where the bytes are (backend,
--                             object_key), their sha256 and size, and the state of the object:
--                               'uploading'  claimed by a put that has not verified it yet
--                               'ready'      verified; the only state a reference may name
--                               'deleting'   a sweep is removing the object (file / s3)
--                             unreferenced_since: NULL while a live reference exists (every
--                             reference sets it NULL); else since when (clock time) it has had
--                             none. A sweep deletes rows with unreferenced_since older than the
--                             grace period whose references, read in the sweep's own snapshot,
--                             are all dead.
-- shardstore.artifact_chunks  the bytes of the postgres backend, 1 MiB per row, by upload
-- shardstore.artifact_refs    who needs an artifact: (owner_type, owner_id); turn and
--                             checkpoint refs carry session_id and turn_seq, so the registry's
--                             purges, retention and rewind remove them with their turns and
--                             checkpoints.
--
-- The race a sweep must never lose (a new reference to an object being deleted): a reference
-- UPDATEs the artifact row (unreferenced_since := NULL) in the transaction that inserts it,
-- and only while the row is 'ready'. A sweep's DELETE (or its UPDATE to 'deleting') requires
-- unreferenced_since < statement_timestamp() - grace and no live reference in its snapshot.
-- A reference committed before that snapshot is seen; one committed after it made a newer row
-- version, which READ COMMITTED re-checks (EvalPlanQual) and finds NULL, or was marked again
-- with clock_timestamp() after that commit, i.e. after the sweep's cutoff; one that comes
-- after the sweep locked the row finds it gone (or 'deleting') and is refused. Marks are
-- always clock_timestamp() for that reason.

CREATE TABLE shardstore.artifacts (
    tenant_id           text NOT NULL,
    artifact_id         uuid NOT NULL,
    sha256              text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes          bigint NOT NULL CHECK (size_bytes >= 0),
    content_type        text NOT NULL,
    backend             text NOT NULL CHECK (backend IN ('postgres', 'file', 's3')),
    object_key          text NOT NULL,
    state               text NOT NULL CHECK (state IN ('uploading', 'ready', 'deleting')),
    upload_id           uuid,
    tokens              bigint CHECK (tokens IS NULL OR tokens >= 0),
    required_for_resume boolean NOT NULL DEFAULT false,
    schema_version      integer NOT NULL DEFAULT 1,
    ever_referenced     boolean NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL,
    unreferenced_since  timestamptz,
    PRIMARY KEY (tenant_id, artifact_id),
    CHECK (backend <> 'postgres' OR state <> 'deleting'),
    CHECK (state <> 'ready' OR backend <> 'postgres' OR upload_id IS NOT NULL)
);

CREATE INDEX artifacts_unreferenced ON shardstore.artifacts (unreferenced_since)
    WHERE unreferenced_since IS NOT NULL;
CREATE INDEX artifacts_deleting ON shardstore.artifacts (tenant_id) WHERE state = 'deleting';

CREATE TABLE shardstore.artifact_chunks (
    upload_id  uuid NOT NULL,
    chunk_no   integer NOT NULL CHECK (chunk_no >= 0),
    tenant_id  text NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (upload_id, chunk_no)
);
-- the bytes are mostly compressed already (or read whole): no pglz on the way in
ALTER TABLE shardstore.artifact_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE shardstore.artifact_refs (
    tenant_id           text NOT NULL,
    artifact_id         uuid NOT NULL,
    owner_type          text NOT NULL
        CHECK (owner_type IN ('turn', 'checkpoint', 'trajectory', 'business_output')),
    owner_id            text NOT NULL,
    session_id          uuid,
    turn_seq            bigint,
    required_for_resume boolean NOT NULL DEFAULT false,
    expires_at          timestamptz,
    created_at          timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, artifact_id, owner_type, owner_id),
    CHECK ((owner_type IN ('turn', 'checkpoint')) = (session_id IS NOT NULL AND turn_seq IS NOT NULL))
);

CREATE INDEX artifact_refs_session ON shardstore.artifact_refs (session_id, turn_seq)
    WHERE session_id IS NOT NULL;
CREATE INDEX artifact_refs_owner ON shardstore.artifact_refs (tenant_id, owner_type, owner_id);

-- refs of turns and checkpoints go with them: session purges, range purges, retention and
-- rewind delete by (session_id, turn_seq); refs without a session are tenant rows
SELECT shardstore.register_session_table_v2('shardstore.artifact_refs', turn_column => 'turn_seq',
                                            tenant_column => 'tenant_id', session_nullable => true,
                                            note => 'who references an artifact');

-- the artifact rows and their bytes are tenant rows, not session rows: their own policies
SELECT shardstore.register_global_table_v1('shardstore.artifacts', 'artifact objects, by tenant',
                                           tenant_grants => 'SELECT, INSERT, UPDATE, DELETE');
SELECT shardstore.register_global_table_v1('shardstore.artifact_chunks',
                                           'artifact bytes (postgres backend), by tenant',
                                           tenant_grants => 'SELECT, INSERT, UPDATE, DELETE');
CREATE POLICY tenant_isolation ON shardstore.artifacts
    USING (tenant_id = (SELECT shardstore.rls_tenant_v1()))
    WITH CHECK (tenant_id = (SELECT shardstore.rls_tenant_v1()));
CREATE POLICY tenant_isolation ON shardstore.artifact_chunks
    USING (tenant_id = (SELECT shardstore.rls_tenant_v1()))
    WITH CHECK (tenant_id = (SELECT shardstore.rls_tenant_v1()));

-- Whether a reference keeps its artifact alive now: a checkpoint's while the checkpoint
-- exists (keep_checkpoints deletes checkpoints, not refs) and, unless it is required for
-- resume, until it expires; every other one until it expires.
CREATE FUNCTION shardstore.artifact_ref_live_v1(r shardstore.artifact_refs)
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN r.owner_type = 'checkpoint' THEN
                    (r.required_for_resume OR r.expires_at IS NULL OR r.expires_at > statement_timestamp())
                    AND EXISTS (SELECT 1 FROM shardstore.checkpoints c
                                 WHERE c.session_id = r.session_id
                                   AND c.checkpoint_id::text = r.owner_id)
                ELSE r.expires_at IS NULL OR r.expires_at > statement_timestamp() END
$$;

CREATE FUNCTION shardstore.artifact_has_live_ref_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
                      AND shardstore.artifact_ref_live_v1(r))
$$;

-- When refs go (unref, purges, retention, rewind), their artifacts left without a live ref
-- are marked now, so that the grace period starts at the removal and a purge can find what
-- it released. A mark overwrites an older one (set while a ref existed by a racing sweep).
CREATE FUNCTION shardstore.artifact_refs_gone_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE shardstore.artifacts a SET unreferenced_since = clock_timestamp()
      FROM (SELECT DISTINCT g.tenant_id, g.artifact_id FROM gone g) d
     WHERE a.tenant_id = d.tenant_id AND a.artifact_id = d.artifact_id
       AND NOT shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id);
    RETURN NULL;
END
$$;

CREATE TRIGGER artifact_refs_gone AFTER DELETE ON shardstore.artifact_refs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION shardstore.artifact_refs_gone_v1();

-- Postgres backend: the chunks of p_upload (inserted in this transaction) become the
-- artifact, unless the same content is already stored (then they are deleted and the
-- existing row is returned, 'existing'; an unreferenced one gets a fresh grace period).
-- Each chunk is verified against the digest the client computed ('corrupt': nothing kept).
CREATE FUNCTION shardstore.artifact_commit_pg_v1(
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
    INSERT INTO shardstore.artifacts AS a
           (tenant_id, artifact_id, sha256, size_bytes, content_type, backend, object_key, state,
            upload_id, tokens, required_for_resume, created_at, unreferenced_since)
    VALUES (p_tenant, p_artifact, p_sha256, p_size, p_content_type, 'postgres', p_key, 'ready',
            p_upload, p_tokens, p_required, clock_timestamp(), clock_timestamp())
    ON CONFLICT (tenant_id, artifact_id) DO NOTHING;
    IF FOUND THEN
        r_status := 'created'; r_content_type := p_content_type; r_size := p_size;
        r_tokens := p_tokens; r_required := p_required; r_backend := 'postgres'; r_key := p_key;
        r_created_at := clock_timestamp();
        RETURN NEXT;
        RETURN;
    END IF;
    DELETE FROM shardstore.artifact_chunks c WHERE c.upload_id = p_upload;
    SELECT * INTO v_found FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    IF v_found.state <> 'ready' THEN
        -- another backend's put in flight or being swept: the caller retries
        r_status := 'busy';
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE shardstore.artifacts a
       SET unreferenced_since = CASE WHEN a.unreferenced_since IS NULL THEN NULL
                                     ELSE clock_timestamp() END,
           required_for_resume = a.required_for_resume OR p_required,
           tokens = coalesce(a.tokens, p_tokens)
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
    r_status := 'existing'; r_content_type := v_found.content_type; r_size := v_found.size_bytes;
    r_tokens := coalesce(v_found.tokens, p_tokens); r_required := v_found.required_for_resume OR p_required;
    r_backend := v_found.backend; r_key := v_found.object_key; r_created_at := v_found.created_at;
    RETURN NEXT;
END
$$;

-- Object backends (file, s3), step 1 of a put: claim the row. 'existing': the content is
-- stored and verified (an unreferenced one gets a fresh grace period); 'claimed': the row is
-- committed as 'uploading' (new, or taken over from a put that died or a sweep that has not
-- removed it yet), and the caller places the object under artifact_lock_upload_v1.
CREATE FUNCTION shardstore.artifact_claim_v1(
    p_tenant text, p_artifact uuid, p_sha256 text, p_size bigint, p_content_type text,
    p_backend text, p_key text, p_tokens bigint, p_required boolean)
RETURNS TABLE (r_status text, r_content_type text, r_size bigint, r_tokens bigint,
               r_required boolean, r_backend text, r_key text, r_created_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_found shardstore.artifacts%ROWTYPE;
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        INSERT INTO shardstore.artifacts AS a
               (tenant_id, artifact_id, sha256, size_bytes, content_type, backend, object_key,
                state, tokens, required_for_resume, created_at, unreferenced_since)
        VALUES (p_tenant, p_artifact, p_sha256, p_size, p_content_type, p_backend, p_key,
                'uploading', p_tokens, p_required, clock_timestamp(), clock_timestamp())
        ON CONFLICT (tenant_id, artifact_id) DO NOTHING;
        IF FOUND THEN
            r_status := 'claimed'; r_content_type := p_content_type; r_size := p_size;
            r_tokens := p_tokens; r_required := p_required; r_backend := p_backend;
            r_key := p_key; r_created_at := clock_timestamp();
            RETURN NEXT;
            RETURN;
        END IF;
        -- waits for a sweep removing the object (it holds the row while it does)
        SELECT * INTO v_found FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
        IF FOUND THEN
            IF v_found.state = 'ready' THEN
                UPDATE shardstore.artifacts a
                   SET unreferenced_since = CASE WHEN a.unreferenced_since IS NULL THEN NULL
                                                 ELSE clock_timestamp() END,
                       required_for_resume = a.required_for_resume OR p_required,
                       tokens = coalesce(a.tokens, p_tokens)
                 WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
                r_status := 'existing';
            ELSIF v_found.backend <> p_backend THEN
                r_status := 'busy';
            ELSE
                UPDATE shardstore.artifacts a
                   SET state = 'uploading', unreferenced_since = clock_timestamp(),
                       object_key = p_key
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

-- Step 2 (in the caller's transaction, held while it places and verifies the object): the
-- row locked; its state tells whether to go on ('uploading'), stop ('ready': another put
-- finished it) or claim again (NULL: gone; 'deleting': a sweep took it).
CREATE FUNCTION shardstore.artifact_lock_upload_v1(p_tenant text, p_artifact uuid)
RETURNS text
LANGUAGE sql
AS $$
    SELECT a.state FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE
$$;

-- Step 3: verified; the row becomes 'ready' (only from 'uploading', under the lock above).
CREATE FUNCTION shardstore.artifact_mark_ready_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE shardstore.artifacts a SET state = 'ready', unreferenced_since = clock_timestamp()
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'uploading';
    RETURN FOUND;
END
$$;

-- A reference, only to a ready artifact: the row is updated (unreferenced_since := NULL) so
-- that a racing sweep re-checks it (see the top of this file). p_session / p_turn: for turn
-- and checkpoint owners, checked here (turn: below the session's head; checkpoint: exists,
-- its session and turn_seq are taken from it). Statuses: 'ok', 'missing' (no ready artifact
-- of this tenant), 'no_owner' (turn or checkpoint not found in this tenant), 'purged'.
CREATE FUNCTION shardstore.artifact_ref_v1(
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
BEGIN
    IF p_owner_type = 'checkpoint' THEN
        SELECT c.session_id, c.turn_seq INTO v_session, v_turn FROM shardstore.checkpoints c
         WHERE c.checkpoint_id::text = p_owner_id AND c.tenant_id = p_tenant
           AND (p_session IS NULL OR c.session_id = p_session)
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
    INSERT INTO shardstore.artifact_refs AS r
           (tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq,
            required_for_resume, expires_at, created_at)
    VALUES (p_tenant, p_artifact, p_owner_type, p_owner_id, v_session, v_turn, p_required,
            p_expires, clock_timestamp())
    ON CONFLICT (tenant_id, artifact_id, owner_type, owner_id) DO UPDATE
       SET required_for_resume = r.required_for_resume OR EXCLUDED.required_for_resume,
           expires_at = CASE WHEN r.expires_at IS NULL OR EXCLUDED.expires_at IS NULL THEN NULL
                             ELSE greatest(r.expires_at, EXCLUDED.expires_at) END;
    RETURN 'ok';
END
$$;

-- Many references of one owner kind at once (the turns of an offloaded append, the artifacts
-- of a checkpoint): the first status that is not 'ok' (the caller's transaction then rolls
-- back), else 'ok'. Artifacts are locked in id order: two writers never deadlock.
CREATE FUNCTION shardstore.artifact_ref_many_v1(
    p_tenant text, p_artifacts uuid[], p_owner_type text, p_owner_ids text[], p_session uuid,
    p_turns bigint[], p_required boolean[])
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    x        record;
    v_status text;
BEGIN
    FOR x IN SELECT * FROM unnest(p_artifacts, p_owner_ids, p_turns, p_required)
                      AS u(artifact_id, owner_id, turn_seq, required)
              ORDER BY u.artifact_id, u.owner_id LOOP
        v_status := shardstore.artifact_ref_v1(p_tenant, x.artifact_id, p_owner_type, x.owner_id,
                                               p_session, x.turn_seq, x.required, NULL);
        IF v_status <> 'ok' THEN
            RETURN v_status;
        END IF;
    END LOOP;
    RETURN 'ok';
END
$$;

-- Sweep, mark phase: artifacts without a live ref get a mark (their grace starts), marks on
-- artifacts that have one again are cleared. Returns (marked, cleared).
CREATE FUNCTION shardstore.artifacts_mark_v1(p_batch integer)
RETURNS TABLE (r_marked bigint, r_cleared bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    WITH m AS (
        UPDATE shardstore.artifacts a SET unreferenced_since = clock_timestamp()
         WHERE (a.tenant_id, a.artifact_id) IN (
                   SELECT x.tenant_id, x.artifact_id FROM shardstore.artifacts x
                    WHERE x.unreferenced_since IS NULL
                      AND NOT shardstore.artifact_has_live_ref_v1(x.tenant_id, x.artifact_id)
                    LIMIT p_batch)
           AND a.unreferenced_since IS NULL
        RETURNING 1)
    SELECT count(*) INTO r_marked FROM m;
    WITH c AS (
        UPDATE shardstore.artifacts a SET unreferenced_since = NULL
         WHERE a.unreferenced_since IS NOT NULL AND a.state = 'ready'
           AND shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
        RETURNING 1)
    SELECT count(*) INTO r_cleared FROM c;
    RETURN NEXT;
END
$$;

-- Sweep, delete phase. Artifacts unreferenced since before statement_timestamp() - p_grace
-- (p_tenant: only that tenant's; p_since: only those marked at or after it, i.e. released by
-- the purge that started then; p_released: only artifacts that once had a reference):
--   postgres backend: row and chunks deleted now (r_deleted true);
--   other backends: the row becomes 'deleting' (r_deleted false), and the caller removes the
--   object under artifact_lock_delete_v1, then the row with artifact_forget_v1.
-- p_dry_run: what would go, nothing changes.
CREATE FUNCTION shardstore.artifacts_sweep_v1(
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
                      AND (p_tenant IS NULL OR x.tenant_id = p_tenant)
                      AND (p_since IS NULL OR x.unreferenced_since >= p_since)
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
           AND a.unreferenced_since < v_cutoff AND a.state IN ('ready', 'uploading')
           AND (p_since IS NULL OR a.unreferenced_since >= p_since)
           AND NOT shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
        RETURNING a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes, false;
END
$$;

-- Rows left 'deleting' (by this sweep, or by one that died before removing the object).
CREATE FUNCTION shardstore.artifacts_deleting_v1(p_tenant text, p_batch integer)
RETURNS TABLE (r_tenant text, r_artifact uuid, r_backend text, r_key text, r_size bigint)
LANGUAGE sql
STABLE
AS $$
    SELECT a.tenant_id, a.artifact_id, a.backend, a.object_key, a.size_bytes
      FROM shardstore.artifacts a
     WHERE a.state = 'deleting' AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
     ORDER BY a.tenant_id, a.artifact_id
     LIMIT p_batch
$$;

-- In the caller's transaction, held while it removes the object: true if the row is still
-- 'deleting' (a put that took it over since has made it 'uploading': leave the object).
CREATE FUNCTION shardstore.artifact_lock_delete_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE sql
AS $$
    SELECT coalesce((SELECT a.state = 'deleting' FROM shardstore.artifacts a
                      WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE), false)
$$;

CREATE FUNCTION shardstore.artifact_forget_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM shardstore.artifact_refs r WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact;
    DELETE FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact AND a.state = 'deleting';
    RETURN FOUND;
END
$$;
