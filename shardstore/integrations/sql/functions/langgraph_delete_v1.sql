-- Delete LangGraph checkpoints by id rows (their shardstore checkpoints and their writes);
-- returns how many. The turns stay: later checkpoints may hold them, and purging the
-- session removes them.
CREATE OR REPLACE FUNCTION shardstore.langgraph_delete_v1(p_session_ids uuid[], p_namespaces text[], p_checkpoint_ids text[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_done integer;
BEGIN
    WITH gone AS (
        DELETE FROM shardstore.langgraph_checkpoints g
         USING unnest(p_session_ids, p_namespaces, p_checkpoint_ids) AS x(sid, ns, cid)
         WHERE g.session_id = x.sid AND g.checkpoint_ns = x.ns AND g.checkpoint_id = x.cid
        RETURNING g.session_id, g.shard_id
    )
    DELETE FROM shardstore.checkpoints c USING gone
     WHERE c.session_id = gone.session_id AND c.checkpoint_id = gone.shard_id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    DELETE FROM shardstore.langgraph_writes w
     USING unnest(p_session_ids, p_namespaces, p_checkpoint_ids) AS x(sid, ns, cid)
     WHERE w.session_id = x.sid AND w.checkpoint_ns = x.ns AND w.checkpoint_id = x.cid;
    RETURN v_done;
END
$function$;
