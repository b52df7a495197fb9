-- Sets the text search configuration (p_config; NULL switches text search off) and rebuilds
-- every text window from the chunks in agent_history, in one transaction (buffered turns'
-- windows are deleted and left to the next text pass); returns how many windows it wrote.
-- It first takes the advisory lock of text_config_v1 exclusively: it waits for every writer
-- transaction that read the old configuration (their chunks are then seen and their windows
-- deleted), and writers starting meanwhile wait for its commit. A writer waiting behind it
-- while it waits for a writer that waits for the first one's row lock is a soft deadlock,
-- which PostgreSQL's detector resolves by reordering the lock queue (after deadlock_timeout),
-- aborting no one. Not granted to PUBLIC (grant_tenant_role_v2 does grant it to tenant roles,
-- with every function it does not revoke by name).
CREATE OR REPLACE FUNCTION shardstore.text_configure_v1(p_config regconfig)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('shardstore.text_config', 0));
    UPDATE shardstore.text_search_config SET config = p_config, configured_at = now();
    DELETE FROM shardstore.turn_text;
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows(p_config, e.v->'m') w
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.text_configure_v1(regconfig) FROM PUBLIC;
