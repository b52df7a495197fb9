CREATE OR REPLACE FUNCTION shardstore.facts_purge_subject_v1(p_tenant text, p_subject text, p_dry_run boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n    bigint;
    v_b    bigint;
    v_live uuid[];
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended(jsonb_build_array('fact-subject', p_tenant, p_subject)::text, 8));
    BEGIN
        -- the subject's live sessions (a dry run leaves their facts to their purges' counts)
        SELECT coalesce(array_agg(s.session_id), '{}') INTO v_live FROM shardstore.sessions s
         WHERE p_dry_run AND s.tenant_id = p_tenant AND s.subject_id = p_subject AND s.purged_at IS NULL;
        SELECT count(*), coalesce(sum(pg_column_size(f.*)), 0) INTO v_n, v_b FROM shardstore.facts f
         WHERE f.tenant_id = p_tenant AND f.subject = p_subject
           AND (f.source_session_id IS NULL OR NOT f.source_session_id = ANY (v_live));
        DELETE FROM shardstore.facts f
         WHERE f.tenant_id = p_tenant AND f.subject = p_subject
           AND (f.source_session_id IS NULL OR NOT f.source_session_id = ANY (v_live));
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;  -- a dry run: the delete is undone, the counts stay
    END;
    RETURN jsonb_build_object('tables', jsonb_build_object('shardstore.facts', jsonb_build_array(v_n, 0, v_b)));
END
$function$;
