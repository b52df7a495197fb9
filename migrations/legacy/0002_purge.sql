-- 0002: GDPR purge. A registry of everything a purge must clear, and the functions that
-- purge one session atomically (whole: tombstone; or a prefix of its turns), in one
-- statement each. Batching, planning and reports live in shardstore/purge*.py.
--
-- Concurrency, in one paragraph (docs/purge.md has the long form). A purge locks the
-- session row FOR UPDATE, so appends, flushes and other purges of that session wait for it;
-- appends that come after it see purged_at and raise SS410. Background folds take no
-- session lock: a fold is one statement that DELETEs the chunk's buffer rows and INSERTs the
-- chunk. So a purge deletes the buffer rows FIRST and reads the session's chunk list AFTER
-- that statement: a fold that committed before the buffer delete is visible to the chunk
-- list (READ COMMITTED takes a new snapshot per statement); a fold still running holds the
-- buffer rows, the buffer delete waits for it and the chunk list then sees its chunk; a
-- fold that starts later finds the buffer rows deleted (after the purge commits) and
-- moves nothing. Either way no purged turn survives in agent_history.

-- What a purge clears, besides the sessions row (tombstoned, see purge_session_v1). Later
-- tables that hold anything derived from a session's turns (checkpoints, facts, artifact
-- references, embedding vectors) only INSERT a row here; every purge then clears them:
--   * every purge removes all rows WHERE <session_column> = the session;
--   * a range purge (purge_range, purge_before) removes the rows tied to purged turns:
--     turn_column (a turn_seq) < the cut, or chunk_column (a chunk_seq) of a chunk that was
--     deleted or rewritten (with chunk_start_column, the delete names the chunks' start
--     times, so a table partitioned like agent_history is pruned). Rows with neither column
--     are session-level and survive a range purge.
-- Rows are cleared in ascending `position` (turn_buffer is always first); give a table that
-- references another with a foreign key a lower position than the table it references.
-- `builtin` rows are the core tables, cleared by the functions' own code in that order.
-- `rewrite_reset`: columns of agent_history set to NULL when a purge rewrites a chunk (e.g.
-- an embedding of the chunk's old text).
-- Contract for writers of registered tables: write in a transaction that checks the session
-- with shardstore.purge_guard_v1(session_id) (or holds a lock on its sessions row), so
-- that a write either commits before a purge starts (and is purged) or sees the tombstone.
CREATE TABLE shardstore.purge_targets (
    table_name         regclass PRIMARY KEY,
    session_column     name NOT NULL DEFAULT 'session_id',
    turn_column        name,
    chunk_column       name,
    chunk_start_column name,
    position           integer NOT NULL DEFAULT 100 CHECK (position > 0),
    builtin            boolean NOT NULL DEFAULT false,
    rewrite_reset      name[] NOT NULL DEFAULT '{}',
    note               text,
    CHECK (turn_column IS NULL OR chunk_column IS NULL),
    CHECK (chunk_start_column IS NULL OR chunk_column IS NOT NULL)
);

INSERT INTO shardstore.purge_targets
       (table_name, turn_column, chunk_column, chunk_start_column, position, builtin, note)
VALUES ('shardstore.turn_buffer', 'turn_seq', NULL, NULL, 1, true,
        'buffered turns; always cleared first'),
       ('shardstore.agent_history', NULL, 'chunk_seq', 'chunk_start', 20, true,
        'chunks, by exact partition key; the chunk holding a range cut is rewritten'),
       ('shardstore.chunk_map', NULL, 'chunk_seq', NULL, 30, true, 'chunk locations'),
       ('shardstore.turn_keys', 'turn_seq', NULL, NULL, 40, true, 'idempotency keys');

-- Adds one table's counts to a purge result: {"table": [rows deleted, rows rewritten, bytes]}.
CREATE FUNCTION shardstore.purge_acc_v1(p_acc jsonb, p_table text, p_rows bigint,
                                        p_rewritten bigint, p_bytes bigint)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE
        WHEN coalesce(p_rows, 0) = 0 AND coalesce(p_rewritten, 0) = 0 AND coalesce(p_bytes, 0) = 0
            THEN p_acc
        ELSE p_acc || jsonb_build_object(p_table, jsonb_build_array(
            coalesce((p_acc -> p_table ->> 0)::bigint, 0) + coalesce(p_rows, 0),
            coalesce((p_acc -> p_table ->> 1)::bigint, 0) + coalesce(p_rewritten, 0),
            coalesce((p_acc -> p_table ->> 2)::bigint, 0) + coalesce(p_bytes, 0)))
    END
$$;

-- Writers of registered tables call this in their transaction: it takes a KEY SHARE lock on
-- the session row (a purge's FOR UPDATE waits for that transaction, and the transaction
-- waits for a purge in progress) and raises SS404 / SS410 for unknown / purged sessions.
CREATE FUNCTION shardstore.purge_guard_v1(p_session_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_purged timestamptz;
BEGIN
    SELECT s.purged_at INTO v_purged FROM shardstore.sessions s
     WHERE s.session_id = p_session_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF v_purged IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
END
$$;

-- Tables that hold agent_history rows but are not (or no longer fully) attached to it:
-- partitions being detached (DETACH ... CONCURRENTLY pending) and detached ones waiting for
-- maintenance to archive and drop them. Queries on agent_history do not reach them, so a
-- purge clears them directly.
CREATE FUNCTION shardstore.purge_detached_tables_v1()
RETURNS SETOF regclass
LANGUAGE sql
STABLE
AS $$
    SELECT c.oid::regclass
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
     WHERE n.nspname = 'shardstore' AND c.relkind = 'r'
       AND c.relname LIKE 'agent\_history\_%'
       AND (i.inhrelid IS NULL OR i.inhdetachpending)
     ORDER BY c.oid
$$;

-- The first turn of a session at or after p_before (turns of a session never go back in
-- time), or its next_turn_seq when every turn is older: the cut of a purge by time. Reads
-- one chunk's turns: the newest chunk that starts before p_before (chunks before it hold
-- only older turns, chunks after it only newer ones).
CREATE FUNCTION shardstore.purge_cut_v1(p_session_id uuid, p_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next  bigint;
    v_cut   bigint;
    v_seq   bigint;
    v_start timestamptz;
    v_found bigint;
BEGIN
    SELECT s.next_turn_seq INTO v_next FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_cut := v_next;
    SELECT min(b.turn_seq) INTO v_found FROM shardstore.turn_buffer b
     WHERE b.session_id = p_session_id AND b.created_at >= p_before;
    v_cut := least(v_cut, v_found);
    SELECT min(m.first_turn_seq) INTO v_found FROM shardstore.chunk_map m
     WHERE m.session_id = p_session_id AND m.chunk_start >= p_before;
    v_cut := least(v_cut, v_found);
    SELECT m.chunk_seq, m.chunk_start INTO v_seq, v_start FROM shardstore.chunk_map m
     WHERE m.session_id = p_session_id AND m.chunk_start < p_before
     ORDER BY m.chunk_seq DESC LIMIT 1;
    IF FOUND THEN
        EXECUTE 'SELECT min((x.e->>''s'')::bigint)
                   FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS x(e)
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                    AND (x.e->>''at'')::timestamptz >= $4'
           INTO v_found USING p_session_id, v_seq, v_start, p_before;
        v_cut := least(v_cut, v_found);
    END IF;
    RETURN v_cut;
END
$$;

-- Removes a session's rows from every registered table: all of them (p_cut NULL) or those of
-- turns before p_cut (the chunk holding the cut is rewritten without them). The caller holds
-- the session row lock. Rows of agent_history partitions named in p_skip_parts are removed
-- but not counted (a dry run of purge_before counts them as a partition truncate instead).
-- Returns {"table": [rows deleted, rows rewritten, bytes removed]} for the tables touched;
-- bytes are pg_column_size() of the removed rows (values as stored, TOAST compressed), and
-- for a rewritten row the size it lost.
CREATE FUNCTION shardstore.purge_rows_v1(p_session_id uuid, p_cut bigint, p_skip_parts text[])
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_acc       jsonb := '{}';
    v_n         bigint;
    v_b         bigint;
    c           record;
    t           record;
    v_del_seq   bigint[] := '{}';   -- chunks deleted from agent_history (attached partitions)
    v_del_start timestamptz[] := '{}';
    v_rw_seq    bigint;             -- the chunk rewritten at the cut
    v_rw_start  timestamptz;
    v_gone_seq  bigint[] := '{}';   -- every chunk deleted or rewritten, detached tables too
    v_gone_start timestamptz[] := '{}';
    v_map_seq   bigint[] := '{}';   -- chunk_map rows to delete
    v_cand_seq  bigint[] := '{}';   -- range purge: locations of chunks that start before the cut
    v_cand_start timestamptz[] := '{}';
    v_found_seq bigint[] := '{}';
    v_part      text;
    v_before    bigint;
    v_after     bigint;
    v_reset     text := '';
    v_skip      text[] := coalesce(p_skip_parts, '{}');
BEGIN
    -- 1. the write buffer, first: see the concurrency note at the top of this file
    WITH d AS (
        DELETE FROM shardstore.turn_buffer x
         WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut)
        RETURNING pg_column_size(x.*) AS sz)
    SELECT count(*), coalesce(sum(d.sz), 0) INTO v_n, v_b FROM d;
    v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.turn_buffer', v_n, 0, v_b);

    -- 2. which chunks go (read after the buffer delete, so folds it waited for are seen)
    IF p_cut IS NULL THEN
        SELECT coalesce(array_agg(m.chunk_seq ORDER BY m.chunk_seq), '{}'),
               coalesce(array_agg(m.chunk_start ORDER BY m.chunk_seq), '{}')
          INTO v_del_seq, v_del_start
          FROM shardstore.chunk_map m WHERE m.session_id = p_session_id;
        v_map_seq := v_del_seq;
    ELSE
        SELECT coalesce(array_agg(m.chunk_seq ORDER BY m.chunk_seq), '{}'),
               coalesce(array_agg(m.chunk_start ORDER BY m.chunk_seq), '{}')
          INTO v_cand_seq, v_cand_start
          FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.first_turn_seq < p_cut;
        FOR c IN EXECUTE
            'SELECT h.chunk_seq, h.chunk_start, h.first_turn_seq + h.turn_count AS upto
               FROM shardstore.agent_history h
              WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                AND (h.chunk_seq, h.chunk_start) IN (SELECT * FROM unnest($2::bigint[], $3::timestamptz[]))'
            USING p_session_id, v_cand_seq, v_cand_start
        LOOP
            v_found_seq := v_found_seq || c.chunk_seq;
            IF c.upto <= p_cut THEN
                v_del_seq := v_del_seq || c.chunk_seq;
                v_del_start := v_del_start || c.chunk_start;
            ELSE
                v_rw_seq := c.chunk_seq;
                v_rw_start := c.chunk_start;
            END IF;
        END LOOP;
        -- a location whose chunk row is gone (its partition was emptied or detached) has
        -- nothing left to keep: forget it
        SELECT coalesce(array_agg(x.seq ORDER BY x.seq), '{}') INTO v_map_seq
          FROM unnest(v_cand_seq) AS x(seq)
         WHERE x.seq <> ALL (v_found_seq) OR x.seq = ANY (v_del_seq);
    END IF;
    v_gone_seq := v_del_seq;
    v_gone_start := v_del_start;
    IF p_cut IS NOT NULL THEN
        SELECT coalesce(array_agg(x.seq), '{}'), coalesce(array_agg(x.st), '{}')
          INTO v_gone_seq, v_gone_start
          FROM unnest(v_cand_seq, v_cand_start) AS x(seq, st)
         WHERE x.seq = ANY (v_map_seq);
    END IF;
    IF v_rw_seq IS NOT NULL THEN
        v_gone_seq := v_gone_seq || v_rw_seq;
        v_gone_start := v_gone_start || v_rw_start;
    END IF;

    -- 3. detached partitions (not reachable through agent_history)
    SELECT coalesce(string_agg(format('%I = NULL', r), ', '), '') INTO v_reset
      FROM shardstore.purge_targets pt, unnest(pt.rewrite_reset) AS r
     WHERE pt.table_name = 'shardstore.agent_history'::regclass;
    FOR t IN SELECT d AS rel FROM shardstore.purge_detached_tables_v1() AS d LOOP
        FOR c IN EXECUTE format(
            'DELETE FROM %s h WHERE h.session_id = $1 AND ($2::bigint IS NULL OR h.first_turn_seq + h.turn_count <= $2)
             RETURNING h.chunk_seq, h.chunk_start, pg_column_size(h.*) AS sz', t.rel)
            USING p_session_id, p_cut
        LOOP
            v_acc := shardstore.purge_acc_v1(v_acc, t.rel::text, 1, 0, c.sz);
            v_map_seq := v_map_seq || c.chunk_seq;
            v_gone_seq := v_gone_seq || c.chunk_seq;
            v_gone_start := v_gone_start || c.chunk_start;
        END LOOP;
        IF p_cut IS NOT NULL THEN
            FOR c IN EXECUTE format(
                'SELECT h.chunk_seq, h.chunk_start, pg_column_size(h.*) AS sz FROM %s h
                  WHERE h.session_id = $1 AND h.first_turn_seq < $2 AND h.first_turn_seq + h.turn_count > $2', t.rel)
                USING p_session_id, p_cut
            LOOP
                EXECUTE format(
                    'UPDATE %s h SET (conversation_chunk, first_turn_seq, turn_count, token_count, byte_count) =
                        (SELECT jsonb_agg(x.e ORDER BY x.ord), $4::bigint, count(*), sum((x.e->>''t'')::bigint),
                                least(h.byte_count, sum(octet_length((x.e->''m'')::text)))
                           FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                          WHERE (x.e->>''s'')::bigint >= $4)%s
                      WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                     RETURNING pg_column_size(h.*)',
                    t.rel, CASE WHEN v_reset = '' THEN '' ELSE ', ' || v_reset END)
                    INTO v_after USING p_session_id, c.chunk_seq, c.chunk_start, p_cut;
                v_acc := shardstore.purge_acc_v1(v_acc, t.rel::text, 0, 1, greatest(c.sz - v_after, 0));
                v_gone_seq := v_gone_seq || c.chunk_seq;
                v_gone_start := v_gone_start || c.chunk_start;
                IF v_rw_seq IS NULL THEN
                    v_rw_seq := c.chunk_seq;
                END IF;
            END LOOP;
        END IF;
    END LOOP;

    -- 4. every other registered table, in registry order
    FOR t IN SELECT * FROM shardstore.purge_targets pt
              WHERE pt.table_name <> 'shardstore.turn_buffer'::regclass
              ORDER BY pt.position, pt.table_name::text LOOP
        IF t.table_name = 'shardstore.agent_history'::regclass THEN
            IF cardinality(v_del_seq) > 0 THEN
                -- ANY ($3) on the partition key prunes at plan time (EXECUTE plans with values)
                FOR c IN EXECUTE
                    'WITH d AS (
                         DELETE FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                            AND ($4 OR (h.chunk_seq, h.chunk_start) IN
                                       (SELECT * FROM unnest($2::bigint[], $3::timestamptz[])))
                         RETURNING h.tableoid::regclass::text AS part, pg_column_size(h.*) AS sz)
                     SELECT d.part, count(*) AS n, sum(d.sz) AS sz FROM d GROUP BY d.part'
                    USING p_session_id, v_del_seq, v_del_start, p_cut IS NULL
                LOOP
                    IF NOT c.part = ANY (v_skip) THEN
                        v_acc := shardstore.purge_acc_v1(v_acc, c.part, c.n, 0, c.sz);
                    END IF;
                END LOOP;
            END IF;
            IF v_rw_seq IS NOT NULL AND v_rw_start IS NOT NULL AND p_cut IS NOT NULL THEN
                EXECUTE 'SELECT h.tableoid::regclass::text, pg_column_size(h.*) FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
                   INTO v_part, v_before USING p_session_id, v_rw_seq, v_rw_start;
                IF v_part IS NOT NULL THEN
                    EXECUTE format(
                        'UPDATE shardstore.agent_history h
                            SET (conversation_chunk, first_turn_seq, turn_count, token_count, byte_count) =
                                (SELECT jsonb_agg(x.e ORDER BY x.ord), $4::bigint, count(*),
                                        sum((x.e->>''t'')::bigint),
                                        least(h.byte_count, sum(octet_length((x.e->''m'')::text)))
                                   FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                                  WHERE (x.e->>''s'')::bigint >= $4)%s
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                         RETURNING pg_column_size(h.*)',
                        CASE WHEN v_reset = '' THEN '' ELSE ', ' || v_reset END)
                       INTO v_after USING p_session_id, v_rw_seq, v_rw_start, p_cut;
                    v_acc := shardstore.purge_acc_v1(v_acc, v_part, 0, 1, greatest(v_before - v_after, 0));
                END IF;
            END IF;
        ELSIF t.table_name = 'shardstore.chunk_map'::regclass THEN
            WITH d AS (
                DELETE FROM shardstore.chunk_map x
                 WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.chunk_seq = ANY (v_map_seq))
                RETURNING pg_column_size(x.*) AS sz)
            SELECT count(*), coalesce(sum(d.sz), 0) INTO v_n, v_b FROM d;
            v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_map', v_n, 0, v_b);
            IF p_cut IS NOT NULL AND v_rw_seq IS NOT NULL THEN
                UPDATE shardstore.chunk_map x SET first_turn_seq = p_cut
                 WHERE x.session_id = p_session_id AND x.chunk_seq = v_rw_seq AND x.first_turn_seq < p_cut;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_map', 0, v_n, 0);
            END IF;
        ELSIF t.table_name = 'shardstore.turn_keys'::regclass THEN
            WITH d AS (
                DELETE FROM shardstore.turn_keys x
                 WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut)
                RETURNING pg_column_size(x.*) AS sz)
            SELECT count(*), coalesce(sum(d.sz), 0) INTO v_n, v_b FROM d;
            v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.turn_keys', v_n, 0, v_b);
        ELSIF p_cut IS NULL OR t.turn_column IS NOT NULL OR t.chunk_column IS NOT NULL THEN
            IF p_cut IS NOT NULL AND t.chunk_column IS NOT NULL AND cardinality(v_gone_seq) = 0 THEN
                CONTINUE;
            END IF;
            EXECUTE format(
                'WITH d AS (DELETE FROM %s x WHERE x.%I = $1 AND %s RETURNING pg_column_size(x.*) AS sz)
                 SELECT count(*), coalesce(sum(d.sz), 0) FROM d',
                t.table_name, t.session_column,
                CASE
                    WHEN p_cut IS NULL THEN 'true'
                    WHEN t.turn_column IS NOT NULL THEN format('x.%I < $2', t.turn_column)
                    WHEN t.chunk_start_column IS NOT NULL
                        THEN format('x.%I = ANY ($4) AND (x.%I, x.%I) IN (SELECT * FROM unnest($3, $4))',
                                    t.chunk_start_column, t.chunk_column, t.chunk_start_column)
                    ELSE format('x.%I = ANY ($3)', t.chunk_column)
                END)
               INTO v_n, v_b USING p_session_id, p_cut, v_gone_seq, v_gone_start;
            v_acc := shardstore.purge_acc_v1(v_acc, t.table_name::text, v_n, 0, v_b);
        END IF;
    END LOOP;
    RETURN v_acc;
END
$$;

-- Purges a whole session, atomically, in one statement: every registered table is cleared
-- and the sessions row becomes a tombstone (purged_at set; subject_id, agent_id and metadata
-- cleared; tenant_id, created_at and the turn count kept). Idempotent: purging a purged
-- session clears again (finds nothing) and keeps the first purged_at. With p_dry_run the
-- same work is done in a subtransaction that is rolled back: the counts are what a real
-- purge would remove at this moment. Returns {"tables": {...}, "tombstoned": bool}.
CREATE FUNCTION shardstore.purge_session_v1(p_session_id uuid, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s         record;
    v_acc     jsonb;
    v_cleared bigint;
BEGIN
    BEGIN
        SELECT x.purged_at, x.subject_id, x.agent_id, x.metadata INTO s
          FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
        END IF;
        v_cleared := coalesce(pg_column_size(s.subject_id), 0) + coalesce(pg_column_size(s.agent_id), 0)
                   + CASE WHEN s.metadata = '{}' THEN 0 ELSE pg_column_size(s.metadata) END;
        UPDATE shardstore.sessions x
           SET purged_at = coalesce(x.purged_at, clock_timestamp()),
               subject_id = NULL, agent_id = NULL, metadata = '{}',
               open_turns = 0, open_tokens = 0, open_bytes = 0
         WHERE x.session_id = p_session_id;
        v_acc := shardstore.purge_rows_v1(p_session_id, NULL, NULL);
        v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.sessions', 0,
                                         (s.purged_at IS NULL OR v_cleared > 0)::int, v_cleared);
        v_acc := jsonb_build_object('tables', v_acc, 'tombstoned', s.purged_at IS NULL);
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;  -- a dry run: the work is undone, v_acc keeps the counts
    END;
    RETURN v_acc;
END
$$;

-- Purges a session's oldest turns, atomically: those before turn p_before_seq, or (when it is
-- NULL) those written before p_before. Deleted: buffered turns, chunks wholly before the cut
-- (with their chunk_map rows), idempotency keys, and registered rows tied to those turns or
-- chunks; the chunk holding the cut is rewritten without the purged turns. The session stays
-- live; its open chunk's counters are recomputed. A purged session returns "purged": true
-- and is left alone; an unknown one raises SS404 when p_strict, else returns "missing": true.
-- Dry run as in purge_session_v1. Returns {"tables": {...}, "cut": first turn kept}.
CREATE FUNCTION shardstore.purge_range_v1(p_session_id uuid, p_before_seq bigint, p_before timestamptz,
                                          p_dry_run boolean, p_skip_parts text[], p_strict boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_acc    jsonb;
    v_cut    bigint;
    v_first  bigint;
    v_start  timestamptz;
    v_turns  bigint;
    v_tokens bigint;
    v_bytes  bigint;
    v_ft     bigint;
    v_fk     bigint;
    v_fb     bigint;
BEGIN
    BEGIN
        SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            IF p_strict THEN
                RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
            END IF;
            RETURN jsonb_build_object('tables', '{}'::jsonb, 'missing', true);
        END IF;
        IF s.purged_at IS NOT NULL THEN
            RETURN jsonb_build_object('tables', '{}'::jsonb, 'purged', true);
        END IF;
        v_cut := least(coalesce(p_before_seq, shardstore.purge_cut_v1(p_session_id, p_before)),
                       s.next_turn_seq);
        v_acc := shardstore.purge_rows_v1(p_session_id, v_cut, p_skip_parts);
        v_first := s.next_turn_seq - s.open_turns;  -- first turn of the open chunk
        IF s.open_turns > 0 AND v_cut > v_first THEN
            SELECT count(*), coalesce(sum(b.tokens), 0), coalesce(sum(b.bytes), 0)
              INTO v_turns, v_tokens, v_bytes
              FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session_id AND b.chunk_seq = s.open_chunk_seq;
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session_id AND m.chunk_seq = s.open_chunk_seq;
            IF FOUND THEN
                EXECUTE 'SELECT h.turn_count, h.token_count, h.byte_count FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
                   INTO v_ft, v_fk, v_fb USING p_session_id, s.open_chunk_seq, v_start;
                v_turns := v_turns + coalesce(v_ft, 0);
                v_tokens := v_tokens + coalesce(v_fk, 0);
                v_bytes := v_bytes + coalesce(v_fb, 0);
            END IF;
            UPDATE shardstore.sessions x
               SET open_turns = v_turns, open_tokens = v_tokens, open_bytes = v_bytes
             WHERE x.session_id = p_session_id;
        END IF;
        v_acc := jsonb_build_object('tables', v_acc, 'cut', v_cut);
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;
    END;
    RETURN v_acc;
END
$$;

-- Empties one attached agent_history partition whose every chunk was written before p_before
-- (and, with p_tenant, belongs to that tenant's sessions): TRUNCATE instead of deleting row by
-- row. Waits at most p_lock_timeout for its ACCESS EXCLUSIVE lock, else leaves it (the rows
-- are then deleted session by session). The empty partition stays attached; partition
-- retention (`shardstore maintain`) drops it. Returns {"truncated": bool, "rows": n,
-- "bytes": its size on disk before (table, TOAST and indexes), "reason": why not}.
CREATE FUNCTION shardstore.purge_truncate_partition_v1(p_partition text, p_before timestamptz,
                                                       p_tenant text, p_dry_run boolean,
                                                       p_lock_timeout interval)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rel     regclass := to_regclass(format('shardstore.%I', p_partition));
    v_rows    bigint;
    v_bytes   bigint;
    v_old     boolean;
    v_tenant  boolean;
BEGIN
    IF v_rel IS NULL OR NOT EXISTS (
            SELECT 1 FROM pg_inherits i
             WHERE i.inhrelid = v_rel AND i.inhparent = 'shardstore.agent_history'::regclass
               AND NOT i.inhdetachpending) THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'not an attached partition');
    END IF;
    IF NOT p_dry_run THEN
        PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text || 'ms', true);
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_rel);
        EXCEPTION WHEN lock_not_available THEN
            RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'lock timeout');
        END;
    END IF;
    EXECUTE format(
        'SELECT count(*), coalesce(bool_and(h.chunk_end < $1), true),
                coalesce(bool_and($2::text IS NULL OR s.tenant_id = $2), true)
           FROM %s h LEFT JOIN shardstore.sessions s ON s.session_id = h.session_id', v_rel)
       INTO v_rows, v_old, v_tenant USING p_before, p_tenant;
    IF v_rows = 0 THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'empty');
    END IF;
    IF NOT v_old THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'holds newer turns');
    END IF;
    IF NOT v_tenant THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'holds other tenants');
    END IF;
    v_bytes := pg_total_relation_size(v_rel);
    IF NOT p_dry_run THEN
        EXECUTE format('TRUNCATE %s', v_rel);
    END IF;
    RETURN jsonb_build_object('truncated', true, 'rows', v_rows, 'bytes', v_bytes, 'reason', NULL);
END
$$;
