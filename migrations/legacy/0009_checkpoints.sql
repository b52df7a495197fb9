-- 0009: checkpoints (resume after a crash), docs/architecture.md "Checkpoints".
--
-- A checkpoint is the agent's state, its pending tool calls/results and its POSITION in the
-- history (turn_seq: the last turn it includes, -1 for none), never a copy of the messages:
-- its size does not depend on the history length. restore() reads the newest checkpoint
-- and the history up to its position.
--
-- One row per checkpoint; `seq` (one sequence for all sessions) orders a session's
-- checkpoints exactly, whatever the clock does. Keys include session_id (Citus: distributed
-- by session_id); tenant_id is copied from the session so that the RLS policy needs no
-- subquery. Registered with turn_column = turn_seq: a range purge (and retention) deletes
-- the checkpoints positioned before the cut, which name purged turns; a whole-session purge
-- deletes them all.
--
-- idempotency_key is namespaced: 'c:' || key for checkpoint(..., idempotency_key=key),
-- 't:' || key for the checkpoint written by append_turn(..., idempotency_key=key,
-- checkpoint=...), so that the two never collide and a retried append finds its checkpoint.

CREATE SEQUENCE shardstore.checkpoint_seq AS bigint;

CREATE TABLE shardstore.checkpoints (
    session_id      uuid NOT NULL,
    checkpoint_id   uuid NOT NULL,
    seq             bigint NOT NULL,
    tenant_id       text NOT NULL,
    turn_seq        bigint NOT NULL CHECK (turn_seq >= -1),
    sub_step        integer CHECK (sub_step >= 0),
    parent_id       uuid,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    state           jsonb NOT NULL,
    tool_calls      jsonb,
    tool_results    jsonb,
    metadata        jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (session_id, checkpoint_id),
    UNIQUE (session_id, idempotency_key)
);

CREATE INDEX checkpoints_newest ON shardstore.checkpoints (session_id, seq DESC);

-- The next checkpoint seq. SECURITY DEFINER: tenant roles (grant_tenant_role_v2 grants
-- functions and tables, not sequences) write checkpoints too.
CREATE FUNCTION shardstore.checkpoint_next_seq_v1()
RETURNS bigint
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT nextval('shardstore.checkpoint_seq') $$;

SELECT shardstore.register_session_table_v1('shardstore.checkpoints', turn_column => 'turn_seq',
                                            tenant_column => 'tenant_id',
                                            note => 'agent checkpoints: state + position, no messages');

-- Writes a checkpoint positioned at the session's last committed turn. A key seen before
-- returns the first checkpoint (r_status 'duplicate', with its content) and stores nothing,
-- even if the content differs; an unknown parent returns r_status 'no_parent' and stores
-- nothing. SS404 / SS410 for an unknown / purged session (purge_guard_v1: a purge either
-- runs after this commits, and removes it, or is seen).
CREATE FUNCTION shardstore.checkpoint_v1(
    p_session_id    uuid,
    p_checkpoint_id uuid,
    p_key           text,
    p_state         jsonb,
    p_tool_calls    jsonb,
    p_tool_results  jsonb,
    p_sub_step      integer,
    p_parent_id     uuid,
    p_metadata      jsonb)
RETURNS TABLE (r_status text, r_checkpoint_id uuid, r_turn_seq bigint, r_sub_step integer,
               r_parent_id uuid, r_created_at timestamptz, r_state jsonb, r_tool_calls jsonb,
               r_tool_results jsonb, r_metadata jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_tenant text;
    v_turn   bigint;
    v_now    timestamptz := statement_timestamp();
    v_seq    bigint;
    v_done   bigint;
BEGIN
    PERFORM shardstore.purge_guard_v1(p_session_id);
    IF p_key IS NOT NULL THEN
        RETURN QUERY
            SELECT 'duplicate'::text, c.checkpoint_id, c.turn_seq, c.sub_step, c.parent_id,
                   c.created_at, c.state, c.tool_calls, c.tool_results, c.metadata
              FROM shardstore.checkpoints c
             WHERE c.session_id = p_session_id AND c.idempotency_key = p_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF p_parent_id IS NOT NULL THEN
        -- held until commit: keep_checkpoints cannot remove the parent meanwhile
        PERFORM 1 FROM shardstore.checkpoints c
          WHERE c.session_id = p_session_id AND c.checkpoint_id = p_parent_id FOR KEY SHARE;
        IF NOT FOUND THEN
            r_status := 'no_parent';
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    SELECT s.tenant_id, s.next_turn_seq - 1 INTO v_tenant, v_turn
      FROM shardstore.sessions s WHERE s.session_id = p_session_id;
    v_seq := shardstore.checkpoint_next_seq_v1();
    INSERT INTO shardstore.checkpoints
           (session_id, checkpoint_id, seq, tenant_id, turn_seq, sub_step, parent_id,
            idempotency_key, created_at, state, tool_calls, tool_results, metadata)
    VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, v_turn, p_sub_step, p_parent_id,
            p_key, v_now, p_state, p_tool_calls, p_tool_results, coalesce(p_metadata, '{}'))
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done = 0 THEN
        -- a concurrent call with the same key committed first
        RETURN QUERY
            SELECT 'duplicate'::text, c.checkpoint_id, c.turn_seq, c.sub_step, c.parent_id,
                   c.created_at, c.state, c.tool_calls, c.tool_results, c.metadata
              FROM shardstore.checkpoints c
             WHERE c.session_id = p_session_id AND c.idempotency_key = p_key;
        RETURN;
    END IF;
    r_status := 'created'; r_checkpoint_id := p_checkpoint_id; r_turn_seq := v_turn;
    r_created_at := v_now;
    RETURN NEXT;
END
$$;

-- An append (append_one_v1 when p_fast and it applies, else append_v1: the same rules and
-- results) and a checkpoint positioned at the last appended turn, in one statement. The
-- checkpoint's key is 't:' || the last turn's key: when that turn is a duplicate (a retry)
-- the first checkpoint's id is returned and nothing is stored (NULL if that append wrote
-- none). Every row carries the checkpoint id. As for append_one_v1, a concurrent retry may
-- fail the fast path with a unique violation; the caller then reruns with p_fast false.
CREATE FUNCTION shardstore.append_checkpoint_v1(
    p_session_id    uuid,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz,
    p_fast          boolean,
    p_checkpoint_id uuid,
    p_state         jsonb)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean, r_checkpoint_id uuid)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    text;
    v_seqs   bigint[] := '{}';
    v_chunks bigint[] := '{}';
    v_tokens integer[] := '{}';
    v_dups   boolean[] := '{}';
    v_seals  boolean[] := '{}';
    v_last   bigint;
    v_tenant text;
    v_now    timestamptz;
    v_seq    bigint;
    v_id     uuid;
    a        record;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_key := 't:' || p_keys[v_n];
    IF p_fast AND v_n = 1 THEN
        SELECT x.r_turn_seq, x.r_chunk_seq INTO a
          FROM shardstore.append_one_v1(p_session_id, p_messages -> 0, p_tokens[1], p_bytes[1],
                                        p_keys[1], p_budget_tokens, p_budget_bytes, p_interval,
                                        p_origin) x;
        IF FOUND THEN
            v_seqs := ARRAY[a.r_turn_seq]; v_chunks := ARRAY[a.r_chunk_seq];
            v_tokens := ARRAY[p_tokens[1]]; v_dups := ARRAY[false]; v_seals := ARRAY[false];
        END IF;
    END IF;
    IF cardinality(v_seqs) = 0 THEN
        FOR a IN SELECT * FROM shardstore.append_v1(p_session_id, p_messages, p_tokens, p_bytes,
                                                    p_keys, p_budget_tokens, p_budget_bytes,
                                                    p_interval, p_origin) LOOP
            v_seqs := v_seqs || a.r_turn_seq; v_chunks := v_chunks || a.r_chunk_seq;
            v_tokens := v_tokens || a.r_tokens; v_dups := v_dups || a.r_duplicate;
            v_seals := v_seals || a.r_sealed;
        END LOOP;
    END IF;
    IF v_dups[v_n] THEN
        -- a retry: the checkpoint the first append wrote, if any
        SELECT c.checkpoint_id INTO v_id FROM shardstore.checkpoints c
         WHERE c.session_id = p_session_id AND c.idempotency_key = v_key;
    ELSE
        -- the append holds the session row: no turn can come in between
        SELECT s.tenant_id, s.next_turn_seq - 1, s.last_turn_at INTO v_tenant, v_last, v_now
          FROM shardstore.sessions s WHERE s.session_id = p_session_id;
        v_seq := shardstore.checkpoint_next_seq_v1();
        INSERT INTO shardstore.checkpoints
               (session_id, checkpoint_id, seq, tenant_id, turn_seq, idempotency_key, created_at,
                state)
        VALUES (p_session_id, p_checkpoint_id, v_seq, v_tenant, v_last, v_key, v_now, p_state);
        v_id := p_checkpoint_id;
    END IF;
    FOR i IN 1 .. v_n LOOP
        r_turn_seq := v_seqs[i]; r_chunk_seq := v_chunks[i]; r_tokens := v_tokens[i];
        r_duplicate := v_dups[i]; r_sealed := v_seals[i]; r_checkpoint_id := v_id;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The newest turns up to p_upto (inclusive), NEWEST FIRST, within p_n turns and
-- p_max_tokens tokens: tail_v1 for a position that may lie before the session's end. Starts
-- at the chunk holding p_upto (the buffer, else chunk_map's last chunk starting at or
-- before it) and walks down as tail_v1 does, jumping over chunk gaps.
CREATE FUNCTION shardstore.tail_at_v1(p_session_id uuid, p_upto bigint, p_n integer,
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

-- Keeps the newest p_keep checkpoints of every session (maintain(keep_checkpoints=N)), at
-- most p_batch sessions per call; returns the sessions visited and the checkpoints deleted.
-- Call again while r_sessions = p_batch, from the session after p_after.
CREATE FUNCTION shardstore.checkpoints_keep_v1(p_keep integer, p_after uuid, p_batch integer)
RETURNS TABLE (r_sessions integer, r_deleted bigint, r_last uuid)
LANGUAGE plpgsql
AS $$
DECLARE
    v_sids uuid[];
    v_n    bigint := 0;
    v_sid  uuid;
    v_cut  bigint;
    v_del  bigint;
BEGIN
    SELECT coalesce(array_agg(x.session_id ORDER BY x.session_id), '{}') INTO v_sids
      FROM (SELECT DISTINCT c.session_id FROM shardstore.checkpoints c
             WHERE p_after IS NULL OR c.session_id > p_after
             ORDER BY c.session_id LIMIT p_batch) x;
    FOREACH v_sid IN ARRAY v_sids LOOP
        IF p_keep = 0 THEN
            v_cut := NULL;
            DELETE FROM shardstore.checkpoints c WHERE c.session_id = v_sid;
            GET DIAGNOSTICS v_del = ROW_COUNT;
            v_n := v_n + v_del;
            CONTINUE;
        END IF;
        SELECT c.seq INTO v_cut FROM shardstore.checkpoints c
         WHERE c.session_id = v_sid ORDER BY c.seq DESC OFFSET p_keep - 1 LIMIT 1;
        IF FOUND THEN
            DELETE FROM shardstore.checkpoints c WHERE c.session_id = v_sid AND c.seq < v_cut;
            GET DIAGNOSTICS v_del = ROW_COUNT;
            v_n := v_n + v_del;
        END IF;
    END LOOP;
    r_sessions := cardinality(v_sids);
    r_deleted := v_n;
    r_last := v_sids[cardinality(v_sids)];
    RETURN NEXT;
END
$$;
