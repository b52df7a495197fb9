-- Maintenance inside the database, for pg_cron: CALL shardstore.run_maintenance(). Does what
-- `shardstore maintain` does, with two differences: a partition is detached with a plain
-- DETACH PARTITION (DETACH ... CONCURRENTLY cannot run inside a procedure), which takes an
-- ACCESS EXCLUSIVE lock on agent_history for a moment, so appends that fold may wait up to
-- p_lock_timeout while it queues (it then gives up and retries); and there is no archive
-- hook: expired partitions are dropped. Must be called outside a transaction block (it
-- commits after every step). Runs never overlap: a call while another run (here or from
-- Python) holds the maintenance lock does nothing and says so in a NOTICE. Every run is
-- logged in shardstore.maintenance_runs.
CREATE OR REPLACE PROCEDURE shardstore.run_maintenance(IN p_premake integer DEFAULT 4, IN p_retention interval DEFAULT NULL::interval, IN p_flush_idle interval DEFAULT '00:05:00'::interval, IN p_lock_timeout interval DEFAULT '00:00:01'::interval)
 LANGUAGE plpgsql
AS $procedure$
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
            PERFORM shardstore.maint_prepare_partition(v_lo, v_lo + v_interval);
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
                  FROM shardstore.maint_expire_rows_v2(v_boundary, 1000);
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
                    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
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
                PERFORM shardstore.maint_drop_retired_v2(v_retired, p_lock_timeout);
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
$procedure$;
