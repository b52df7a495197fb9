-- A tenant's live sessions (of p_agent, when given) that may hold turns without text windows,
-- at most p_limit: those with fewer indexed turns than turns (next_turn_seq; a fork, whose
-- inherited turns are its ancestors' rows, always counts, as does a session whose retention
-- removed turns); the client's text pass then indexes what is sealed in them
-- (text_sealed_pending_v1 judges one session exactly). One read of the tenant's windows'
-- positions by the primary key (no chunk's JSON); a function, so that its plan is cached.
CREATE OR REPLACE FUNCTION shardstore.text_sealed_pending_tenant_v1(p_tenant text, p_agent text, p_limit integer)
 RETURNS uuid[]
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN ARRAY(
        SELECT s.session_id
          FROM shardstore.sessions s,
               -- by the primary key, session by session (one partition each)
               LATERAL (SELECT count(DISTINCT t.turn_seq) AS n
                          FROM shardstore.turn_text t
                         WHERE t.session_id = s.session_id) w
         WHERE s.tenant_id = p_tenant AND s.purged_at IS NULL
           AND (p_agent IS NULL OR s.agent_id = p_agent)
           AND w.n < s.next_turn_seq
         ORDER BY coalesce(s.last_turn_at, s.created_at) DESC, s.session_id
         LIMIT p_limit);
END
$function$;
