CREATE OR REPLACE FUNCTION shardstore.purge_session_data(p_session_id uuid, p_dry_run boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s         record;
    v_acc     jsonb;
    v_cleared bigint;
    v_now     timestamptz;
BEGIN
    BEGIN
        SELECT x.purged_at, x.subject_id, x.agent_id, x.metadata INTO s
          FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
        END IF;
        -- this session may hold copies of another session's turns (copied here when that
        -- session rewound or purged a range under this fork): they are not this session's
        -- data, so its live forks, which read them here, get what they inherit copied into
        -- themselves first; fork_erase below then takes this session's own turns out of
        -- those copies again
        IF EXISTS (SELECT 1 FROM shardstore.fork_copies f
                    WHERE f.session_id = p_session_id AND f.origin_session_id <> p_session_id) THEN
            PERFORM shardstore.fork_cow(p_session_id, NULL);
        END IF;
        v_cleared := coalesce(pg_column_size(s.subject_id), 0) + coalesce(pg_column_size(s.agent_id), 0)
                   + CASE WHEN s.metadata = '{}' THEN 0 ELSE pg_column_size(s.metadata) END;
        v_now := clock_timestamp();
        UPDATE shardstore.sessions x
           SET purged_at = coalesce(x.purged_at, v_now),
               subject_id = NULL, agent_id = NULL, metadata = '{}',
               open_turns = 0, open_tokens = 0, open_bytes = 0
         WHERE x.session_id = p_session_id;
        v_acc := shardstore.purge_rows(p_session_id, NULL, NULL);
        v_acc := shardstore.fork_erase(p_session_id, v_acc);
        v_acc := shardstore.purge_acc(v_acc, 'shardstore.sessions', 0,
                                         (s.purged_at IS NULL OR v_cleared > 0)::int, v_cleared);
        v_acc := jsonb_build_object('tables', v_acc, 'tombstoned', s.purged_at IS NULL);
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;  -- a dry run: the work is undone, v_acc keeps the counts
    END;
    RETURN v_acc;
END
$function$;
