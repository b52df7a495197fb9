-- Sweep, mark phase: artifacts without a live ref get a mark (their grace starts), marks on
-- artifacts that have one again are cleared. Returns (marked, cleared).
CREATE OR REPLACE FUNCTION shardstore.artifacts_mark_v1(p_batch integer)
 RETURNS TABLE(r_marked bigint, r_cleared bigint)
 LANGUAGE plpgsql
AS $function$
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
$function$;
