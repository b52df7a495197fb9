CREATE OR REPLACE FUNCTION shardstore.rewind_turns(p_session_id uuid, p_to bigint)
 RETURNS TABLE(r_status text, r_removed bigint, r_turns bigint, r_first bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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

    -- 1. buffered turns from the cut on, first, and the folded chunks read after (as
    -- purge_rows does: a fold moving these rows is waited for, one committed before is seen)
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
           AND EXISTS (SELECT 1 FROM unnest(v_gone_seq, v_gone_start) AS ks(ks_seq, ks_start)
                        WHERE ks.ks_seq = q.chunk_seq AND ks.ks_start = q.chunk_start);
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
                    AND EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::timestamptz[]) AS ks(ks_seq, ks_start)
                                    WHERE ks.ks_seq = h.chunk_seq AND ks.ks_start = h.chunk_start)'
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
    FOR t IN SELECT d AS rel FROM shardstore.purge_detached_tables() AS d LOOP
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
                     THEN format('x.%I = ANY ($3) AND EXISTS (SELECT 1 FROM unnest($2, $3) AS ks(ks_seq, ks_start) WHERE ks.ks_seq = x.%I AND ks.ks_start = x.%I)',
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
           open_turns = v_turns, open_tokens = v_tokens, open_bytes = v_bytes,
           first_turn_seq = least(x.first_turn_seq, p_to)
     WHERE x.session_id = p_session_id;
    r_status := 'ok';
    r_removed := s.next_turn_seq - p_to;
    r_turns := p_to;
    RETURN NEXT;
END
$function$;
