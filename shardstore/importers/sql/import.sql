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
