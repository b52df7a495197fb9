-- 0045: a purge erases every artifact its sessions ever referenced, also after a crash.
--
-- Before: a purge deleted at once only the artifacts whose references it removed itself
-- (marked after its start). An artifact whose last reference had gone earlier (a rewind, an
-- unref, checkpoint pruning) kept its grace period, a day, after a purge of its session,
-- subject or tenant; and a purge killed after committing its row deletions but before
-- deleting the released objects left them to the grace sweep, which a re-run did not
-- shorten (the re-run marked them before its own start).
--
-- Now:
--   shardstore.artifact_links      (tenant, session, artifact): a session referenced the
--                                  artifact at some time. Written by every reference that
--                                  names a session (turns, checkpoints, trajectories of a
--                                  session); not removed when the reference goes (rewind,
--                                  unref, checkpoint pruning), only with the session (a
--                                  registered session table: purges, retention).
--   shardstore.artifact_erasures   (tenant, artifact): what a purge must still erase. A
--                                  session purge (purge_session_v2) writes the artifacts of
--                                  the session's links and references here in the same
--                                  transaction as it deletes the session's rows; a tenant
--                                  purge writes every artifact of the tenant. The purge then
--                                  erases each entry (artifact_erase_v1): kept if a live
--                                  reference (of another session, or one without a
--                                  session) still needs it, else deleted (postgres: row and
--                                  chunks; file, s3: the row becomes 'deleting' and the
--                                  caller removes the object, then the row). An entry goes
--                                  only with the artifact's row, or its 'deleting' mark, so
--                                  a purge killed at any point leaves its work here, and the
--                                  re-run (or the next sweep) finishes it.

-- On a distributed (Citus) schema this transaction reads the distributed artifact_refs in
-- parallel (INSERT ... SELECT) and then creates functions, which Citus refuses after a
-- parallel operation in the same transaction: one connection per worker instead. On one
-- node the setting is an unused placeholder.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE shardstore.artifact_links (
    tenant_id   text NOT NULL,
    session_id  uuid NOT NULL,
    artifact_id uuid NOT NULL,
    linked_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, session_id, artifact_id)
);

-- Keyed by tenant like artifact_refs (distributed with it on Citus): the session column is
-- never NULL, the registration only says so to get the tenant-keyed placement.
SELECT shardstore.register_session_table_v2('shardstore.artifact_links',
                                            tenant_column => 'tenant_id',
                                            session_nullable => true,
                                            note => 'which sessions ever referenced an artifact');

-- the sessions that hold references now were linked to their artifacts all along
INSERT INTO shardstore.artifact_links (tenant_id, session_id, artifact_id, linked_at)
SELECT r.tenant_id, r.session_id, r.artifact_id, min(r.created_at)
  FROM shardstore.artifact_refs r
 WHERE r.session_id IS NOT NULL
 GROUP BY r.tenant_id, r.session_id, r.artifact_id
ON CONFLICT DO NOTHING;

CREATE TABLE shardstore.artifact_erasures (
    tenant_id   text NOT NULL,
    artifact_id uuid NOT NULL,
    queued_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, artifact_id)
);

-- compared without a subquery, as the other artifact tables' policies (Citus)
CREATE POLICY tenant_isolation ON shardstore.artifact_erasures
    USING (tenant_id = shardstore.rls_tenant_v2())
    WITH CHECK (tenant_id = shardstore.rls_tenant_v2());
SELECT shardstore.register_global_table_v1('shardstore.artifact_erasures',
                                           'artifacts a purge has still to erase, by tenant',
                                           tenant_grants => 'SELECT, INSERT, DELETE');

CREATE OR REPLACE FUNCTION shardstore.citus_tenant_tables_v1()
RETURNS TABLE (r_table regclass, r_column text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifacts'::regclass, 'tenant_id'),
           ('shardstore.artifact_chunks'::regclass, 'tenant_id'),
           ('shardstore.artifact_erasures'::regclass, 'tenant_id')
$$;

-- 0034's artifact_ref_v1, and a reference naming a session links the session to the
-- artifact (kept when the reference goes; gone with the session).
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
    IF v_session IS NOT NULL THEN
        -- the session (checked above to be this tenant's, and locked) is linked for good
        INSERT INTO shardstore.artifact_links (tenant_id, session_id, artifact_id, linked_at)
        VALUES (p_tenant, v_session, p_artifact, v_now)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN 'ok';
END
$$;

-- purge_session_v1, and the artifacts the session ever referenced (its links and its
-- references, read under the session lock that every reference naming the session waits
-- for) queued for erasure in the same transaction. Only rows of the session's own tenant
-- are read: a row a tenant wrote naming another tenant's session queues nothing there.
CREATE FUNCTION shardstore.purge_session_v2(p_session_id uuid, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tenant text;
    v_now    timestamptz;
BEGIN
    IF p_dry_run THEN
        RETURN shardstore.purge_session_v1(p_session_id, true);
    END IF;
    SELECT x.tenant_id INTO v_tenant FROM shardstore.sessions x
     WHERE x.session_id = p_session_id FOR UPDATE;
    IF FOUND THEN
        v_now := clock_timestamp();
        INSERT INTO shardstore.artifact_erasures (tenant_id, artifact_id, queued_at)
        SELECT v_tenant, x.artifact_id, v_now
          FROM (SELECT l.artifact_id FROM shardstore.artifact_links l
                 WHERE l.tenant_id = v_tenant AND l.session_id = p_session_id
                UNION
                SELECT r.artifact_id FROM shardstore.artifact_refs r
                 WHERE r.tenant_id = v_tenant AND r.session_id = p_session_id) x
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN shardstore.purge_session_v1(p_session_id, false);
END
$$;

-- After its sessions are purged, a tenant purge erases every artifact of the tenant: the
-- references that name no session (business outputs, trajectories of no session) are
-- deleted and every artifact queued. Returns how many were queued.
CREATE FUNCTION shardstore.artifact_erase_tenant_v1(p_tenant text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_n bigint;
BEGIN
    DELETE FROM shardstore.artifact_refs r WHERE r.tenant_id = p_tenant AND r.session_id IS NULL;
    INSERT INTO shardstore.artifact_erasures (tenant_id, artifact_id, queued_at)
    SELECT a.tenant_id, a.artifact_id, clock_timestamp()
      FROM shardstore.artifacts a WHERE a.tenant_id = p_tenant
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Queued erasures of one tenant (NULL: every tenant the caller sees).
CREATE FUNCTION shardstore.artifact_erasures_v1(p_tenant text, p_batch integer)
RETURNS TABLE (r_tenant text, r_artifact uuid)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT e.tenant_id, e.artifact_id FROM shardstore.artifact_erasures e
         WHERE p_tenant IS NULL OR e.tenant_id = p_tenant
         ORDER BY e.tenant_id, e.artifact_id
         LIMIT p_batch;
END
$$;

-- One queued erasure, in the caller's transaction. The artifact row is locked first (as a
-- reference locks it before writing: one committed before is seen by the liveness check
-- below, one after finds the row gone or 'deleting' and is refused), then:
--   'gone'      no such artifact;
--   'kept'      a live reference still needs it (another session's, or one of no session);
--   'deleted'   postgres backend: row, chunks and dead references deleted;
--   'deleting'  object backends: the row is 'deleting'; the caller removes the object and
--               then the row (artifact_lock_delete_v1, artifact_forget_v1), as a sweep does.
-- The entry goes in every case: what is left to do is the 'deleting' row itself.
CREATE FUNCTION shardstore.artifact_erase_v1(p_tenant text, p_artifact uuid)
RETURNS TABLE (r_status text, r_backend text, r_size bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_row shardstore.artifacts%ROWTYPE;
BEGIN
    DELETE FROM shardstore.artifact_erasures e
     WHERE e.tenant_id = p_tenant AND e.artifact_id = p_artifact;
    SELECT * INTO v_row FROM shardstore.artifacts a
     WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    IF NOT FOUND THEN
        r_status := 'gone';
    ELSIF shardstore.artifact_has_live_ref_v1(p_tenant, p_artifact) THEN
        r_status := 'kept';
    ELSIF v_row.backend = 'postgres' THEN
        DELETE FROM shardstore.artifacts a
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
        DELETE FROM shardstore.artifact_chunks k
         WHERE k.tenant_id = p_tenant AND k.upload_id = v_row.upload_id;
        DELETE FROM shardstore.artifact_refs r
         WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact;
        r_status := 'deleted';
    ELSE
        UPDATE shardstore.artifacts a SET state = 'deleting'
         WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact;
        r_status := 'deleting';
    END IF;
    r_backend := v_row.backend;
    r_size := v_row.size_bytes;
    RETURN NEXT;
END
$$;

-- 0034's artifacts_deleting_v1 with each row's sha256: the caller derives the object's key
-- from (tenant, sha256) itself and never uses the stored object_key, which a tenant role
-- can write.
CREATE FUNCTION shardstore.artifacts_deleting_v2(p_tenant text, p_batch integer)
RETURNS TABLE (r_tenant text, r_artifact uuid, r_backend text, r_sha256 text, r_size bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT a.tenant_id, a.artifact_id, a.backend, a.sha256, a.size_bytes
          FROM shardstore.artifacts a
         WHERE a.state = 'deleting' AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
         ORDER BY a.tenant_id, a.artifact_id
         LIMIT p_batch;
END
$$;
