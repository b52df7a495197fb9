-- The history's statements (shardstore/history/ops.py): configuration, partitions, sessions,
-- appends and reads, by name (shardstore.core.sql.query(name) finds any feature's statement).
-- Reads of agent_history are sent unprepared with literal partition keys so that they
-- prune at plan time (a generic plan would lock every partition).

-- name: config_get
SELECT extract(epoch FROM partition_interval)::float8 AS interval_seconds,
       partition_origin AS origin
  FROM shardstore.config;

-- name: config_init
INSERT INTO shardstore.config (partition_interval) VALUES (make_interval(secs => %s))
ON CONFLICT (singleton) DO NOTHING;

-- name: config_set_interval
UPDATE shardstore.config SET partition_interval = make_interval(secs => %s);

-- name: partition_count
SELECT count(*) FROM pg_inherits WHERE inhparent = 'shardstore.agent_history'::regclass;

-- name: ensure_partition
SELECT shardstore.ensure_partition_v1(%s);

-- name: session_create
INSERT INTO shardstore.sessions (session_id, tenant_id, subject_id, agent_id, metadata)
VALUES (%s, %s, %s, %s, %s::jsonb)
ON CONFLICT (session_id) DO NOTHING
RETURNING session_id;

-- name: session_owners
SELECT tenant_id, subject_id, agent_id, purged_at IS NOT NULL AS purged
  FROM shardstore.sessions
 WHERE session_id = %s;

-- name: session_get
SELECT session_id, tenant_id, subject_id, agent_id, metadata::text AS metadata, created_at,
       next_turn_seq AS turn_count, open_chunk_seq + (open_turns > 0)::int AS chunk_count,
       purged_at IS NOT NULL AS purged, first_turn_seq, open_chunk_seq, open_chunk_start, open_turns,
       open_tokens, open_bytes, last_turn_at, fork_parent
  FROM shardstore.sessions WHERE session_id = %s;

-- name: sealed_append_head
-- what an encrypted append seals its turns for (shardstore/encryption/turns.py): the session's
-- owners, the seq its next turn gets and which of the batch's idempotency keys it knows. The
-- row is locked as the append locks it (FOR NO KEY UPDATE: folds and text passes, which hold
-- FOR KEY SHARE, go on), so no other append or rewind moves the head before this
-- transaction's append: optimistic re-reads starved under four concurrent writers. The epoch
-- is the newest rewind's (the last element of rewind_epochs), the one new turns are sealed for.
-- Both tables are filtered by the session id itself, so Citus routes the statement, lock
-- included, to the session's shard (a correlated filter on s.session_id it refuses under FOR).
SELECT s.tenant_id, s.subject_id, s.next_turn_seq, s.purged_at IS NOT NULL AS purged,
       coalesce(s.rewind_epochs[cardinality(s.rewind_epochs)], 0) AS epoch,
       ARRAY(SELECT k.idempotency_key FROM shardstore.turn_keys k
              WHERE k.session_id = %(sid)s AND k.idempotency_key = ANY(%(keys)s::text[]))
         AS known
  FROM shardstore.sessions s WHERE s.session_id = %(sid)s
   FOR NO KEY UPDATE OF s;

-- name: append_sealed
-- an encrypted append in one statement, its turns sealed for the seqs and the epoch of the head
-- the store kept from its previous append (append_sealed_v1: SS412 when the head moved)
SELECT r_turn_seq AS turn_seq, r_chunk_seq AS chunk_seq, r_tokens AS tokens,
       r_duplicate AS duplicate, r_sealed AS sealed
  FROM shardstore.append_sealed_v1(%s, %s, %s::bigint[], %s::jsonb, %s::integer[], %s::integer[],
                                   %s::text[], %s, %s, make_interval(secs => %s), %s, %s);

-- name: append_sealed_one
-- append_sealed for one turn, its arguments scalars (append_sealed_one_v1)
SELECT r_turn_seq AS turn_seq, r_chunk_seq AS chunk_seq, r_tokens AS tokens,
       r_duplicate AS duplicate, r_sealed AS sealed
  FROM shardstore.append_sealed_one_v1(%s, %s, %s::bigint, %s::jsonb, %s::integer, %s::integer,
                                       %s::text, %s::bigint, %s::bigint, make_interval(secs => %s),
                                       %s);

-- name: tail_window_sealed
-- tail_window and the session's rewind epochs from one snapshot (tail_sealed_v1)
SELECT r_window, r_epochs FROM shardstore.tail_sealed_v1(%s, %s, %s);

-- name: sealed_epochs
-- the rewind epochs a reader checks encrypted turns against (shardstore/encryption/turns.py):
-- pairs (cut, epoch), flat, of the rewinds still standing; NULL when never rewound
SELECT s.rewind_epochs FROM shardstore.sessions s WHERE s.session_id = %s;

-- name: sealed_copies
-- the origins of the turns a fork's copy-on-write moved into a session's storage, with the
-- turns of each (shardstore/encryption/turns.py reads it for every session of a fork chain,
-- one session, so one shard, per statement)
SELECT c.origin_session_id AS origin, c.first_turn_seq AS lo, c.last_turn_seq AS hi
  FROM shardstore.fork_copies c
 WHERE c.session_id = %s;

-- name: session_list
-- live sessions newest first, paged by the keyset (created_at, session_id): sent unprepared
-- so that it is planned with its values and the NULL filters fold away, reading one of the
-- partial indexes sessions_list* in order
SELECT session_id, tenant_id, subject_id, agent_id, metadata::text AS metadata, created_at,
       next_turn_seq AS turn_count, open_chunk_seq + (open_turns > 0)::int AS chunk_count,
       purged_at IS NOT NULL AS purged, first_turn_seq, last_turn_at
  FROM shardstore.sessions
 WHERE purged_at IS NULL
   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
   AND (%(subject)s::text IS NULL OR subject_id = %(subject)s::text)
   AND (%(agent)s::text IS NULL OR agent_id = %(agent)s::text)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
   AND (%(external)s::text IS NULL OR metadata->>'external_id' = %(external)s::text)
   AND (%(before_at)s::timestamptz IS NULL
        OR (created_at, session_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
 ORDER BY created_at DESC, session_id DESC
 LIMIT %(limit)s;

-- name: session_cursor
-- where a listing page that ended at this session continues (purged sessions included)
SELECT created_at, session_id FROM shardstore.sessions WHERE session_id = %s;

-- name: append
-- a batch; sealed chunks holding the newest keep_turns turns stay buffered
SELECT r_turn_seq AS turn_seq, r_chunk_seq AS chunk_seq, r_tokens AS tokens,
       r_duplicate AS duplicate, r_sealed AS sealed
  FROM shardstore.append_v2(%s, %s::jsonb, %s::integer[], %s::integer[], %s::text[], %s, %s,
                            make_interval(secs => %s), %s, %s);

-- name: append_one
-- one turn: the fast path (append_to_open_chunk), else the one-statement seal
-- (append_seal_one), else the batch path (append_v2), in the same call
SELECT r_turn_seq, r_chunk_seq, r_tokens, r_duplicate, r_sealed
  FROM shardstore.append_one_v2(%s, %s::jsonb, %s::integer, %s::integer, %s::text, %s::bigint,
                                %s::bigint, make_interval(secs => %s), %s);

-- name: flush
SELECT shardstore.flush_v1(%s);

-- name: fold_sealed
-- the sealed chunks, less the newest ones holding the session's newest keep_turns turns
SELECT shardstore.fold_sealed_v2(%s, %s);

-- name: fold_sealed_indexed
-- the same, and the windows of the session's buffered turns that have none, in one
-- round trip; either order gives the same rows (a fold does not index a turn twice); and
-- whether the database indexes text at all, which the background folder keeps to know
-- whether text passes are worth asking for
SELECT shardstore.fold_sealed_v2(%s, %s), shardstore.text_index_buffered_v1(%s),
       shardstore.text_config_v1() IS NOT NULL;

-- name: tail_window
-- tail's rows as one JSON array (tail_window_v1: the items, why one text value, why a
-- function of its own)
SELECT shardstore.tail_window_v1(%s, %s, %s);

-- name: chunk_map_from
SELECT chunk_seq, chunk_start FROM shardstore.chunk_map
 WHERE session_id = %s AND chunk_seq >= coalesce(
       (SELECT max(chunk_seq) FROM shardstore.chunk_map
         WHERE session_id = %s AND first_turn_seq <= %s), 0)
 ORDER BY chunk_seq;

-- name: chunk_map_since
SELECT chunk_seq, chunk_start FROM shardstore.chunk_map
 WHERE session_id = %s AND chunk_seq >= %s
 ORDER BY chunk_seq;

-- name: buffer_chunks
SELECT chunk_seq, min(turn_seq) AS first_turn_seq, count(*)::int AS turn_count,
       sum(tokens)::bigint AS token_count, sum(bytes)::bigint AS byte_count,
       min(created_at) AS chunk_start, max(created_at) AS chunk_end
  FROM shardstore.turn_buffer
 WHERE session_id = %s AND chunk_seq >= %s
 GROUP BY chunk_seq
 ORDER BY chunk_seq;

-- name: chunk_texts
-- several chunks' envelopes as JSON text, by exact partition keys (pruned at plan time);
-- parsing them client-side is ~2x faster than expanding them with jsonb_array_elements
SELECT chunk_seq, conversation_chunk::text
  FROM shardstore.agent_history
 WHERE session_id = %s AND chunk_seq = ANY(%s) AND chunk_start = ANY(%s)
 ORDER BY chunk_seq;

-- name: buffer_turns
SELECT turn_seq, chunk_seq, tokens, created_at, idempotency_key, message::text AS message
  FROM shardstore.turn_buffer
 WHERE session_id = %s AND turn_seq >= %s AND turn_seq < %s
 ORDER BY turn_seq;

-- name: chunk_meta
-- the partition is named from chunk_start by the partition rule (tableoid would name a
-- shard on Citus)
SELECT h.chunk_seq, h.first_turn_seq, h.turn_count, h.token_count, h.byte_count,
       h.chunk_start, h.chunk_end,
       shardstore.maint_partition_name_v1(date_bin(c.partition_interval, h.chunk_start,
                                                    c.partition_origin)) AS partition
  FROM shardstore.agent_history h CROSS JOIN shardstore.config c
 WHERE h.session_id = %s AND h.chunk_seq = ANY(%s) AND h.chunk_start = ANY(%s)
 ORDER BY h.chunk_seq;

-- name: stats_sessions
-- a fork's next_turn_seq counts the turns it inherits (0..fork_at), stored in its ancestors;
-- a purged session (a tombstone) holds no turns
SELECT count(*) FILTER (WHERE purged_at IS NULL) AS sessions,
       coalesce(sum(next_turn_seq - coalesce(fork_at + 1, 0)) FILTER (WHERE purged_at IS NULL),
                0) AS turns
  FROM shardstore.sessions;

-- name: stats_buffer
SELECT count(*) FROM shardstore.turn_buffer;

-- name: stats_partitions
SELECT c.relname AS name,
       pg_get_expr(c.relpartbound, c.oid) AS bound,
       shardstore.relation_size_v1(c.oid) AS bytes
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'shardstore.agent_history'::regclass
 ORDER BY c.relname;

-- name: stats_partition_rows
-- per partition, named by the partition rule from each chunk's start (not tableoid),
-- counted in chunk_map: one small row per chunk row, with the same chunk_start, so the
-- scan reads MBs where agent_history's heap is GBs; each partition is named once
SELECT shardstore.maint_partition_name_v1(p.lower), p.n
  FROM (SELECT date_bin(c.partition_interval, m.chunk_start, c.partition_origin) AS lower,
               count(*) AS n
          FROM shardstore.chunk_map m CROSS JOIN shardstore.config c
         GROUP BY 1) p;
