-- Locks a live session row; raises SS404 / SS410 for unknown / purged sessions.
CREATE OR REPLACE FUNCTION shardstore.lock_session_v1(p_session_id uuid)
 RETURNS shardstore.sessions
 LANGUAGE plpgsql
AS $function$
DECLARE
    s shardstore.sessions%ROWTYPE;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    RETURN s;
END
$function$;
