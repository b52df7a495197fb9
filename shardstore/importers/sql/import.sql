-- Statements of the importers and the exporter (shardstore/importers/).

-- name: import_session_first_turn
-- an imported session whose export began after a range purge starts where it began
UPDATE shardstore.sessions SET first_turn_seq = %s WHERE session_id = %s;

-- name: import_session_insert
-- a session exactly as exported (its created_at included); no row when the id exists
INSERT INTO shardstore.sessions (session_id, tenant_id, subject_id, agent_id, metadata, created_at)
VALUES (%s, %s, %s, %s, %s::jsonb, %s)
ON CONFLICT (session_id) DO NOTHING
RETURNING session_id;

-- name: import_session_created
-- the source's creation time for a session the import made (before its first turn)
UPDATE shardstore.sessions SET created_at = %s WHERE session_id = %s AND next_turn_seq = 0;

-- name: import_turns
-- a batch of past turns; sealed chunks holding the newest keep_turns turns stay buffered
SELECT r_status AS status, r_index AS index, r_sealed AS sealed
  FROM shardstore.import_turns_v3(%s, %s, %s::jsonb, %s::integer[], %s::integer[], %s::text[],
                                  %s::timestamptz[], %s, %s, make_interval(secs => %s), %s, %s);

-- name: import_session_turns
SELECT next_turn_seq FROM shardstore.sessions WHERE session_id = %s;

-- name: export_session_state
-- what a version 2 session line adds: where its history starts and where it was forked from
SELECT first_turn_seq, fork_parent, fork_at FROM shardstore.sessions WHERE session_id = %s;

-- name: export_checkpoints
-- a page of a session's checkpoints, oldest first (seq order), after a seq
SELECT checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id, idempotency_key,
       created_at, state::text AS state, tool_calls::text AS tool_calls,
       tool_results::text AS tool_results, metadata::text AS metadata
  FROM shardstore.checkpoints
 WHERE session_id = %(sid)s AND seq > %(after)s
 ORDER BY seq
 LIMIT %(limit)s;

-- name: export_runs
SELECT run_id, tenant_id, framework, thread_key, status, awaiting::text AS awaiting,
       awaiting_since, steps, usd_cost, error, metadata::text AS metadata, created_at,
       updated_at, closed_at
  FROM shardstore.runs
 WHERE session_id = %s
 ORDER BY created_at, run_id;

-- name: export_summaries
-- a page of a session's own chunk summaries, after a chunk_seq
SELECT chunk_seq, tenant_id, chunk_start, first_turn_seq, last_turn_seq, summary, tokens,
       model, created_at, message_tokens, counted_by
  FROM shardstore.chunk_summaries
 WHERE session_id = %(sid)s AND chunk_seq > %(after)s
 ORDER BY chunk_seq
 LIMIT %(limit)s;

-- name: export_facts
-- a page of the facts of a tenant and/or subject, every version, after (tenant, fact_id)
SELECT tenant_id, fact_id, subject, key, value::text AS value, confidence, source_session_id,
       source_turn_seq, valid_from, valid_to, recorded_at
  FROM shardstore.facts
 WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
   AND (%(subject)s::text IS NULL OR subject = %(subject)s::text)
   AND (tenant_id, fact_id) > (%(after_tenant)s::text, %(after_id)s::uuid)
 ORDER BY tenant_id, fact_id
 LIMIT %(limit)s;

-- name: import_checkpoint
-- a checkpoint as exported, in the tenant of the session it is imported into (never the
-- file's), with a new seq: seq comes from one sequence for the database, so checkpoints
-- keep their order within the session and stay older than any written after the import
INSERT INTO shardstore.checkpoints
       (session_id, checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id,
        idempotency_key, created_at, state, tool_calls, tool_results, metadata)
SELECT s.session_id, %(id)s, nextval('shardstore.checkpoint_seq'), s.tenant_id, %(turn)s,
       %(sub)s, %(parent)s, %(key)s, %(at)s, %(state)s::jsonb, %(calls)s::jsonb,
       %(results)s::jsonb, %(meta)s::jsonb
  FROM shardstore.sessions s
 WHERE s.session_id = %(sid)s;

-- name: import_run_elsewhere
-- whether a run id is used by another session (runs are looked up by run id alone)
SELECT 1 AS found FROM shardstore.runs WHERE run_id = %s AND session_id <> %s LIMIT 1;

-- name: import_run
-- a run as exported, in the tenant of the session it is imported into
INSERT INTO shardstore.runs
       (session_id, run_id, tenant_id, framework, thread_key, status, awaiting,
        awaiting_since, steps, usd_cost, error, metadata, created_at, updated_at, closed_at)
SELECT s.session_id, %(id)s, s.tenant_id, %(framework)s, %(thread)s, %(status)s,
       %(awaiting)s::jsonb, %(awaiting_since)s, %(steps)s, %(cost)s, %(error)s,
       %(meta)s::jsonb, %(at)s, %(updated)s, %(closed)s
  FROM shardstore.sessions s
 WHERE s.session_id = %(sid)s;

-- name: import_summary
-- a chunk summary, stored on the imported chunk holding exactly its turns (its chunk_seq
-- and chunk_start are the importing store's); its summary queue row goes. No row stored
-- (0) when no folded chunk of the session holds exactly those turns.
WITH c AS (
    SELECT h.chunk_seq, h.chunk_start FROM shardstore.agent_history h
     WHERE h.session_id = %(sid)s AND h.first_turn_seq = %(first)s
       AND h.first_turn_seq + h.turn_count - 1 = %(last)s
     LIMIT 1),
ins AS (
    INSERT INTO shardstore.chunk_summaries
           (session_id, chunk_seq, tenant_id, chunk_start, first_turn_seq, last_turn_seq,
            summary, tokens, model, created_at, message_tokens, counted_by)
    SELECT s.session_id, c.chunk_seq, s.tenant_id, c.chunk_start, %(first)s, %(last)s,
           %(summary)s, %(tokens)s, %(model)s, %(at)s, %(message_tokens)s, %(counted_by)s
      FROM c, shardstore.sessions s
     WHERE s.session_id = %(sid)s
    ON CONFLICT (session_id, chunk_seq) DO NOTHING
    RETURNING chunk_seq),
gone AS (
    DELETE FROM shardstore.summary_queue q
     WHERE q.session_id = %(sid)s AND q.chunk_seq IN (SELECT chunk_seq FROM ins))
SELECT count(*) AS stored FROM ins;

-- name: import_session_tenant
-- the tenant of a session in this database (a fact's source must be of the fact's tenant)
SELECT tenant_id FROM shardstore.sessions WHERE session_id = %s;

-- name: import_fact
-- a fact version as exported; no row when its id is there (or its key already has a
-- current version: the caller tells the two apart)
INSERT INTO shardstore.facts
       (tenant_id, fact_id, subject, key, value, confidence, source_session_id,
        source_turn_seq, valid_from, valid_to, recorded_at)
VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
RETURNING fact_id;

-- name: import_fact_exists
SELECT 1 AS found FROM shardstore.facts WHERE tenant_id = %s AND fact_id = %s;

-- name: export_session_artifacts
-- a page of the ready artifacts a session's references and links name, after one
SELECT a.tenant_id, a.artifact_id, a.sha256, a.size_bytes, a.content_type, a.tokens,
       a.required_for_resume, a.created_at
  FROM shardstore.artifacts a
 WHERE a.state = 'ready'
   AND (a.tenant_id, a.artifact_id) IN (
        SELECT r.tenant_id, r.artifact_id FROM shardstore.artifact_refs r
         WHERE r.session_id = %(sid)s
        UNION
        SELECT l.tenant_id, l.artifact_id FROM shardstore.artifact_links l
         WHERE l.session_id = %(sid)s)
   AND a.artifact_id > %(after)s
 ORDER BY a.artifact_id
 LIMIT %(limit)s;

-- name: export_session_refs
-- a page of a session's artifact references, by (turn_seq, owner_type, owner_id, artifact_id)
-- after the given one (a NULL turn_seq, a trajectory's, sorts as -1)
SELECT r.tenant_id, r.artifact_id, r.owner_type, r.owner_id, r.turn_seq,
       r.required_for_resume, r.expires_at
  FROM shardstore.artifact_refs r
 WHERE r.session_id = %(sid)s
   AND (coalesce(r.turn_seq, -1), r.owner_type, r.owner_id, r.artifact_id)
       > (%(turn)s::bigint, %(type)s::text, %(owner)s::text, %(artifact)s::uuid)
 ORDER BY coalesce(r.turn_seq, -1), r.owner_type, r.owner_id, r.artifact_id
 LIMIT %(limit)s;

-- name: access_session_tables
-- the session tables a purge covers (the registry's), for an access report's row counts
SELECT table_name::text AS table_name, session_column::text AS session_column
  FROM shardstore.purge_targets
 ORDER BY position, table_name::text;

-- name: export_session_ancestors
-- the live sessions a session's history depends on, which an export writes before it so
-- that an import can rebuild the lineage: its fork parent and the origins of the turns
-- copied into it (copy-on-write)
SELECT s.session_id, s.tenant_id, s.subject_id
  FROM shardstore.sessions s
 WHERE s.purged_at IS NULL
   AND s.session_id IN (SELECT f.fork_parent FROM shardstore.sessions f WHERE f.session_id = %(sid)s
                        UNION
                        SELECT c.origin_session_id FROM shardstore.fork_copies c
                         WHERE c.session_id = %(sid)s)
 ORDER BY s.created_at, s.session_id;

-- name: export_fork_copies
-- a session's copy-on-write records: which of its turns were copied from which origin
-- (chunk numbers are the exporting store's own; an import maps turn ranges onto its chunks)
SELECT origin_session_id, first_turn_seq, last_turn_seq
  FROM shardstore.fork_copies
 WHERE session_id = %s
 ORDER BY chunk_seq, origin_session_id;

-- name: export_session_links
-- a session's artifact links that no reference of the session still backs (the link stays
-- when the reference goes: a purge of the session erases the artifact all the same)
SELECT l.tenant_id, l.artifact_id
  FROM shardstore.artifact_links l
 WHERE l.session_id = %s
   AND NOT EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.session_id = l.session_id AND r.tenant_id = l.tenant_id
                      AND r.artifact_id = l.artifact_id)
 ORDER BY l.artifact_id;

-- name: export_sessionless_refs
-- a page of a tenant's references that name no session (business outputs, trajectories of
-- no session), after (owner_type, owner_id, artifact_id)
SELECT r.tenant_id, r.artifact_id, r.owner_type, r.owner_id, r.turn_seq,
       r.required_for_resume, r.expires_at
  FROM shardstore.artifact_refs r
 WHERE r.tenant_id = %(tenant)s AND r.session_id IS NULL
   AND (r.owner_type, r.owner_id, r.artifact_id)
       > (%(type)s::text, %(owner)s::text, %(artifact)s::uuid)
 ORDER BY r.owner_type, r.owner_id, r.artifact_id
 LIMIT %(limit)s;

-- name: export_sessionless_artifacts
-- the ready artifacts that a page of session-less references names
SELECT a.tenant_id, a.artifact_id, a.sha256, a.size_bytes, a.content_type, a.tokens,
       a.required_for_resume, a.created_at
  FROM shardstore.artifacts a
 WHERE a.state = 'ready' AND a.tenant_id = %s AND a.artifact_id = ANY(%s::uuid[])
 ORDER BY a.artifact_id;

-- name: import_fork_parent
-- the session a fork line names as its parent, here
SELECT tenant_id, subject_id, agent_id, next_turn_seq, purged_at IS NOT NULL AS purged
  FROM shardstore.sessions WHERE session_id = %s;

-- name: import_fork
-- a fork of a session here (fork_v1: one row, the inherited turns read through the
-- lineage); status 'exists' when the id is taken
SELECT r_status AS status FROM shardstore.fork_v1(%s, %s, NULL, %s, %s::jsonb);

-- name: import_fork_chunk
-- where the parent %(parent)s's view stores its turn %(at)s: the owning session (the parent
-- or an ancestor) and chunk
SELECT r_owner, r_chunk_seq FROM shardstore.fork_chunk_of_v1(%(parent)s, %(at)s);

-- name: import_fork_point
-- the time of turn %(at)s in chunk %(chunk)s of session %(owner)s, buffered or folded (each
-- subquery names the session, so that on Citus each goes to the session's shard)
SELECT coalesce(
         (SELECT b.created_at FROM shardstore.turn_buffer b
           WHERE b.session_id = %(owner)s AND b.chunk_seq = %(chunk)s
             AND b.turn_seq = %(at)s),
         (SELECT (x.e->>'at')::timestamptz
            FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS x(e)
           WHERE h.session_id = %(owner)s AND h.chunk_seq = %(chunk)s
             AND (x.e->>'s')::bigint = %(at)s
           LIMIT 1)) AS at;

-- name: import_fork_times
-- an imported fork keeps the file's creation time; its last turn so far is the last one
-- it inherits (fork_v1 took the parent's newest, which its own turns may predate)
UPDATE shardstore.sessions SET created_at = %s, last_turn_at = %s WHERE session_id = %s;

-- name: import_fork_copy
-- a copy-on-write record on each imported chunk of the session holding turns of the range
-- (folded chunks: what fork_erase rewrites); the number of chunks it landed on
WITH c AS (
    INSERT INTO shardstore.fork_copies AS f
           (session_id, chunk_seq, origin_session_id, chunk_start, first_turn_seq,
            last_turn_seq, tenant_id)
    SELECT h.session_id, h.chunk_seq, %(origin)s, h.chunk_start,
           greatest(h.first_turn_seq, %(first)s),
           least(h.first_turn_seq + h.turn_count - 1, %(last)s), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = %(sid)s AND h.first_turn_seq <= %(last)s
       AND h.first_turn_seq + h.turn_count - 1 >= %(first)s
    ON CONFLICT (session_id, chunk_seq, origin_session_id) DO UPDATE
       SET first_turn_seq = least(f.first_turn_seq, EXCLUDED.first_turn_seq),
           last_turn_seq = greatest(f.last_turn_seq, EXCLUDED.last_turn_seq)
    RETURNING 1)
SELECT count(*) AS chunks FROM c;

-- name: import_artifact_link
-- a session's link to an artifact of its tenant (ready here); no row when the artifact is not
INSERT INTO shardstore.artifact_links (tenant_id, session_id, artifact_id, linked_at)
SELECT a.tenant_id, %(sid)s, a.artifact_id, clock_timestamp()
  FROM shardstore.artifacts a
 WHERE a.tenant_id = %(tenant)s AND a.artifact_id = %(artifact)s AND a.state = 'ready'
ON CONFLICT DO NOTHING
RETURNING 1 AS linked;

-- name: import_artifact_there
SELECT 1 AS found FROM shardstore.artifacts
 WHERE tenant_id = %s AND artifact_id = %s AND state = 'ready';

-- name: import_seal_open
-- the session's open chunk is sealed as the chunker seals one: the next turn opens a new
-- chunk, and a fold moves the sealed one to agent_history
UPDATE shardstore.sessions
   SET open_chunk_seq = open_chunk_seq + 1, open_turns = 0, open_tokens = 0, open_bytes = 0
 WHERE session_id = %s AND open_turns > 0;

-- name: import_summary_chunk
-- the chunk import_summary stores a summary on (an encrypted store seals the summary for it)
SELECT h.chunk_seq FROM shardstore.agent_history h
 WHERE h.session_id = %(sid)s AND h.first_turn_seq = %(first)s
   AND h.first_turn_seq + h.turn_count - 1 = %(last)s
 LIMIT 1;
