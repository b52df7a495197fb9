-- Entry point of a range purge (purge_range_data does the purge; arguments and result are
-- its). Locks the session row FOR UPDATE first; when the session is live and the cut is past
-- turn 0, every live fork of it gets its own copy of what it reads (fork_cow) and the session
-- copies in what it read from its own parent (fork_materialise), so the purge changes no
-- other session's history. Then copy records wholly before the cut are deleted and their
-- turns un-indexed (fork_copy_unindexed), and those straddling it start at the cut. A dry
-- run does all of it and rolls it back (SS298, caught) to return the report.
CREATE OR REPLACE FUNCTION shardstore.purge_range_v2(p_session_id uuid, p_before_seq bigint, p_before timestamp with time zone, p_dry_run boolean, p_skip_parts text[], p_strict boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    s     shardstore.sessions%ROWTYPE;
    v_acc jsonb;
    v_cut bigint;
    d     record;
BEGIN
    BEGIN
        SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF FOUND AND s.purged_at IS NULL THEN
            v_cut := least(coalesce(p_before_seq, shardstore.purge_cut(p_session_id, p_before)),
                           s.next_turn_seq);
            IF v_cut > 0 THEN
                PERFORM shardstore.fork_cow(p_session_id, NULL);
                PERFORM shardstore.fork_materialise(p_session_id, NULL);
            END IF;
        END IF;
        v_acc := shardstore.purge_range_data(p_session_id, p_before_seq, p_before, false,
                                           p_skip_parts, p_strict);
        IF v_cut IS NOT NULL THEN
            FOR d IN DELETE FROM shardstore.fork_copies f
                      WHERE f.session_id = p_session_id AND f.last_turn_seq < v_cut RETURNING f.* LOOP
                PERFORM shardstore.fork_copy_unindexed(d.session_id, d.chunk_seq, d.chunk_start,
                                                          d.first_turn_seq, d.last_turn_seq);
            END LOOP;
            UPDATE shardstore.fork_copies f SET first_turn_seq = v_cut
             WHERE f.session_id = p_session_id AND f.first_turn_seq < v_cut;
        END IF;
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS298', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS298' THEN
        NULL;
    END;
    RETURN v_acc;
END
$function$;
