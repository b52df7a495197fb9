-- Checkpoints: statements by name, see shardstore/state/checkpoints.py.

-- name: checkpoint_write
SELECT r_status AS status, r_checkpoint_id AS checkpoint_id, r_turn_seq AS turn_seq,
       r_sub_step AS sub_step, r_parent_id AS parent_id, r_created_at AS created_at,
       r_state::text AS state, r_tool_calls::text AS tool_calls,
       r_tool_results::text AS tool_results, r_metadata::text AS metadata
  FROM shardstore.checkpoint_v1(%s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s::integer, %s,
                                %s::jsonb);

-- name: append_checkpoint
SELECT r_turn_seq AS turn_seq, r_chunk_seq AS chunk_seq, r_tokens AS tokens,
       r_duplicate AS duplicate, r_sealed AS sealed, r_checkpoint_id AS checkpoint_id
  FROM shardstore.append_checkpoint_v1(%s, %s::jsonb, %s::integer[], %s::integer[], %s::text[],
                                       %s, %s, make_interval(secs => %s), %s, %s, %s,
                                       %s::jsonb);

-- name: checkpoint_get
SELECT c.checkpoint_id, c.session_id, c.turn_seq, c.sub_step, c.parent_id, c.created_at,
       c.state::text AS state, c.tool_calls::text AS tool_calls,
       c.tool_results::text AS tool_results, c.metadata::text AS metadata, c.seq
  FROM shardstore.checkpoints c
 WHERE c.session_id = %s AND c.checkpoint_id = %s;

-- name: checkpoint_newest
SELECT c.checkpoint_id, c.session_id, c.turn_seq, c.sub_step, c.parent_id, c.created_at,
       c.state::text AS state, c.tool_calls::text AS tool_calls,
       c.tool_results::text AS tool_results, c.metadata::text AS metadata, c.seq
  FROM shardstore.checkpoints c
 WHERE c.session_id = %s
 ORDER BY c.seq DESC
 LIMIT 1;

-- name: tail_at
SELECT r_turn_seq AS turn_seq, r_chunk_seq AS chunk_seq, r_tokens AS tokens,
       r_created_at AS created_at, r_key AS idempotency_key, r_message::text AS message
  FROM shardstore.tail_at_v1(%s, %s, %s, %s);

-- name: checkpoints_keep
SELECT r_sessions AS sessions, r_deleted AS deleted, r_last AS last
  FROM shardstore.checkpoints_keep_v1(%s, %s, %s);

-- name: append_checkpoint_one
-- one turn and its checkpoint: scalar arguments, one plain row back, no arrays
SELECT r_turn_seq, r_chunk_seq, r_tokens, r_duplicate, r_sealed, r_checkpoint_id
  FROM shardstore.append_checkpoint_v2(%s, %s::jsonb, %s::integer, %s::integer, %s::text,
                                       %s::bigint, %s::bigint, make_interval(secs => %s), %s,
                                       %s, %s::jsonb);

-- name: checkpoint_page
-- checkpoints() in one statement: the session (none: no row; purged), whether the `before`
-- checkpoint exists (true without one), and the page, newest first, as checkpoint_list's;
-- a session without checkpoints on that page gives one row with no checkpoint columns.
-- Every table is filtered by the session id itself, and the anchor is looked up by a
-- non-NULL id (the nil UUID when there is no `before`; the page then ignores the anchor):
-- on Citus the statement is then routed to the session's shard whole. Filtered through
-- the join only, or compared with NULL (folded to false, which leaves the anchor no
-- shard), Citus refuses it ("complex joins are only supported when all distributed
-- tables are co-located ...").
SELECT s.purged_at IS NOT NULL AS purged,
       (%(before_id)s::uuid IS NULL OR a.seq IS NOT NULL) AS anchor_found,
       c.checkpoint_id, c.session_id, c.turn_seq, c.sub_step, c.parent_id, c.created_at,
       c.state::text AS state, c.tool_calls::text AS tool_calls,
       c.tool_results::text AS tool_results, c.metadata::text AS metadata, c.seq
  FROM shardstore.sessions s
  LEFT JOIN shardstore.checkpoints a
         ON a.session_id = %(sid)s
        AND a.checkpoint_id = coalesce(%(before_id)s::uuid, '00000000-0000-0000-0000-000000000000')
  LEFT JOIN LATERAL (
        SELECT k.* FROM shardstore.checkpoints k
         WHERE k.session_id = %(sid)s
           AND (%(before_id)s::uuid IS NULL OR k.seq < a.seq)
           AND (%(before_at)s::timestamptz IS NULL OR k.created_at < %(before_at)s::timestamptz)
         ORDER BY k.seq DESC
         LIMIT %(limit)s::bigint) c ON (%(before_id)s::uuid IS NULL OR a.seq IS NOT NULL)
 WHERE s.session_id = %(sid)s
 ORDER BY c.seq DESC NULLS LAST;

-- name: restore_window
SELECT r_found AS found, r_turn_count AS turn_count, r_checkpoint_id AS checkpoint_id,
       r_turn_seq AS turn_seq, r_sub_step AS sub_step, r_parent_id AS parent_id,
       r_created_at AS created_at, r_state AS state, r_tool_calls AS tool_calls,
       r_tool_results AS tool_results, r_metadata AS metadata, r_window AS window,
       r_before AS before, r_has_artifacts AS has_artifacts, r_rewind_epochs AS rewind_epochs
  FROM shardstore.restore_window_v2(%s, %s, %s, %s);
