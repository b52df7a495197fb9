-- Fork: a new session whose history is another session's turns 0..F, shared, not copied.
--
-- Data model. sessions gains the lineage: fork_parent (the session owning turn F, the last
-- inherited turn), fork_at (F) and fork_chunk (the first chunk_seq the fork owns; its own
-- turns start at F + 1 in chunk fork_chunk). A fork reads as one history the segments
-- fork_segments_v1 resolves: its own chunks >= fork_chunk, then the parent's chunks below
-- that with turn_seq <= fork_at, then the parent's parent's below the parent's fork_chunk
-- with turn_seq <= least(both fork points), and so on. chunk_seq and turn_seq stay unique
-- and increasing along a lineage, so tails, history and chunks read it like one session.
-- fork_parent is normalised at fork time: forking F inside an inherited prefix points at the
-- ancestor that owns F, so a fork depends only on the turns it actually reads.
--
-- Copy-on-write. A per-session change of an ancestor (rewind below a descendant's fork
-- point, purge_range of one session) first copies into each affected descendant the
-- chunks it would lose (fork_materialise_v1: the chunks of its view from the one holding
-- the cut, exact chunk boundaries, same chunk_seq and chunk_start) and lowers its fork
-- point: the descendant's history is unchanged and it no longer depends on those turns.
-- fork_copies records where copied turns came from (transitively: a copy of a copy keeps
-- the first origin too), so a GDPR purge of the origin erases the copies as well
-- (fork_erase_v1, called by purge_session_v1). Retention by age (purge_before,
-- maintain(retention=...)) removes turns by the time they were written; inherited turns
-- carry their original time and go for every session that reads them, as copies would.

ALTER TABLE shardstore.sessions
    ADD COLUMN fork_parent uuid,
    ADD COLUMN fork_at bigint,
    ADD COLUMN fork_chunk bigint;

CREATE INDEX sessions_fork_parent ON shardstore.sessions (fork_parent, fork_at)
    WHERE fork_parent IS NOT NULL;

-- Turns copied into a session by copy-on-write: (holder, chunk) -> origin session and the
-- origin's turn range in it. One row per origin (a copied chunk may hold turns its owner
-- had itself copied from further up).
CREATE TABLE shardstore.fork_copies (
    session_id        uuid NOT NULL,
    chunk_seq         bigint NOT NULL,
    origin_session_id uuid NOT NULL,
    chunk_start       timestamptz NOT NULL,
    first_turn_seq    bigint NOT NULL,
    last_turn_seq     bigint NOT NULL,
    PRIMARY KEY (session_id, chunk_seq, origin_session_id)
);
CREATE INDEX fork_copies_origin ON shardstore.fork_copies (origin_session_id);

-- session-level only: rewinds and range purges of the holder trim these rows themselves
-- (rewind_v2, purge_range_v2), so the record of a rewritten chunk's origin is not lost
SELECT shardstore.register_session_table_v1('shardstore.fork_copies',
    note => 'fork: origin of turns copied into a fork by copy-on-write (GDPR erase of copies)');

-- The segments a session's history is read from, newest first: (session, chunk_seq range
-- [lo, hi), hi NULL = unbounded, turns <= turn_hi, NULL = unbounded). A session that is not
-- a fork has one segment: itself, [0, NULL), NULL. Purged ancestors stay in the list (their
-- rows are gone, so they contribute nothing); a deleted ancestor row ends the list.
CREATE FUNCTION shardstore.fork_segments_v1(p_session_id uuid)
RETURNS TABLE (r_session_id uuid, r_chunk_lo bigint, r_chunk_hi bigint, r_turn_hi bigint,
               r_depth integer)
LANGUAGE sql
STABLE
AS $$
    WITH RECURSIVE seg(sid, lo, hi, turn_hi, parent, fork_at, fork_chunk, depth) AS (
        SELECT s.session_id, coalesce(s.fork_chunk, 0), NULL::bigint, NULL::bigint,
               s.fork_parent, s.fork_at, s.fork_chunk, 0
          FROM shardstore.sessions s WHERE s.session_id = p_session_id
        UNION ALL
        -- least() ignores NULLs: the tightest bound along the path
        SELECT p.session_id, coalesce(p.fork_chunk, 0), least(seg.hi, seg.fork_chunk),
               least(seg.turn_hi, seg.fork_at), p.fork_parent, p.fork_at, p.fork_chunk,
               seg.depth + 1
          FROM seg JOIN shardstore.sessions p ON p.session_id = seg.parent
         WHERE seg.depth < 100000)
    SELECT sid, lo, hi, turn_hi, depth FROM seg
     WHERE depth = 0 OR (lo < hi AND turn_hi >= 0)
     ORDER BY depth
$$;

-- The chunk of a session's view that holds turn p_turn, and the session owning it; no row
-- when no stored chunk holds it (a turn removed by retention or a range purge).
CREATE FUNCTION shardstore.fork_chunk_of_v1(p_session_id uuid, p_turn bigint)
RETURNS TABLE (r_owner uuid, r_chunk_seq bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    g     record;
    v_seq bigint;
BEGIN
    IF p_turn IS NULL OR p_turn < 0 THEN
        RETURN;
    END IF;
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session_id) LOOP
        CONTINUE WHEN g.r_turn_hi IS NOT NULL AND g.r_turn_hi < p_turn;
        SELECT greatest(
                   (SELECT b.chunk_seq FROM shardstore.turn_buffer b
                     WHERE b.session_id = g.r_session_id AND b.turn_seq = p_turn),
                   (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                     WHERE m.session_id = g.r_session_id AND m.first_turn_seq <= p_turn
                       AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)))
          INTO v_seq;
        IF v_seq IS NOT NULL AND v_seq >= g.r_chunk_lo
           AND (g.r_chunk_hi IS NULL OR v_seq < g.r_chunk_hi) THEN
            r_owner := g.r_session_id;
            r_chunk_seq := v_seq;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- tail_v1 / tail_at_v1 for a fork: the newest turns up to p_upto (NULL: the end), NEWEST
-- FIRST, within p_n turns and p_max_tokens tokens, walking each segment's chunks down as
-- tail_v1 does (buffered turns before folded ones, exact partition keys, gap jumps), with
-- the segment's turn bound. One STABLE call: one snapshot, one round trip.
CREATE FUNCTION shardstore.fork_tail_v1(p_session_id uuid, p_upto bigint, p_n integer,
                                        p_max_tokens bigint)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamptz,
               r_key text, r_message jsonb)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    g        record;
    v_bound  bigint;
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean;
    t        record;
BEGIN
    FOR g IN SELECT * FROM shardstore.fork_segments_v1(p_session_id) LOOP
        v_bound := least(g.r_turn_hi, p_upto);
        CONTINUE WHEN v_bound IS NOT NULL AND v_bound < 0;
        IF v_bound IS NULL THEN
            SELECT s.open_chunk_seq INTO v_seq FROM shardstore.sessions s
             WHERE s.session_id = g.r_session_id;
        ELSE
            SELECT greatest(
                       (SELECT b.chunk_seq FROM shardstore.turn_buffer b
                         WHERE b.session_id = g.r_session_id AND b.turn_seq = v_bound),
                       (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = g.r_session_id AND m.first_turn_seq <= v_bound
                           AND (g.r_chunk_hi IS NULL OR m.chunk_seq < g.r_chunk_hi)))
              INTO v_seq;
        END IF;
        IF g.r_chunk_hi IS NOT NULL THEN
            v_seq := least(v_seq, g.r_chunk_hi - 1);
        END IF;
        v_hit := false;
        WHILE v_seq IS NOT NULL AND v_seq >= g.r_chunk_lo LOOP
            FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                       FROM shardstore.turn_buffer b
                      WHERE b.session_id = g.r_session_id AND b.chunk_seq = v_seq
                        AND (v_bound IS NULL OR b.turn_seq <= v_bound)
                      ORDER BY b.turn_seq DESC LOOP
                IF (p_n IS NOT NULL AND v_count >= p_n)
                   OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                    RETURN;
                END IF;
                r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
                r_created_at := t.created_at; r_key := t.key; r_message := t.message;
                RETURN NEXT;
                v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
                v_hit := true;
            END LOOP;
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = g.r_session_id AND m.chunk_seq = v_seq;
            IF NOT FOUND AND NOT v_hit THEN
                SELECT greatest(
                           (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                             WHERE m.session_id = g.r_session_id AND m.chunk_seq < v_seq),
                           (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                             WHERE b.session_id = g.r_session_id AND b.chunk_seq < v_seq))
                  INTO v_seq;
                CONTINUE;
            END IF;
            v_hit := false;
            IF FOUND THEN
                FOR t IN EXECUTE
                    'SELECT (e->>''s'')::bigint AS turn_seq, (e->>''t'')::integer AS tokens,
                            (e->>''at'')::timestamptz AS created_at, e->>''k'' AS key, e->''m'' AS message
                       FROM shardstore.agent_history h,
                            jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                      WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                      ORDER BY x.ord DESC'
                    USING g.r_session_id, v_seq, v_start LOOP
                    CONTINUE WHEN v_bound IS NOT NULL AND t.turn_seq > v_bound;
                    IF (p_n IS NOT NULL AND v_count >= p_n)
                       OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                        RETURN;
                    END IF;
                    r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
                    r_created_at := t.created_at; r_key := t.key; r_message := t.message;
                    RETURN NEXT;
                    v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
                END LOOP;
            END IF;
            v_seq := v_seq - 1;
        END LOOP;
    END LOOP;
END
$$;

-- As in 0001, and a fork's tail is fork_tail_v1 (a session that is not a fork reads as before).
CREATE OR REPLACE FUNCTION shardstore.tail_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamptz,
               r_key text, r_message jsonb)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean := false;
    t        record;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    IF s.fork_parent IS NOT NULL THEN
        RETURN QUERY SELECT * FROM shardstore.fork_tail_v1(p_session_id, NULL, p_n, p_max_tokens);
        RETURN;
    END IF;
    v_seq := s.open_chunk_seq;
    WHILE v_seq >= 0 LOOP
        FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq = v_seq
                  ORDER BY b.turn_seq DESC LOOP
            IF (p_n IS NOT NULL AND v_count >= p_n)
               OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                RETURN;
            END IF;
            r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
            r_created_at := t.created_at; r_key := t.key; r_message := t.message;
            RETURN NEXT;
            v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            v_hit := true;
        END LOOP;
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = v_seq;
        IF NOT FOUND AND NOT v_hit THEN
            -- a gap (chunks removed by a range purge or retention): jump to the next
            -- chunk that still exists, or stop
            SELECT greatest(
                       (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.chunk_seq < v_seq),
                       (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                         WHERE b.session_id = p_session_id AND b.chunk_seq < v_seq))
              INTO v_seq;
            EXIT WHEN v_seq IS NULL;
            CONTINUE;
        END IF;
        v_hit := false;
        IF FOUND THEN
            -- EXECUTE plans with the values known, so the scan prunes to one partition
            FOR t IN EXECUTE
                'SELECT (e->>''s'')::bigint AS turn_seq, (e->>''t'')::integer AS tokens,
                        (e->>''at'')::timestamptz AS created_at, e->>''k'' AS key, e->''m'' AS message
                   FROM shardstore.agent_history h,
                        jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                  ORDER BY x.ord DESC'
                USING p_session_id, v_seq, v_start LOOP
                IF (p_n IS NOT NULL AND v_count >= p_n)
                   OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                    RETURN;
                END IF;
                r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
                r_created_at := t.created_at; r_key := t.key; r_message := t.message;
                RETURN NEXT;
                v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            END LOOP;
        END IF;
        v_seq := v_seq - 1;
    END LOOP;
END
$$;

-- As in 0009, and a fork's is fork_tail_v1.
CREATE OR REPLACE FUNCTION shardstore.tail_at_v1(p_session_id uuid, p_upto bigint, p_n integer,
                                      p_max_tokens bigint)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_created_at timestamptz,
               r_key text, r_message jsonb)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_count  integer := 0;
    v_tokens bigint := 0;
    v_seq    bigint;
    v_start  timestamptz;
    v_hit    boolean := false;
    t        record;
BEGIN
    PERFORM 1 FROM shardstore.sessions s WHERE s.session_id = p_session_id AND s.purged_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF p_upto < 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM shardstore.sessions s
                WHERE s.session_id = p_session_id AND s.fork_parent IS NOT NULL) THEN
        RETURN QUERY SELECT * FROM shardstore.fork_tail_v1(p_session_id, p_upto, p_n, p_max_tokens);
        RETURN;
    END IF;
    SELECT greatest(
               (SELECT b.chunk_seq FROM shardstore.turn_buffer b
                 WHERE b.session_id = p_session_id AND b.turn_seq = p_upto),
               (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                 WHERE m.session_id = p_session_id AND m.first_turn_seq <= p_upto))
      INTO v_seq;
    WHILE v_seq IS NOT NULL AND v_seq >= 0 LOOP
        FOR t IN SELECT b.turn_seq, b.tokens, b.created_at, b.idempotency_key AS key, b.message
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq = v_seq AND b.turn_seq <= p_upto
                  ORDER BY b.turn_seq DESC LOOP
            IF (p_n IS NOT NULL AND v_count >= p_n)
               OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                RETURN;
            END IF;
            r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
            r_created_at := t.created_at; r_key := t.key; r_message := t.message;
            RETURN NEXT;
            v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            v_hit := true;
        END LOOP;
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = v_seq;
        IF NOT FOUND AND NOT v_hit THEN
            SELECT greatest(
                       (SELECT max(m.chunk_seq) FROM shardstore.chunk_map m
                         WHERE m.session_id = p_session_id AND m.chunk_seq < v_seq),
                       (SELECT max(b.chunk_seq) FROM shardstore.turn_buffer b
                         WHERE b.session_id = p_session_id AND b.chunk_seq < v_seq))
              INTO v_seq;
            CONTINUE;
        END IF;
        v_hit := false;
        IF FOUND THEN
            FOR t IN EXECUTE
                'SELECT (e->>''s'')::bigint AS turn_seq, (e->>''t'')::integer AS tokens,
                        (e->>''at'')::timestamptz AS created_at, e->>''k'' AS key, e->''m'' AS message
                   FROM shardstore.agent_history h,
                        jsonb_array_elements(h.conversation_chunk) WITH ORDINALITY AS x(e, ord)
                  WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3
                  ORDER BY x.ord DESC'
                USING p_session_id, v_seq, v_start LOOP
                CONTINUE WHEN t.turn_seq > p_upto;
                IF (p_n IS NOT NULL AND v_count >= p_n)
                   OR (p_max_tokens IS NOT NULL AND v_tokens + t.tokens > p_max_tokens) THEN
                    RETURN;
                END IF;
                r_turn_seq := t.turn_seq; r_chunk_seq := v_seq; r_tokens := t.tokens;
                r_created_at := t.created_at; r_key := t.key; r_message := t.message;
                RETURN NEXT;
                v_count := v_count + 1; v_tokens := v_tokens + t.tokens;
            END LOOP;
        END IF;
        v_seq := v_seq - 1;
    END LOOP;
END
$$;

-- Creates a fork of p_source at turn p_at (NULL: its last turn now; -1: nothing inherited)
-- or at checkpoint p_checkpoint's position, as session p_new with the source's owners and
-- p_metadata. O(1) in the history length: one session row; the lineage is read at read
-- time. The source row is held FOR SHARE, so a rewind, purge or append of the source waits
-- for the fork or is seen by it. Returns a status instead of raising (the client raises
-- the typed error; nothing is written): ok, not_found, purged, no_checkpoint, below,
-- past_end, exists. r_turns: the source's turn count.
CREATE FUNCTION shardstore.fork_v1(p_source uuid, p_at bigint, p_checkpoint uuid, p_new uuid,
                                   p_metadata jsonb)
RETURNS TABLE (r_status text, r_at bigint, r_turns bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_at    bigint;
    v_owner uuid;
    v_chunk bigint;
    v_n     integer;
BEGIN
    SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_source FOR SHARE;
    IF NOT FOUND THEN
        r_status := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    r_turns := s.next_turn_seq;
    IF s.purged_at IS NOT NULL THEN
        r_status := 'purged';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_checkpoint IS NOT NULL THEN
        SELECT c.turn_seq INTO v_at FROM shardstore.checkpoints c
         WHERE c.session_id = p_source AND c.checkpoint_id = p_checkpoint;
        IF NOT FOUND THEN
            r_status := 'no_checkpoint';
            RETURN NEXT;
            RETURN;
        END IF;
    ELSE
        v_at := coalesce(p_at, s.next_turn_seq - 1);
    END IF;
    r_at := v_at;
    IF v_at < -1 THEN
        r_status := 'below';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_at >= s.next_turn_seq THEN
        r_status := 'past_end';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT o.r_owner, o.r_chunk_seq INTO v_owner, v_chunk
      FROM shardstore.fork_chunk_of_v1(p_source, v_at) o;
    INSERT INTO shardstore.sessions AS x
           (session_id, tenant_id, subject_id, agent_id, metadata, next_turn_seq, open_chunk_seq,
            last_turn_at, fork_parent, fork_at, fork_chunk)
    VALUES (p_new, s.tenant_id, s.subject_id, s.agent_id, p_metadata, v_at + 1,
            coalesce(v_chunk + 1, 0), s.last_turn_at, v_owner,
            CASE WHEN v_owner IS NOT NULL THEN v_at END, v_chunk + 1)
    ON CONFLICT (session_id) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    r_status := CASE WHEN v_n = 1 THEN 'ok' ELSE 'exists' END;
    RETURN NEXT;
END
$$;

-- Copy-on-write: copies into fork p_child the chunks of its view from the one holding turn
-- p_from on (NULL: all of them) that it inherits, with their chunk_seq, chunk_start and
-- envelopes (turns past its inherited bound left out), records their origins in
-- fork_copies, and lowers its fork point to just before them: its history is unchanged and
-- no longer reads those turns from its ancestors. A fork point that reaches -1, or a copy
-- of everything, leaves it a plain session. The copied chunks are queued for embedding by
-- the agent_history trigger (the fork gets its own vectors). Buffered turns are locked
-- before they are read, so a concurrent fold moves them before or after, never during.
-- Returns the number of chunks copied.
CREATE FUNCTION shardstore.fork_materialise_v1(p_child uuid, p_from bigint)
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
                    token_count, byte_count, conversation_chunk)
            VALUES (p_child, k.seq, v_start, v_end, v_first, v_n, v_tok, v_bytes, v_env);
            INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq)
            VALUES (p_child, k.seq, v_start, v_first);
            -- origins: the owner, and whatever the owner had copied into this chunk itself
            INSERT INTO shardstore.fork_copies AS f
                   (session_id, chunk_seq, origin_session_id, chunk_start, first_turn_seq, last_turn_seq)
            SELECT p_child, k.seq, o.origin, v_start, o.lo, o.hi
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

-- Copy-on-write for every live fork of p_session that reads its turns from p_from on
-- (NULL: every fork of it), before p_session changes them. Forks in session id order.
CREATE FUNCTION shardstore.fork_cow_v1(p_session_id uuid, p_from bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    d        record;
    v_copied bigint := 0;
BEGIN
    FOR d IN SELECT x.session_id FROM shardstore.sessions x
              WHERE x.fork_parent = p_session_id AND x.purged_at IS NULL
                AND (p_from IS NULL OR x.fork_at >= p_from)
              ORDER BY x.session_id LOOP
        v_copied := v_copied + shardstore.fork_materialise_v1(d.session_id, p_from);
    END LOOP;
    RETURN v_copied;
END
$$;

-- GDPR erase of copies: removes the turns that copy-on-write copied out of p_origin from
-- every session holding them (the chunk rewritten without them, or deleted when nothing
-- else is left; its vectors deleted, a rewritten chunk queued again; the holder's open
-- chunk counters recomputed when it is that chunk). Views need no erase: they read the
-- origin's own rows, which the purge deletes. Returns p_acc with the counts added.
CREATE FUNCTION shardstore.fork_erase_v1(p_origin uuid, p_acc jsonb)
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

-- rewind_v1 for a lineage: forks reading the turns from p_to on get their copies first
-- (fork_cow_v1); a fork rewound below its own fork point drops its own turns and inherits
-- less (as if forked at p_to - 1: the next append opens a new chunk); otherwise rewind_v1,
-- and the origin records of the removed copied turns go. Same result columns as rewind_v1.
CREATE FUNCTION shardstore.rewind_v2(p_session_id uuid, p_to bigint)
RETURNS TABLE (r_status text, r_removed bigint, r_turns bigint, r_first bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_owner uuid;
    v_chunk bigint;
    t       record;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    IF p_to IS NULL OR p_to < 0 OR p_to >= s.next_turn_seq THEN
        RETURN QUERY SELECT * FROM shardstore.rewind_v1(p_session_id, p_to);
        RETURN;
    END IF;
    PERFORM shardstore.fork_cow_v1(p_session_id, p_to);
    IF s.fork_parent IS NULL OR p_to > s.fork_at THEN
        RETURN QUERY SELECT * FROM shardstore.rewind_v1(p_session_id, p_to);
        DELETE FROM shardstore.fork_copies f WHERE f.session_id = p_session_id AND f.first_turn_seq >= p_to;
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
    DELETE FROM shardstore.fork_copies f WHERE f.session_id = p_session_id;
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

-- purge_range_v1 for one session (purge_range()): its forks keep their histories (their
-- inherited turns are copied into them first), and a fork range-purged lets go of
-- inherited turns by taking them over first, so the cut removes them from it alone. The
-- batched retention path (purge_before) still calls purge_range_v1: age applies to every
-- session that reads a turn. Dry run: everything, copies included, is rolled back.
CREATE FUNCTION shardstore.purge_range_v2(p_session_id uuid, p_before_seq bigint, p_before timestamptz,
                                          p_dry_run boolean, p_skip_parts text[], p_strict boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s     shardstore.sessions%ROWTYPE;
    v_acc jsonb;
    v_cut bigint;
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
            DELETE FROM shardstore.fork_copies f WHERE f.session_id = p_session_id AND f.last_turn_seq < v_cut;
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

-- As in 0002, and the turns copied out of this session into forks are erased too
-- (fork_erase_v1): a GDPR purge leaves the erased text readable through no fork.
CREATE OR REPLACE FUNCTION shardstore.purge_session_v1(p_session_id uuid, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s         record;
    v_acc     jsonb;
    v_cleared bigint;
BEGIN
    BEGIN
        SELECT x.purged_at, x.subject_id, x.agent_id, x.metadata INTO s
          FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
        END IF;
        v_cleared := coalesce(pg_column_size(s.subject_id), 0) + coalesce(pg_column_size(s.agent_id), 0)
                   + CASE WHEN s.metadata = '{}' THEN 0 ELSE pg_column_size(s.metadata) END;
        UPDATE shardstore.sessions x
           SET purged_at = coalesce(x.purged_at, clock_timestamp()),
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
