-- Data-key rotation (shardstore/encryption/rotation.py): finding the sealed values that still
-- name a retired key id ("k") and re-sealing them under the new one, each statement a
-- compare-and-set on the value read, so that a concurrent append, fold or rewind is never
-- overwritten. The finders page by key (keyset), so a value that could not be swapped is
-- skipped in this pass and found again by the next.

-- name: rotation_may_act_for
-- whether this store may rotate or shred the keys of tenant %(tenant)s: an operator's
-- connection (row security not in force), a role bound to that tenant, or a connection whose
-- tenant setting names it
SELECT CASE
         WHEN NOT row_security_active('shardstore.sessions') THEN true
         WHEN EXISTS (SELECT 1 FROM shardstore.rls_role_tenants b WHERE b.role_name = current_user)
           THEN EXISTS (SELECT 1 FROM shardstore.rls_role_tenants b
                         WHERE b.role_name = current_user AND b.tenant_id = %(tenant)s)
         ELSE nullif(current_setting('shardstore.tenant_id', true), '') IS NOT DISTINCT FROM %(tenant)s
       END;

-- name: rotation_bound_tenant
-- the one tenant this connection acts for, if any: its tenant setting (a tenant store binds it
-- in every transaction), else the tenant its role is bound to when there is exactly one
SELECT coalesce(nullif(current_setting('shardstore.tenant_id', true), ''),
                (SELECT min(b.tenant_id) FROM shardstore.rls_role_tenants b
                  WHERE b.role_name = current_user HAVING count(*) = 1));

-- name: rotation_session_owner
SELECT tenant_id, subject_id, purged_at IS NOT NULL AS purged
  FROM shardstore.sessions
 WHERE session_id = %(sid)s;

-- name: rotation_subject_known
-- whether tenant %(tenant)s has a live session or a fact of subject %(subject)s
SELECT EXISTS (SELECT 1 FROM shardstore.sessions
                WHERE tenant_id = %(tenant)s AND subject_id = %(subject)s AND purged_at IS NULL)
    OR EXISTS (SELECT 1 FROM shardstore.facts
                WHERE tenant_id = %(tenant)s AND subject = %(subject)s);

-- name: rotation_sessions
-- the sessions whose rows may hold values sealed under the scope's key: the subject's (or the
-- one session), and the forks whose copy-on-write copied turns written by one of them
WITH own AS (
    SELECT session_id FROM shardstore.sessions
     WHERE tenant_id = %(tenant)s AND purged_at IS NULL
       AND (subject_id = %(subject)s OR session_id = %(session)s)
)
SELECT session_id FROM own
UNION
SELECT c.session_id FROM shardstore.fork_copies c
 WHERE c.tenant_id = %(tenant)s AND c.origin_session_id IN (SELECT session_id FROM own)
ORDER BY 1;

-- name: rotation_buffered_turns
SELECT turn_seq, message::text AS value
  FROM shardstore.turn_buffer
 WHERE session_id = %(sid)s AND turn_seq > %(after)s
   AND message ? 'ss_enc' AND message->>'k' = ANY(%(kids)s)
 ORDER BY turn_seq
 LIMIT %(n)s;

-- name: rotation_reseal_buffered_turns
UPDATE shardstore.turn_buffer b
   SET message = v.new
  FROM unnest(%(seqs)s::bigint[], %(olds)s::jsonb[], %(news)s::jsonb[]) AS v(seq, old, new)
 WHERE b.session_id = %(sid)s AND b.turn_seq = v.seq AND b.message = v.old
RETURNING b.turn_seq;

-- name: rotation_chunk_turns
-- the sealed turns of a session's chunks in agent_history, after (chunk, turn) %(chunk)s,
-- %(after)s
SELECT h.chunk_seq, h.chunk_start, (e->>'s')::bigint AS turn_seq, (e->'m')::text AS value
  FROM shardstore.agent_history h
 CROSS JOIN LATERAL jsonb_array_elements(h.conversation_chunk) AS e
 WHERE h.session_id = %(sid)s AND h.chunk_seq >= %(chunk)s
   AND (h.chunk_seq > %(chunk)s OR (e->>'s')::bigint > %(after)s)
   AND e->'m' ? 'ss_enc' AND e->'m'->>'k' = ANY(%(kids)s)
 ORDER BY h.chunk_seq, (e->>'s')::bigint
 LIMIT %(n)s;

-- name: rotation_reseal_chunk_turns
-- swaps the message of each listed turn of one chunk where it still is the value read; the
-- rest of the chunk (also turns a concurrent fold added) is kept as it is now
UPDATE shardstore.agent_history h
   SET conversation_chunk = (
       SELECT jsonb_agg(CASE WHEN r.new IS NULL THEN x.e ELSE jsonb_set(x.e, '{m}', r.new) END
                        ORDER BY x.ord)
         FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
         LEFT JOIN unnest(%(seqs)s::bigint[], %(olds)s::jsonb[], %(news)s::jsonb[]) AS r(s, old, new)
           ON (x.e->>'s')::bigint = r.s AND x.e->'m' = r.old)
 WHERE h.session_id = %(sid)s AND h.chunk_seq = %(chunk)s AND h.chunk_start = %(start)s
RETURNING h.chunk_seq,
          (SELECT count(*) FROM jsonb_array_elements(h.conversation_chunk) AS e
            WHERE e->'m' = ANY(%(news)s::jsonb[])) AS swapped;

-- name: rotation_checkpoints
SELECT checkpoint_id, state::text AS state, tool_calls::text AS tool_calls,
       tool_results::text AS tool_results
  FROM shardstore.checkpoints
 WHERE session_id = %(sid)s AND checkpoint_id > %(after)s
   AND (state->>'k' = ANY(%(kids)s) OR tool_calls->>'k' = ANY(%(kids)s)
        OR tool_results->>'k' = ANY(%(kids)s))
 ORDER BY checkpoint_id
 LIMIT %(n)s;

-- name: rotation_reseal_checkpoints
UPDATE shardstore.checkpoints c
   SET state = v.new_state, tool_calls = v.new_calls, tool_results = v.new_results
  FROM unnest(%(ids)s::uuid[], %(old_states)s::jsonb[], %(new_states)s::jsonb[],
              %(old_calls)s::jsonb[], %(new_calls)s::jsonb[],
              %(old_results)s::jsonb[], %(new_results)s::jsonb[])
       AS v(id, old_state, new_state, old_calls, new_calls, old_results, new_results)
 WHERE c.session_id = %(sid)s AND c.checkpoint_id = v.id AND c.state = v.old_state
   AND c.tool_calls IS NOT DISTINCT FROM v.old_calls
   AND c.tool_results IS NOT DISTINCT FROM v.old_results
RETURNING c.checkpoint_id;

-- name: rotation_summaries
-- a sealed summary is the JSON text of its envelope, "k" among its first fields
SELECT chunk_seq, first_turn_seq, last_turn_seq, summary AS value
  FROM shardstore.chunk_summaries
 WHERE session_id = %(sid)s AND chunk_seq > %(after)s AND summary LIKE ANY(%(patterns)s)
 ORDER BY chunk_seq
 LIMIT %(n)s;

-- name: rotation_reseal_summaries
UPDATE shardstore.chunk_summaries s
   SET summary = v.new
  FROM unnest(%(seqs)s::bigint[], %(olds)s::text[], %(news)s::text[]) AS v(seq, old, new)
 WHERE s.session_id = %(sid)s AND s.chunk_seq = v.seq AND s.summary = v.old
RETURNING s.chunk_seq;

-- name: rotation_facts
SELECT fact_id, key, value::text AS value
  FROM shardstore.facts
 WHERE tenant_id = %(tenant)s AND subject = %(subject)s AND fact_id > %(after)s
   AND value->>'k' = ANY(%(kids)s)
 ORDER BY fact_id
 LIMIT %(n)s;

-- name: rotation_reseal_facts
UPDATE shardstore.facts f
   SET value = v.new
  FROM unnest(%(ids)s::uuid[], %(olds)s::jsonb[], %(news)s::jsonb[]) AS v(id, old, new)
 WHERE f.tenant_id = %(tenant)s AND f.fact_id = v.id AND f.value = v.old
RETURNING f.fact_id;

-- name: rotation_lock_session
-- taken for the final check: waits for the sealed writers in flight (they lock the row, FOR NO
-- KEY UPDATE or FOR KEY SHARE, and read the data key after), so that none seals under a retired
-- key after it
SELECT 1 FROM shardstore.sessions WHERE session_id = %(sid)s FOR UPDATE;

-- name: rotation_langgraph_writes
-- LangGraph pending writes: the value is the sealed envelope's JSON as bytes
SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, value_type,
       convert_from(value, 'UTF8') AS value
  FROM shardstore.langgraph_writes
 WHERE session_id = %(sid)s
   AND (checkpoint_ns, checkpoint_id, task_id, idx) > (%(ns)s, %(cid)s, %(task)s, %(idx)s)
   AND value LIKE ANY(%(patterns)s::bytea[])
 ORDER BY checkpoint_ns, checkpoint_id, task_id, idx
 LIMIT %(n)s;

-- name: rotation_reseal_langgraph_writes
UPDATE shardstore.langgraph_writes w
   SET value = convert_to(v.new, 'UTF8')
  FROM unnest(%(nss)s::text[], %(cids)s::text[], %(tasks)s::text[], %(idxs)s::int[],
              %(olds)s::text[], %(news)s::text[]) AS v(ns, cid, task, idx, old, new)
 WHERE w.session_id = %(sid)s AND w.checkpoint_ns = v.ns AND w.checkpoint_id = v.cid
   AND w.task_id = v.task AND w.idx = v.idx AND w.value = convert_to(v.old, 'UTF8')
RETURNING w.idx;

-- name: rotation_artifacts_linked
-- whether an artifact linked to one of the sessions is still stored: its bytes may be sealed
-- under the scope's key (an artifact owned by a turn or checkpoint of a session is sealed under
-- that session's key, and the link stays for good), and the rotation does not re-key artifact
-- bytes. Asked in the final check, under its session locks: a link of freshly sealed bytes
-- locks its session row and re-reads the key first, so it committed before (seen here) or
-- links bytes sealed under the new version only
SELECT EXISTS (
    SELECT 1 FROM shardstore.artifact_links l
      JOIN shardstore.artifacts a ON a.tenant_id = l.tenant_id AND a.artifact_id = l.artifact_id
     WHERE l.tenant_id = %(tenant)s AND l.session_id = ANY(%(sids)s));

-- name: rotation_lock_subject
-- taken for the final check of a subject's rotation: the subject's fact lock exclusively,
-- which waits for the fact writers in flight (they take it shared before they read the data
-- key: sealed_writer_subject) and holds later ones until the check commits. Taken where the
-- tenant's facts are: the one-row join over a probe of facts filtered by the tenant is
-- routed by Citus, lock included, to the node holding the tenant's facts shard, whichever
-- node the client connected to (an advisory lock holds on one node only), so a fact writer
-- connected straight to a worker meets it too; on one server it is a plain lock
SELECT pg_advisory_xact_lock(
         hashtextextended(jsonb_build_array('fact-subject', %(tenant)s::text,
                                            %(subject)s::text)::text, 8))
  FROM (SELECT 1 FROM shardstore.facts f WHERE f.tenant_id = %(tenant)s LIMIT 1) AS probe
 RIGHT JOIN (VALUES (1)) AS one (v) ON true;

-- name: rotation_forget_keyed_windows
-- the text windows of the session's sealed turns: their lexeme hashes are keyed by a key
-- derived from the data key the rotation replaced, so the next search of the session indexes
-- them again under the current version (plaintext turns' windows stay). Every table is
-- filtered by the session itself, so that Citus routes it to the session's shard.
DELETE FROM shardstore.turn_text t
 WHERE t.session_id = %(sid)s
   AND (EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                 WHERE b.session_id = %(sid)s AND b.turn_seq = t.turn_seq
                   AND b.message ? 'ss_enc')
        OR EXISTS (SELECT 1
                     FROM shardstore.agent_history h,
                          LATERAL jsonb_array_elements(h.conversation_chunk) AS e(v)
                    WHERE h.session_id = %(sid)s AND h.chunk_seq = t.chunk_seq
                      AND (e.v ->> 's')::bigint = t.turn_seq AND e.v -> 'm' ? 'ss_enc'));
