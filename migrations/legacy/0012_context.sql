-- 0012: context assembly (docs/architecture.md "Context"): chunk summaries with their queue,
-- and full-text search over every turn.
--
-- * shardstore.chunk_summaries: one summary per sealed chunk, written by the summary worker
--   (store.summarize(summarizer)); it records the turn range it covers and never replaces
--   the turns. Registered by chunk: a range purge or a rewind that deletes or rewrites a
--   chunk deletes its summary (the registry does it, no purge function changed), and a
--   session purge deletes them all.
-- * shardstore.summary_queue: chunks to summarise. A fold queues its chunk (fold_v1, below:
--   the one change is an INSERT into this queue); a rewrite of a folded chunk (range purge,
--   rewind) queues it again through the trigger summary_requeue (an UPDATE of first_turn_seq
--   or turn_count). The worker takes only sealed chunks (chunk_seq < the session's open
--   chunk) with no turn left in the buffer, so a queued open chunk (queued by a flush, or
--   reopened by a rewind) waits until it is sealed and folded. Registered by session only
--   (as embed_queue): a range purge or rewind leaves its rows, the worker drops rows whose
--   chunk is gone.
-- * shardstore.turn_text: one tsvector per turn window (a long turn is cut into pieces of
--   100,000 characters, so no tsvector nears its 1 MB limit), written by fold_v1 in the same
--   statement that moves the turns out of the buffer: in any snapshot a turn is either in
--   turn_buffer or in turn_text, never both, never neither. Partitioned by HASH (session_id)
--   into 16 partitions, each with its GIN index: a session search reads one partition, and
--   there is no partition lifecycle to run (rows belong to turns: the registry's turn column
--   gives range purges, rewinds, retention and session purges exact deletes). tenant_id and
--   agent_id are copied from the session, so scopes and the RLS policy need no join.
--   Buffered turns are searched on the fly (shardstore/sql/textsearch.sql).
-- * shardstore.text_search_config: the text search configuration (language) of every
--   tsvector, 'english' by default; text_configure_v1('german') switches and rebuilds.

CREATE TABLE shardstore.text_search_config (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    config        regconfig NOT NULL DEFAULT 'english',
    configured_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO shardstore.text_search_config DEFAULT VALUES;
CREATE POLICY tenant_read ON shardstore.text_search_config FOR SELECT USING (true);
SELECT shardstore.register_global_table_v1('shardstore.text_search_config',
                                           'the text search language (0012)', tenant_grants => 'SELECT');

CREATE TABLE shardstore.summary_queue (
    session_id  uuid NOT NULL,
    chunk_seq   bigint NOT NULL,
    chunk_start timestamptz NOT NULL,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, chunk_seq, chunk_start)
);
CREATE INDEX summary_queue_order ON shardstore.summary_queue (queued_at);
SELECT shardstore.register_session_table_v1('shardstore.summary_queue', purge_order => 62,
                                            note => 'chunks waiting for a summary (keys only, 0012)');

CREATE TABLE shardstore.chunk_summaries (
    session_id     uuid NOT NULL,
    chunk_seq      bigint NOT NULL,
    tenant_id      text NOT NULL,
    chunk_start    timestamptz NOT NULL,
    first_turn_seq bigint NOT NULL,
    last_turn_seq  bigint NOT NULL,
    summary        text NOT NULL CHECK (summary <> ''),
    tokens         integer NOT NULL CHECK (tokens >= 0),
    model          text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, chunk_seq),
    CHECK (last_turn_seq >= first_turn_seq)
);
-- after agent_history (20) in purge order: a summary written by a worker that a purge's
-- chunk rewrite waited for is deleted by the same purge
SELECT shardstore.register_session_table_v1('shardstore.chunk_summaries', chunk_column => 'chunk_seq',
                                            tenant_column => 'tenant_id', purge_order => 64,
                                            note => 'summaries of sealed chunks (0012)');

CREATE TABLE shardstore.turn_text (
    session_id uuid NOT NULL,
    turn_seq   bigint NOT NULL,
    window_no  integer NOT NULL,
    chunk_seq  bigint NOT NULL,
    tenant_id  text NOT NULL,
    agent_id   text,
    created_at timestamptz NOT NULL,
    tsv        tsvector NOT NULL,
    PRIMARY KEY (session_id, turn_seq, window_no)
) PARTITION BY HASH (session_id);
DO $$
BEGIN
    FOR i IN 0 .. 15 LOOP
        EXECUTE format('CREATE TABLE shardstore.%I PARTITION OF shardstore.turn_text'
                       ' FOR VALUES WITH (MODULUS 16, REMAINDER %s)', 'turn_text_h' || lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;
CREATE INDEX turn_text_tsv ON shardstore.turn_text USING gin (tsv);
CREATE INDEX turn_text_tenant ON shardstore.turn_text (tenant_id, created_at);
SELECT shardstore.register_session_table_v1('shardstore.turn_text', turn_column => 'turn_seq',
                                            tenant_column => 'tenant_id', purge_order => 66,
                                            note => 'full-text index of every folded turn (0012)');

-- The windows of one message for full-text search: every string value in it (keys are not
-- meaning), in document order, joined by spaces and cut into pieces of 100,000 characters.
CREATE FUNCTION shardstore.text_windows_v1(p_config regconfig, p_message jsonb)
RETURNS TABLE (r_window integer, r_tsv tsvector)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    WITH t AS (
        SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string')
    SELECT w.i, w.tsv
      FROM t, LATERAL (SELECT g.i, to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000)) AS tsv
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i)) w
     WHERE t.txt IS NOT NULL AND t.txt <> '' AND w.tsv <> ''::tsvector
$$;

-- The configured language.
CREATE FUNCTION shardstore.text_config_v1()
RETURNS regconfig
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce((SELECT c.config FROM shardstore.text_search_config c), 'english'::regconfig)
$$;

-- As in 0011, plus, in the same statement: each moved turn's text windows into turn_text,
-- and the chunk into summary_queue. Nothing else changed.
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
    ), texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT m.session_id, m.turn_seq, w.r_window, m.chunk_seq, s.tenant_id, s.agent_id,
               m.created_at, w.r_tsv
          FROM moved m
          JOIN shardstore.sessions s ON s.session_id = m.session_id,
               LATERAL shardstore.text_windows_v1(shardstore.text_config_v1(), m.message) w
        ON CONFLICT DO NOTHING
    )
    SELECT f.turn_count, f.first_turn_seq INTO v_moved, v_first FROM folded f;
    IF v_moved IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO shardstore.chunk_map (session_id, chunk_seq, chunk_start, first_turn_seq)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start, v_first)
    ON CONFLICT (session_id, chunk_seq) DO NOTHING;
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start)
    VALUES (p_session_id, p_chunk_seq, p_chunk_start)
    ON CONFLICT DO NOTHING;
    RETURN v_moved;
END
$$;

-- A folded chunk rewritten by a range purge or a rewind is summarised again (its old summary
-- is deleted by the registry in the same purge or rewind). Fold upserts fire it too: a
-- no-op next to fold_v1's own insert.
CREATE FUNCTION shardstore.summary_requeue_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start)
    VALUES (NEW.session_id, NEW.chunk_seq, NEW.chunk_start)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER summary_requeue AFTER UPDATE ON shardstore.agent_history
    FOR EACH ROW
    WHEN (OLD.first_turn_seq IS DISTINCT FROM NEW.first_turn_seq
          OR OLD.turn_count IS DISTINCT FROM NEW.turn_count)
    EXECUTE FUNCTION shardstore.summary_requeue_v1();

-- Stores the summary of one claimed chunk (the caller holds its queue row FOR UPDATE) if the
-- chunk still has the version the worker read (first_turn_seq, turn_count, chunk_end: a
-- rewind followed by appends and a fold changes chunk_end even where it restores the
-- other two), is sealed with nothing left in the buffer, its session is live, and no fold
-- or purge holds it (FOR SHARE SKIP LOCKED). Returns 'stored' (summary written, queue row
-- deleted), 'changed' (nothing written, the row stays queued) or 'gone' (the chunk no
-- longer exists: its queue row is deleted).
CREATE FUNCTION shardstore.summary_store_v1(
    p_session_id uuid, p_chunk_seq bigint, p_chunk_start timestamptz, p_first bigint,
    p_count integer, p_end timestamptz, p_summary text, p_tokens integer, p_model text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ok     boolean;
    v_tenant text;
    v_open   bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM shardstore.agent_history h
                    WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq
                      AND h.chunk_start = p_chunk_start) THEN
        DELETE FROM shardstore.summary_queue q
         WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
        RETURN 'gone';
    END IF;
    SELECT true INTO v_ok FROM shardstore.agent_history h
     WHERE h.session_id = p_session_id AND h.chunk_seq = p_chunk_seq AND h.chunk_start = p_chunk_start
       AND h.first_turn_seq = p_first AND h.turn_count = p_count AND h.chunk_end = p_end
       FOR SHARE SKIP LOCKED;
    SELECT x.tenant_id, x.open_chunk_seq INTO v_tenant, v_open FROM shardstore.sessions x
     WHERE x.session_id = p_session_id AND x.purged_at IS NULL;
    IF v_ok IS NOT TRUE OR v_tenant IS NULL OR v_open <= p_chunk_seq
       OR EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                   WHERE b.session_id = p_session_id AND b.chunk_seq = p_chunk_seq) THEN
        RETURN 'changed';
    END IF;
    INSERT INTO shardstore.chunk_summaries AS c
           (session_id, chunk_seq, tenant_id, chunk_start, first_turn_seq, last_turn_seq,
            summary, tokens, model)
    VALUES (p_session_id, p_chunk_seq, v_tenant, p_chunk_start, p_first, p_first + p_count - 1,
            p_summary, p_tokens, p_model)
    ON CONFLICT (session_id, chunk_seq) DO UPDATE
       SET tenant_id = EXCLUDED.tenant_id, chunk_start = EXCLUDED.chunk_start,
           first_turn_seq = EXCLUDED.first_turn_seq, last_turn_seq = EXCLUDED.last_turn_seq,
           summary = EXCLUDED.summary, tokens = EXCLUDED.tokens, model = EXCLUDED.model,
           created_at = now();
    DELETE FROM shardstore.summary_queue q
     WHERE q.session_id = p_session_id AND q.chunk_seq = p_chunk_seq AND q.chunk_start = p_chunk_start;
    RETURN 'stored';
END
$$;

-- Switches the text search language and rebuilds every stored tsvector from the folded
-- turns, in one transaction (searches see the old index until it commits). Returns the
-- number of windows written.
CREATE FUNCTION shardstore.text_configure_v1(p_config regconfig)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_n bigint;
BEGIN
    UPDATE shardstore.text_search_config SET config = p_config, configured_at = now();
    DELETE FROM shardstore.turn_text;
    INSERT INTO shardstore.turn_text
           (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
    SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
           (e.v->>'at')::timestamptz, w.r_tsv
      FROM shardstore.agent_history h
      JOIN shardstore.sessions s ON s.session_id = h.session_id,
           jsonb_array_elements(h.conversation_chunk) AS e(v),
           LATERAL shardstore.text_windows_v1(p_config, e.v->'m') w
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
REVOKE EXECUTE ON FUNCTION shardstore.text_configure_v1(regconfig) FROM PUBLIC;

-- what was folded before this migration: indexed for text search, sealed chunks queued
INSERT INTO shardstore.turn_text
       (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, s.tenant_id, s.agent_id,
       (e.v->>'at')::timestamptz, w.r_tsv
  FROM shardstore.agent_history h
  JOIN shardstore.sessions s ON s.session_id = h.session_id,
       jsonb_array_elements(h.conversation_chunk) AS e(v),
       LATERAL shardstore.text_windows_v1(shardstore.text_config_v1(), e.v->'m') w
ON CONFLICT DO NOTHING;
INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start)
SELECT h.session_id, h.chunk_seq, h.chunk_start
  FROM shardstore.agent_history h JOIN shardstore.sessions s ON s.session_id = h.session_id
 WHERE s.purged_at IS NULL AND h.chunk_seq < s.open_chunk_seq
ON CONFLICT DO NOTHING;
