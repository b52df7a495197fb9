-- The session's row as a context needs it (the first CTE of the ctx_read statement); no row
-- for an unknown session. Read by a function, not from sessions in the statement itself: a
-- statement naming sessions is pushed down by Citus whole to the session's shard, where
-- tail_v1 inside it would query the cluster ("cannot execute a distributed query from a query
-- on a shard"; MATERIALIZED does not stop it). This way the statement names no distributed
-- table and runs on the coordinator, each of its functions' queries routed to one shard.
CREATE OR REPLACE FUNCTION shardstore.ctx_head_v1(p_session uuid)
 RETURNS TABLE(r_session_id uuid, r_tenant_id text, r_next_turn_seq bigint, r_purged boolean)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN QUERY
    SELECT x.session_id, x.tenant_id, x.next_turn_seq, x.purged_at IS NOT NULL
      FROM shardstore.sessions x
     WHERE x.session_id = p_session;
END
$function$;
