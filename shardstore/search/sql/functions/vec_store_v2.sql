-- Stores the vectors of units claimed by vec_claim_v2; r_stored counts the units stored,
-- r_left those left for a later claim. A queued chunk ('q') that is gone leaves the queue; one
-- that changed since the claim, is held by a writer (FOR SHARE SKIP LOCKED), belongs to a
-- purged session or to another worker's embedding (vec_session_lock, tried) is left; else its
-- vectors written under an earlier start in the same partition move to its start, the new
-- windows are written and its queue row deleted. Buffered turns ('b'): the session row held FOR
-- KEY SHARE SKIP LOCKED (rewinds and purges kept out), the embedding lock tried, each turn's
-- buffer row held FOR KEY SHARE SKIP LOCKED or found folded into the same chunk; a turn a fold
-- or retention holds leaves the unit for later. Turns already stored are skipped. Then each
-- 'b' session's watermark moves up to r_mark once no buffered turn below it lacks a vector.
-- Never waits for a row lock. One INSERT ... VALUES per window, in a loop: Citus routes each
-- to the session's shard, while it ran the set-based INSERT ... SELECT FROM unnest through the
-- coordinator as a COPY, which it refuses under row-level security.
CREATE OR REPLACE FUNCTION shardstore.vec_store_v2(u_kind text[], u_session uuid[], u_chunk bigint[], u_start timestamp with time zone[], u_first bigint[], u_count integer[], u_mark bigint[], w_unit integer[], w_turn bigint[], w_at timestamp with time zone[], w_vec text[], OUT r_stored integer, OUT r_left integer)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    i          integer;
    v_ok       boolean;
    v_n        integer;
    v_next     integer;
    v_turns    bigint[];
    v_found    boolean;
    v_in       boolean;
    v_floor    timestamptz;
    v_interval interval;
    v_origin   timestamptz;
    v_upto     bigint;
    v_pending  bigint;
    s          record;
    t          record;
    m          record;
    v_msid     uuid[] := '{}';      -- sessions of 'b' units stored, and their marks
    v_mupto    bigint[] := '{}';
    v_mtenant  text[] := '{}';
    v_have     bigint[];
    wr         record;
BEGIN
    r_stored := 0;
    r_left := 0;
    SELECT x.partition_interval, x.partition_origin INTO v_interval, v_origin FROM shardstore.config x;
    FOR i IN 1 .. coalesce(cardinality(u_kind), 0) LOOP
        IF u_kind[i] = 'q' THEN
            v_found := EXISTS (SELECT 1 FROM shardstore.agent_history h
                                WHERE h.session_id = u_session[i] AND h.chunk_seq = u_chunk[i]
                                  AND h.chunk_start = u_start[i]);
            IF NOT v_found THEN
                DELETE FROM shardstore.embed_queue q
                 WHERE q.session_id = u_session[i] AND q.chunk_seq = u_chunk[i]
                   AND q.chunk_start = u_start[i];
                CONTINUE;
            END IF;
            v_ok := NULL;
            SELECT true INTO v_ok FROM shardstore.agent_history h
             WHERE h.session_id = u_session[i] AND h.chunk_seq = u_chunk[i] AND h.chunk_start = u_start[i]
               AND h.first_turn_seq = u_first[i] AND h.turn_count = u_count[i]
               FOR SHARE SKIP LOCKED;
            SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
             WHERE x.session_id = u_session[i] AND x.purged_at IS NULL;
            IF v_ok IS NOT TRUE OR NOT FOUND OR NOT shardstore.vec_session_lock(u_session[i]) THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            -- windows written while the chunk was buffered under an earlier start (same
            -- partition: a chunk never spans one) move to the chunk's start, renumbered
            v_floor := date_bin(v_interval, u_start[i], v_origin);
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start <= u_start[i];
            -- copied, then deleted: an UPDATE of chunk_start (the vectors' partition key)
            -- crashed the Citus 14.0.1 coordinator (signal 11) on a distributed table
            INSERT INTO shardstore.chunk_vectors
                   (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                    first_turn_seq, last_turn_seq, first_at, last_at, embedding)
            SELECT v.session_id, v.chunk_seq, u_start[i], v.window_no + v_next, v.tenant_id,
                   v.agent_id, v.first_turn_seq, v.last_turn_seq, v.first_at, v.last_at,
                   v.embedding
              FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start < u_start[i];
            DELETE FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i]
               AND v.chunk_start >= v_floor AND v.chunk_start < u_start[i];
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i] AND v.chunk_start = u_start[i];
            SELECT array_agg(DISTINCT w.t) INTO v_turns
              FROM unnest(w_unit, w_turn) AS w(idx, t) WHERE w.idx = i;
        ELSE
            SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
             WHERE x.session_id = u_session[i] AND x.purged_at IS NULL
               FOR KEY SHARE SKIP LOCKED;
            IF NOT FOUND OR NOT shardstore.vec_session_lock(u_session[i]) THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            v_turns := '{}';
            v_ok := true;
            FOR t IN SELECT DISTINCT w.t, w.at FROM unnest(w_unit, w_turn, w_at) AS w(idx, t, at)
                      WHERE w.idx = i LOOP
                PERFORM 1 FROM shardstore.turn_buffer b
                  WHERE b.session_id = u_session[i] AND b.turn_seq = t.t AND b.chunk_seq = u_chunk[i]
                    AND b.created_at = t.at
                    FOR KEY SHARE SKIP LOCKED;
                IF FOUND THEN
                    v_turns := v_turns || t.t;
                    CONTINUE;
                END IF;
                IF EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                            WHERE b.session_id = u_session[i] AND b.turn_seq = t.t
                              AND b.chunk_seq = u_chunk[i] AND b.created_at = t.at) THEN
                    v_ok := false;  -- a fold or retention holds it: a later batch decides
                    CONTINUE;
                END IF;
                EXECUTE 'SELECT EXISTS (SELECT 1 FROM shardstore.agent_history h,
                                               jsonb_array_elements(h.conversation_chunk) AS e(v)
                                         WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                                           AND (e.v->>''s'')::bigint = $4 AND (e.v->>''at'')::timestamptz = $5)'
                   INTO v_in USING u_session[i], u_chunk[i], u_start[i], t.t, t.at;
                IF v_in THEN
                    v_turns := v_turns || t.t;  -- folded meanwhile: same turn, same chunk
                END IF;
            END LOOP;
            IF NOT v_ok THEN
                r_left := r_left + 1;
                CONTINUE;
            END IF;
            IF NOT u_session[i] = ANY (v_msid) THEN
                v_msid := v_msid || u_session[i];
                v_mupto := v_mupto || u_mark[i];
                v_mtenant := v_mtenant || s.tenant_id;
            END IF;
            CONTINUE WHEN u_chunk[i] IS NULL;  -- a watermark only
            SELECT coalesce(max(v.window_no), -1) + 1 INTO v_next FROM shardstore.chunk_vectors v
             WHERE v.session_id = u_session[i] AND v.chunk_seq = u_chunk[i] AND v.chunk_start = u_start[i];
        END IF;
        -- one INSERT ... VALUES per window (Citus routes each to the session's shard; the
        -- set-based INSERT ... SELECT FROM unnest went through the coordinator as a COPY,
        -- refused under row-level security); turns already stored are read once, before
        -- (the set-based form's snapshot: several windows of one turn are all written)
        SELECT coalesce(array_agg(x.first_turn_seq), '{}') INTO v_have
          FROM shardstore.chunk_vectors x
         WHERE x.session_id = u_session[i] AND x.chunk_seq = u_chunk[i]
           AND x.chunk_start = u_start[i] AND x.first_turn_seq = ANY (v_turns);
        v_n := 0;
        FOR wr IN SELECT w.t, w.at, w.v
                    FROM unnest(w_unit, w_turn, w_at, w_vec) WITH ORDINALITY AS w(idx, t, at, v, ord)
                   WHERE w.idx = i AND w.t = ANY (v_turns) AND NOT w.t = ANY (v_have)
                   ORDER BY w.ord LOOP
            INSERT INTO shardstore.chunk_vectors
                   (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                    first_turn_seq, last_turn_seq, first_at, last_at, embedding)
            VALUES (u_session[i], u_chunk[i], u_start[i], v_next + v_n, s.tenant_id, s.agent_id,
                    wr.t, wr.t, wr.at, wr.at, wr.v::halfvec);
            v_n := v_n + 1;
        END LOOP;
        IF u_kind[i] = 'q' THEN
            DELETE FROM shardstore.embed_queue q
             WHERE q.session_id = u_session[i] AND q.chunk_seq = u_chunk[i] AND q.chunk_start = u_start[i];
            r_stored := r_stored + 1;
        ELSIF v_n > 0 THEN
            r_stored := r_stored + 1;
        END IF;
    END LOOP;
    -- watermarks: exact now (the session's KEY SHARE lock keeps rewinds and purges out)
    FOR i IN 1 .. cardinality(v_msid) LOOP
        SELECT x.upto INTO v_upto FROM shardstore.embed_marks x WHERE x.session_id = v_msid[i];
        CONTINUE WHEN v_upto IS NOT NULL AND v_upto >= v_mupto[i];
        SELECT count(*) INTO v_pending
          FROM shardstore.vec_buffered_turns(v_msid[i], coalesce(v_upto, 0), v_mupto[i]);
        CONTINUE WHEN v_pending > 0;
        INSERT INTO shardstore.embed_marks AS x (session_id, tenant_id, upto, marked_at)
        VALUES (v_msid[i], v_mtenant[i], v_mupto[i], statement_timestamp())
        ON CONFLICT (session_id) DO UPDATE
           SET upto = greatest(x.upto, EXCLUDED.upto), marked_at = EXCLUDED.marked_at;
    END LOOP;
END
$function$;
