-- 0005: embeddings and vector search (docs/architecture.md, "Search").
--
-- One vector per model window of a chunk, in chunk_vectors, partitioned like agent_history
-- (same bounds, same names with chunk_vectors_p...), an HNSW (cosine) index on every
-- partition. pgvector must be installed on the server; CREATE EXTENSION needs a superuser
-- once (the extension is not "trusted"): after that, this migration needs no special rights.

CREATE EXTENSION IF NOT EXISTS vector;

-- The model whose vectors the table holds. Absent until the first embedding; changing the
-- model goes through vec_configure_v1(..., p_reset => true) (`shardstore reembed`).
CREATE TABLE shardstore.embedding_config (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    model         text NOT NULL CHECK (model <> ''),
    dimension     integer NOT NULL CHECK (dimension BETWEEN 1 AND 4000),
    window_tokens integer NOT NULL CHECK (window_tokens > 0),
    configured_at timestamptz NOT NULL DEFAULT now()
);

-- Chunks whose content changed since they were last embedded (or never were). Keys only.
-- A session purge clears its rows (waiting for a worker that holds them to finish its
-- batch); a range purge leaves them (the rewritten chunk must be embedded again, and the
-- worker drops rows of chunks that vanished).
CREATE TABLE shardstore.embed_queue (
    session_id  uuid NOT NULL,
    chunk_seq   bigint NOT NULL,
    chunk_start timestamptz NOT NULL,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, chunk_seq, chunk_start)
);
CREATE INDEX embed_queue_order ON shardstore.embed_queue (queued_at);

-- One row per window: tenant_id and agent_id are copied from the session so that a tenant
-- search filters the HNSW scan without a join.
CREATE TABLE shardstore.chunk_vectors (
    session_id     uuid NOT NULL,
    chunk_seq      bigint NOT NULL,
    chunk_start    timestamptz NOT NULL,
    window_no      integer NOT NULL,
    tenant_id      text NOT NULL,
    agent_id       text,
    first_turn_seq bigint NOT NULL,
    last_turn_seq  bigint NOT NULL,
    first_at       timestamptz NOT NULL,
    last_at        timestamptz NOT NULL,
    embedding      halfvec NOT NULL,
    PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no)
) PARTITION BY RANGE (chunk_start);
-- A small tenant's windows are found faster by this index and an exact sort than by a
-- filtered HNSW scan; the planner picks per query (benchmarks/results/search_scale.md).
CREATE INDEX chunk_vectors_tenant ON shardstore.chunk_vectors (tenant_id);

INSERT INTO shardstore.purge_targets
       (table_name, chunk_column, chunk_start_column, position, note)
VALUES ('shardstore.chunk_vectors', 'chunk_seq', 'chunk_start', 50,
        'one embedding per window of a chunk (embeddings can be inverted back to text)');
INSERT INTO shardstore.purge_targets (table_name, position, note)
VALUES ('shardstore.embed_queue', 60, 'chunks waiting to be embedded (keys only)');

-- Every chunk write (fold, flush, purge rewrite) queues the chunk for (re-)embedding.
CREATE FUNCTION shardstore.vec_enqueue_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start)
    VALUES (NEW.session_id, NEW.chunk_seq, NEW.chunk_start)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER vec_enqueue AFTER INSERT ON shardstore.agent_history
    FOR EACH ROW EXECUTE FUNCTION shardstore.vec_enqueue_v1();
CREATE TRIGGER vec_enqueue_changed AFTER UPDATE ON shardstore.agent_history
    FOR EACH ROW
    WHEN (OLD.turn_count IS DISTINCT FROM NEW.turn_count
          OR OLD.first_turn_seq IS DISTINCT FROM NEW.first_turn_seq
          OR OLD.conversation_chunk IS DISTINCT FROM NEW.conversation_chunk)
    EXECUTE FUNCTION shardstore.vec_enqueue_v1();

-- chunks folded before this migration
INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start)
SELECT h.session_id, h.chunk_seq, h.chunk_start FROM shardstore.agent_history h
ON CONFLICT DO NOTHING;

-- Records the embedding model, or checks it. A first call records it and types the vector
-- column halfvec(p_dimension) with an HNSW cosine index (built on every partition). A call
-- with another model or dimension raises SS409. p_reset (any model, the same one too)
-- drops every vector, retypes the column and queues every chunk again. Returns the
-- configured row as jsonb.
CREATE FUNCTION shardstore.vec_configure_v1(p_model text, p_dimension integer,
                                            p_window_tokens integer, p_reset boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    cfg shardstore.embedding_config%ROWTYPE;
BEGIN
    SELECT * INTO cfg FROM shardstore.embedding_config FOR UPDATE;
    IF FOUND AND NOT p_reset AND cfg.dimension = p_dimension
       AND lower(regexp_replace(cfg.model, '^.*/', '')) = lower(regexp_replace(p_model, '^.*/', '')) THEN
        IF cfg.window_tokens <> p_window_tokens OR cfg.model <> p_model THEN
            UPDATE shardstore.embedding_config SET window_tokens = p_window_tokens, model = p_model
             RETURNING * INTO cfg;
        END IF;
        RETURN to_jsonb(cfg);
    END IF;
    IF FOUND AND NOT p_reset THEN
        RAISE EXCEPTION USING ERRCODE = 'SS409',
            MESSAGE = format('the stored vectors come from %s (%s dimensions), not %s (%s dimensions); '
                             'vectors of two models cannot be mixed', cfg.model, cfg.dimension,
                             p_model, p_dimension),
            HINT = format('re-embed everything with the new model: shardstore reembed --model %s', p_model);
    END IF;
    -- table-level locks in a fixed order, so that a concurrent first configure waits here
    LOCK TABLE shardstore.chunk_vectors IN ACCESS EXCLUSIVE MODE;
    DROP INDEX IF EXISTS shardstore.chunk_vectors_hnsw;
    TRUNCATE shardstore.chunk_vectors;
    EXECUTE format('ALTER TABLE shardstore.chunk_vectors ALTER COLUMN embedding TYPE halfvec(%s)', p_dimension);
    CREATE INDEX chunk_vectors_hnsw ON shardstore.chunk_vectors USING hnsw (embedding halfvec_cosine_ops);
    IF cfg.singleton IS NOT NULL THEN
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start)
        SELECT h.session_id, h.chunk_seq, h.chunk_start FROM shardstore.agent_history h
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO shardstore.embedding_config AS e (model, dimension, window_tokens)
    VALUES (p_model, p_dimension, p_window_tokens)
    ON CONFLICT (singleton) DO UPDATE
       SET model = EXCLUDED.model, dimension = EXCLUDED.dimension,
           window_tokens = EXCLUDED.window_tokens, configured_at = now()
    RETURNING * INTO cfg;
    RETURN to_jsonb(cfg);
END
$$;

-- Gives every agent_history partition its chunk_vectors partition (same bounds; standalone
-- table with the HNSW index, then ATTACH), and drops vector partitions whose agent_history
-- partition is gone (retention: maint_drop_retired_v1 already deleted their rows). Each DDL
-- waits at most p_lock_timeout; what it could not do now is done on a later call.
-- Returns the bounds of every chunk_vectors partition after the call.
CREATE FUNCTION shardstore.vec_sync_partitions_v1(p_lock_timeout interval DEFAULT '1 second')
RETURNS TABLE (r_lo timestamptz, r_hi timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    p      record;
    v_name text;
BEGIN
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    FOR p IN
        SELECT c.relname AS name,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\) TO'))[1]::timestamptz AS lo,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'shardstore.agent_history'::regclass AND NOT i.inhdetachpending
    LOOP
        v_name := 'chunk_vectors_' || substr(p.name, length('agent_history_') + 1);
        IF NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name))
                                                 AND c.relispartition) THEN
            BEGIN
                IF to_regclass(format('shardstore.%I', v_name)) IS NULL THEN
                    EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.chunk_vectors INCLUDING DEFAULTS'
                                   ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE)', v_name);
                    EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                                   v_name, v_name || '_bounds', p.lo, p.hi);
                END IF;
                EXECUTE format('ALTER TABLE shardstore.chunk_vectors ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                               v_name, p.lo, p.hi);
            EXCEPTION WHEN duplicate_table OR duplicate_object OR unique_violation OR lock_not_available THEN
                NULL;  -- a concurrent call made it, or a lock was busy: the next call finishes
            END;
        END IF;
    END LOOP;
    FOR p IN
        SELECT c.relname AS name
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass
           AND to_regclass(format('shardstore.%I', 'agent_history_' || substr(c.relname, length('chunk_vectors_') + 1))) IS NULL
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE shardstore.%I', p.name);
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN QUERY
        SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\) TO'))[1]::timestamptz,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass
         ORDER BY 1;
END
$$;

-- Stores the windows of a batch of embedded chunks, each chunk all or nothing. A chunk is
-- written only if it still has the version the worker embedded (first_turn_seq, turn_count),
-- its session is not purged and no fold or purge holds it now (FOR SHARE SKIP LOCKED: such a
-- chunk keeps its queue row and is embedded again later). A vanished chunk loses its queue
-- row. Returns (chunks stored, chunks left queued).
CREATE FUNCTION shardstore.vec_store_v1(
    p_session uuid[], p_chunk bigint[], p_start timestamptz[], p_first bigint[], p_count integer[],
    w_chunk_idx integer[], w_first bigint[], w_last bigint[], w_first_at timestamptz[],
    w_last_at timestamptz[], w_vec text[],
    OUT r_stored integer, OUT r_left integer)
LANGUAGE plpgsql
AS $$
DECLARE
    i       integer;
    v_ok    boolean;
    v_found boolean;
    s       record;
BEGIN
    r_stored := 0;
    r_left := 0;
    FOR i IN 1 .. coalesce(cardinality(p_session), 0) LOOP
        v_found := EXISTS (SELECT 1 FROM shardstore.agent_history h
                            WHERE h.session_id = p_session[i] AND h.chunk_seq = p_chunk[i]
                              AND h.chunk_start = p_start[i]);
        IF NOT v_found THEN
            DELETE FROM shardstore.embed_queue q
             WHERE q.session_id = p_session[i] AND q.chunk_seq = p_chunk[i] AND q.chunk_start = p_start[i];
            CONTINUE;
        END IF;
        SELECT true INTO v_ok FROM shardstore.agent_history h
         WHERE h.session_id = p_session[i] AND h.chunk_seq = p_chunk[i] AND h.chunk_start = p_start[i]
           AND h.first_turn_seq = p_first[i] AND h.turn_count = p_count[i]
           FOR SHARE SKIP LOCKED;
        SELECT x.tenant_id, x.agent_id INTO s FROM shardstore.sessions x
         WHERE x.session_id = p_session[i] AND x.purged_at IS NULL;
        IF v_ok IS NOT TRUE OR NOT FOUND THEN
            r_left := r_left + 1;
            v_ok := NULL;
            CONTINUE;
        END IF;
        v_ok := NULL;
        DELETE FROM shardstore.chunk_vectors v
         WHERE v.session_id = p_session[i] AND v.chunk_seq = p_chunk[i] AND v.chunk_start = p_start[i];
        INSERT INTO shardstore.chunk_vectors
               (session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id,
                first_turn_seq, last_turn_seq, first_at, last_at, embedding)
        SELECT p_session[i], p_chunk[i], p_start[i], (row_number() OVER (ORDER BY w.ord))::integer - 1,
               s.tenant_id, s.agent_id, w.f, w.l, w.fa, w.la, w.v::halfvec
          FROM unnest(w_chunk_idx, w_first, w_last, w_first_at, w_last_at, w_vec)
               WITH ORDINALITY AS w(idx, f, l, fa, la, v, ord)
         WHERE w.idx = i;
        DELETE FROM shardstore.embed_queue q
         WHERE q.session_id = p_session[i] AND q.chunk_seq = p_chunk[i] AND q.chunk_start = p_start[i];
        r_stored := r_stored + 1;
    END LOOP;
END
$$;

-- Row-Level Security for the new tables (inert until enable_rls_v1(); docs/security.md).
-- chunk_vectors carries tenant_id itself; the queue joins its session.
CREATE POLICY tenant_isolation ON shardstore.chunk_vectors
    USING (tenant_id = (SELECT shardstore.rls_tenant_v1()))
    WITH CHECK (tenant_id = (SELECT shardstore.rls_tenant_v1()));

CREATE POLICY tenant_isolation ON shardstore.embed_queue
    USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                    WHERE s.session_id = embed_queue.session_id
                      AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())))
    WITH CHECK (EXISTS (SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = embed_queue.session_id
                           AND s.tenant_id = (SELECT shardstore.rls_tenant_v1())));

-- the model record is global: a tenant role reads it and may lock it (vec_configure_v1
-- checks under FOR UPDATE) but never changes it
CREATE POLICY tenant_read ON shardstore.embedding_config FOR SELECT USING (true);
CREATE POLICY tenant_lock ON shardstore.embedding_config FOR UPDATE USING (true) WITH CHECK (false);

CREATE OR REPLACE FUNCTION shardstore.rls_tables_v1()
RETURNS TABLE (r_table regclass, r_tenant boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT t::regclass, k
      FROM unnest(ARRAY['shardstore.sessions', 'shardstore.turn_buffer', 'shardstore.agent_history',
                        'shardstore.chunk_map', 'shardstore.turn_keys', 'shardstore.chunk_vectors',
                        'shardstore.embed_queue', 'shardstore.config', 'shardstore.purge_targets',
                        'shardstore.maintenance_runs', 'shardstore.embedding_config'],
                  ARRAY[true, true, true, true, true, true, true, false, false, false, false]) AS x(t, k)
$$;

-- vector partitions too: they hold session rows under their own names
CREATE OR REPLACE FUNCTION shardstore.rls_partition_tables_v1()
RETURNS SETOF regclass
LANGUAGE sql
STABLE
AS $$
    SELECT c.oid::regclass
      FROM pg_class c
     WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'
       AND c.relname ~ '^(agent_history|chunk_vectors)_[pr]'
     ORDER BY c.relname
$$;

CREATE OR REPLACE FUNCTION shardstore.grant_tenant_role_v1(p_role regrole, p_tenant text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA shardstore TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON shardstore.sessions, shardstore.turn_buffer,'
                   ' shardstore.agent_history, shardstore.chunk_map, shardstore.turn_keys,'
                   ' shardstore.chunk_vectors, shardstore.embed_queue TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON shardstore.config TO %s', p_role);
    EXECUTE format('GRANT SELECT, UPDATE ON shardstore.embedding_config TO %s', p_role);
    EXECUTE format('GRANT SELECT ON shardstore.purge_targets, shardstore.schema_migrations,'
                   ' shardstore.rls_role_tenants TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA shardstore TO %s', p_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v1(boolean),'
                   ' shardstore.disable_rls_v1(), shardstore.grant_tenant_role_v1(regrole, text)'
                   ' FROM %s', p_role);
    IF p_tenant IS NOT NULL THEN
        INSERT INTO shardstore.rls_role_tenants (role_name, tenant_id)
        VALUES (p_role::text, p_tenant)
        ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id;
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION shardstore.grant_tenant_role_v1(regrole, text) FROM PUBLIC;
