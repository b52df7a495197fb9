-- Retention of checkpoints, one page of sessions: for each of up to p_batch sessions with
-- checkpoints after p_after (session id order), deletes all but its newest p_keep checkpoints
-- (by seq; p_keep 0: all of them), with their artifact refs, and marks the artifacts left
-- without a live ref (artifacts_released_v1), one session at a time, each statement naming
-- it. Returns the sessions visited, the checkpoints deleted, and the last session id (the
-- next page's p_after). Takes no session lock.
CREATE OR REPLACE FUNCTION shardstore.checkpoints_keep_v1(p_keep integer, p_after uuid, p_batch integer)
 RETURNS TABLE(r_sessions integer, r_deleted bigint, r_last uuid)
 LANGUAGE plpgsql
AS $function$
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
$function$;
