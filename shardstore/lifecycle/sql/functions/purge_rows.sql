-- Deletes a session's rows for a purge and returns the report (per table: rows deleted,
-- rewritten, bytes; purge_acc): with p_cut NULL everything the session holds, else its turns
-- before p_cut (chunks wholly before it deleted, the chunk holding it rewritten without them
-- and queued for embedding and a summary again). In order: the write buffer; the chunks,
-- read after it; detached partitions (purge_detached_tables), which agent_history no longer
-- reaches; every other registered table (purge_targets), in registry order. Partitions named
-- in p_skip_parts are left out of the report. The caller holds the session row FOR UPDATE,
-- which excludes folds, text passes and the writers of registered tables (purge_guard: KEY
-- SHARE). Sizes are read by a SELECT before each DELETE, not in RETURNING: Citus allows only
-- immutable functions there. Pairs of (chunk_seq, chunk_start) are matched by EXISTS over
-- unnest(...), not `(a, b) IN (SELECT * FROM unnest(...))`, which Citus 14.0 with row
-- security fails on the worker ("subquery has too many columns").
CREATE OR REPLACE FUNCTION shardstore.purge_rows(p_session_id uuid, p_cut bigint, p_skip_parts text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    -- 1. the write buffer, first, and the chunk list read after it: a fold that committed
    -- before is in the list, one still moving these rows is waited for (they are locked
    -- first), one starting later finds them gone; so no purged turn survives in
    -- agent_history (docs/purge.md). Measured, then deleted: sizes are not taken in
    -- RETURNING, which Citus allows only immutable functions in.
    PERFORM 1 FROM shardstore.turn_buffer x
      WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut)
        FOR UPDATE;
    SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) INTO v_n, v_b
      FROM shardstore.turn_buffer x
     WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
    DELETE FROM shardstore.turn_buffer x
     WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
    v_acc := shardstore.purge_acc(v_acc, 'shardstore.turn_buffer', v_n, 0, v_b);

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
                AND EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::timestamptz[]) AS ks(ks_seq, ks_start)
                                    WHERE ks.ks_seq = h.chunk_seq AND ks.ks_start = h.chunk_start)'
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
    FOR t IN SELECT d AS rel FROM shardstore.purge_detached_tables() AS d LOOP
        FOR c IN EXECUTE format(
            'SELECT h.chunk_seq, h.chunk_start, pg_column_size(h.*) AS sz FROM %s h
              WHERE h.session_id = $1 AND ($2::bigint IS NULL OR h.first_turn_seq + h.turn_count <= $2)
                FOR UPDATE', t.rel)
            USING p_session_id, p_cut
        LOOP
            v_acc := shardstore.purge_acc(v_acc, t.rel::text, 1, 0, c.sz);
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
                v_acc := shardstore.purge_acc(v_acc, t.rel::text, 0, 1, greatest(c.sz - v_after, 0));
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
                        AND ($4 OR EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::timestamptz[]) AS ks(ks_seq, ks_start)
                                    WHERE ks.ks_seq = h.chunk_seq AND ks.ks_start = h.chunk_start))
                      GROUP BY h.chunk_start'
                    USING p_session_id, v_del_seq, v_del_start, p_cut IS NULL
                LOOP
                    v_part := 'shardstore.' || shardstore.partition_name(c.chunk_start);
                    IF NOT v_part = ANY (v_skip) THEN
                        v_acc := shardstore.purge_acc(v_acc, v_part, c.n, 0, c.sz);
                    END IF;
                END LOOP;
                EXECUTE
                    'DELETE FROM shardstore.agent_history h
                      WHERE h.session_id = $1 AND h.chunk_start = ANY ($3)
                        AND ($4 OR EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::timestamptz[]) AS ks(ks_seq, ks_start)
                                    WHERE ks.ks_seq = h.chunk_seq AND ks.ks_start = h.chunk_start))'
                  USING p_session_id, v_del_seq, v_del_start, p_cut IS NULL;
            END IF;
            IF v_rw_seq IS NOT NULL AND v_rw_start IS NOT NULL AND p_cut IS NOT NULL THEN
                v_part := NULL;
                EXECUTE 'SELECT pg_column_size(h.*) FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                            FOR UPDATE'
                   INTO v_before USING p_session_id, v_rw_seq, v_rw_start;
                IF v_before IS NOT NULL THEN
                    v_part := 'shardstore.' || shardstore.partition_name(v_rw_start);
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
                    v_acc := shardstore.purge_acc(v_acc, v_part, 0, 1, greatest(v_before - v_after, 0));
                    -- the rewritten chunk is embedded again
                    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                    VALUES (p_session_id, v_rw_seq, v_rw_start, v_now, v_tenant)
                    ON CONFLICT DO NOTHING;
                    -- and summarised again
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
            v_acc := shardstore.purge_acc(v_acc, 'shardstore.chunk_map', v_n, 0, v_b);
            IF p_cut IS NOT NULL AND v_rw_seq IS NOT NULL THEN
                UPDATE shardstore.chunk_map x SET first_turn_seq = p_cut
                 WHERE x.session_id = p_session_id AND x.chunk_seq = v_rw_seq AND x.first_turn_seq < p_cut;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_acc := shardstore.purge_acc(v_acc, 'shardstore.chunk_map', 0, v_n, 0);
            END IF;
        ELSIF t.table_name = 'shardstore.turn_keys'::regclass THEN
            SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) INTO v_n, v_b
              FROM shardstore.turn_keys x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
            DELETE FROM shardstore.turn_keys x
             WHERE x.session_id = p_session_id AND (p_cut IS NULL OR x.turn_seq < p_cut);
            v_acc := shardstore.purge_acc(v_acc, 'shardstore.turn_keys', v_n, 0, v_b);
        ELSIF p_cut IS NULL OR t.turn_column IS NOT NULL OR t.chunk_column IS NOT NULL THEN
            IF p_cut IS NOT NULL AND t.chunk_column IS NOT NULL AND cardinality(v_gone_seq) = 0 THEN
                CONTINUE;
            END IF;
            -- writers of registered tables hold the session's KEY SHARE lock (purge_guard),
            -- which the caller's FOR UPDATE excludes: what is measured is what is deleted
            v_where := format('FROM %s x WHERE x.%I = $1 AND %s',
                t.table_name, t.session_column,
                CASE
                    WHEN p_cut IS NULL THEN 'true'
                    WHEN t.turn_column IS NOT NULL THEN format('x.%I < $2', t.turn_column)
                    WHEN t.chunk_start_column IS NOT NULL
                        THEN format('x.%I = ANY ($4) AND EXISTS (SELECT 1 FROM unnest($3, $4) AS ks(ks_seq, ks_start) WHERE ks.ks_seq = x.%I AND ks.ks_start = x.%I)',
                                    t.chunk_start_column, t.chunk_column, t.chunk_start_column)
                    ELSE format('x.%I = ANY ($3)', t.chunk_column)
                END);
            EXECUTE 'SELECT count(*), coalesce(sum(pg_column_size(x.*)), 0) ' || v_where
               INTO v_n, v_b USING p_session_id, p_cut, v_gone_seq, v_gone_start;
            IF v_n > 0 THEN
                EXECUTE 'DELETE ' || v_where USING p_session_id, p_cut, v_gone_seq, v_gone_start;
            END IF;
            v_acc := shardstore.purge_acc(v_acc, t.table_name::text, v_n, 0, v_b);
        END IF;
    END LOOP;
    RETURN v_acc;
END
$function$;
