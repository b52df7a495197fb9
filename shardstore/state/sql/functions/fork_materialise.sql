-- Copies into fork p_child the chunks it reads from its ancestors (all of them, or with p_from
-- those from the chunk holding turn p_from on), so that the ancestors may change. Locks the
-- child's row FOR UPDATE; 0 when it is missing, not a fork, or p_from lies past its fork
-- point. Nearest ancestor first (fork_segments_v1), each chunk in range is built from its
-- folded envelopes and buffered turns up to the inherited bound, the buffered rows held FOR
-- SHARE so that no fold moves them meanwhile, and written as the child's own chunk
-- (agent_history, chunk_map, embed queue), with a copy record per origin (the owner, and what
-- the owner had copied into that chunk itself) and the copied turns indexed
-- (fork_copy_indexed). Then the child's fork link moves down: cleared when the copy started
-- at chunk 0 (p_from NULL or 0, or no stored chunk holds it) or nothing inherited is left,
-- else set to the owner of the new last inherited turn. Returns the number of chunks copied.
CREATE OR REPLACE FUNCTION shardstore.fork_materialise(p_child uuid, p_from bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
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
    v_own_lo  bigint;  -- the owner's first own turn in a chunk copied from it
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
            -- origins: whatever the owner had copied into this chunk itself, and the owner
            -- for the rest; copies hold an ancestor's turns, which precede the owner's own, so
            -- the owner's turns are those above the highest copied one (a purge of the owner
            -- takes its own turns out of this copy, never what it held for another session)
            SELECT max(y.last_turn_seq) + 1 INTO v_own_lo
              FROM shardstore.fork_copies y
             WHERE y.session_id = g.r_session_id AND y.chunk_seq = k.seq
               AND y.first_turn_seq <= v_last AND y.last_turn_seq >= v_first;
            v_own_lo := greatest(v_first, coalesce(v_own_lo, v_first));
            INSERT INTO shardstore.fork_copies AS f
                   (session_id, chunk_seq, origin_session_id, chunk_start, first_turn_seq, last_turn_seq,
                    tenant_id)
            SELECT p_child, k.seq, o.origin, v_start, o.lo, o.hi, c.tenant_id
              FROM (SELECT g.r_session_id AS origin, v_own_lo AS lo, v_last AS hi
                     WHERE v_own_lo <= v_last
                    UNION ALL
                    SELECT y.origin_session_id, greatest(y.first_turn_seq, v_first),
                           least(y.last_turn_seq, v_last)
                      FROM shardstore.fork_copies y
                     WHERE y.session_id = g.r_session_id AND y.chunk_seq = k.seq
                       AND y.first_turn_seq <= v_last AND y.last_turn_seq >= v_first) o
            ON CONFLICT (session_id, chunk_seq, origin_session_id) DO UPDATE
               SET first_turn_seq = least(f.first_turn_seq, EXCLUDED.first_turn_seq),
                   last_turn_seq = greatest(f.last_turn_seq, EXCLUDED.last_turn_seq);
            PERFORM shardstore.fork_copy_indexed(p_child, k.seq, v_start, v_first, v_last);
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
$function$;
