-- shardstore schema, version 1: sessions, the write buffer, chunked history partitioned by
-- chunk start time, and the versioned functions that keep appends atomic.

CREATE TABLE shardstore.config (
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partition_interval interval NOT NULL CHECK (partition_interval >= interval '1 second'),
    -- a Monday, so that weekly partitions start on Mondays
    partition_origin   timestamptz NOT NULL DEFAULT '2001-01-01 00:00:00+00',
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- One row per conversation; it also holds the write head, so an append locks exactly this
-- row. Frequent small updates: leave room for HOT updates.
CREATE TABLE shardstore.sessions (
    session_id       uuid PRIMARY KEY,
    tenant_id        text NOT NULL,
    subject_id       text,
    agent_id         text,
    metadata         jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at        timestamptz,
    purged_at        timestamptz,
    next_turn_seq    bigint NOT NULL DEFAULT 0,
    open_chunk_seq   bigint NOT NULL DEFAULT 0,
    open_chunk_start timestamptz,
    open_turns       integer NOT NULL DEFAULT 0,
    open_tokens      bigint NOT NULL DEFAULT 0,
    open_bytes       bigint NOT NULL DEFAULT 0,
    last_turn_at     timestamptz
) WITH (fillfactor = 70);

CREATE INDEX sessions_tenant_subject ON shardstore.sessions (tenant_id, subject_id);

-- Sealed and partly folded chunks. Partitioned by the chunk's start time so that a long
-- session spreads over partitions as it ages and retention can drop whole partitions.
CREATE TABLE shardstore.agent_history (
    session_id         uuid NOT NULL,
    chunk_seq          bigint NOT NULL,
    chunk_start        timestamptz NOT NULL,
    chunk_end          timestamptz NOT NULL,
    first_turn_seq     bigint NOT NULL,
    turn_count         integer NOT NULL,
    token_count        bigint NOT NULL,
    byte_count         bigint NOT NULL,
    -- array of turn envelopes {"s": turn_seq, "t": tokens, "at": created_at, "k": key?, "m": message}
    conversation_chunk jsonb NOT NULL,
    PRIMARY KEY (session_id, chunk_seq, chunk_start)
) PARTITION BY RANGE (chunk_start);

-- Where each chunk lives: lets session reads name the exact partition key, so they prune
-- to one partition at plan time however many partitions exist.
CREATE TABLE shardstore.chunk_map (
    session_id     uuid NOT NULL,
    chunk_seq      bigint NOT NULL,
    chunk_start    timestamptz NOT NULL,
    first_turn_seq bigint NOT NULL,
    PRIMARY KEY (session_id, chunk_seq)
);

-- Turns of each session's open chunk, one row each, until folded into agent_history.
CREATE TABLE shardstore.turn_buffer (
    session_id      uuid NOT NULL,
    turn_seq        bigint NOT NULL,
    chunk_seq       bigint NOT NULL,
    created_at      timestamptz NOT NULL,
    tokens          integer NOT NULL,
    bytes           integer NOT NULL,
    idempotency_key text,
    message         jsonb NOT NULL,
    PRIMARY KEY (session_id, turn_seq)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 2000);

-- Idempotency keys outlive the buffer row, so a retry is recognised after its fold too.
CREATE TABLE shardstore.turn_keys (
    session_id      uuid NOT NULL,
    idempotency_key text NOT NULL,
    turn_seq        bigint NOT NULL,
    chunk_seq       bigint NOT NULL,
    tokens          integer NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (session_id, idempotency_key)
);

-- Makes sure the partition holding p_at exists and is attached; returns its name.
-- Standalone table + bounds CHECK + ATTACH: never blocks inserts into other partitions.
-- Safe when writers race: the loser's CREATE waits for the winner and is then ignored.
CREATE FUNCTION shardstore.ensure_partition_v1(p_at timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    cfg        shardstore.config%ROWTYPE;
    v_lo       timestamptz;
    v_hi       timestamptz;
    v_name     text;
    v_attached boolean;
BEGIN
    SELECT * INTO cfg FROM shardstore.config;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS500',
            MESSAGE = 'shardstore is not initialised: connect with shardstore.connect() or run "shardstore init"';
    END IF;
    v_lo := date_bin(cfg.partition_interval, p_at, cfg.partition_origin);
    v_hi := v_lo + cfg.partition_interval;
    v_name := 'agent_history_p' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached THEN
        RETURN v_name;
    END IF;
    BEGIN
        IF v_attached IS NULL THEN
            EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.agent_history INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)',
                           v_name);
            EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                           v_name, v_name || '_bounds', v_lo, v_hi);
        END IF;
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN duplicate_table OR unique_violation OR duplicate_object THEN
        NULL;  -- a concurrent writer made it; checked below
    END;
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached IS NOT TRUE THEN
        -- the racing writer created the table but had not attached it yet: attach it now
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    END IF;
    RETURN v_name;
END
$$;

-- Moves the buffered turns of one chunk into agent_history with a single jsonb || upsert
-- (a plain insert on the chunk's first fold). Returns the number of turns moved.
CREATE FUNCTION shardstore.fold_v1(p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz)
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
                        THEN jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'at', m.created_at, 'm', m.message)
                        ELSE jsonb_build_object('s', m.turn_seq, 't', m.tokens, 'at', m.created_at,
                                                'k', m.idempotency_key, 'm', m.message)
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

-- Locks a live session row; raises SS404 / SS410 for unknown / purged sessions.
CREATE FUNCTION shardstore.lock_session_v1(p_session_id uuid)
RETURNS shardstore.sessions
LANGUAGE plpgsql
AS $$
DECLARE
    s shardstore.sessions%ROWTYPE;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    RETURN s;
END
$$;

-- Appends a batch of turns (one or many) atomically: assigns gap-free turn_seq, starts a
-- new chunk when the token budget, the byte cap or the partition boundary would be
-- crossed, and records idempotency keys. A key seen before returns the first result with
-- duplicate = true and stores nothing. A sealed chunk stays in the buffer (r_sealed tells
-- the caller) and is folded by fold_sealed_v1 outside the append's transaction, so that
-- no append pays for a fold.
CREATE FUNCTION shardstore.append_v1(
    p_session_id    uuid,
    p_messages      jsonb,      -- JSON array, one message per turn
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,      -- shardstore.config's, passed in to save a read per call
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_sealed boolean;
    v_now    timestamptz;
    v_bucket timestamptz;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_key    record;
    v_dirty  boolean := false;
BEGIN
    SELECT * INTO s FROM shardstore.sessions WHERE session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
    END IF;
    IF s.purged_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SS410', MESSAGE = format('session %s was purged', p_session_id);
    END IF;
    -- turns of one session never go back in time, even if the server clock does
    v_now := greatest(statement_timestamp(), s.last_turn_at);
    v_bucket := date_bin(p_interval, v_now, p_origin);
    FOR i IN 1 .. v_n LOOP
        IF p_keys[i] IS NOT NULL THEN
            SELECT k.turn_seq, k.chunk_seq, k.tokens INTO v_key
              FROM shardstore.turn_keys k
             WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i];
            IF FOUND THEN
                r_turn_seq := v_key.turn_seq; r_chunk_seq := v_key.chunk_seq;
                r_tokens := v_key.tokens; r_duplicate := true; r_sealed := false;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> v_bucket) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_now;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_now, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1));
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_now);
        END IF;
        r_turn_seq := s.next_turn_seq; r_chunk_seq := s.open_chunk_seq;
        r_tokens := p_tokens[i]; r_duplicate := false; r_sealed := coalesce(v_sealed, false);
        RETURN NEXT;
        v_sealed := false;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_dirty := true;
    END LOOP;
    IF v_dirty THEN
        UPDATE shardstore.sessions
           SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
               open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
               open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_now
         WHERE session_id = p_session_id;
    END IF;
END
$$;

-- Folds every sealed chunk still in a session's buffer (chunk_seq below the open one), in
-- chunk order. Needs no session lock: sealed chunks get no more turns, and two folders
-- racing for one chunk serialise on its buffer rows (the second moves nothing).
-- Returns the number of turns moved.
CREATE FUNCTION shardstore.fold_sealed_v1(p_session_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_open  bigint;
    v_moved integer := 0;
    v_start timestamptz;
    c       record;
BEGIN
    SELECT open_chunk_seq INTO v_open FROM shardstore.sessions WHERE session_id = p_session_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR c IN SELECT b.chunk_seq, min(b.created_at) AS first_at
               FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id AND b.chunk_seq < v_open
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        -- a chunk flushed while it was open already has its start (and partition) recorded
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = c.chunk_seq;
        v_moved := v_moved + shardstore.fold_v1(p_session_id, c.chunk_seq, coalesce(v_start, c.first_at));
    END LOOP;
    RETURN v_moved;
END
$$;

-- Folds all of a session's buffered turns, sealed chunks and the open one, into
-- agent_history; the open chunk stays open for more turns (used by maintenance for idle
-- sessions and by store.flush()). Returns the number of turns moved.
CREATE FUNCTION shardstore.flush_v1(p_session_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    s       shardstore.sessions%ROWTYPE;
    v_moved integer;
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    v_moved := shardstore.fold_sealed_v1(p_session_id);
    IF s.open_turns > 0 THEN
        v_moved := v_moved + shardstore.fold_v1(p_session_id, s.open_chunk_seq, s.open_chunk_start);
    END IF;
    RETURN v_moved;
END
$$;

-- The newest turns of a session, NEWEST FIRST, stopping before p_n turns are exceeded or
-- before the next turn would take the total over p_max_tokens (NULL = no limit). Walks
-- chunks down from the open one by primary key, so a tail costs the same at 1,000 and at
-- 1,000,000 turns: in each chunk the buffered turns (newest) come before the folded ones,
-- and the folded part is read by its exact partition key.
CREATE FUNCTION shardstore.tail_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
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

-- The common append in one statement: one turn that fits the open chunk (no seal, no
-- partition boundary), for a live session whose idempotency key (if any) is new. Returns
-- no row when any of that does not hold; the caller then uses append_v1, which handles
-- every case. Same rules as append_v1 (tests/test_model_stateful.py holds both to one
-- model). A concurrent append with the same key makes the turn_keys insert fail with a
-- unique violation, rolling back the whole statement: the caller retries with append_v1,
-- which reports the duplicate.
CREATE FUNCTION shardstore.append_one_v1(
    p_session_id    uuid,
    p_message       jsonb,
    p_tokens        integer,
    p_bytes         integer,
    p_key           text,
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint)
LANGUAGE sql
AS $$
    WITH head AS (
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1,
               open_turns    = s.open_turns + 1,
               open_tokens   = s.open_tokens + p_tokens,
               open_bytes    = s.open_bytes + p_bytes,
               last_turn_at  = greatest(statement_timestamp(), s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND s.open_tokens + p_tokens <= p_budget_tokens
           AND s.open_bytes + p_bytes <= p_budget_bytes
           AND date_bin(p_interval, greatest(statement_timestamp(), s.last_turn_at), p_origin)
             = date_bin(p_interval, s.open_chunk_start, p_origin)
           AND (p_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = p_session_id AND k.idempotency_key = p_key))
        RETURNING s.next_turn_seq - 1 AS turn_seq, s.open_chunk_seq AS chunk_seq,
                  s.last_turn_at AS at
    ), keyed AS (
        INSERT INTO shardstore.turn_keys
               (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at)
        SELECT p_session_id, p_key, head.turn_seq, head.chunk_seq, p_tokens, head.at
          FROM head WHERE p_key IS NOT NULL
    )
    INSERT INTO shardstore.turn_buffer
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message)
    SELECT p_session_id, head.turn_seq, head.chunk_seq, head.at, p_tokens, p_bytes, p_key, p_message
      FROM head
    RETURNING turn_seq, chunk_seq
$$;
