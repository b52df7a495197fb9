-- Copy-on-write for every live fork of p_session that reads its turns from p_from on
-- (NULL: every fork of it), before p_session changes them. Forks in session id order. A
-- purged fork is skipped but not its own forks: they still read p_session's turns through it
-- (the purge took only the purged fork's own turns), so they are copied into in its place.
CREATE OR REPLACE FUNCTION shardstore.fork_cow(p_session_id uuid, p_from bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    d        record;
    v_copied bigint := 0;
BEGIN
    FOR d IN SELECT x.session_id, x.purged_at IS NOT NULL AS purged FROM shardstore.sessions x
              WHERE x.fork_parent = p_session_id
                AND (p_from IS NULL OR x.fork_at >= p_from)
              ORDER BY x.session_id LOOP
        IF d.purged THEN
            v_copied := v_copied + shardstore.fork_cow(d.session_id, p_from);
        ELSE
            v_copied := v_copied + shardstore.fork_materialise(d.session_id, p_from);
        END IF;
    END LOOP;
    RETURN v_copied;
END
$function$;
