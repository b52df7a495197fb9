-- Full-text search over sealed turns (encryption at rest): keyed lexeme hashes, computed by
-- the client (shardstore/search/keyed.py, docs/decisions/0025-encrypted-search.md).

-- What a session-scope search over keyed windows needs, in one statement: the query's
-- lexemes and the text search configuration (NULL: off) on every row, and a row per live
-- session of its fork lineage (%(tenant)s, when given, must match), with whose data key its
-- rows are hashed (tenant, subject) and whether it holds sealed turns without windows
-- (text_sealed_pending_v1) for the text pass.
-- name: keyed_session_prelude
WITH q AS MATERIALIZED (  -- once, not once a row
    SELECT shardstore.text_config_read_v1()::text AS config,
           coalesce(tsvector_to_array(to_tsvector(shardstore.text_config_read_v1(),
                                                  %(q)s::text)), '{}') AS words)
SELECT q.config, q.words, s.session_id, s.tenant_id, s.subject_id,
       shardstore.text_sealed_pending_v1(s.session_id) AS pending
  FROM q
  LEFT JOIN (shardstore.fork_segments_v1(%(session)s) g
             JOIN shardstore.sessions s ON s.session_id = g.r_session_id
                                       AND s.purged_at IS NULL
                                       AND (%(tenant)s::text IS NULL
                                            OR s.tenant_id = %(tenant)s::text)) ON true;

-- What a tenant-scope search over keyed windows needs, in one statement: the query's
-- lexemes, the text search configuration (NULL: off) and the tenant's sessions (of the
-- agent) holding sealed turns without text windows (text_sealed_pending_tenant_v1; at most
-- %(sessions)s) on every row, and a row per live
-- session of the tenant (of the agent), the most recently active first, at most %(n)s,
-- with its subject (whose key hashes its rows; its own without one). One row with a NULL
-- session when the tenant has none.
-- name: keyed_tenant_prelude
WITH q AS MATERIALIZED (  -- once, not once a row
    SELECT shardstore.text_config_read_v1()::text AS config,
           coalesce(tsvector_to_array(to_tsvector(shardstore.text_config_read_v1(),
                                                  %(q)s::text)), '{}') AS words,
           shardstore.text_sealed_pending_tenant_v1(%(tenant)s, %(agent)s,
                                                    %(sessions)s) AS pending)
SELECT q.config, q.words, q.pending, x.session_id, x.subject_id
  FROM q
  LEFT JOIN (SELECT s.session_id, s.subject_id
               FROM shardstore.sessions s
              WHERE s.tenant_id = %(tenant)s AND s.purged_at IS NULL
                AND (%(agent)s::text IS NULL OR s.agent_id = %(agent)s::text)
              ORDER BY coalesce(s.last_turn_at, s.created_at) DESC, s.session_id
              LIMIT %(n)s) x ON true;

-- A text pass's text search configuration (NULL: off), under the writers' lock
-- (text_config_v1: a language switch waits for the pass, and the pass for it). A statement of
-- its own: beside the session row below, Citus would run it on the session's shard, where the
-- configuration (a reference table) is a nested distributed read it refuses.
-- name: keyed_pass_config
SELECT shardstore.text_config_v1()::text AS config;

-- A text pass's hold on one session: FOR KEY SHARE (excludes rewinds, purges and flushes,
-- never appends, as text_index_buffered_v1), and the rewind epochs its turns are opened with
-- (no rewind moves them while the row is held). No row: the session is gone or purged.
-- name: keyed_pass_session
SELECT s.tenant_id, s.subject_id, s.agent_id, s.rewind_epochs
  FROM shardstore.sessions s
 WHERE s.session_id = %s AND s.purged_at IS NULL
   FOR KEY SHARE OF s;

-- The session's sealed turns (buffered, then folded) after turn %(after)s that have no text
-- window, in turn order, at most %(n)s; a folded chunk is read only when it has fewer
-- indexed turns than turns. Every table is filtered by the session itself (not by a
-- correlation), so that Citus routes the whole statement to the session's shard.
-- name: keyed_pending_turns
SELECT p.turn_seq, p.chunk_seq, p.created_at, p.message
  FROM (SELECT b.turn_seq, b.chunk_seq, b.created_at, b.message::text AS message
          FROM shardstore.turn_buffer b
         WHERE b.session_id = %(session)s AND b.turn_seq > %(after)s AND b.message ? 'ss_enc'
           AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                            WHERE t.session_id = %(session)s AND t.turn_seq = b.turn_seq)
        UNION ALL
        SELECT (e.v ->> 's')::bigint, h.chunk_seq, (e.v ->> 'at')::timestamptz, (e.v -> 'm')::text
          FROM shardstore.agent_history h,
               LATERAL jsonb_array_elements(h.conversation_chunk) AS e(v)
         WHERE h.session_id = %(session)s
           AND h.first_turn_seq + h.turn_count - 1 > %(after)s
           AND (SELECT count(DISTINCT t.turn_seq) FROM shardstore.turn_text t
                 WHERE t.session_id = %(session)s AND t.chunk_seq = h.chunk_seq) < h.turn_count
           AND (e.v ->> 's')::bigint > %(after)s AND e.v -> 'm' ? 'ss_enc'
           AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                            WHERE t.session_id = %(session)s
                              AND t.turn_seq = (e.v ->> 's')::bigint)) p
 ORDER BY p.turn_seq
 LIMIT %(n)s;

-- The lexemes of each window of opened messages (sent here, never stored), cut as
-- text_windows cuts them: (message's index from 1, window, lexemes).
-- name: keyed_window_words
SELECT x.i, w.r_window, w.r_words
  FROM unnest(%s::text[]) WITH ORDINALITY AS x(m, i),
       LATERAL shardstore.text_window_words_v1(%s::regconfig, x.m::jsonb) w
 ORDER BY x.i, w.r_window;

-- Keyed windows of one session's sealed turns (each tsv: the sorted distinct keyed hashes,
-- as an integer[] literal); a window already there is kept.
-- name: keyed_store_windows
INSERT INTO shardstore.turn_text
       (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
SELECT %(session)s, x.turn_seq, x.window_no, x.chunk_seq, %(tenant)s, %(agent)s, x.created_at,
       x.tsv::integer[]
  FROM unnest(%(turns)s::bigint[], %(windows)s::integer[], %(chunks)s::bigint[],
              %(ats)s::timestamptz[], %(tsvs)s::text[])
       AS x(turn_seq, window_no, chunk_seq, created_at, tsv)
ON CONFLICT DO NOTHING;

-- name: keyed_text_search
SELECT r.r_session_id AS session_id, r.r_chunk_seq AS chunk_seq, r.r_turn_seq AS first_turn_seq,
       r.r_turn_seq AS last_turn_seq, r.r_score AS score, r.r_cover AS cover
  FROM shardstore.text_rank_keyed_v2(%(session)s::uuid, %(tenant)s::text, %(agent)s::text,
                                     %(since)s::timestamptz, %(until)s::timestamptz,
                                     %(hashes)s::integer[], %(lexemes)s::integer,
                                     %(sessions)s::uuid[], %(slots)s::integer[], %(n)s::integer,
                                     %(sample)s::integer, %(cap)s::integer) r;

-- Whether sealed turns get vectors; an embedding batch reads it in its transaction (the
-- shared lock of vec_sealed_vectors_v1), a search without a lock.
-- name: sealed_vectors_locked
SELECT shardstore.vec_sealed_vectors_v1();

-- name: sealed_vectors_get
SELECT coalesce((SELECT c.sealed_vectors FROM shardstore.text_search_config c), true);

-- name: sealed_vectors_set
SELECT shardstore.vec_sealed_vectors_set_v1(%s);

-- A maintenance run's text pass: the live sessions (of every tenant) holding sealed turns
-- without text windows, the most recently active first, at most %s. A session counts only when
-- it has fewer indexed turns than turns (one read of its windows' positions by the primary
-- key); text_sealed_pending_v1 then judges it exactly.
-- name: keyed_pending_sessions
SELECT s.session_id
  FROM shardstore.sessions s,
       LATERAL (SELECT count(DISTINCT t.turn_seq) AS n
                  FROM shardstore.turn_text t
                 WHERE t.session_id = s.session_id) w
 WHERE s.purged_at IS NULL AND w.n < s.next_turn_seq
   AND shardstore.text_sealed_pending_v1(s.session_id)
 ORDER BY coalesce(s.last_turn_at, s.created_at) DESC, s.session_id
 LIMIT %s;
