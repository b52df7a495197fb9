-- 0011: rewind (docs/architecture.md "Rewind"): remove a session's turns from a turn_seq
-- on (retry / edit the last message), atomically, in one statement.
--
-- The head rule. After a rewind to turn N the session looks exactly as if only turns
-- 0..N-1 had ever been appended: next_turn_seq = N, and the chunk holding turn N-1 is the
-- open chunk again, with its turn count, tokens and bytes recomputed (a chunk that was
-- sealed or folded is reopened; later appends seal it again by the usual rules if the next
-- turn does not fit, or if it started in another partition's range, so a chunk never spans
-- partitions). chunk_seq stays gap-free: the next chunk is that chunk's seq + 1. The chunk
-- holding the cut, if folded, is rewritten keeping the turns before the cut; chunks after it
-- are deleted. Folds into a reopened chunk go through fold_v1's ON CONFLICT || upsert
-- (fold_sealed_v1 and flush_v1 take its start from chunk_map), as after a flush().
--
-- Reopening needs each kept turn's byte count, and agent_history kept only per-chunk
-- totals. So fold_v1 now writes it into the envelope as "b" (a few bytes per turn);
-- envelopes folded before this migration have none, and a rewind counts their message's
-- jsonb text instead (an estimate: the byte cap then applies to that estimate).
--
-- Concurrency (as for a range purge, 0002): the session row is locked first (appends,
-- flushes, purges, checkpoint and fact writers wait); the buffer rows of removed turns are
-- deleted before chunk_map is read, so a background fold that moved them is seen and one
-- that comes later moves nothing; the kept buffer rows of the new open chunk are locked
-- before agent_history is touched, so no fold changes that chunk while its counters are
-- computed (and a fold holding them finishes first, without waiting for this function).
-- Embedding: the queue rows of changed chunks are deleted before the chunks change (waiting
-- for a worker that holds them to finish its batch, so that no worker embeds the old text
-- and stores it afterwards); the rewrite's UPDATE queues the rewritten chunk again (trigger
-- vec_enqueue_changed); its vectors and those of deleted chunks are deleted after that.

-- As in 0001, and each envelope carries the turn's byte count ("b").
CREATE OR REPLACE FUNCTION shardstore.fold_v1(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_moved integer;
    v_first bigint;
BEGIN
    PERFORM shardstore.ensure_partition_v1(p_chunk_start);
    WITH moved AS (
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = p_session_id AND b.chunk_seq = p_chunk_seq
        RETURNING b.*
    ), folded AS (
        INSERT INTO shardstore.agent_history AS h
               (session_id, chunk_seq, chunk_start, chunk_end, first_turn_seq, turn_count,
                token_count, byte_count, conversation_chunk)
        SELECT p_session_id, p_chunk_seq, p_chunk_start, max(m.created_at), min(m.turn_seq),
               count(*), sum(m.tokens), sum(m.bytes),
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
        RETURNING h.turn_count, h.first_turn_seq
    )
    SELECT f.turn_count, f.first_turn_seq INTO v_moved, v_first FROM folded f;
    IF v_moved IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_first)
    ON CONFLICT (session_id, chunk_seq) DO NOTHING;
    RETURN v_moved;
END
$$;

-- Removes the turns p_to.. of a session and everything derived from them: buffered turns,
-- chunks after the cut (with chunk_map rows, queue rows and vectors), the folded part of
-- the chunk holding the cut (rewritten without them, its vectors deleted and the chunk
-- queued again), their idempotency keys (released: a retry with one stores a new turn),
-- rows of registered turn-level tables with a turn >= p_to (checkpoints positioned after the
-- cut, fact versions sourced at a removed turn) and of registered chunk-level tables for the
-- deleted or rewritten chunks; then resets the head (the rule at the top of this file).
-- r_status: 'ok' (r_removed turns removed, 0 when p_to is the turn count), 'past_end' or
-- 'negative' (nothing written), or 'purged_below' (p_to is below the first turn a range
-- purge kept; r_first is that turn; nothing written). r_turns: the turn count after.
-- SS404 / SS410 for an unknown / purged session.
CREATE FUNCTION shardstore.rewind_v1(p_session_id uuid, p_to bigint)
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
