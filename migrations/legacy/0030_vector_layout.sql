-- 0030: chunk_vectors partitioned by HASH (tenant_id) into 32 leaves instead of by RANGE
-- (chunk_start) like agent_history (docs/architecture.md, "Search", "Vector layout").
--
-- Why (benchmarks/results/search_scale_1m_v2.md): a tenant search ran one scan per
-- agent_history partition. At 10^6 windows in 100 daily partitions that was a Merge Append
-- of 100 HNSW scans (315 ms for a tenant owning 30% of the rows) or 100 bitmap scans
-- (51 ms for one owning 1.4%). Hashed by tenant, a tenant's rows are in one leaf: its
-- search plans that leaf only (the statements are unprepared, so pruning is at plan time)
-- and runs one HNSW scan, or one exact scan of the tenant's rows (vector_ops.search_op
-- picks by the tenant's row count, vec_tenant_leaf_v1 gives the HNSW scan its ef_search).
--
-- What changes shape:
-- * chunk_vectors PARTITION BY HASH (tenant_id), leaves chunk_vectors_h00 .. _h31. A
--   tenant's search touches one leaf whatever their number; more leaves make the leaf
--   (and so the exact scan of a small tenant, whose rows lie among the leaf's others)
--   smaller, fewer keep the statements that do not name a tenant (by session: the worker's
--   store, purge, session search) from probing many leaves. Columns unchanged.
-- * primary key (session_id, chunk_seq, chunk_start, window_no, tenant_id): a partitioned
--   table's key must hold its partition column; a session's tenant is fixed, so the key
--   identifies the same rows (session_id still leads it, for Citus).
-- * chunk_vectors_tenant on (tenant_id, chunk_start), was (tenant_id): since/until no
--   longer prune partitions, so the bounded count of a tenant's rows in a time window
--   (vec_tenant_rows) is one index-only range scan.
-- * vec_sync_partitions_v1 makes and drops no partitions (every chunk has its leaf); the
--   worker no longer calls it. Retention already deleted retired chunks' vector rows
--   (by registry, per turn): that is now all that happens to vectors.
--
-- The rows move: a new table is made, every row copied, the old one (with its daily
-- partitions) dropped, the new one renamed. Kept: the registry row (moved to the new
-- table: same purge position, columns, note), the table's grants (copied from the old
-- parent's ACL, every grantee and grant option), row security (ENABLE/FORCE as the old
-- parent had it) and the tenant_isolation policy on the parent and every leaf.
-- On Citus the new table is local until `shardstore distribute` is run again (like a table
-- a later migration registers): a hash-partitioned table can be distributed by tenant_id
-- as the range-partitioned one was (Citus distributes partitioned tables of any strategy;
-- not run on a Citus cluster here, see docs/scale-out.md).

LOCK TABLE shardstore.chunk_vectors IN ACCESS EXCLUSIVE MODE;

CREATE TABLE shardstore.chunk_vectors_new
    (LIKE shardstore.chunk_vectors INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
    PARTITION BY HASH (tenant_id);

DO $$
BEGIN
    FOR i IN 0 .. 31 LOOP
        EXECUTE format('CREATE TABLE shardstore.%I PARTITION OF shardstore.chunk_vectors_new'
                       ' FOR VALUES WITH (MODULUS 32, REMAINDER %s)',
                       'chunk_vectors_h' || lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;

-- rows first, indexes after (one build per index instead of one insert per row into each);
-- in the old partitions' order, i.e. by time as the worker writes them (no sort: a sort
-- would spill 1 kB rows to disk, and cluster tenants only until the next writes)
INSERT INTO shardstore.chunk_vectors_new SELECT * FROM shardstore.chunk_vectors;

DO $$
DECLARE
    v_hnsw  boolean := to_regclass('shardstore.chunk_vectors_hnsw') IS NOT NULL;
    v_old   regclass := 'shardstore.chunk_vectors'::regclass;
    v_on    boolean;
    v_force boolean;
    g       record;
    p       record;
BEGIN
    SELECT c.relrowsecurity, c.relforcerowsecurity INTO v_on, v_force FROM pg_class c WHERE c.oid = v_old;
    -- the old parent's grants, to be given again on the new table
    CREATE TEMP TABLE vl_grants ON COMMIT DROP AS
        SELECT a.grantee, a.privilege_type, a.is_grantable
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = v_old AND a.grantee <> c.relowner;
    UPDATE shardstore.table_registry SET table_name = 'shardstore.chunk_vectors_new'::regclass
     WHERE table_name = v_old;
    DROP TABLE shardstore.chunk_vectors;
    ALTER TABLE shardstore.chunk_vectors_new RENAME TO chunk_vectors;
    ALTER TABLE shardstore.chunk_vectors
        ADD CONSTRAINT chunk_vectors_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);
    CREATE INDEX chunk_vectors_tenant ON shardstore.chunk_vectors (tenant_id, chunk_start);
    -- the HNSW index exists once a model typed the column (vec_configure_v2)
    IF v_hnsw THEN
        -- a leaf's graph built past maintenance_work_mem goes on disk and slows down ~10x:
        -- a leaf of 300,000 384-dimension windows needs ~400 MB (for this transaction only)
        IF pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('1GB') THEN
            SET LOCAL maintenance_work_mem = '1GB';
        END IF;
        CREATE INDEX chunk_vectors_hnsw ON shardstore.chunk_vectors USING hnsw (embedding halfvec_cosine_ops);
    END IF;
    FOR g IN SELECT * FROM vl_grants LOOP
        EXECUTE format('GRANT %s ON shardstore.chunk_vectors TO %s%s', g.privilege_type,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    PERFORM shardstore.rls_install_policy_v1('shardstore.chunk_vectors', 'shardstore.chunk_vectors');
    FOR p IN SELECT i.inhrelid::regclass AS leaf FROM pg_inherits i
              WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass LOOP
        PERFORM shardstore.rls_install_policy_v1(p.leaf, 'shardstore.chunk_vectors');
        IF v_on THEN
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p.leaf);
            EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', p.leaf,
                           CASE WHEN v_force THEN 'FORCE' ELSE 'NO FORCE' END);
        END IF;
    END LOOP;
    IF v_on THEN
        ALTER TABLE shardstore.chunk_vectors ENABLE ROW LEVEL SECURITY;
        EXECUTE format('ALTER TABLE shardstore.chunk_vectors %s ROW LEVEL SECURITY',
                       CASE WHEN v_force THEN 'FORCE' ELSE 'NO FORCE' END);
    END IF;
END
$$;

ANALYZE shardstore.chunk_vectors;

-- Every chunk has its vector leaf now: nothing to create or drop. The worker no longer
-- calls this; a client of the version before does (before every batch) and gets one range
-- that holds every chunk_start a Python datetime can hold, in any session time zone.
CREATE OR REPLACE FUNCTION shardstore.vec_sync_partitions_v1(p_lock_timeout interval DEFAULT '1 second')
RETURNS TABLE (r_lo timestamptz, r_hi timestamptz)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT '0001-01-02 00:00:00+00'::timestamptz, '9999-12-30 00:00:00+00'::timestamptz;
END
$$;

-- The leaf holding a tenant's vectors, as the planner's statistics see it: the leaf's
-- estimated rows (pg_class.reltuples, -1 before its first VACUUM/ANALYZE) and the share of
-- them that are the tenant's (the most-common-values frequency of tenant_id in the leaf;
-- NULL when the tenant is not among them, the leaf was never analysed, or row security
-- hides the statistics from the caller). Catalogs only: no row is read. A tenant search
-- scales hnsw.ef_search by 1 / share (vector_ops.ann_settings).
CREATE FUNCTION shardstore.vec_tenant_leaf_v1(p_tenant text)
RETURNS TABLE (r_leaf_rows real, r_share real)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_mod integer;
BEGIN
    SELECT count(*) INTO v_mod FROM pg_inherits i WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass;
    RETURN QUERY
        SELECT c.reltuples,
               (SELECT s.most_common_freqs[array_position(s.most_common_vals::text::text[], p_tenant)]
                  FROM pg_stats s
                 WHERE s.schemaname = 'shardstore' AND s.tablename = c.relname AND s.attname = 'tenant_id')
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass
           AND satisfies_hash_partition('shardstore.chunk_vectors'::regclass, v_mod,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'remainder (\d+)'))[1]::integer,
                   p_tenant);
END
$$;

-- Per-transaction settings of a tenant search through HNSW: iterative scan in strict
-- order (the scan goes on until LIMIT rows pass the tenant filter), hnsw.ef_search and
-- hnsw.max_scan_tuples (pgvector's default of 20000 ends the scan of a tenant owning a
-- small share of its leaf before it found enough rows). SET LOCAL: Citus sends it on.
CREATE FUNCTION shardstore.vec_search_settings_v2(p_ef_search integer, p_max_scan_tuples integer)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    SET LOCAL hnsw.iterative_scan = strict_order;
    EXECUTE format('SET LOCAL hnsw.ef_search = %s', p_ef_search);
    EXECUTE format('SET LOCAL hnsw.max_scan_tuples = %s', p_max_scan_tuples);
END
$$;
