-- 0017: the same schema on Citus (docs/scale-out.md), distributed by session_id. Nothing
-- here needs Citus: every change keeps what the functions do on plain PostgreSQL and puts
-- it in a form Citus can distribute (`shardstore distribute` then distributes the tables;
-- tests/test_distributable.py keeps the schema in that form).
--
--   * tenant_id on every session table. turn_buffer, agent_history (and its partitions and
--     detached tables), chunk_map, turn_keys and embed_queue get the session's tenant_id,
--     written by the functions that insert their rows, so that every tenant_isolation
--     policy compares a column with shardstore.rls_tenant_v2() instead of looking the
--     session up in a subquery (Citus refuses subqueries in policies on distributed
--     tables). rls_tenant_v2 is rls_tenant_v1 as a SQL-standard body (names bound at
--     creation, so no search_path is needed and the planner inlines it: still evaluated
--     once per statement, as the InitPlan of the old (SELECT rls_tenant_v1()) was).
--     rls_role_tenants becomes a reference table under Citus, so role bindings resolve on
--     the shards.
--   * No trigger on a session table: fold_v1, the range purge and rewind rewrites, and
--     vec_configure_v1 queue the chunks they write themselves (the work of vec_enqueue and
--     vec_enqueue_changed, dropped here).
--   * No LANGUAGE sql function with parameters on session tables (Citus cannot plan their
--     parameters): append_one_v1 and maint_fold_candidates_v1 become PL/pgSQL;
--     enable_rls_v1 (an SQL wrapper of a DDL function) too.
--   * No volatile function inside DML on a session table and no non-immutable function in
--     RETURNING: now() / clock_timestamp() go into variables (vec_configure_v1,
--     purge_session_v1, fold_v1), row sizes are measured by a SELECT of the rows locked
--     before they are deleted, and partitions are named from chunk_start (the partition
--     rule) instead of tableoid, which on Citus is a shard's (purge_rows_v1).
--   * No FOR UPDATE / SKIP LOCKED across sessions: retention (maint_expire_rows_v2) and the
--     embedding queue claim (vec_claim_v1, new) pick candidates without locks, then lock
--     each session's rows with SKIP LOCKED in a single-session statement.
--   * Sizes through relation_size_v1 (citus_total_relation_size for a distributed table).

-- 1. tenant_id on the hot tables, backfilled from the sessions
ALTER TABLE shardstore.turn_buffer ADD COLUMN tenant_id text;
ALTER TABLE shardstore.agent_history ADD COLUMN tenant_id text;
ALTER TABLE shardstore.chunk_map ADD COLUMN tenant_id text;
ALTER TABLE shardstore.turn_keys ADD COLUMN tenant_id text;
ALTER TABLE shardstore.embed_queue ADD COLUMN tenant_id text;
ALTER TABLE shardstore.summary_queue ADD COLUMN tenant_id text;
ALTER TABLE shardstore.fork_copies ADD COLUMN tenant_id text;
DO $$
DECLARE
    t regclass;
BEGIN
    -- detached partitions waiting for archive hold agent_history rows under their own name
    FOR t IN SELECT c.oid::regclass FROM pg_class c
              WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'
                AND NOT c.relispartition AND c.relname ~ '^agent_history_[pr][0-9]' LOOP
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS tenant_id text', t);
    END LOOP;
    FOR t IN SELECT unnest(ARRAY['shardstore.turn_buffer', 'shardstore.agent_history',
                                 'shardstore.chunk_map', 'shardstore.turn_keys',
                                 'shardstore.embed_queue', 'shardstore.summary_queue',
                                 'shardstore.fork_copies']::regclass[])
             UNION ALL
             SELECT c.oid::regclass FROM pg_class c
              WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'
                AND NOT c.relispartition AND c.relname ~ '^agent_history_[pr][0-9]' LOOP
        EXECUTE format('UPDATE %s x SET tenant_id = s.tenant_id FROM shardstore.sessions s'
                       ' WHERE s.session_id = x.session_id AND x.tenant_id IS NULL', t);
        -- rows of sessions retention already deleted: no tenant sees them
        EXECUTE format('UPDATE %s x SET tenant_id = '''' WHERE x.tenant_id IS NULL', t);
    END LOOP;
END
$$;
ALTER TABLE shardstore.turn_buffer ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.agent_history ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.chunk_map ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.turn_keys ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.embed_queue ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.summary_queue ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE shardstore.fork_copies ALTER COLUMN tenant_id SET NOT NULL;

-- 2. chunks are queued by the functions that write them, not by triggers
DROP TRIGGER vec_enqueue ON shardstore.agent_history;
DROP TRIGGER vec_enqueue_changed ON shardstore.agent_history;
-- and for summaries (0012's summary_requeue): the rewrites queue their chunk themselves
DROP TRIGGER summary_requeue ON shardstore.agent_history;
DROP FUNCTION shardstore.summary_requeue_v1();

-- 3. the connection's tenant, as a function a policy may call without a subquery
CREATE FUNCTION shardstore.rls_tenant_v2()
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
BEGIN ATOMIC
    SELECT coalesce(
        (SELECT b.tenant_id FROM shardstore.rls_role_tenants b WHERE b.role_name = CURRENT_USER),
        nullif(current_setting('shardstore.tenant_id', true), ''));
END;

-- The size of a table on disk (table, TOAST, indexes), wherever its rows are: on Citus the
-- coordinator's copy of a distributed table is empty and its shards hold the rows.
CREATE FUNCTION shardstore.relation_size_v1(p_rel regclass)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_size bigint;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT citus_total_relation_size($1) FROM pg_dist_partition WHERE logicalrelid = $1'
           INTO v_size USING p_rel;
    END IF;
    RETURN coalesce(v_size, pg_total_relation_size(p_rel));
END
$$;

-- The agent_history partition holding a chunk that starts at p_start (the naming rule of
-- ensure_partition_v1 with shardstore.config's interval and origin).
CREATE FUNCTION shardstore.partition_name_v1(p_start timestamptz)
RETURNS text
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_name text;
BEGIN
    SELECT shardstore.maint_partition_name_v1(date_bin(c.partition_interval, p_start, c.partition_origin))
      INTO v_name FROM shardstore.config c;
    RETURN v_name;
END
$$;

-- Whether Citus holds p_rel as a distributed table (false without Citus).
CREATE FUNCTION shardstore.is_distributed_v1(p_rel regclass)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_found boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1)'
           INTO v_found USING p_rel;
    END IF;
    RETURN v_found;
END
$$;

-- 4. the functions, in the form above (each: what it does is unchanged). rls_install_policy_v1
-- writes `tenant_column = shardstore.rls_tenant_v2()` (the EXISTS form is kept for a table
-- registered without a tenant column, which tests/test_distributable.py refuses).

CREATE OR REPLACE FUNCTION shardstore.append_v1(
    p_session_id    uuid,
    p_messages      jsonb,      -- JSON array, one message per turn
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,      -- shardstore.config's, passed in to save a read per call
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_sealed boolean;
    v_now    timestamptz;
    v_bucket timestamptz;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    record;
    v_dirty  boolean := false;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    -- turns of one session never go back in time, even if the server clock does
    v_now := greatest(statement_timestamp(), s.last_turn_at);
    v_bucket := date_bin(p_interval, v_now, p_origin);
    FOR i IN 1 .. v_n LOOP
        IF p_keys[i] IS NOT NULL THEN
            SELECT k.turn_seq, k.chunk_seq, k.tokens INTO v_key
              FROM shardstore.turn_keys k
             WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i];
            IF FOUND THEN
                r_turn_seq := v_key.turn_seq; r_chunk_seq := v_key.chunk_seq;
                r_tokens := v_key.tokens; r_duplicate := true; r_sealed := false;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> v_bucket) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_now;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
                tenant_id)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_now, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1), s.tenant_id);
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_now,
                    s.tenant_id);
        END IF;
        r_turn_seq := s.next_turn_seq; r_chunk_seq := s.open_chunk_seq;
        r_tokens := p_tokens[i]; r_duplicate := false; r_sealed := coalesce(v_sealed, false);
        RETURN NEXT;
        v_sealed := false;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_dirty := true;
    END LOOP;
    IF v_dirty THEN
        UPDATE shardstore.sessions
           SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
               open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
               open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
         WHERE session_id = p_session_id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.fold_v1(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_moved  integer;
    v_first  bigint;
    v_tenant text;
    v_now    timestamptz := now();
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    v_config regconfig := shardstore.text_config_v1();
BEGIN
    -- on a Citus worker (a delegated call) this finds the partition made: it never runs DDL
    -- there unless the partition is missing, which the coordinator's premake prevents
    PERFORM shardstore.ensure_partition_v1(p_chunk_start);
    WITH moved AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = p_session_id AND b.chunk_seq = p_chunk_seq
        RETURNING b.*
    ), folded AS (
        INSERT INTO shardstore.agent_history AS h
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, tenant_id, conversation_chunk)
        SELECT p_session_id, p_chunk_seq, p_chunk_start, max(m.created_at), min(m.turn_seq),
               count(*), sum(m.tokens), sum(m.bytes), min(m.tenant_id),
               jsonb_agg(
                   CASE WHEN m.idempotency_key IS NULL
                        THEN jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'm', m.message)
                        ELSE jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'b', m.bytes,
                                                'at', m.created_at, 'k', m.idempotency_key,
                                                'm', m.message)
                   END ORDER BY m.turn_seq)
          FROM moved m
        HAVING count(*) > 0
        ON CONFLICT (session_id, chunk_seq, chunk_start) DO UPDATE
           SET conversation_chunk = h.conversation_chunk || EXCLUDED.conversation_chunk,
               chunk_end   = EXCLUDED.chunk_end,
               turn_count  = h.turn_count + EXCLUDED.turn_count,
               token_count = h.token_count + EXCLUDED.token_count,
               byte_count  = h.byte_count + EXCLUDED.byte_count
        RETURNING h.turn_count, h.first_turn_seq, h.tenant_id
    ), texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT m.session_id, m.turn_seq, w.r_window, m.chunk_seq, s.tenant_id, s.agent_id,
               m.created_at, w.r_tsv
          FROM moved m
          JOIN shardstore.sessions s ON s.session_id = m.session_id,
               LATERAL shardstore.text_windows_v1(v_config, m.message) w
        ON CONFLICT DO NOTHING
    )
    SELECT f.turn_count, f.first_turn_seq, f.tenant_id INTO v_moved, v_first, v_tenant FROM folded f;
    IF v_moved IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_first, v_tenant)
    ON CONFLICT (session_id, chunk_seq) DO NOTHING;
    -- the chunk's content changed: (re-)embed it (what the trigger vec_enqueue did)
    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_now, v_tenant)
    ON CONFLICT DO NOTHING;
    RETURN v_moved;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.purge_session_v1(p_session_id uuid, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s         record;
    v_acc     jsonb;
    v_cleared bigint;
    v_now     timestamptz;
BEGIN
    BEGIN
        SELECT x.purged_at, x.subject_id, x.agent_id, x.metadata INTO s
          FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
        END IF;
        v_cleared := coalesce(pg_column_size(s.subject_id), 0) + coalesce(pg_column_size(s.agent_id), 0)
                   + CASE WHEN s.metadata = '{}' THEN 0 ELSE pg_column_size(s.metadata) END;
        v_now := clock_timestamp();
        UPDATE shardstore.sessions x
           SET purged_at = coalesce(x.purged_at, v_now),
               subject_id = NULL, agent_id = NULL, metadata = '{}',
               open_turns = 0, open_tokens = 0, open_bytes = 0
         WHERE x.session_id = p_session_id;
        v_acc := shardstore.purge_rows_v1(p_session_id, NULL, NULL);
        v_acc := shardstore.fork_erase_v1(p_session_id, v_acc);
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

CREATE OR REPLACE FUNCTION shardstore.purge_rows_v1(p_session_id uuid, p_cut bigint, p_skip_parts text[])
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
    v_tenant    text;
    v_now       timestamptz := now();
    v_where     text;
BEGIN
    SELECT s.tenant_id INTO v_tenant FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    -- 1. the write buffer, first: see the concurrency note in 0002. Its rows are locked
    -- first (a fold holding them finishes before), measured, then deleted: sizes are not
    -- taken in RETURNING, which Citus allows only immutable functions in.
    PERFORM 1 FROM shardstore.turn_buffer x
      WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut)
        FOR UPDATE;
    SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) INTO v_n, v_b
      FROM shardstore.turn_buffer x
     WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
    DELETE FROM shardstore.turn_buffer x
     WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
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
            'SELECT h.chunk_seq, h.chunk_start, pg_column_size(h.*) AS sz FROM %s h
              WHERE h.session_id = $1 AND ($2::bigint IS NULL OR h.first_turn_seq + h.turn_count <= $2)
                FOR UPDATE', t.rel)
            USING p_session_id, p_cut
        LOOP
            v_acc := shardstore.purge_acc_v1(v_acc, t.rel::text, 1, 0, c.sz);
            v_map_seq := v_map_seq || c.chunk_seq;
            v_gone_seq := v_gone_seq || c.chunk_seq;
            v_gone_start := v_gone_start || c.chunk_start;
        END LOOP;
        EXECUTE format(
            'DELETE FROM %s h WHERE h.session_id = $1 AND ($2::bigint IS NULL OR h.first_turn_seq + h.turn_count <= $2)',
            t.rel)
          USING p_session_id, p_cut;
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
                      WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3',
                    t.rel, CASE WHEN v_reset = '' THEN '' ELSE ', ' || v_reset END)
                    USING p_session_id, c.chunk_seq, c.chunk_start, p_cut;
                EXECUTE format('SELECT pg_column_size(h.*) FROM %s h
                                 WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3', t.rel)
                   INTO v_after USING p_session_id, c.chunk_seq, c.chunk_start;
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
                -- measured, then deleted; the partition is named from chunk_start (the
                -- partition rule), not tableoid, which on Citus names a shard
                FOR c IN EXECUTE
                    'SELECT h.chunk_start, count(*) AS n, sum(pg_column_size(h.*)) AS sz
                       FROM shardstore.agent_history h
                      WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                        AND ($4 OR (h.chunk_seq, h.chunk_start) IN
                                   (SELECT * FROM unnest($2::bigint[], $3::timestamptz[])))
                      GROUP BY h.chunk_start'
                    USING p_session_id, v_del_seq, v_del_start, p_cut IS NULL
                LOOP
                    v_part := 'shardstore.' || shardstore.partition_name_v1(c.chunk_start);
                    IF NOT v_part = ANY (v_skip) THEN
                        v_acc := shardstore.purge_acc_v1(v_acc, v_part, c.n, 0, c.sz);
                    END IF;
                END LOOP;
                EXECUTE
                    'DELETE FROM shardstore.agent_history h
                      WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                        AND ($4 OR (h.chunk_seq, h.chunk_start) IN
                                   (SELECT * FROM unnest($2::bigint[], $3::timestamptz[])))'
                  USING p_session_id, v_del_seq, v_del_start, p_cut IS NULL;
            END IF;
            IF v_rw_seq IS NOT NULL AND v_rw_start IS NOT NULL AND p_cut IS NOT NULL THEN
                v_part := NULL;
                EXECUTE 'SELECT pg_column_size(h.*) FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                            FOR UPDATE'
                   INTO v_before USING p_session_id, v_rw_seq, v_rw_start;
                IF v_before IS NOT NULL THEN
                    v_part := 'shardstore.' || shardstore.partition_name_v1(v_rw_start);
                    EXECUTE format(
                        'UPDATE shardstore.agent_history h
                            SET (conversation_chunk, first_turn_seq, turn_count, token_count, byte_count) =
                                (SELECT jsonb_agg(x.e ORDER BY x.ord), $4::bigint, count(*),
                                        sum((x.e->>''t'')::bigint),
                                        least(h.byte_count, sum(octet_length((x.e->''m'')::text)))
                                   FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                                  WHERE (x.e->>''s'')::bigint >= $4)%s
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3',
                        CASE WHEN v_reset = '' THEN '' ELSE ', ' || v_reset END)
                       USING p_session_id, v_rw_seq, v_rw_start, p_cut;
                    EXECUTE 'SELECT pg_column_size(h.*) FROM shardstore.agent_history h
                              WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
                       INTO v_after USING p_session_id, v_rw_seq, v_rw_start;
                    v_acc := shardstore.purge_acc_v1(v_acc, v_part, 0, 1, greatest(v_before - v_after, 0));
                    -- the rewritten chunk is embedded again (what vec_enqueue_changed did)
                    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                    VALUES (p_session_id, v_rw_seq, v_rw_start, v_now, v_tenant)
                    ON CONFLICT DO NOTHING;
                    -- and summarised again (what the trigger summary_requeue of 0012 did)
                    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                    VALUES (p_session_id, v_rw_seq, v_rw_start, v_now, v_tenant)
                    ON CONFLICT DO NOTHING;
                END IF;
            END IF;
        ELSIF t.table_name = 'shardstore.chunk_map'::regclass THEN
            SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) INTO v_n, v_b
              FROM shardstore.chunk_map x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.chunk_seq = ANY (v_map_seq));
            DELETE FROM shardstore.chunk_map x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.chunk_seq = ANY (v_map_seq));
            v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_map', v_n, 0, v_b);
            IF p_cut IS NOT NULL AND v_rw_seq IS NOT NULL THEN
                UPDATE shardstore.chunk_map x SET first_turn_seq = p_cut
                 WHERE x.session_id = p_session_id AND x.chunk_seq = v_rw_seq AND x.first_turn_seq < p_cut;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_map', 0, v_n, 0);
            END IF;
        ELSIF t.table_name = 'shardstore.turn_keys'::regclass THEN
            SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) INTO v_n, v_b
              FROM shardstore.turn_keys x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
            DELETE FROM shardstore.turn_keys x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
            v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.turn_keys', v_n, 0, v_b);
        ELSIF p_cut IS NULL OR t.turn_column IS NOT NULL OR t.chunk_column IS NOT NULL THEN
            IF p_cut IS NOT NULL AND t.chunk_column IS NOT NULL AND cardinality(v_gone_seq) = 0 THEN
                CONTINUE;
            END IF;
            -- writers of registered tables hold the session's KEY SHARE lock (purge_guard_v1),
            -- which the caller's FOR UPDATE excludes: what is measured is what is deleted
            v_where := format('FROM %s x WHERE x.%I = $1 AND %s',
                t.table_name, t.session_column,
                CASE
                    WHEN p_cut IS NULL THEN 'true'
                    WHEN t.turn_column IS NOT NULL THEN format('x.%I < $2', t.turn_column)
                    WHEN t.chunk_start_column IS NOT NULL
                        THEN format('x.%I = ANY ($4) AND (x.%I, x.%I) IN (SELECT * FROM unnest($3, $4))',
                                    t.chunk_start_column, t.chunk_column, t.chunk_start_column)
                    ELSE format('x.%I = ANY ($3)', t.chunk_column)
                END);
            EXECUTE 'SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) ' || v_where
               INTO v_n, v_b USING p_session_id, p_cut, v_gone_seq, v_gone_start;
            IF v_n > 0 THEN
                EXECUTE 'DELETE ' || v_where USING p_session_id, p_cut, v_gone_seq, v_gone_start;
            END IF;
            v_acc := shardstore.purge_acc_v1(v_acc, t.table_name::text, v_n, 0, v_b);
        END IF;
    END LOOP;
    RETURN v_acc;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.purge_truncate_partition_v1(p_partition text, p_before timestamptz,
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
    v_bytes := shardstore.relation_size_v1(v_rel);
    IF NOT p_dry_run THEN
        EXECUTE format('TRUNCATE %s', v_rel);
    END IF;
    RETURN jsonb_build_object('truncated', true, 'rows', v_rows, 'bytes', v_bytes, 'reason', NULL);
END
$$;

CREATE OR REPLACE FUNCTION shardstore.maint_expire_rows_v2(p_before timestamptz, p_batch integer)
RETURNS TABLE (r_sessions bigint, r_turns bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids   uuid[] := '{}';
    v_sids  uuid[] := '{}';
    v_upto  bigint[] := '{}';
    v_seqs  bigint[];
    v_keys  text[];
    v_sid   uuid;
    c       record;
    k       record;
    t       record;
BEGIN
    -- candidates without locks, then each session locked on its own with SKIP LOCKED (a
    -- session being written to is skipped; its condition is checked again under the lock)
    FOR c IN SELECT x.session_id FROM shardstore.sessions x
              WHERE x.purged_at IS NULL AND coalesce(x.last_turn_at, x.created_at) < p_before
              LIMIT p_batch LOOP
        PERFORM 1 FROM shardstore.sessions s
          WHERE s.session_id = c.session_id AND s.purged_at IS NULL
            AND coalesce(s.last_turn_at, s.created_at) < p_before
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM shardstore.sessions s WHERE s.session_id = c.session_id;
        v_ids := v_ids || c.session_id;
    END LOOP;
    IF cardinality(v_ids) > 0 THEN
        DELETE FROM shardstore.turn_buffer WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.chunk_map WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.turn_keys WHERE session_id = ANY (v_ids);
        FOR t IN SELECT r.table_name, r.session_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin
                  ORDER BY r.position, r.table_name::text LOOP
            EXECUTE format('DELETE FROM %s WHERE %I = ANY ($1)', t.table_name, t.session_column)
              USING v_ids;
        END LOOP;
    END IF;
    r_sessions := cardinality(v_ids);
    r_turns := 0;
    -- old buffered turns: candidates without locks, then per session the rows no fold holds
    FOR c IN SELECT x.session_id, array_agg(x.turn_seq) AS seqs
               FROM (SELECT b.session_id, b.turn_seq FROM shardstore.turn_buffer b
                      WHERE b.created_at < p_before LIMIT p_batch) x
              GROUP BY x.session_id LOOP
        v_seqs := '{}';
        v_keys := '{}';
        FOR k IN SELECT b.turn_seq, b.idempotency_key FROM shardstore.turn_buffer b
                  WHERE b.session_id = c.session_id AND b.turn_seq = ANY (c.seqs)
                    AND b.created_at < p_before
                    FOR UPDATE SKIP LOCKED LOOP
            v_seqs := v_seqs || k.turn_seq;
            IF k.idempotency_key IS NOT NULL THEN
                v_keys := v_keys || k.idempotency_key;
            END IF;
        END LOOP;
        CONTINUE WHEN cardinality(v_seqs) = 0;
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = c.session_id AND b.turn_seq = ANY (v_seqs);
        IF cardinality(v_keys) > 0 THEN
            DELETE FROM shardstore.turn_keys x
             WHERE x.session_id = c.session_id AND x.idempotency_key = ANY (v_keys);
        END IF;
        r_turns := r_turns + cardinality(v_seqs);
        v_sids := v_sids || c.session_id;
        v_upto := v_upto || (SELECT max(s) FROM unnest(v_seqs) AS s);
    END LOOP;
    IF cardinality(v_sids) > 0 THEN
        -- turns of a session are written in order: every turn up to the newest expired one is older
        FOR t IN SELECT r.table_name, r.session_column, r.turn_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin AND r.turn_column IS NOT NULL
                  ORDER BY r.position, r.table_name::text LOOP
            FOR i IN 1 .. cardinality(v_sids) LOOP
                EXECUTE format('DELETE FROM %s x WHERE x.%I = $1 AND x.%I <= $2',
                               t.table_name, t.session_column, t.turn_column)
                  USING v_sids[i], v_upto[i];
            END LOOP;
        END LOOP;
    END IF;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.vec_configure_v1(p_model text, p_dimension integer,
                                            p_window_tokens integer, p_reset boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    cfg   shardstore.embedding_config%ROWTYPE;
    v_now timestamptz := now();
BEGIN
    SELECT * INTO cfg FROM shardstore.embedding_config FOR UPDATE;
    IF FOUND AND NOT p_reset AND cfg.dimension = p_dimension
       AND lower(regexp_replace(cfg.model, '^.*/', '')) = lower(regexp_replace(p_model, '^.*/', '')) THEN
        IF cfg.window_tokens <> p_window_tokens OR cfg.model <> p_model THEN
            UPDATE shardstore.embedding_config SET window_tokens = p_window_tokens, model = p_model
             RETURNING * INTO cfg;
        END IF;
        RETURN to_jsonb(cfg);
    END IF;
    IF FOUND AND NOT p_reset THEN
        RAISE EXCEPTION USING ERRCODE = 'SS409',
            MESSAGE = format('the stored vectors come from %s (%s dimensions), not %s (%s dimensions); '
                             'vectors of two models cannot be mixed', cfg.model, cfg.dimension,
                             p_model, p_dimension),
            HINT = format('re-embed everything with the new model: shardstore reembed --model %s', p_model);
    END IF;
    -- table-level locks in a fixed order, so that a concurrent first configure waits here
    LOCK TABLE shardstore.chunk_vectors IN ACCESS EXCLUSIVE MODE;
    DROP INDEX IF EXISTS shardstore.chunk_vectors_hnsw;
    TRUNCATE shardstore.chunk_vectors;
    EXECUTE format('ALTER TABLE shardstore.chunk_vectors ALTER COLUMN embedding TYPE halfvec(%s)', p_dimension);
    CREATE INDEX chunk_vectors_hnsw ON shardstore.chunk_vectors USING hnsw (embedding halfvec_cosine_ops);
    IF cfg.singleton IS NOT NULL THEN
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT h.session_id, h.chunk_seq, h.chunk_start, v_now, h.tenant_id FROM shardstore.agent_history h
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO shardstore.embedding_config AS e (model, dimension, window_tokens, configured_at)
    VALUES (p_model, p_dimension, p_window_tokens, v_now)
    ON CONFLICT (singleton) DO UPDATE
       SET model = EXCLUDED.model, dimension = EXCLUDED.dimension,
           window_tokens = EXCLUDED.window_tokens, configured_at = v_now
    RETURNING * INTO cfg;
    RETURN to_jsonb(cfg);
END
$$;

CREATE OR REPLACE FUNCTION shardstore.rls_install_policy_v1(p_rel regclass, p_from regclass)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r      shardstore.table_registry%ROWTYPE;
    v_expr text;
BEGIN
    SELECT * INTO r FROM shardstore.table_registry x WHERE x.table_name = p_from AND x.kind = 'session';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered session table', p_from);
    END IF;
    IF r.tenant_column IS NOT NULL THEN
        v_expr := format('%I = shardstore.rls_tenant_v2()', r.tenant_column);
    ELSE
        v_expr := format('EXISTS (SELECT 1 FROM shardstore.sessions s WHERE s.session_id = %s.%I'
                         ' AND s.tenant_id = (SELECT shardstore.rls_tenant_v1()))', p_rel, r.session_column);
    END IF;
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', p_rel);
    EXECUTE format('CREATE POLICY tenant_isolation ON %s USING (%s) WITH CHECK (%s)', p_rel, v_expr, v_expr);
END
$$;

CREATE OR REPLACE FUNCTION shardstore.facts_purge_subject_v1(p_tenant text, p_subject text, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_n    bigint;
    v_b    bigint;
    v_live uuid[];
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended(jsonb_build_array('fact-subject', p_tenant, p_subject)::text, 8));
    BEGIN
        -- the subject's live sessions (a dry run leaves their facts to their purges' counts)
        SELECT coalesce(array_agg(s.session_id), '{}') INTO v_live FROM shardstore.sessions s
         WHERE p_dry_run AND s.tenant_id = p_tenant AND s.subject_id = p_subject AND s.purged_at IS NULL;
        SELECT count(*), coalesce(sum(pg_column_size(f.*)), 0) INTO v_n, v_b FROM shardstore.facts f
         WHERE f.tenant_id = p_tenant AND f.subject = p_subject
           AND (f.source_session_id IS NULL OR NOT f.source_session_id = ANY (v_live));
        DELETE FROM shardstore.facts f
         WHERE f.tenant_id = p_tenant AND f.subject = p_subject
           AND (f.source_session_id IS NULL OR NOT f.source_session_id = ANY (v_live));
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;  -- a dry run: the delete is undone, the counts stay
    END;
    RETURN jsonb_build_object('tables', jsonb_build_object('shardstore.facts', jsonb_build_array(v_n, 0, v_b)));
END
$$;

CREATE OR REPLACE FUNCTION shardstore.rewind_v1(p_session_id uuid, p_to bigint)
RETURNS TABLE (r_status text, r_removed bigint, r_turns bigint, r_first bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s            shardstore.sessions%ROWTYPE;
    v_first      bigint;
    v_cut_chunk  bigint;           -- the chunk holding turn p_to
    v_open       bigint;           -- the new open chunk: the one holding turn p_to - 1
    v_open_start timestamptz;
    v_turns      bigint := 0;
    v_tokens     bigint := 0;
    v_bytes      bigint := 0;
    v_ft         bigint;
    v_fk         bigint;
    v_fb         bigint;
    v_del_seq    bigint[] := '{}';   -- folded chunks deleted (attached partitions)
    v_del_start  timestamptz[] := '{}';
    v_rw_seq     bigint;             -- the folded chunk rewritten at the cut
    v_rw_start   timestamptz;
    v_rw_upto    bigint;
    v_gone_seq   bigint[];           -- deleted or rewritten, detached tables too
    v_gone_start timestamptz[];
    v_reset      text := '';
    v_rewrite    text;
    c            record;
    t            record;
    v_changed    bigint;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    r_turns := s.next_turn_seq;
    r_removed := 0;
    IF p_to IS NULL OR p_to < 0 THEN
        r_status := 'negative';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_to > s.next_turn_seq THEN
        r_status := 'past_end';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_to = s.next_turn_seq THEN
        r_status := 'ok';
        RETURN NEXT;
        RETURN;
    END IF;
    -- range purges and retention remove a prefix: the first turn still stored
    SELECT least((SELECT min(m.first_turn_seq) FROM shardstore.chunk_map m
                   WHERE m.session_id = p_session_id),
                 (SELECT min(b.turn_seq) FROM shardstore.turn_buffer b
                   WHERE b.session_id = p_session_id))
      INTO v_first;
    v_first := coalesce(v_first, s.next_turn_seq);
    IF p_to < v_first THEN
        r_status := 'purged_below';
        r_first := v_first;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT greatest((SELECT b.chunk_seq FROM shardstore.turn_buffer b
                      WHERE b.session_id = p_session_id AND b.turn_seq = p_to),
                    (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                      WHERE m.session_id = p_session_id AND m.first_turn_seq <= p_to))
      INTO v_cut_chunk;

    -- 1. buffered turns from the cut on, first (see the concurrency note at the top)
    DELETE FROM shardstore.turn_buffer b WHERE b.session_id = p_session_id AND b.turn_seq >= p_to;

    -- 2. the new open chunk, and its kept buffered turns locked (no fold moves them now)
    IF p_to > 0 THEN
        SELECT greatest((SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                          WHERE b.session_id = p_session_id),
                        (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                          WHERE m.session_id = p_session_id AND m.first_turn_seq < p_to))
          INTO v_open;
    END IF;
    IF v_open IS NOT NULL THEN
        WITH kept AS (
            SELECT b.tokens, b.bytes, b.created_at FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session_id AND b.chunk_seq = v_open
               FOR UPDATE)
        SELECT count(*), coalesce(sum(k.tokens), 0), coalesce(sum(k.bytes), 0), min(k.created_at)
          INTO v_turns, v_tokens, v_bytes, v_open_start
          FROM kept k;
    END IF;

    -- 3. which folded chunks go or are rewritten (read after the buffer delete)
    FOR c IN SELECT m.chunk_seq, m.chunk_start, m.first_turn_seq FROM shardstore.chunk_map m
              WHERE m.session_id = p_session_id
                AND (m.first_turn_seq >= p_to OR m.chunk_seq = v_open)
              ORDER BY m.chunk_seq LOOP
        IF c.first_turn_seq >= p_to THEN
            v_del_seq := v_del_seq || c.chunk_seq;
            v_del_start := v_del_start || c.chunk_start;
        ELSE
            EXECUTE 'SELECT h.first_turn_seq + h.turn_count FROM shardstore.agent_history h
                      WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
               INTO v_rw_upto USING p_session_id, c.chunk_seq, c.chunk_start;
            v_open_start := c.chunk_start;  -- a folded chunk starts where chunk_map says
            IF v_rw_upto > p_to THEN
                v_rw_seq := c.chunk_seq;
                v_rw_start := c.chunk_start;
            END IF;
        END IF;
    END LOOP;
    v_gone_seq := v_del_seq;
    v_gone_start := v_del_start;
    IF v_rw_seq IS NOT NULL THEN
        v_gone_seq := v_gone_seq || v_rw_seq;
        v_gone_start := v_gone_start || v_rw_start;
    END IF;

    -- 4. queue rows of the chunks that change, before they change
    IF cardinality(v_gone_seq) > 0 THEN
        DELETE FROM shardstore.embed_queue q
         WHERE q.session_id = p_session_id
           AND (q.chunk_seq, q.chunk_start) IN (SELECT * FROM unnest(v_gone_seq, v_gone_start));
    END IF;

    -- 5. agent_history: delete, then rewrite the chunk holding the cut (keeping turns < p_to)
    SELECT coalesce(string_agg(format(', %I = NULL', r), ''), '') INTO v_reset
      FROM shardstore.purge_targets pt, unnest(pt.rewrite_reset) AS r
     WHERE pt.table_name = 'shardstore.agent_history'::regclass;
    v_rewrite :=
        'UPDATE %s h
            SET (conversation_chunk, turn_count, token_count, byte_count, chunk_end) =
                (SELECT jsonb_agg(x.e ORDER BY x.ord), count(*), sum((x.e->>''t'')::bigint),
                        least(h.byte_count,
                              sum(coalesce((x.e->>''b'')::bigint, octet_length((x.e->''m'')::text)))),
                        max((x.e->>''at'')::timestamptz)
                   FROM jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                  WHERE (x.e->>''s'')::bigint < $4)' || v_reset || '
          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
            AND h.first_turn_seq < $4 AND h.first_turn_seq + h.turn_count > $4
         RETURNING h.turn_count, h.token_count, h.byte_count';
    IF cardinality(v_del_seq) > 0 THEN
        -- ANY ($3) on the partition key prunes at plan time (EXECUTE plans with values)
        EXECUTE 'DELETE FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                    AND (h.chunk_seq, h.chunk_start) IN (SELECT * FROM unnest($2::bigint[], $3::timestamptz[]))'
          USING p_session_id, v_del_seq, v_del_start;
    END IF;
    IF v_rw_seq IS NOT NULL THEN
        EXECUTE format(v_rewrite, 'shardstore.agent_history')
           USING p_session_id, v_rw_seq, v_rw_start, p_to;
        GET DIAGNOSTICS v_changed = ROW_COUNT;
        IF v_changed > 0 THEN
            INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
            VALUES (p_session_id, v_rw_seq, v_rw_start, statement_timestamp(), s.tenant_id)
            ON CONFLICT DO NOTHING;
            INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
            VALUES (p_session_id, v_rw_seq, v_rw_start, statement_timestamp(), s.tenant_id)
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    -- partitions being detached or waiting for archive (not reachable through agent_history)
    FOR t IN SELECT d AS rel FROM shardstore.purge_detached_tables_v1() AS d LOOP
        FOR c IN EXECUTE format(
            'DELETE FROM %s h WHERE h.session_id = $1 AND h.first_turn_seq >= $2
             RETURNING h.chunk_seq, h.chunk_start', t.rel)
            USING p_session_id, p_to
        LOOP
            v_gone_seq := v_gone_seq || c.chunk_seq;
            v_gone_start := v_gone_start || c.chunk_start;
        END LOOP;
        FOR c IN EXECUTE format(
            'SELECT h.chunk_seq, h.chunk_start FROM %s h
              WHERE h.session_id = $1 AND h.first_turn_seq < $2 AND h.first_turn_seq + h.turn_count > $2', t.rel)
            USING p_session_id, p_to
        LOOP
            EXECUTE format(v_rewrite, t.rel) USING p_session_id, c.chunk_seq, c.chunk_start, p_to;
            v_gone_seq := v_gone_seq || c.chunk_seq;
            v_gone_start := v_gone_start || c.chunk_start;
        END LOOP;
    END LOOP;

    -- 6. the new open chunk's folded part (after its rewrite)
    IF v_open IS NOT NULL AND v_open_start IS NOT NULL THEN
        EXECUTE 'SELECT h.turn_count, h.token_count, h.byte_count FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
           INTO v_ft, v_fk, v_fb USING p_session_id, v_open, v_open_start;
        v_turns := v_turns + coalesce(v_ft, 0);
        v_tokens := v_tokens + coalesce(v_fk, 0);
        v_bytes := v_bytes + coalesce(v_fb, 0);
    END IF;

    -- 7. chunk locations, keys, and every other registered table, in registry order
    DELETE FROM shardstore.chunk_map m WHERE m.session_id = p_session_id AND m.first_turn_seq >= p_to;
    DELETE FROM shardstore.turn_keys k WHERE k.session_id = p_session_id AND k.turn_seq >= p_to;
    FOR t IN SELECT * FROM shardstore.purge_targets pt
              WHERE NOT pt.builtin AND (pt.turn_column IS NOT NULL OR pt.chunk_column IS NOT NULL)
              ORDER BY pt.position, pt.table_name::text LOOP
        IF t.turn_column IS NOT NULL THEN
            EXECUTE format('DELETE FROM %s x WHERE x.%I = $1 AND x.%I >= $2',
                           t.table_name, t.session_column, t.turn_column)
              USING p_session_id, p_to;
        ELSIF cardinality(v_gone_seq) > 0 THEN
            EXECUTE format(
                'DELETE FROM %s x WHERE x.%I = $1 AND %s',
                t.table_name, t.session_column,
                CASE WHEN t.chunk_start_column IS NOT NULL
                     THEN format('x.%I = ANY ($3) AND (x.%I, x.%I) IN (SELECT * FROM unnest($2, $3))',
                                 t.chunk_start_column, t.chunk_column, t.chunk_start_column)
                     ELSE format('x.%I = ANY ($2)', t.chunk_column)
                END)
              USING p_session_id, v_gone_seq, v_gone_start;
        END IF;
    END LOOP;

    -- 8. the head: as if only turns 0..p_to-1 had been appended
    IF v_turns = 0 THEN
        -- nothing kept (p_to = 0, or the first turn a range purge kept): an empty open
        -- chunk where the removed turns started
        v_open := coalesce(v_cut_chunk, 0);
        v_open_start := NULL;
        v_tokens := 0;
        v_bytes := 0;
    END IF;
    UPDATE shardstore.sessions x
       SET next_turn_seq = p_to, open_chunk_seq = v_open, open_chunk_start = v_open_start,
           open_turns = v_turns, open_tokens = v_tokens, open_bytes = v_bytes
     WHERE x.session_id = p_session_id;
    r_status := 'ok';
    r_removed := s.next_turn_seq - p_to;
    r_turns := p_to;
    RETURN NEXT;
END
$$;

-- As in 0001, in PL/pgSQL (Citus cannot plan a LANGUAGE sql function's parameters), and the
-- rows carry the session's tenant. Same rules and results: one turn that fits the open
-- chunk of a live session whose key (if any) is new; no row otherwise. A concurrent retry
-- with the same key fails the turn_keys insert (unique violation) and rolls the statement
-- back; the caller reruns through append_v1.
-- Two forms of the same writes, chosen by whether Citus is loaded (docs/scale-out.md,
-- "Measured", server-side per call): on plain PostgreSQL ONE statement, the CTE of 0001
-- (~55-75 us on 18, as fast as the SQL function; ~60 us on 16, where the SQL function
-- re-plans at every call and costs ~480 us; as separate statements ~135-200 us); on Citus
-- separate single-shard statements (~1-1.5 ms through the coordinator, delegated), because
-- Citus plans the CTE's INSERT ... SELECT through the coordinator (~20 ms).
CREATE OR REPLACE FUNCTION shardstore.append_one_v1(
    p_session_id    uuid,
    p_message       jsonb,
    p_tokens        integer,
    p_bytes         integer,
    p_key           text,
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := statement_timestamp();
    v_at     timestamptz;
    v_tenant text;
BEGIN
    -- citus.version exists where the Citus library is loaded (a GUC lookup, ~free)
    IF current_setting('citus.version', true) IS NOT NULL THEN
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1,
               open_turns    = s.open_turns + 1,
               open_tokens   = s.open_tokens + p_tokens,
               open_bytes    = s.open_bytes + p_bytes,
               last_turn_at  = greatest(v_now, s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND s.open_tokens + p_tokens <= p_budget_tokens
           AND s.open_bytes + p_bytes <= p_budget_bytes
           AND date_bin(p_interval, greatest(v_now, s.last_turn_at), p_origin)
             = date_bin(p_interval, s.open_chunk_start, p_origin)
           AND (p_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = p_session_id AND k.idempotency_key = p_key))
        RETURNING s.next_turn_seq - 1, s.open_chunk_seq, s.last_turn_at, s.tenant_id
             INTO r_turn_seq, r_chunk_seq, v_at, v_tenant;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF p_key IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_key, r_turn_seq, r_chunk_seq, p_tokens, v_at, v_tenant);
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key,
                message, tenant_id)
        VALUES (p_session_id, r_turn_seq, r_chunk_seq, v_at, p_tokens, p_bytes, p_key, p_message,
                v_tenant);
        RETURN NEXT;
        RETURN;
    END IF;
    WITH head AS (
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1,
               open_turns    = s.open_turns + 1,
               open_tokens   = s.open_tokens + p_tokens,
               open_bytes    = s.open_bytes + p_bytes,
               last_turn_at  = greatest(v_now, s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND s.open_tokens + p_tokens <= p_budget_tokens
           AND s.open_bytes + p_bytes <= p_budget_bytes
           AND date_bin(p_interval, greatest(v_now, s.last_turn_at), p_origin)
             = date_bin(p_interval, s.open_chunk_start, p_origin)
           AND (p_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = p_session_id AND k.idempotency_key = p_key))
        RETURNING s.next_turn_seq - 1 AS turn_seq, s.open_chunk_seq AS chunk_seq,
                  s.last_turn_at AS at, s.tenant_id
    ), keyed AS (
        INSERT INTO shardstore.turn_keys
               (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
        SELECT p_session_id, p_key, head.turn_seq, head.chunk_seq, p_tokens, head.at, head.tenant_id
          FROM head WHERE p_key IS NOT NULL
    )
    INSERT INTO shardstore.turn_buffer AS b
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
            tenant_id)
    SELECT p_session_id, head.turn_seq, head.chunk_seq, head.at, p_tokens, p_bytes, p_key,
           p_message, head.tenant_id
      FROM head
    RETURNING b.turn_seq, b.chunk_seq INTO r_turn_seq, r_chunk_seq;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END
$$;

-- As in 0003, in PL/pgSQL.
CREATE OR REPLACE FUNCTION shardstore.maint_fold_candidates_v1(p_before timestamptz)
RETURNS SETOF uuid
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT DISTINCT b.session_id
          FROM shardstore.turn_buffer b
          JOIN shardstore.sessions s ON s.session_id = b.session_id
         WHERE s.purged_at IS NULL
           AND (s.last_turn_at < p_before OR (b.chunk_seq < s.open_chunk_seq AND b.created_at < p_before));
END
$$;

-- As in 0006, in PL/pgSQL (Citus refused the SQL wrapper of a DDL function).
CREATE OR REPLACE FUNCTION shardstore.enable_rls_v1(p_force boolean DEFAULT false)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT * FROM shardstore.enable_rls_v2(p_force);
END
$$;

-- Claims up to p_limit queued chunks (of p_session, or any) that no other worker holds,
-- oldest first, with the chunk's version and text; the locks last until the caller's
-- transaction ends. Candidates are read without locks, then each is locked on its own with
-- SKIP LOCKED (Citus runs no FOR UPDATE across sessions); a candidate another worker holds
-- or took is passed over, so a call returns fewer chunks only when fewer are free.
CREATE FUNCTION shardstore.vec_claim_v1(p_session uuid, p_limit integer)
RETURNS TABLE (r_session_id uuid, r_chunk_seq bigint, r_chunk_start timestamptz,
               r_first_turn_seq bigint, r_turn_count integer, r_chunk_text text)
LANGUAGE plpgsql
AS $$
DECLARE
    c     record;
    v_got integer := 0;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    FOR c IN SELECT x.session_id, x.chunk_seq, x.chunk_start FROM shardstore.embed_queue x
              WHERE p_session IS NULL OR x.session_id = p_session
              ORDER BY x.queued_at
              LIMIT p_limit * 4 + 16 LOOP
        PERFORM 1 FROM shardstore.embed_queue q
          WHERE q.session_id = c.session_id AND q.chunk_seq = c.chunk_seq
            AND q.chunk_start = c.chunk_start
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        r_session_id := c.session_id;
        r_chunk_seq := c.chunk_seq;
        r_chunk_start := c.chunk_start;
        r_first_turn_seq := NULL;
        r_turn_count := NULL;
        r_chunk_text := NULL;
        -- EXECUTE plans with the values known, so the scan prunes to one partition
        EXECUTE 'SELECT h.first_turn_seq, h.turn_count, h.conversation_chunk::text
                   FROM shardstore.agent_history h
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
           INTO r_first_turn_seq, r_turn_count, r_chunk_text
          USING c.session_id, c.chunk_seq, c.chunk_start;
        RETURN NEXT;
        v_got := v_got + 1;
        EXIT WHEN v_got >= p_limit;
    END LOOP;
END
$$;

-- 5. the five tables registered again with their tenant column: their policies compare it
-- (rls_install_policy_v1 above), and so do the policies of every other session table and
-- of the partitions that have one
SELECT shardstore.register_session_table_v1('shardstore.turn_buffer', turn_column => 'turn_seq',
                                            tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.agent_history', chunk_column => 'chunk_seq',
                                            chunk_start_column => 'chunk_start',
                                            tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.chunk_map', chunk_column => 'chunk_seq',
                                            tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.turn_keys', turn_column => 'turn_seq',
                                            tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.embed_queue', tenant_column => 'tenant_id');
SELECT shardstore.register_session_table_v1('shardstore.summary_queue', purge_order => 62,
                                            tenant_column => 'tenant_id',
                                            note => 'chunks waiting for a summary (keys only, 0012)');
SELECT shardstore.register_session_table_v1('shardstore.fork_copies', tenant_column => 'tenant_id',
    note => 'fork: origin of turns copied into a fork by copy-on-write (GDPR erase of copies)');
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT x.table_name FROM shardstore.table_registry x WHERE x.kind = 'session' LOOP
        PERFORM shardstore.rls_install_policy_v1(r.table_name, r.table_name);
    END LOOP;
    FOR r IN SELECT p.r_table, p.r_parent FROM shardstore.rls_partition_tables_v2() p
              WHERE EXISTS (SELECT 1 FROM pg_policy x
                             WHERE x.polrelid = p.r_table AND x.polname = 'tenant_isolation') LOOP
        PERFORM shardstore.rls_install_policy_v1(r.r_table, r.r_parent);
    END LOOP;
END
$$;

-- 6. what `shardstore distribute` asks of Citus, as functions valid without it (Citus's
-- catalogs and functions are reached through EXECUTE, so this migration and every named
-- statement run on plain PostgreSQL; called there, they raise or report "not Citus").

-- How Citus holds p_rel: r_method 'h' (hash-distributed, by r_column), 'n' (reference), 's'
-- / 'l' (other); no row when Citus does not hold it (or is not installed).
CREATE FUNCTION shardstore.citus_table_state_v1(p_rel regclass)
RETURNS TABLE (r_method text, r_column text)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT p.partmethod::text, column_to_column_name(p.logicalrelid, p.partkey)::text
           FROM pg_dist_partition p WHERE p.logicalrelid = $1'
        USING p_rel;
END
$$;

-- This node's Citus group (0: the coordinator) and the active primary workers.
CREATE FUNCTION shardstore.citus_node_v1(OUT r_group integer, OUT r_workers integer)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    EXECUTE 'SELECT (SELECT groupid FROM pg_dist_local_group),
                    (SELECT count(*)::int FROM pg_dist_node
                      WHERE groupid <> 0 AND noderole = ''primary'' AND isactive)'
       INTO r_group, r_workers;
END
$$;

-- Makes p_rel a reference table (p_column NULL) or distributes it by p_column, colocated
-- with p_colocate ('none': a new colocation group).
CREATE FUNCTION shardstore.citus_distribute_table_v1(p_rel regclass, p_column text, p_colocate text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_column IS NULL THEN
        EXECUTE 'SELECT create_reference_table($1)' USING p_rel;
    ELSE
        EXECUTE 'SELECT create_distributed_table($1, $2, colocate_with => $3)'
          USING p_rel, p_column, p_colocate;
    END IF;
END
$$;

-- shardstore's functions and procedures Citus does not know yet (the workers lack them).
CREATE FUNCTION shardstore.citus_functions_pending_v1()
RETURNS SETOF regprocedure
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT p.oid::regprocedure FROM pg_proc p
          WHERE p.pronamespace = ''shardstore''::regnamespace
            AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                             WHERE o.classid = ''pg_proc''::regclass AND o.objid = p.oid)
            -- a function taking or returning the row of a table kept local cannot be
            -- propagated (Citus: its dependency is not in the metadata); it runs on the
            -- coordinator, where that table is
            AND NOT EXISTS (SELECT 1 FROM shardstore.citus_kept_local_v1() k
                              JOIN pg_class c ON c.oid = k.r_table
                             WHERE c.reltype = ANY (p.proargtypes::oid[]) OR c.reltype = p.prorettype)
          ORDER BY p.oid';
END
$$;

-- Whether Citus delegates calls of p_fn by one of its arguments.
CREATE FUNCTION shardstore.citus_function_delegated_v1(p_fn regprocedure)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_found boolean;
BEGIN
    EXECUTE 'SELECT distribution_argument_index IS NOT NULL FROM pg_dist_object
              WHERE classid = ''pg_proc''::regclass AND objid = $1'
       INTO v_found USING p_fn;
    RETURN coalesce(v_found, false);
END
$$;

-- Makes Citus create p_fn on every node; with p_argument, delegates its calls to the
-- worker holding that argument's session (colocated with shardstore.sessions).
CREATE FUNCTION shardstore.citus_distribute_function_v1(p_fn regprocedure, p_argument text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_argument IS NULL THEN
        EXECUTE 'SELECT create_distributed_function($1)' USING p_fn;
    ELSE
        EXECUTE 'SELECT create_distributed_function($1, $2, colocate_with => ''shardstore.sessions'')'
          USING p_fn, p_argument;
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION shardstore.citus_distribute_table_v1(regclass, text, text),
    shardstore.citus_distribute_function_v1(regprocedure, text) FROM PUBLIC;

-- The two settings a distributed store needs; each returns whether it changed something.
-- rls_tenant_v2(), which the policies call on the shards, reads the reference table of role
-- bindings there: a nested query Citus refuses unless the function allows it (and then it
-- is a plain call, not inlined).
CREATE FUNCTION shardstore.citus_tenant_on_shards_v1()
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc
                WHERE oid = 'shardstore.rls_tenant_v2()'::regprocedure
                  AND 'citus.allow_nested_distributed_execution=on' = ANY (proconfig)) THEN
        RETURN false;
    END IF;
    ALTER FUNCTION shardstore.rls_tenant_v2() SET citus.allow_nested_distributed_execution = on;
    RETURN true;
END
$$;

-- SET LOCAL (the search settings, a transaction's tenant) reaches the shards' queries in
-- every new connection to this database.
CREATE FUNCTION shardstore.citus_propagate_set_local_v1()
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_db_role_setting s
                WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND s.setrole = 0
                  AND 'citus.propagate_set_commands=local' = ANY (s.setconfig)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER DATABASE %I SET citus.propagate_set_commands = local', current_database());
    PERFORM set_config('citus.propagate_set_commands', 'local', false);
    RETURN true;
END
$$;

REVOKE EXECUTE ON FUNCTION shardstore.citus_tenant_on_shards_v1(),
    shardstore.citus_propagate_set_local_v1() FROM PUBLIC;

-- The settings of a tenant search, for the rest of the transaction: iterative scan keeps a
-- filtered HNSW scan going until enough rows pass the filter; strict order keeps each
-- partition's output sorted. SET LOCAL rather than set_config(): with
-- citus.propagate_set_commands = 'local' (`shardstore distribute`) Citus sends SET LOCAL on
-- to the shards, where the index scans run.
CREATE FUNCTION shardstore.vec_search_settings_v1(p_ef_search integer)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    SET LOCAL hnsw.iterative_scan = strict_order;
    EXECUTE format('SET LOCAL hnsw.ef_search = %s', p_ef_search);
END
$$;

-- 7. the functions of 0012-0015 in the same form (each: 0013/0014/0015's body, only the
-- changes said). tail_v1 and tail_at_v1 keep 0013's bodies (nothing above changes them).

-- 0013's result, as PL/pgSQL (Citus plans no LANGUAGE sql function with parameters on a
-- distributed table, nor a recursive CTE across sessions): the recursive query as a loop,
-- one single-session lookup per ancestor.
CREATE OR REPLACE FUNCTION shardstore.fork_segments_v1(p_session_id uuid)
RETURNS TABLE (r_session_id uuid, r_chunk_lo bigint, r_chunk_hi bigint, r_turn_hi bigint,
               r_depth integer)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    cur     record;
    v_sid   uuid := p_session_id;
    v_lo    bigint;
    v_hi    bigint;
    v_thi   bigint;
    v_depth integer := 0;
BEGIN
    LOOP
        SELECT s.session_id, s.fork_chunk, s.fork_parent, s.fork_at INTO cur
          FROM shardstore.sessions s WHERE s.session_id = v_sid;
        EXIT WHEN NOT FOUND;
        v_lo := coalesce(cur.fork_chunk, 0);
        IF v_depth = 0 OR (v_lo < v_hi AND v_thi >= 0) THEN
            r_session_id := cur.session_id; r_chunk_lo := v_lo; r_chunk_hi := v_hi;
            r_turn_hi := v_thi; r_depth := v_depth;
            RETURN NEXT;
        END IF;
        EXIT WHEN cur.fork_parent IS NULL OR v_depth >= 100000;
        -- least() ignores NULLs: the tightest bound along the path
        v_hi := least(v_hi, cur.fork_chunk);
        v_thi := least(v_thi, cur.fork_at);
        v_sid := cur.fork_parent;
        v_depth := v_depth + 1;
    END LOOP;
END
$$;

-- 0013's body, plus: the copies carry the fork's tenant_id (agent_history, chunk_map,
-- fork_copies), and each copied chunk is queued for embedding here (the trigger vec_enqueue
-- did it before).
CREATE OR REPLACE FUNCTION shardstore.fork_materialise_v1(p_child uuid, p_from bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    c         shardstore.sessions%ROWTYPE;
    g         record;
    k         record;
    v_x       bigint := 0;
    v_start   timestamptz;
    v_env     jsonb;
    v_first   bigint;
    v_last    bigint;
    v_n       bigint;
    v_tok     bigint;
    v_bytes   bigint;
    v_end     timestamptz;
    v_min_at  timestamptz;
    v_lowest  bigint;
    v_copied  bigint := 0;
    v_new_at  bigint;
    v_owner   uuid;
    v_ochunk  bigint;
BEGIN
    SELECT * INTO c FROM shardstore.sessions x WHERE x.session_id = p_child FOR UPDATE;
    IF NOT FOUND OR c.fork_parent IS NULL OR (p_from IS NOT NULL AND p_from > c.fork_at) THEN
        RETURN 0;
    END IF;
    IF p_from IS NOT NULL AND p_from > 0 THEN
        SELECT o.r_chunk_seq INTO v_x FROM shardstore.fork_chunk_of_v1(p_child, p_from) o;
        v_x := coalesce(v_x, 0);
    END IF;
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_child) WHERE r_depth > 0 ORDER BY r_depth LOOP
        FOR k IN SELECT DISTINCT q.seq FROM (
                     SELECT m.chunk_seq AS seq FROM shardstore.chunk_map m
                      WHERE m.session_id = g.r_session_id AND m.chunk_seq >= greatest(g.r_chunk_lo, v_x)
                        AND m.chunk_seq < g.r_chunk_hi
                     UNION ALL
                     SELECT b.chunk_seq FROM shardstore.turn_buffer b
                      WHERE b.session_id = g.r_session_id AND b.chunk_seq >= greatest(g.r_chunk_lo, v_x)
                        AND b.chunk_seq < g.r_chunk_hi AND b.turn_seq <= g.r_turn_hi) q
                  ORDER BY q.seq LOOP
            PERFORM 1 FROM shardstore.turn_buffer b
              WHERE b.session_id = g.r_session_id AND b.chunk_seq = k.seq FOR SHARE;
            v_start := NULL;
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = g.r_session_id AND m.chunk_seq = k.seq;
            WITH env AS (
                SELECT x.e, (x.e->>'s')::bigint AS s
                  FROM shardstore.agent_history h,
                       jsonb_array_elements(h.conversation_chunk) AS x(e)
                 WHERE v_start IS NOT NULL AND h.session_id = g.r_session_id
                   AND h.chunk_seq = k.seq AND h.chunk_start = v_start
                UNION ALL
                SELECT CASE WHEN b.idempotency_key IS NULL
                            THEN jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                    'at', b.created_at, 'm', b.message)
                            ELSE jsonb_build_object('s', b.turn_seq, 't', b.tokens, 'b', b.bytes,
                                                    'at', b.created_at, 'k', b.idempotency_key,
                                                    'm', b.message)
                       END, b.turn_seq
                  FROM shardstore.turn_buffer b
                 WHERE b.session_id = g.r_session_id AND b.chunk_seq = k.seq)
            SELECT jsonb_agg(env.e ORDER BY env.s), min(env.s), max(env.s), count(*),
                   sum((env.e->>'t')::bigint),
                   sum(coalesce((env.e->>'b')::bigint, octet_length((env.e->'m')::text))),
                   max((env.e->>'at')::timestamptz), min((env.e->>'at')::timestamptz)
              INTO v_env, v_first, v_last, v_n, v_tok, v_bytes, v_end, v_min_at
              FROM env WHERE env.s <= g.r_turn_hi;
            CONTINUE WHEN coalesce(v_n, 0) = 0;
            v_start := coalesce(v_start, v_min_at);
            PERFORM shardstore.ensure_partition_v1(v_start);
            INSERT INTO shardstore.agent_history
                   (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                    token_count, byte_count, tenant_id, conversation_chunk)
            VALUES (p_child, k.seq, v_start, v_end, v_first, v_n, v_tok, v_bytes, c.tenant_id, v_env);
            INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq, tenant_id)
            VALUES (p_child, k.seq, v_start, v_first, c.tenant_id);
            INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
            VALUES (p_child, k.seq, v_start, statement_timestamp(), c.tenant_id)
            ON CONFLICT DO NOTHING;
            -- origins: the owner, and whatever the owner had copied into this chunk itself
            INSERT INTO shardstore.fork_copies AS f
                   (session_id, chunk_seq, origin_session_id, chunk_start, first_turn_seq, last_turn_seq,
                    tenant_id)
            SELECT p_child, k.seq, o.origin, v_start, o.lo, o.hi, c.tenant_id
              FROM (SELECT g.r_session_id AS origin, v_first AS lo, v_last AS hi
                    UNION ALL
                    SELECT y.origin_session_id, greatest(y.first_turn_seq, v_first),
                           least(y.last_turn_seq, v_last)
                      FROM shardstore.fork_copies y
                     WHERE y.session_id = g.r_session_id AND y.chunk_seq = k.seq
                       AND y.first_turn_seq <= v_last AND y.last_turn_seq >= v_first) o
            ON CONFLICT (session_id, chunk_seq, origin_session_id) DO UPDATE
               SET first_turn_seq = least(f.first_turn_seq, EXCLUDED.first_turn_seq),
                   last_turn_seq = greatest(f.last_turn_seq, EXCLUDED.last_turn_seq);
            v_copied := v_copied + 1;
            v_lowest := least(v_lowest, v_first);
        END LOOP;
    END LOOP;
    v_new_at := coalesce(v_lowest, p_from) - 1;
    IF v_x = 0 OR v_new_at IS NULL OR v_new_at < 0 THEN
        UPDATE shardstore.sessions x SET fork_parent = NULL, fork_at = NULL, fork_chunk = NULL
         WHERE x.session_id = p_child;
    ELSE
        -- the lineage is still the old one here: the owner of the new last inherited turn
        SELECT o.r_owner, o.r_chunk_seq INTO v_owner, v_ochunk
          FROM shardstore.fork_chunk_of_v1(p_child, v_new_at) o;
        UPDATE shardstore.sessions x
           SET fork_parent = v_owner,
               fork_at = CASE WHEN v_owner IS NOT NULL THEN v_new_at END,
               fork_chunk = CASE WHEN v_owner IS NOT NULL THEN v_x END
         WHERE x.session_id = p_child;
    END IF;
    RETURN v_copied;
END
$$;

-- 0013's body, plus: a rewritten chunk is queued for embedding and summarising here (the
-- triggers vec_enqueue_changed and summary_requeue did it before).
CREATE OR REPLACE FUNCTION shardstore.fork_erase_v1(p_origin uuid, p_acc jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    r       record;
    h       shardstore.sessions%ROWTYPE;
    v_acc   jsonb := p_acc;
    v_keep  bigint;
    v_gone  bigint;
    v_size  bigint;
    v_after bigint;
    v_vecs  bigint;
    v_turns bigint;
    v_tok   bigint;
    v_bytes bigint;
BEGIN
    FOR r IN SELECT f.* FROM shardstore.fork_copies f WHERE f.origin_session_id = p_origin
              ORDER BY f.session_id, f.chunk_seq LOOP
        SELECT * INTO h FROM shardstore.sessions x WHERE x.session_id = r.session_id FOR UPDATE;
        v_keep := NULL;
        v_gone := NULL;
        DELETE FROM shardstore.embed_queue q
         WHERE q.session_id = r.session_id AND q.chunk_seq = r.chunk_seq AND q.chunk_start = r.chunk_start;
        SELECT count(*) FILTER (WHERE (x.e->>'s')::bigint NOT BETWEEN r.first_turn_seq AND r.last_turn_seq),
               count(*) FILTER (WHERE (x.e->>'s')::bigint BETWEEN r.first_turn_seq AND r.last_turn_seq),
               pg_column_size(h2.conversation_chunk)
          INTO v_keep, v_gone, v_size
          FROM shardstore.agent_history h2, jsonb_array_elements(h2.conversation_chunk) AS x(e)
         WHERE h2.session_id = r.session_id AND h2.chunk_seq = r.chunk_seq AND h2.chunk_start = r.chunk_start
         GROUP BY h2.conversation_chunk;
        IF coalesce(v_gone, 0) > 0 THEN
            IF v_keep = 0 THEN
                DELETE FROM shardstore.agent_history x
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start;
                DELETE FROM shardstore.chunk_map m
                 WHERE m.session_id = r.session_id AND m.chunk_seq = r.chunk_seq;
                v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.agent_history', 1, 0, v_size);
                v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_map', 1, 0, 0);
            ELSE
                UPDATE shardstore.agent_history x
                   SET (conversation_chunk, first_turn_seq, turn_count, token_count, byte_count) =
                       (SELECT jsonb_agg(y.e ORDER BY y.ord), min((y.e->>'s')::bigint), count(*),
                               sum((y.e->>'t')::bigint),
                               sum(coalesce((y.e->>'b')::bigint, octet_length((y.e->'m')::text)))
                          FROM jsonb_array_elements(x.conversation_chunk) WITH ORDINALITY AS y(e, ord)
                         WHERE (y.e->>'s')::bigint NOT BETWEEN r.first_turn_seq AND r.last_turn_seq)
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start
                RETURNING x.first_turn_seq, pg_column_size(x.conversation_chunk) INTO v_after, v_tok;
                UPDATE shardstore.chunk_map m SET first_turn_seq = v_after
                 WHERE m.session_id = r.session_id AND m.chunk_seq = r.chunk_seq;
                INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                VALUES (r.session_id, r.chunk_seq, r.chunk_start, statement_timestamp(), h.tenant_id)
                ON CONFLICT DO NOTHING;
                INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                VALUES (r.session_id, r.chunk_seq, r.chunk_start, statement_timestamp(), h.tenant_id)
                ON CONFLICT DO NOTHING;
                v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.agent_history', 0, 1,
                                                 greatest(v_size - v_tok, 0));
            END IF;
            DELETE FROM shardstore.chunk_vectors v
             WHERE v.session_id = r.session_id AND v.chunk_seq = r.chunk_seq AND v.chunk_start = r.chunk_start;
            GET DIAGNOSTICS v_vecs = ROW_COUNT;
            v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.chunk_vectors', v_vecs, 0, 0);
            IF h.open_chunk_seq = r.chunk_seq AND h.open_turns > 0 THEN
                SELECT count(*), coalesce(sum(b.tokens), 0), coalesce(sum(b.bytes), 0)
                  INTO v_turns, v_tok, v_bytes
                  FROM shardstore.turn_buffer b
                 WHERE b.session_id = r.session_id AND b.chunk_seq = r.chunk_seq;
                SELECT v_turns + coalesce(sum(x.turn_count), 0), v_tok + coalesce(sum(x.token_count), 0),
                       v_bytes + coalesce(sum(x.byte_count), 0)
                  INTO v_turns, v_tok, v_bytes
                  FROM shardstore.agent_history x
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start;
                UPDATE shardstore.sessions x
                   SET open_turns = v_turns, open_tokens = v_tok, open_bytes = v_bytes
                 WHERE x.session_id = r.session_id;
            END IF;
        END IF;
        DELETE FROM shardstore.fork_copies f
         WHERE f.session_id = r.session_id AND f.chunk_seq = r.chunk_seq
           AND f.origin_session_id = r.origin_session_id;
        v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.fork_copies', 1, 0, 0);
    END LOOP;
    RETURN v_acc;
END
$$;

-- 0015's body, plus tenant_id on the buffered turns and their keys.
CREATE OR REPLACE FUNCTION shardstore.import_turns_v1(
    p_session_id    uuid,
    p_first_seq     bigint,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_at            timestamptz[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_status text, r_index integer, r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_at     timestamptz;
    v_prev   timestamptz;
    v_sealed boolean := false;
    v_limit  timestamptz := statement_timestamp() + interval '5 minutes';
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    IF s.next_turn_seq <> p_first_seq THEN
        IF s.next_turn_seq = 0 AND s.open_chunk_seq = 0 AND s.open_turns = 0 AND p_first_seq > 0 THEN
            s.next_turn_seq := p_first_seq;
        ELSE
            r_status := 'seq'; r_index := 0; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    v_prev := s.last_turn_at;
    FOR i IN 1 .. v_n LOOP
        v_at := p_at[i];
        IF v_prev IS NOT NULL AND v_at < v_prev THEN
            r_status := 'time'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_at > v_limit THEN
            r_status := 'future'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_keys[i] IS NOT NULL AND EXISTS (
               SELECT 1 FROM shardstore.turn_keys k
                WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i]) THEN
            r_status := 'key'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> date_bin(p_interval, v_at, p_origin)) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_at;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
                tenant_id)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_at, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1), s.tenant_id);
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_at,
                    s.tenant_id);
        END IF;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_prev := v_at;
    END LOOP;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_prev
     WHERE session_id = p_session_id;
    r_status := 'ok'; r_index := v_n; r_sealed := v_sealed;
    RETURN NEXT;
END
$$;

-- 0014's bodies, as PL/pgSQL (see fork_segments_v1).
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v1(r shardstore.artifact_refs)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN CASE WHEN r.owner_type = 'checkpoint' THEN
                    (r.required_for_resume OR r.expires_at IS NULL OR r.expires_at > statement_timestamp())
                    AND EXISTS (SELECT 1 FROM shardstore.checkpoints c
                                 WHERE c.session_id = r.session_id
                                   AND c.checkpoint_id::text = r.owner_id)
                ELSE r.expires_at IS NULL OR r.expires_at > statement_timestamp() END;
END
$$;

CREATE OR REPLACE FUNCTION shardstore.artifact_has_live_ref_v1(p_tenant text, p_artifact uuid)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM shardstore.artifact_refs r
                    WHERE r.tenant_id = p_tenant AND r.artifact_id = p_artifact
                      AND shardstore.artifact_ref_live_v1(r));
END
$$;

-- the artifact tables' own policies (0014) compare the column without a subquery too
DROP POLICY tenant_isolation ON shardstore.artifacts;
CREATE POLICY tenant_isolation ON shardstore.artifacts
    USING (tenant_id = shardstore.rls_tenant_v2())
    WITH CHECK (tenant_id = shardstore.rls_tenant_v2());
DROP POLICY tenant_isolation ON shardstore.artifact_chunks;
CREATE POLICY tenant_isolation ON shardstore.artifact_chunks
    USING (tenant_id = shardstore.rls_tenant_v2())
    WITH CHECK (tenant_id = shardstore.rls_tenant_v2());

-- 8. session tables `shardstore distribute` leaves on the coordinator, with the reason
-- (tests/test_distributable.py and distribute() skip them; docs/scale-out.md)
CREATE FUNCTION shardstore.citus_kept_local_v1()
RETURNS TABLE (r_table regclass, r_reason text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifact_refs'::regclass,
            'its AFTER DELETE trigger artifact_refs_gone marks released artifacts the moment '
            || 'any path (unref, purges, retention, rewind, the registry) deletes refs, and the '
            || 'artifact tables it updates are coordinator tables too')
$$;
