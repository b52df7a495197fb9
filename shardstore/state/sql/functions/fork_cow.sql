-- Copy-on-write for every live fork of p_session that reads its turns from p_from on
-- (NULL: every fork of it), before p_session changes them. Forks in session id order.
CREATE OR REPLACE FUNCTION shardstore.fork_cow(p_session_id uuid, p_from bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    d        record;
    v_copied bigint := 0;
BEGIN
    FOR d IN SELECT x.session_id FROM shardstore.sessions x
              WHERE x.fork_parent = p_session_id AND x.purged_at IS NULL
                AND (p_from IS NULL OR x.fork_at >= p_from)
              ORDER BY x.session_id LOOP
        v_copied := v_copied + shardstore.fork_materialise(d.session_id, p_from);
    END LOOP;
    RETURN v_copied;
END
$function$;
