-- Scale-out on Citus (shardstore/schema/distribute.py, docs/scale-out.md). The distributability
-- checks read the catalog of any PostgreSQL (Citus or not); the rest runs on a Citus
-- coordinator only. Every session-scoped table is distributed by its session column (a
-- table whose session column may be NULL, registered with session_nullable, by its tenant
-- column), colocated with shardstore.sessions (or with the other tenant-keyed tables).

-- name: dist_citus_version
SELECT extversion FROM pg_extension WHERE extname = 'citus';

-- name: dist_tables
-- the registered session tables with the column each is distributed by, sessions first,
-- then the tenant-keyed global tables (citus_tenant_tables_v1: the artifact tables)
SELECT x.rel::text AS table_name, x.col AS column_name, x.by_tenant
  FROM (SELECT r.table_name AS rel,
               CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END AS col,
               r.session_nullable AS by_tenant, 0 AS grp, r.position AS pos
          FROM shardstore.table_registry r
         WHERE r.kind = 'session'
           AND r.table_name NOT IN (SELECT k.r_table FROM shardstore.citus_kept_local_v1() k)
        UNION ALL
        SELECT t.r_table, t.r_column, true, 1, 0 FROM shardstore.citus_tenant_tables_v1() t) x
 ORDER BY x.rel <> 'shardstore.sessions'::regclass, x.by_tenant, x.grp, x.pos, x.rel::text;

-- name: dist_check_keys
-- unique keys (primary keys included) of a session table (or a tenant-keyed global table)
-- that lack its distribution column
WITH d AS (
    SELECT r.table_name AS rel,
           CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END AS col
      FROM shardstore.table_registry r
     WHERE r.kind = 'session'
       AND r.table_name NOT IN (SELECT k.r_table FROM shardstore.citus_kept_local_v1() k)
    UNION ALL
    SELECT t.r_table, t.r_column FROM shardstore.citus_tenant_tables_v1() t)
SELECT d.rel::text, i.indexrelid::regclass::text
  FROM d
  JOIN pg_index i ON i.indrelid = d.rel AND i.indisunique
 WHERE NOT EXISTS (
           SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = d.rel AND a.attname = d.col
              AND a.attnum = ANY (i.indkey::int2[]))
 ORDER BY 1, 2;

-- name: dist_check_foreign_keys
-- foreign keys touching a session table that are not between two tables distributed the
-- same way on the distribution column (Citus refuses them, or they would not be colocated)
WITH reg AS (
    SELECT r.table_name AS rel, r.kind,
           CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END AS col,
           r.session_nullable AS by_tenant
      FROM shardstore.table_registry r
     WHERE r.table_name NOT IN (SELECT k.r_table FROM shardstore.citus_kept_local_v1() k))
SELECT c.conrelid::regclass::text, c.conname::text, c.confrelid::regclass::text
  FROM pg_constraint c
  LEFT JOIN reg a ON a.rel = c.conrelid
  LEFT JOIN reg b ON b.rel = c.confrelid
 WHERE c.contype = 'f'
   AND (a.kind = 'session' OR b.kind = 'session')
   AND NOT (a.kind = 'session' AND b.kind = 'session' AND a.by_tenant = b.by_tenant
            AND EXISTS (SELECT 1 FROM generate_subscripts(c.conkey, 1) k
                          JOIN pg_attribute x ON x.attrelid = c.conrelid AND x.attnum = c.conkey[k]
                          JOIN pg_attribute y ON y.attrelid = c.confrelid AND y.attnum = c.confkey[k]
                         WHERE x.attname = a.col AND y.attname = b.col))
 ORDER BY 1, 2;

-- name: dist_check_sql_functions
-- LANGUAGE sql functions with parameters whose body names a session table: Citus cannot
-- plan them on distributed tables ("use of parameters in SQL functions"); write PL/pgSQL
SELECT p.oid::regprocedure::text, t.relname::text
  FROM pg_proc p
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'sql'
  JOIN (SELECT r.table_name AS rel FROM shardstore.table_registry r
         WHERE r.kind = 'session'
           AND r.table_name NOT IN (SELECT k.r_table FROM shardstore.citus_kept_local_v1() k)
        UNION ALL
        SELECT x.r_table FROM shardstore.citus_tenant_tables_v1() x) r ON true
  JOIN pg_class t ON t.oid = r.rel
 WHERE p.pronamespace = 'shardstore'::regnamespace
   AND p.pronargs > 0
   AND coalesce(pg_get_function_sqlbody(p.oid), p.prosrc)
       ~* ('shardstore\.' || t.relname || '($|[^a-z0-9_])')
 ORDER BY 1, 2;

-- name: dist_check_policies
-- policies with a subquery on session tables, their partitions and the tables made
-- reference tables ("Subqueries are not supported in policies on distributed tables")
SELECT p.polrelid::regclass::text, p.polname::text
  FROM pg_policy p
  JOIN pg_class c ON c.oid = p.polrelid
 WHERE c.relnamespace = 'shardstore'::regnamespace
   AND (coalesce(p.polqual::text, '') LIKE '%{SUBLINK%'
        OR coalesce(p.polwithcheck::text, '') LIKE '%{SUBLINK%')
 ORDER BY 1, 2;

-- name: dist_check_triggers
-- user triggers on session tables (tenant-keyed global tables too) or their partitions
-- (Citus refuses to distribute them)
SELECT g.tgrelid::regclass::text, g.tgname::text
  FROM pg_trigger g
  JOIN (SELECT r.table_name AS rel FROM shardstore.table_registry r
         WHERE r.kind = 'session'
           AND r.table_name NOT IN (SELECT k.r_table FROM shardstore.citus_kept_local_v1() k)
        UNION ALL
        SELECT x.r_table FROM shardstore.citus_tenant_tables_v1() x) r ON true
 WHERE NOT g.tgisinternal
   AND (g.tgrelid = r.rel
        OR g.tgrelid IN (SELECT relid FROM pg_partition_tree(r.rel)))
 ORDER BY 1, 2;

-- name: dist_standalone_tables
-- standalone tables holding partition rows beside a registered partitioned table (detached
-- partitions waiting for archive), distributed too so that purges reach them like the rest
SELECT c.oid::regclass::text
  FROM shardstore.table_registry r
  JOIN pg_class p ON p.oid = r.table_name AND p.relkind = 'p'
  JOIN pg_class c ON c.relnamespace = p.relnamespace AND c.relkind = 'r' AND NOT c.relispartition
                 AND left(c.relname, length(p.relname) + 1) = p.relname || '_'
                 AND substr(c.relname, length(p.relname) + 2) ~ '^[pr][0-9]'
 WHERE r.kind = 'session' AND NOT r.session_nullable
 ORDER BY 1;

-- name: dist_reference_candidates
-- the config-like tables every node reads: made reference tables
SELECT t::text FROM unnest(ARRAY['shardstore.config', 'shardstore.embedding_config',
                                 'shardstore.rls_role_tenants',
                                 'shardstore.text_search_config']::regclass[]) AS t;

-- name: dist_table_state
-- how Citus holds a table now: 'h' (hash-distributed, with its column), 'n' (reference);
-- no row: a plain local table
SELECT r_method, r_column FROM shardstore.citus_table_state_v1(%s::regclass);

-- name: dist_node
-- this node's Citus group (0: the coordinator) and its active workers
SELECT r_group, r_workers FROM shardstore.citus_node_v1();

-- name: dist_create_table
-- p_column NULL: a reference table
SELECT shardstore.citus_distribute_table_v1(%s::regclass, %s, %s);

-- name: dist_functions_pending
SELECT f::text FROM shardstore.citus_functions_pending_v1() AS f;

-- name: dist_function_delegated
SELECT shardstore.citus_function_delegated_v1(%s::regprocedure);

-- name: dist_signatures
-- each named function's signature (every shardstore function has one overload)
SELECT p.proname::text, p.oid::regprocedure::text
  FROM pg_proc p
 WHERE p.pronamespace = 'shardstore'::regnamespace AND p.proname = ANY(%s::text[]);

-- name: dist_distribute_function
-- %s NULL: only created on every node; else delegated by that argument
SELECT shardstore.citus_distribute_function_v1(%s::regprocedure, %s);

-- name: dist_tenant_on_shards
SELECT shardstore.citus_tenant_on_shards_v1();

-- name: dist_propagate_set_local
SELECT shardstore.citus_propagate_set_local_v1();
