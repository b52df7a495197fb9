-- rewind_v2 (0031), and the artifacts of the turn and checkpoint refs it deletes (those at
-- or after p_to, read under the session lock, which every turn or checkpoint reference
-- takes too) marked when left without a live reference.
CREATE OR REPLACE FUNCTION shardstore.rewind_v3(p_session_id uuid, p_to bigint)
 RETURNS TABLE(r_status text, r_removed bigint, r_turns bigint, r_first bigint)
 LANGUAGE plpgsql
AS $function$
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
$function$;
