-- 0033: artifact_refs without its trigger, and reference liveness decided by the reference
-- row alone (issue 17: Citus distributes no table with a trigger, and cannot push a
-- correlated subquery from a tenant-keyed table into `checkpoints`, keyed by session).
--
-- Before: the statement trigger artifact_refs_gone (0014) marked the artifacts a DELETE of
-- refs left without a live reference (unreferenced_since := clock_timestamp()), whichever
-- path deleted them; and a checkpoint's reference counted only while its checkpoint EXISTS
-- (keep_checkpoints deleted checkpoints, not their refs).
-- Now: whoever deletes checkpoints deletes their refs in the same transaction (the
-- registry's purges and rewinds delete both by (session_id, turn_seq), and a checkpoint
-- ref's turn_seq is its checkpoint's: artifact_ref_v1 takes both from the checkpoint row;
-- checkpoints_keep_v1 below deletes them by owner id), and every path that deletes refs
-- marks what it released itself:
--   unref_artifact           artifact_unref_v1 (below), at once
--   keep_checkpoints         checkpoints_keep_v1 (below), at once
--   rewind                   rewind_v3 (below): reads the refs it is about to delete under
--                            the session lock, marks after rewind_v2 deleted them
--   the purges               their release step (shardstore/purge.py): the tenant's
--                            artifacts settled before the purge (artifacts_mark_v2), marked
--                            after it, those marked since the purge began deleted at once
--   retention (maintain)     lazily: the sweep's mark phase marks what lost its refs, so
--                            the grace starts at that sweep, not at the removal
-- Every mark is clock_timestamp() taken while the artifact row is locked (the race argument
-- at the top of 0014: a reference committed before the mark is seen by any sweep whose
-- cutoff is past the mark; one committed after it re-sets the row to NULL).

DROP TRIGGER artifact_refs_gone ON shardstore.artifact_refs;
DROP FUNCTION shardstore.artifact_refs_gone_v1();

-- Whether a reference keeps its artifact alive now, from its own row: a checkpoint's while
-- it is required for resume or has not expired (its checkpoint exists: refs go with their
-- checkpoints), every other one until it expires.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v1(r shardstore.artifact_refs)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (r.owner_type = 'checkpoint' AND r.required_for_resume)
           OR r.expires_at IS NULL OR r.expires_at > statement_timestamp();
END
$$;

-- The artifacts (p_tenants[i], p_artifacts[i]) lost references in this transaction: each
-- one left without a live reference is marked now (its grace starts). Rows are locked one
-- by one in key order (two callers never deadlock on them), the liveness read after the
-- lock, and the mark taken after it (clock_timestamp() as a value, not in the UPDATE: Citus
-- allows no volatile function in DML on a distributed table). Returns how many it marked.
CREATE FUNCTION shardstore.artifacts_released_v1(p_tenants text[], p_artifacts uuid[])
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    x   record;
    v_n bigint := 0;
    v_at timestamptz;
BEGIN
    FOR x IN SELECT DISTINCT u.t, u.a FROM unnest(p_tenants, p_artifacts) AS u(t, a)
              WHERE u.t IS NOT NULL AND u.a IS NOT NULL
              ORDER BY u.t, u.a LOOP
        PERFORM 1 FROM shardstore.artifacts a
          WHERE a.tenant_id = x.t AND a.artifact_id = x.a FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN shardstore.artifact_has_live_ref_v1(x.t, x.a);
        v_at := clock_timestamp();
        UPDATE shardstore.artifacts a SET unreferenced_since = v_at
         WHERE a.tenant_id = x.t AND a.artifact_id = x.a;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;

-- unref_artifact: one reference removed (true if it existed), its artifact marked when that
-- was its last live one. The artifact row is locked first, as artifact_ref_v1 locks it
-- before it writes the reference: an unref and a ref of the same pair never deadlock.
CREATE FUNCTION shardstore.artifact_unref_v1(p_tenant text, p_artifact uuid, p_owner_type text,
                                             p_owner_id text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM shardstore.artifacts a
      WHERE a.tenant_id = p_tenant AND a.artifact_id = p_artifact FOR UPDATE;
    DELETE FROM shardstore.artifact_refs r
     WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
       AND r.owner_type = p_owner_type AND r.owner_id = p_owner_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM shardstore.artifacts_released_v1(ARRAY[p_tenant], ARRAY[p_artifact]);
    RETURN true;
END
$$;

-- As in 0009, and the references of the deleted checkpoints deleted with them (their
-- artifacts marked when left without a live reference).
CREATE OR REPLACE FUNCTION shardstore.checkpoints_keep_v1(p_keep integer, p_after uuid, p_batch integer)
RETURNS TABLE (r_sessions integer, r_deleted bigint, r_last uuid)
LANGUAGE plpgsql
AS $$
DECLARE
    v_sids    uuid[];
    v_n       bigint := 0;
    v_sid     uuid;
    v_cut     bigint;
    v_ids     text[];
    v_tenant  text;
    v_rt      text[];
    v_ra      uuid[];
    d         record;
BEGIN
    SELECT coalesce(array_agg(x.session_id ORDER BY x.session_id), '{}') INTO v_sids
      FROM (SELECT DISTINCT c.session_id FROM shardstore.checkpoints c
             WHERE p_after IS NULL OR c.session_id > p_after
             ORDER BY c.session_id LIMIT p_batch) x;
    FOREACH v_sid IN ARRAY v_sids LOOP
        v_ids := '{}';
        IF p_keep = 0 THEN
            v_cut := NULL;
        ELSE
            SELECT c.seq INTO v_cut FROM shardstore.checkpoints c
             WHERE c.session_id = v_sid ORDER BY c.seq DESC OFFSET p_keep - 1 LIMIT 1;
            CONTINUE WHEN NOT FOUND;
        END IF;
        FOR d IN DELETE FROM shardstore.checkpoints c
                  WHERE c.session_id = v_sid AND (v_cut IS NULL OR c.seq < v_cut)
              RETURNING c.checkpoint_id, c.tenant_id LOOP
            v_ids := v_ids || d.checkpoint_id::text;
            v_tenant := d.tenant_id;
        END LOOP;
        v_n := v_n + cardinality(v_ids);
        CONTINUE WHEN cardinality(v_ids) = 0;
        v_rt := '{}';
        v_ra := '{}';
        FOR d IN DELETE FROM shardstore.artifact_refs r
                  WHERE r.tenant_id = v_tenant AND r.session_id = v_sid
                    AND r.owner_type = 'checkpoint' AND r.owner_id = ANY (v_ids)
              RETURNING r.tenant_id, r.artifact_id LOOP
            v_rt := v_rt || d.tenant_id;
            v_ra := v_ra || d.artifact_id;
        END LOOP;
        PERFORM shardstore.artifacts_released_v1(v_rt, v_ra);
    END LOOP;
    r_sessions := cardinality(v_sids);
    r_deleted := v_n;
    r_last := v_sids[cardinality(v_sids)];
    RETURN NEXT;
END
$$;

-- rewind_v2 (0031), and the artifacts of the turn and checkpoint refs it deletes (those at
-- or after p_to, read under the session lock, which every turn or checkpoint reference
-- takes too) marked when left without a live reference.
CREATE FUNCTION shardstore.rewind_v3(p_session_id uuid, p_to bigint)
RETURNS TABLE (r_status text, r_removed bigint, r_turns bigint, r_first bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    s     shardstore.sessions%ROWTYPE;
    v_ids uuid[];
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    SELECT coalesce(array_agg(DISTINCT r.artifact_id), '{}') INTO v_ids
      FROM shardstore.artifact_refs r
     WHERE r.tenant_id = s.tenant_id AND r.session_id = p_session_id AND r.turn_seq >= p_to;
    RETURN QUERY SELECT * FROM shardstore.rewind_v2(p_session_id, p_to);
    IF cardinality(v_ids) > 0 THEN
        PERFORM shardstore.artifacts_released_v1(array_fill(s.tenant_id, ARRAY[cardinality(v_ids)]),
                                                 v_ids);
    END IF;
END
$$;

-- Sweep, mark phase (0014's artifacts_mark_v1), for one tenant (p_tenant) or all (NULL):
-- artifacts without a live ref get a mark, marks on artifacts that have one again are
-- cleared. A purge runs it for its tenant before it starts (what lost its refs earlier is
-- marked before the purge's clock: it keeps its grace; stale marks of referenced artifacts
-- are cleared) and after it (what the purge released is marked after its clock: deleted at
-- once). Returns (marked, cleared).
CREATE FUNCTION shardstore.artifacts_mark_v2(p_batch integer, p_tenant text)
RETURNS TABLE (r_marked bigint, r_cleared bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    WITH m AS (
        UPDATE shardstore.artifacts a SET unreferenced_since = clock_timestamp()
         WHERE (a.tenant_id, a.artifact_id) IN (
                   SELECT x.tenant_id, x.artifact_id FROM shardstore.artifacts x
                    WHERE x.unreferenced_since IS NULL
                      AND (p_tenant IS NULL OR x.tenant_id = p_tenant)
                      AND NOT shardstore.artifact_has_live_ref_v1(x.tenant_id, x.artifact_id)
                    LIMIT p_batch)
           AND a.unreferenced_since IS NULL
        RETURNING 1)
    SELECT count(*) INTO r_marked FROM m;
    WITH c AS (
        UPDATE shardstore.artifacts a SET unreferenced_since = NULL
         WHERE a.unreferenced_since IS NOT NULL AND a.state = 'ready'
           AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
           AND shardstore.artifact_has_live_ref_v1(a.tenant_id, a.artifact_id)
        RETURNING 1)
    SELECT count(*) INTO r_cleared FROM c;
    RETURN NEXT;
END
$$;

-- Refs of checkpoints already gone (keep_checkpoints before this migration left them; they
-- no longer count, by the checkpoint's absence, from now on they would): deleted, and their
-- artifacts marked.
DO $$
DECLARE
    v_rt text[] := '{}';
    v_ra uuid[] := '{}';
    d    record;
BEGIN
    FOR d IN DELETE FROM shardstore.artifact_refs r
              WHERE r.owner_type = 'checkpoint'
                AND NOT EXISTS (SELECT 1 FROM shardstore.checkpoints c
                                 WHERE c.session_id = r.session_id
                                   AND c.checkpoint_id::text = r.owner_id)
          RETURNING r.tenant_id, r.artifact_id LOOP
        v_rt := v_rt || d.tenant_id;
        v_ra := v_ra || d.artifact_id;
    END LOOP;
    PERFORM shardstore.artifacts_released_v1(v_rt, v_ra);
END
$$;

-- artifact_refs has no trigger now, but is read with the artifact rows (coordinator tables
-- still) in one statement: it stays with them until they are distributed too.
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
RETURNS TABLE (r_table regclass, r_reason text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifact_refs'::regclass,
            'references are read and written with the artifact rows (coordinator tables) in '
            || 'one statement and one snapshot (the sweep''s safety argument)')
$$;
