-- LangGraph checkpointer: statements by name, see
-- shardstore/integrations/langgraph.py.

-- name: lg_sessions
SELECT s.session_id, s.purged_at IS NOT NULL AS purged
  FROM shardstore.sessions s WHERE s.session_id = ANY(%s::uuid[]);

-- name: lg_head
-- what the saver's copy of the turns is checked against: the head, the last append's time
-- and the first turn still stored along the session's lineage (fork_segments_v1): range
-- purges and retention remove a prefix
SELECT s.next_turn_seq AS turns, s.last_turn_at AS last_at, s.purged_at IS NOT NULL AS purged,
       coalesce((SELECT min(f.first) FROM (
                   SELECT (SELECT m.first_turn_seq FROM shardstore.chunk_map m
                            WHERE m.session_id = g.r_session_id AND m.chunk_seq >= g.r_chunk_lo
                              AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)
                            ORDER BY m.chunk_seq LIMIT 1) AS first
                     FROM shardstore.fork_segments_v1(s.session_id) g
                   UNION ALL
                   SELECT (SELECT min(b.turn_seq) FROM shardstore.turn_buffer b
                            WHERE b.session_id = g.r_session_id AND b.chunk_seq >= g.r_chunk_lo
                              AND (g.r_chunk_hi IS NULL OR b.chunk_seq < g.r_chunk_hi)
                              AND (g.r_turn_hi IS NULL OR b.turn_seq <= g.r_turn_hi))
                     FROM shardstore.fork_segments_v1(s.session_id) g) f),
                s.next_turn_seq) AS first
  FROM shardstore.sessions s WHERE s.session_id = %s;

-- name: lg_put
SELECT r_status AS status, r_turns AS turns, r_last_at AS last_at, r_sealed AS sealed
  FROM shardstore.langgraph_put_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::integer[],
                                   %s::integer[], %s, %s, make_interval(secs => %s), %s,
                                   %s::jsonb, %s::jsonb);

-- name: lg_put_writes
SELECT shardstore.langgraph_put_writes_v1(%s, %s, %s, %s, %s, %s::integer[], %s::text[],
                                          %s::text[], %s::bytea[]);

-- name: lg_get_one
-- get_tuple's checkpoint (the one named, else the newest of the namespace), its pending
-- writes and the session's head (as lg_head), from one snapshot; no row: no session
SELECT r_turns AS turns, r_last_at AS last_at, r_purged AS purged, r_first AS first,
       r_checkpoint_id AS checkpoint_id, r_parent_id AS parent_id, r_state AS state,
       r_metadata AS metadata, r_task_ids AS task_ids, r_channels AS channels,
       r_types AS value_types, r_values AS write_values
  FROM shardstore.langgraph_get_v1(%s, %s, %s);

-- name: lg_list
-- newest first (LangGraph ids sort by time); every bound NULL: none. Sent unprepared.
SELECT g.session_id, g.checkpoint_ns, g.checkpoint_id, g.parent_id, c.state::text AS state,
       c.metadata::text AS metadata, s.metadata::text AS session_metadata
  FROM shardstore.langgraph_checkpoints g
  JOIN shardstore.checkpoints c ON c.session_id = g.session_id AND c.checkpoint_id = g.shard_id
  JOIN shardstore.sessions s ON s.session_id = g.session_id
 WHERE s.tenant_id = %(tenant)s AND s.purged_at IS NULL
   AND (%(sid)s::uuid IS NULL OR g.session_id = %(sid)s::uuid)
   AND (%(ns)s::text IS NULL OR g.checkpoint_ns = %(ns)s::text)
   AND (%(before)s::text IS NULL OR g.checkpoint_id < %(before)s::text)
   AND (%(filter)s::jsonb IS NULL OR c.metadata @> %(filter)s::jsonb)
 ORDER BY g.checkpoint_id DESC, g.session_id, g.checkpoint_ns
 LIMIT %(limit)s::bigint;

-- name: lg_writes
-- pending writes of the named checkpoints, in LangGraph's order (writes_sort_key)
SELECT w.session_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, w.value_type,
       w.value
  FROM shardstore.langgraph_writes w
  JOIN unnest(%s::uuid[], %s::text[], %s::text[]) AS x(sid, ns, cid)
    ON w.session_id = x.sid AND w.checkpoint_ns = x.ns AND w.checkpoint_id = x.cid
 ORDER BY w.session_id, w.checkpoint_ns, w.checkpoint_id, w.task_path, w.task_id, w.idx;

-- name: lg_runs
SELECT g.session_id, g.checkpoint_ns, g.checkpoint_id
  FROM shardstore.langgraph_checkpoints g
  JOIN shardstore.sessions s ON s.session_id = g.session_id
 WHERE g.run_id = ANY(%s::text[]) AND s.tenant_id = %s;

-- name: lg_not_latest
-- every checkpoint of these sessions but the newest of each namespace
SELECT g.session_id, g.checkpoint_ns, g.checkpoint_id
  FROM shardstore.langgraph_checkpoints g
 WHERE g.session_id = ANY(%s::uuid[])
   AND g.checkpoint_id < (SELECT max(h.checkpoint_id) FROM shardstore.langgraph_checkpoints h
                           WHERE h.session_id = g.session_id
                             AND h.checkpoint_ns = g.checkpoint_ns);

-- name: lg_delete
SELECT shardstore.langgraph_delete_v1(%s::uuid[], %s::text[], %s::text[]);

-- name: lg_copy
SELECT shardstore.langgraph_copy_v1(%s, %s);
