-- 0003: partition maintenance. The steps of a maintenance run as small functions, each
-- one short transaction, shared by the Python runner (partition_manager) and the in-database
-- procedure shardstore.run_maintenance() (for pg_cron). Every function that waits for a lock
-- takes a lock timeout and gives up (returns false / -1) instead of queueing writers behind it.

-- One row per maintenance run (Python or in-database), newest kept; `shardstore maintain`
-- and monitoring read the last one.
CREATE TABLE shardstore.maintenance_runs (
    run_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text NOT NULL,           -- 'python' or 'procedure'
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    healthy     boolean NOT NULL,
    report      jsonb NOT NULL
);

-- Keeps the run log short: the newest 1,000 runs.
CREATE FUNCTION shardstore.maint_log_run_v1(p_source text, p_started timestamptz,
                                            p_healthy boolean, p_report jsonb)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO shardstore.maintenance_runs (source, started_at, healthy, report)
    VALUES (p_source, p_started, p_healthy, p_report)
    RETURNING run_id INTO v_id;
    DELETE FROM shardstore.maintenance_runs WHERE run_id <= v_id - 1000;
    RETURN v_id;
END
$$;

-- A lock timeout as the text SET lock_timeout takes (whole milliseconds, at least 1).
CREATE FUNCTION shardstore.maint_ms_v1(p_timeout interval)
RETURNS text
LANGUAGE sql
IMMUTABLE
AS $$ SELECT greatest(1, round(extract(epoch FROM p_timeout) * 1000))::bigint || 'ms' $$;

-- The partition table name for a lower bound (the rule of ensure_partition_v1).
CREATE FUNCTION shardstore.maint_partition_name_v1(p_lower timestamptz)
RETURNS text
LANGUAGE sql
STABLE
AS $$ SELECT 'agent_history_p' || to_char(p_lower AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS') $$;

-- Creates the standalone table for [p_lower, p_upper): agent_history's columns, defaults,
-- indexes and a CHECK matching the bounds (so that ATTACH skips its validation scan).
-- Locks nothing but the new table. Does nothing when the table exists. Returns its name.
CREATE FUNCTION shardstore.maint_prepare_partition_v1(p_lower timestamptz, p_upper timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := shardstore.maint_partition_name_v1(p_lower);
BEGIN
    IF to_regclass(format('shardstore.%I', v_name)) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.agent_history INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)',
                           v_name);
            EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                           v_name, v_name || '_bounds', p_lower, p_upper);
        EXCEPTION WHEN duplicate_table OR unique_violation OR duplicate_object THEN
            NULL;  -- a writer (ensure_partition_v1) made it concurrently
        END;
    END IF;
    RETURN v_name;
END
$$;

-- Attaches the table made by maint_prepare_partition_v1 (creating it if missing), waiting at
-- most p_lock_timeout for the SHARE UPDATE EXCLUSIVE lock on agent_history (which inserts do
-- not conflict with). Returns true when the partition is attached (by this call or before),
-- false when the lock wait timed out: the caller retries after a pause.
CREATE FUNCTION shardstore.maint_attach_partition_v1(p_lower timestamptz, p_upper timestamptz,
                                                     p_lock_timeout interval)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_name     text := shardstore.maint_prepare_partition_v1(p_lower, p_upper);
    v_attached boolean;
BEGIN
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached THEN
        RETURN true;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    BEGIN
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I'
                       ' FOR VALUES FROM (%L) TO (%L)', v_name, p_lower, p_upper);
    EXCEPTION
        WHEN lock_not_available THEN
            RETURN false;
        WHEN OTHERS THEN
            -- a writer attached it while this call waited: fine; anything else is an error
            SELECT c.relispartition INTO v_attached
              FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
            IF v_attached IS NOT TRUE THEN
                RAISE;
            END IF;
    END;
    RETURN true;
END
$$;

-- Sessions whose buffer maintenance should fold: idle since before p_before (flush: the open
-- chunk too), or holding a sealed chunk buffered since before p_before (its fold was lost,
-- e.g. the process died). Purged sessions have no buffer.
CREATE FUNCTION shardstore.maint_fold_candidates_v1(p_before timestamptz)
RETURNS SETOF uuid
LANGUAGE sql
STABLE
AS $$
    SELECT DISTINCT b.session_id
      FROM shardstore.turn_buffer b
      JOIN shardstore.sessions s ON s.session_id = b.session_id
     WHERE s.purged_at IS NULL
       AND (s.last_turn_at < p_before OR (b.chunk_seq < s.open_chunk_seq AND b.created_at < p_before))
$$;

-- Folds one candidate session. An idle session (no turn since p_before) is flushed: its
-- sealed chunks and its open chunk go to agent_history, the open chunk stays open. A session
-- that is being written to, or that got a turn since, only has its sealed chunks folded
-- (which needs no session lock). Never waits for a session lock: SKIP LOCKED, and at most
-- p_lock_timeout for anything else. Returns the number of turns moved.
CREATE FUNCTION shardstore.maint_fold_session_v1(p_session_id uuid, p_before timestamptz,
                                                 p_lock_timeout interval)
RETURNS integer
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    PERFORM 1 FROM shardstore.sessions s
     WHERE s.session_id = p_session_id AND s.purged_at IS NULL AND s.last_turn_at < p_before
       FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN shardstore.flush_v1(p_session_id);
    END IF;
    RETURN shardstore.fold_sealed_v1(p_session_id);
END
$$;

-- Retention of rows outside agent_history, one batch per call (call until both are 0):
-- * sessions whose last activity (last turn, else creation) is before p_before, with their
--   buffered turns, chunk locations and idempotency keys (their chunks are all in partitions
--   that end by p_before, which retention drops). Purge tombstones are kept. A session being
--   written to is skipped (SKIP LOCKED) and re-checked after any concurrent append;
-- * buffered turns written before p_before, with their idempotency keys.
-- p_before must be a partition boundary, so that "older" means exactly "in a dropped
-- partition's range".
CREATE FUNCTION shardstore.maint_expire_rows_v1(p_before timestamptz, p_batch integer)
RETURNS TABLE (r_sessions bigint, r_turns bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids uuid[];
    t     record;
BEGIN
    WITH gone AS (
        DELETE FROM shardstore.sessions s
         WHERE s.session_id IN (
                   SELECT x.session_id FROM shardstore.sessions x
                    WHERE x.purged_at IS NULL
                      AND coalesce(x.last_turn_at, x.created_at) < p_before
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
           AND coalesce(s.last_turn_at, s.created_at) < p_before
        RETURNING s.session_id)
    SELECT coalesce(array_agg(session_id), '{}') INTO v_ids FROM gone;
    IF cardinality(v_ids) > 0 THEN
        DELETE FROM shardstore.turn_buffer WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.chunk_map WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.turn_keys WHERE session_id = ANY (v_ids);
        -- and every session-scoped table that later features registered for purges
        FOR t IN SELECT p.table_name, p.session_column FROM shardstore.purge_targets p
                  WHERE NOT p.builtin ORDER BY p.position LOOP
            EXECUTE format('DELETE FROM %s WHERE %I = ANY ($1)', t.table_name, t.session_column)
              USING v_ids;
        END LOOP;
    END IF;
    r_sessions := cardinality(v_ids);
    WITH old AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE (b.session_id, b.turn_seq) IN (
                   SELECT x.session_id, x.turn_seq FROM shardstore.turn_buffer x
                    WHERE x.created_at < p_before
                    LIMIT p_batch
                      FOR UPDATE SKIP LOCKED)
        RETURNING b.session_id, b.idempotency_key
    ), keys AS (
        DELETE FROM shardstore.turn_keys k USING old
         WHERE old.idempotency_key IS NOT NULL
           AND k.session_id = old.session_id AND k.idempotency_key = old.idempotency_key
    )
    SELECT count(*) INTO r_turns FROM old;
    RETURN NEXT;
END
$$;

-- Finishes a DETACH ... CONCURRENTLY that was interrupted (the partition is left "detach
-- pending": invisible to new queries, refusing inserts). Waits at most p_lock_timeout.
-- Returns true when the table is no longer a partition, false on a lock timeout.
CREATE FUNCTION shardstore.maint_finalize_detach_v1(p_name text, p_lock_timeout interval)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_inherits i
                    WHERE i.inhrelid = to_regclass(format('shardstore.%I', p_name))
                      AND i.inhparent = 'shardstore.agent_history'::regclass) THEN
        RETURN true;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    EXECUTE format('ALTER TABLE shardstore.agent_history DETACH PARTITION shardstore.%I FINALIZE', p_name);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

-- Renames a detached (expired) partition table agent_history_pX to agent_history_rX, so that
-- no writer can re-attach it (ensure_partition_v1 looks for the p name) while it is archived
-- and dropped. Returns the new name; a table already renamed is returned as is.
CREATE FUNCTION shardstore.maint_retire_v1(p_name text, p_lock_timeout interval)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_new  text;
    v_part boolean;
BEGIN
    IF p_name LIKE 'agent_history\_r%' THEN
        RETURN p_name;
    END IF;
    IF p_name NOT LIKE 'agent_history\_p%' THEN
        RAISE EXCEPTION 'not a partition table name: %', p_name;
    END IF;
    v_new := 'agent_history_r' || substr(p_name, length('agent_history_p') + 1);
    SELECT c.relispartition INTO v_part
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', p_name));
    IF v_part IS NULL THEN
        IF to_regclass(format('shardstore.%I', v_new)) IS NOT NULL THEN
            RETURN v_new;
        END IF;
        RAISE EXCEPTION 'table shardstore.% does not exist', p_name;
    END IF;
    IF v_part THEN
        RAISE EXCEPTION 'shardstore.% is still a partition of agent_history', p_name;
    END IF;
    IF to_regclass(format('shardstore.%I', v_new)) IS NOT NULL THEN
        -- an earlier retired copy of the same range still waits for its archive: that one
        -- goes first (the next run retires this one)
        RAISE EXCEPTION 'shardstore.% is still waiting to be archived and dropped', v_new;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    EXECUTE format('ALTER TABLE shardstore.%I RENAME TO %I', p_name, v_new);
    RETURN v_new;
END
$$;

-- Drops a retired table (agent_history_rX) and forgets its chunks: their chunk_map rows and
-- the idempotency keys of their turns (a session's chunks up to the newest one in the table
-- are all older than it). Returns the number of chunk rows the table held.
CREATE FUNCTION shardstore.maint_drop_retired_v1(p_name text, p_lock_timeout interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_rows bigint;
    t      record;
BEGIN
    IF p_name NOT LIKE 'agent_history\_r%' THEN
        RAISE EXCEPTION 'only retired tables (agent_history_r...) are dropped, not %', p_name;
    END IF;
    IF to_regclass(format('shardstore.%I', p_name)) IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
    EXECUTE format('LOCK TABLE shardstore.%I IN ACCESS EXCLUSIVE MODE', p_name);
    EXECUTE format(
        'WITH per_session AS (SELECT session_id, max(chunk_seq) AS upto, count(*) AS n
                                FROM shardstore.%I GROUP BY session_id),
              maps AS (DELETE FROM shardstore.chunk_map m USING per_session p
                        WHERE m.session_id = p.session_id AND m.chunk_seq <= p.upto),
              keys AS (DELETE FROM shardstore.turn_keys k USING per_session p
                        WHERE k.session_id = p.session_id AND k.chunk_seq <= p.upto)
         SELECT coalesce(sum(n), 0) FROM per_session', p_name) INTO v_rows;
    -- registered chunk-level tables (e.g. per-chunk vectors) lose the dropped chunks' rows
    FOR t IN SELECT p.table_name, p.session_column, p.chunk_column FROM shardstore.purge_targets p
              WHERE NOT p.builtin AND p.chunk_column IS NOT NULL ORDER BY p.position LOOP
        EXECUTE format(
            'DELETE FROM %s x USING (SELECT session_id, max(chunk_seq) AS upto
                                       FROM shardstore.%I GROUP BY session_id) d
              WHERE x.%I = d.session_id AND x.%I <= d.upto',
            t.table_name, p_name, t.session_column, t.chunk_column);
    END LOOP;
    EXECUTE format('DROP TABLE shardstore.%I', p_name);
    RETURN v_rows;
END
$$;

-- Maintenance inside the database, for pg_cron: CALL shardstore.run_maintenance(). Does what
-- `shardstore maintain` does, with two differences: a partition is detached with a plain
-- DETACH PARTITION (DETACH ... CONCURRENTLY cannot run inside a procedure), which takes an
-- ACCESS EXCLUSIVE lock on agent_history for a moment, so appends that fold may wait up to
-- p_lock_timeout while it queues (it then gives up and retries); and there is no archive
-- hook: expired partitions are dropped. Must be called outside a transaction block (it
-- commits after every step). Runs never overlap: a call while another run (here or from
-- Python) holds the maintenance lock does nothing and says so in a NOTICE. Every run is
-- logged in shardstore.maintenance_runs.
CREATE PROCEDURE shardstore.run_maintenance(
    p_premake      integer  DEFAULT 4,
    p_retention    interval DEFAULT NULL,
    p_flush_idle   interval DEFAULT '5 minutes',
    p_lock_timeout interval DEFAULT '1 second')
LANGUAGE plpgsql
AS $$
DECLARE
    -- the key of partition_manager.runner.MAINTENANCE_LOCK_KEY
    c_key       constant bigint := 6001118325060599810;
    v_started   timestamptz := clock_timestamp();
    v_now       timestamptz;
    v_interval  interval;
    v_origin    timestamptz;
    v_current   timestamptz;
    v_boundary  timestamptz;
    v_lo        timestamptz;
    v_ok        boolean;
    v_try       integer;
    v_created   text[] := '{}';
    v_dropped   text[] := '{}';
    v_finished  text[] := '{}';
    v_errors    text[] := '{}';
    v_folded    integer := 0;
    v_moved     integer;
    v_sessions  bigint := 0;
    v_turns     bigint := 0;
    v_rs        bigint;
    v_rt        bigint;
    v_ahead     integer;
    v_retired   text;
    v_healthy   boolean;
    r           record;
BEGIN
    IF p_premake IS NULL OR p_premake < 0 OR p_premake > 1000 THEN
        RAISE EXCEPTION 'p_premake must be between 0 and 1000';
    END IF;
    IF p_retention IS NOT NULL AND p_retention <= interval '0' THEN
        RAISE EXCEPTION 'p_retention must be a positive interval (or NULL: keep everything)';
    END IF;
    IF NOT pg_try_advisory_lock(c_key) THEN
        RAISE NOTICE 'shardstore maintenance is already running; nothing done';
        RETURN;
    END IF;
    SELECT partition_interval, partition_origin INTO v_interval, v_origin FROM shardstore.config;
    IF NOT FOUND THEN
        PERFORM pg_advisory_unlock(c_key);
        RAISE EXCEPTION 'shardstore is not initialised: connect once with shardstore.connect()';
    END IF;
    v_now := clock_timestamp();
    v_current := date_bin(v_interval, v_now, v_origin);

    -- 1. finish detaches interrupted by a crash
    FOR r IN SELECT c.relname::text AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'shardstore.agent_history'::regclass AND i.inhdetachpending LOOP
        BEGIN
            IF shardstore.maint_finalize_detach_v1(r.name, p_lock_timeout) THEN
                v_finished := v_finished || r.name;
            ELSE
                v_errors := v_errors || format('finishing the detach of %s timed out', r.name);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            v_errors := v_errors || format('finishing the detach of %s: %s', r.name, SQLERRM);
        END;
        COMMIT;
    END LOOP;

    -- 2. premake: the current partition and p_premake after it
    FOR i IN 0 .. p_premake LOOP
        v_lo := v_current + i * v_interval;
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c
                               WHERE c.oid = to_regclass(format('shardstore.%I', shardstore.maint_partition_name_v1(v_lo)))
                                 AND c.relispartition);
        v_ok := false;
        v_try := 0;
        BEGIN
            PERFORM shardstore.maint_prepare_partition_v1(v_lo, v_lo + v_interval);
        EXCEPTION WHEN OTHERS THEN
            v_errors := v_errors || format('creating the partition for %s: %s', v_lo, SQLERRM);
            CONTINUE;
        END;
        COMMIT;
        WHILE NOT v_ok AND v_try < 6 LOOP
            BEGIN
                v_ok := shardstore.maint_attach_partition_v1(v_lo, v_lo + v_interval, p_lock_timeout);
            EXCEPTION WHEN OTHERS THEN
                v_errors := v_errors || format('attaching the partition for %s: %s', v_lo, SQLERRM);
                EXIT;
            END;
            COMMIT;
            IF NOT v_ok THEN
                v_try := v_try + 1;
                PERFORM pg_sleep(least(2.0, 0.05 * 2 ^ v_try));
            END IF;
        END LOOP;
        IF v_ok THEN
            v_created := v_created || shardstore.maint_partition_name_v1(v_lo);
        ELSIF v_try >= 6 THEN
            v_errors := v_errors || format('attaching the partition for %s timed out %s times', v_lo, v_try);
        END IF;
    END LOOP;

    -- 3. fold the buffers of idle sessions
    FOR r IN SELECT f AS sid FROM shardstore.maint_fold_candidates_v1(v_now - p_flush_idle) f LOOP
        BEGIN
            v_moved := shardstore.maint_fold_session_v1(r.sid, v_now - p_flush_idle, p_lock_timeout);
            IF v_moved > 0 THEN
                v_folded := v_folded + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- busy: next run
        WHEN OTHERS THEN
            v_errors := v_errors || format('folding session %s: %s', r.sid, SQLERRM);
        END;
        COMMIT;
    END LOOP;

    -- 4. retention
    IF p_retention IS NOT NULL THEN
        v_boundary := date_bin(v_interval, v_now - p_retention, v_origin);
        LOOP
            BEGIN
                SELECT r_sessions, r_turns INTO v_rs, v_rt
                  FROM shardstore.maint_expire_rows_v1(v_boundary, 1000);
            EXCEPTION WHEN OTHERS THEN
                v_errors := v_errors || format('expiring rows: %s', SQLERRM);
                v_rs := 0; v_rt := 0;
            END;
            COMMIT;
            v_sessions := v_sessions + v_rs;
            v_turns := v_turns + v_rt;
            EXIT WHEN v_rs = 0 AND v_rt = 0;
        END LOOP;
        FOR r IN SELECT c.relname::text AS name
                   FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                  WHERE i.inhparent = 'shardstore.agent_history'::regclass
                    AND NOT i.inhdetachpending
                    AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), $r$TO \('([^']+)'\)$r$))[1]::timestamptz
                        <= v_boundary
                  ORDER BY 1 LOOP
            v_ok := false;
            v_try := 0;
            WHILE NOT v_ok AND v_try < 6 LOOP
                BEGIN
                    PERFORM set_config('lock_timeout', shardstore.maint_ms_v1(p_lock_timeout), true);
                    EXECUTE format('ALTER TABLE shardstore.agent_history DETACH PARTITION shardstore.%I', r.name);
                    v_ok := true;
                EXCEPTION WHEN lock_not_available THEN
                    v_try := v_try + 1;
                END;
                COMMIT;
                IF NOT v_ok THEN
                    PERFORM pg_sleep(least(2.0, 0.05 * 2 ^ v_try));
                END IF;
            END LOOP;
            IF NOT v_ok THEN
                v_errors := v_errors || format('detaching %s timed out %s times', r.name, v_try);
            END IF;
        END LOOP;
        -- every expired standalone table: just detached, detached by an earlier run, or retired
        FOR r IN SELECT c.relname::text AS name FROM pg_class c
                  WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'
                    AND NOT c.relispartition
                    AND c.relname ~ '^agent_history_[pr][0-9]{8}t[0-9]{6}$'
                    AND to_timestamp(substr(c.relname, 16), 'YYYYMMDD"t"HH24MISS')::timestamp
                        AT TIME ZONE 'UTC' + v_interval <= v_boundary
                  ORDER BY substr(c.relname, 16), c.relname DESC LOOP  -- a retired copy first
            BEGIN
                v_retired := shardstore.maint_retire_v1(r.name, p_lock_timeout);
                PERFORM shardstore.maint_drop_retired_v1(v_retired, p_lock_timeout);
                v_dropped := v_dropped || ('agent_history_p' || substr(r.name, 16));
            EXCEPTION WHEN OTHERS THEN
                v_errors := v_errors || format('dropping %s: %s', r.name, SQLERRM);
            END;
            COMMIT;
        END LOOP;
    END IF;

    -- 5. report
    SELECT count(*) INTO v_ahead
      FROM generate_series(1, p_premake) AS g(k)
     WHERE EXISTS (SELECT 1 FROM pg_class c
                    WHERE c.oid = to_regclass(format('shardstore.%I',
                                     shardstore.maint_partition_name_v1(v_current + g.k * v_interval)))
                      AND c.relispartition);
    v_healthy := cardinality(v_errors) = 0 AND v_ahead >= p_premake;
    PERFORM shardstore.maint_log_run_v1('procedure', v_started, v_healthy, jsonb_build_object(
        'partitions_created', to_jsonb(v_created),
        'partitions_dropped', to_jsonb(v_dropped),
        'detaches_finished', to_jsonb(v_finished),
        'sessions_folded', v_folded,
        'sessions_expired', v_sessions,
        'buffered_turns_expired', v_turns,
        'partitions_ahead', v_ahead,
        'premake', p_premake,
        'errors', to_jsonb(v_errors),
        'seconds', extract(epoch FROM clock_timestamp() - v_started)));
    COMMIT;
    PERFORM pg_advisory_unlock(c_key);
    RAISE NOTICE 'shardstore maintenance: % created, % dropped, % sessions folded, % ahead (want %), % errors',
        cardinality(v_created), cardinality(v_dropped), v_folded, v_ahead, p_premake, cardinality(v_errors);
    FOR i IN 1 .. coalesce(array_length(v_errors, 1), 0) LOOP
        RAISE WARNING 'shardstore maintenance: %', v_errors[i];
    END LOOP;
END
$$;
