-- 0031: fork_copies without triggers, so that Citus can distribute it by session_id
-- (issue 17; Citus refuses a table with triggers). The work of 0019's three row triggers
-- (fork_copy_text, fork_copy_text_widened, fork_copy_gone) is done by the functions that
-- write or delete copy records: fork_materialise_v1 indexes the turns it copies and queues the
-- chunk for a summary; fork_erase_v1, rewind_v2 and purge_range_v2 un-index what a deleted
-- record covered. The registry's session purge needs nothing: it deletes every text row,
-- summary and queue row of the session itself. Narrowing UPDATEs (rewind, range purge) never
-- fired a trigger (it fired on widening only) and need nothing either.

DROP TRIGGER fork_copy_text ON shardstore.fork_copies;
DROP TRIGGER fork_copy_text_widened ON shardstore.fork_copies;
DROP TRIGGER fork_copy_gone ON shardstore.fork_copies;
DROP FUNCTION shardstore.fork_copy_text_v1();
DROP FUNCTION shardstore.fork_copy_gone_v1();

-- Turns p_first..p_last copied into (p_session, p_chunk) are indexed for text search and the
-- chunk is queued for a summary (0019's fork_copy_text_v1, called instead of triggered).
CREATE FUNCTION shardstore.fork_copy_indexed_v1(p_session uuid, p_chunk bigint, p_start timestamptz,
                                                p_first bigint, p_last bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows_v1(shardstore.text_config_v1(), e.v->'m') w
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
       AND (e.v->>'s')::bigint BETWEEN p_first AND p_last
    ON CONFLICT DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, statement_timestamp(), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
    ON CONFLICT DO NOTHING;
END
$$;

-- A copy record of turns p_first..p_last of (p_session, p_chunk) deleted: their text rows go,
-- and the chunk's summary (it may tell of erased turns), the chunk queued again when it still
-- exists (0019's fork_copy_gone_v1, called instead of triggered).
CREATE FUNCTION shardstore.fork_copy_unindexed_v1(p_session uuid, p_chunk bigint, p_start timestamptz,
                                                  p_first bigint, p_last bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM shardstore.turn_text t
     WHERE t.session_id = p_session AND t.chunk_seq = p_chunk
       AND t.turn_seq BETWEEN p_first AND p_last;
    DELETE FROM shardstore.chunk_summaries c
     WHERE c.session_id = p_session AND c.chunk_seq = p_chunk;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
    SELECT h.session_id, h.chunk_seq, h.chunk_start, statement_timestamp(), h.tenant_id
      FROM shardstore.agent_history h
     WHERE h.session_id = p_session AND h.chunk_seq = p_chunk AND h.chunk_start = p_start
    ON CONFLICT DO NOTHING;
END
$$;

-- As in 0017, and the copied turns indexed by fork_copy_indexed_v1.
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
            PERFORM shardstore.fork_copy_indexed_v1(p_child, k.seq, v_start, v_first, v_last);
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


-- As in 0017, and a deleted copy record un-indexed by fork_copy_unindexed_v1.
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
        PERFORM shardstore.fork_copy_unindexed_v1(r.session_id, r.chunk_seq, r.chunk_start,
                                                  r.first_turn_seq, r.last_turn_seq);
        v_acc := shardstore.purge_acc_v1(v_acc, 'shardstore.fork_copies', 1, 0, 0);
    END LOOP;
    RETURN v_acc;
END
$$;


-- As in 0013, and deleted copy records un-indexed.
CREATE OR REPLACE FUNCTION shardstore.rewind_v2(p_session_id uuid, p_to bigint)
RETURNS TABLE (r_status text, r_removed bigint, r_turns bigint, r_first bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_owner uuid;
    v_chunk bigint;
    t       record;
    d       record;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    IF p_to IS NULL OR p_to < 0 OR p_to >= s.next_turn_seq THEN
        RETURN QUERY SELECT * FROM shardstore.rewind_v1(p_session_id, p_to);
        RETURN;
    END IF;
    PERFORM shardstore.fork_cow_v1(p_session_id, p_to);
    IF s.fork_parent IS NULL OR p_to > s.fork_at THEN
        RETURN QUERY SELECT * FROM shardstore.rewind_v1(p_session_id, p_to);
        FOR d IN DELETE FROM shardstore.fork_copies f
                  WHERE f.session_id = p_session_id AND f.first_turn_seq >= p_to RETURNING f.* LOOP
            PERFORM shardstore.fork_copy_unindexed_v1(d.session_id, d.chunk_seq, d.chunk_start,
                                                      d.first_turn_seq, d.last_turn_seq);
        END LOOP;
        UPDATE shardstore.fork_copies f SET last_turn_seq = p_to - 1
         WHERE f.session_id = p_session_id AND f.last_turn_seq >= p_to;
        RETURN;
    END IF;
    PERFORM shardstore.rewind_v1(p_session_id, s.fork_at + 1);
    FOR t IN SELECT * FROM shardstore.purge_targets pt
              WHERE NOT pt.builtin AND pt.turn_column IS NOT NULL
              ORDER BY pt.position, pt.table_name::text LOOP
        EXECUTE format('DELETE FROM %s x WHERE x.%I = $1 AND x.%I >= $2',
                       t.table_name, t.session_column, t.turn_column)
          USING p_session_id, p_to;
    END LOOP;
    FOR d IN DELETE FROM shardstore.fork_copies f WHERE f.session_id = p_session_id RETURNING f.* LOOP
        PERFORM shardstore.fork_copy_unindexed_v1(d.session_id, d.chunk_seq, d.chunk_start,
                                                  d.first_turn_seq, d.last_turn_seq);
    END LOOP;
    SELECT o.r_owner, o.r_chunk_seq INTO v_owner, v_chunk
      FROM shardstore.fork_chunk_of_v1(p_session_id, p_to - 1) o;
    UPDATE shardstore.sessions x
       SET fork_parent = v_owner, fork_at = CASE WHEN v_owner IS NOT NULL THEN p_to - 1 END,
           fork_chunk = v_chunk + 1, next_turn_seq = p_to, open_chunk_seq = coalesce(v_chunk + 1, 0),
           open_chunk_start = NULL, open_turns = 0, open_tokens = 0, open_bytes = 0
     WHERE x.session_id = p_session_id;
    r_status := 'ok';
    r_removed := s.next_turn_seq - p_to;
    r_turns := p_to;
    RETURN NEXT;
END
$$;


-- As in 0013, and deleted copy records un-indexed.
CREATE OR REPLACE FUNCTION shardstore.purge_range_v2(p_session_id uuid, p_before_seq bigint, p_before timestamptz,
                                          p_dry_run boolean, p_skip_parts text[], p_strict boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s     shardstore.sessions%ROWTYPE;
    v_acc jsonb;
    v_cut bigint;
    d     record;
BEGIN
    BEGIN
        SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF FOUND AND s.purged_at IS NULL THEN
            v_cut := least(coalesce(p_before_seq, shardstore.purge_cut_v1(p_session_id, p_before)),
                           s.next_turn_seq);
            IF v_cut > 0 THEN
                PERFORM shardstore.fork_cow_v1(p_session_id, NULL);
                PERFORM shardstore.fork_materialise_v1(p_session_id, NULL);
            END IF;
        END IF;
        v_acc := shardstore.purge_range_v1(p_session_id, p_before_seq, p_before, false,
                                           p_skip_parts, p_strict);
        IF v_cut IS NOT NULL THEN
            FOR d IN DELETE FROM shardstore.fork_copies f
                      WHERE f.session_id = p_session_id AND f.last_turn_seq < v_cut RETURNING f.* LOOP
                PERFORM shardstore.fork_copy_unindexed_v1(d.session_id, d.chunk_seq, d.chunk_start,
                                                          d.first_turn_seq, d.last_turn_seq);
            END LOOP;
            UPDATE shardstore.fork_copies f SET first_turn_seq = v_cut
             WHERE f.session_id = p_session_id AND f.first_turn_seq < v_cut;
        END IF;
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS298', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS298' THEN
        NULL;
    END;
    RETURN v_acc;
END
$$;


-- fork_copies can be distributed now; artifact_refs cannot yet (its statement trigger).
CREATE OR REPLACE FUNCTION shardstore.citus_kept_local_v1()
RETURNS TABLE (r_table regclass, r_reason text)
LANGUAGE sql
STABLE
AS $$
    VALUES ('shardstore.artifact_refs'::regclass,
            'its AFTER DELETE trigger artifact_refs_gone marks released artifacts the moment '
            || 'any path (unref, purges, retention, rewind, the registry) deletes refs, and the '
            || 'artifact tables it updates are coordinator tables too')
$$;
