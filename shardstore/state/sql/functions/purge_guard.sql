-- Writers of registered tables call this in their transaction: it takes a KEY SHARE lock on
-- the session row (a purge's FOR UPDATE waits for that transaction, and the transaction
-- waits for a purge in progress) and raises SS404 / SS410 for unknown / purged sessions.
CREATE OR REPLACE FUNCTION shardstore.purge_guard(p_session_id uuid)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_purged timestamptz;
BEGIN
    SELECT s.purged_at INTO v_purged FROM shardstore.sessions s
     WHERE s.session_id = p_session_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF v_purged IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
END
$function$;
