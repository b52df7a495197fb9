-- Drops a retired table (agent_history_r...; any other name raises; 0 when it is gone) under
-- ACCESS EXCLUSIVE, waiting at most p_lock_timeout. First deletes, for each session in it, the
-- chunk_map and turn_keys rows of its chunks up to the newest one in the table, and the rows
-- of registered (non-builtin, purge_rows) session tables tied to those chunks or turns: a
-- session's chunks up to its newest in the table are all older than it, so every earlier
-- chunk's rows go too. Returns the number of chunk rows dropped.
CREATE OR REPLACE FUNCTION shardstore.maint_drop_retired_v2(p_name text, p_lock_timeout interval)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_rows bigint;
    t      record;
BEGIN
    IF p_name NOT LIKE 'agent\_history\_r%' THEN
        RAISE EXCEPTION 'only retired tables (agent_history_r...) are dropped, not %', p_name;
    END IF;
    IF to_regclass(format('shardstore.%I', p_name)) IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', shardstore.maint_ms(p_lock_timeout), true);
    EXECUTE format('LOCK TABLE shardstore.%I IN ACCESS EXCLUSIVE MODE', p_name);
    EXECUTE format(
        'WITH per_session AS (SELECT session_id, max(chunk_seq) AS upto, count(*) AS n
                                FROM shardstore.%I GROUP BY session_id),
              maps AS (DELETE FROM shardstore.chunk_map m USING per_session p
                        WHERE m.session_id = p.session_id AND m.chunk_seq <= p.upto),
              keys AS (DELETE FROM shardstore.turn_keys k USING per_session p
                        WHERE k.session_id = p.session_id AND k.chunk_seq <= p.upto)
         SELECT coalesce(sum(n), 0) FROM per_session', p_name) INTO v_rows;
    FOR t IN SELECT r.table_name, r.session_column, r.turn_column, r.chunk_column
               FROM shardstore.table_registry r
              WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin
                AND (r.chunk_column IS NOT NULL OR r.turn_column IS NOT NULL)
              ORDER BY r.position, r.table_name::text LOOP
        IF t.chunk_column IS NOT NULL THEN
            EXECUTE format(
                'DELETE FROM %s x USING (SELECT session_id, max(chunk_seq) AS upto
                                           FROM shardstore.%I GROUP BY session_id) d
                  WHERE x.%I = d.session_id AND x.%I <= d.upto',
                t.table_name, p_name, t.session_column, t.chunk_column);
        ELSE
            EXECUTE format(
                'DELETE FROM %s x USING (SELECT session_id, max(first_turn_seq + turn_count) AS upto
                                           FROM shardstore.%I GROUP BY session_id) d
                  WHERE x.%I = d.session_id AND x.%I < d.upto',
                t.table_name, p_name, t.session_column, t.turn_column);
        END IF;
    END LOOP;
    EXECUTE format('DROP TABLE shardstore.%I', p_name);
    RETURN v_rows;
END
$function$;
