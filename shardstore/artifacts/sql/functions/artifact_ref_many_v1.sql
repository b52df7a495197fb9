-- Many references of one owner kind at once (the turns of an offloaded append, the artifacts
-- of a checkpoint): the first status that is not 'ok' (the caller's transaction then rolls
-- back), else 'ok'. Artifacts are locked in id order: two writers never deadlock.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_many_v1(p_tenant text, p_artifacts uuid[], p_owner_type text, p_owner_ids text[], p_session uuid, p_turns bigint[], p_required boolean[])
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$;
