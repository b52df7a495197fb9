-- Scale-out on Citus (shardstore/distribute.py, docs/scale-out.md). The distributability
-- checks read the catalog of any PostgreSQL (Citus or not); the rest runs on a Citus
-- coordinator only. Every session-scoped table is distributed by its session column (a
-- table whose session column may be NULL, registered with session_nullable, by its tenant
-- column), colocated with shardstore.sessions (or with the other tenant-keyed tables).

-- name: dist_citus_version
SELECT extversion FROM pg_extension WHERE extname = 'citus';

-- name: dist_tables
-- the registered session tables with the column each is distributed by, sessions first
SELECT r.table_name::text AS table_name,
       CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END AS column_name,
       r.session_nullable AS by_tenant
  FROM shardstore.table_registry r
 WHERE r.kind = 'session'
 ORDER BY r.table_name <> 'shardstore.sessions'::regclass, r.session_nullable, r.position,
          r.table_name::text;

-- name: dist_check_keys
-- unique keys (primary keys included) of a session table that lack its distribution column
SELECT r.table_name::text, i.indexrelid::regclass::text
  FROM shardstore.table_registry r
  JOIN pg_index i ON i.indrelid = r.table_name AND i.indisunique
 WHERE r.kind = 'session'
   AND NOT EXISTS (
           SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = r.table_name
              AND a.attname = CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END
              AND a.attnum = ANY (i.indkey::int2[]))
 ORDER BY 1, 2;

-- name: dist_check_foreign_keys
-- foreign keys touching a session table that are not between two tables distributed the
-- same way on the distribution column (Citus refuses them, or they would not be colocated)
WITH reg AS (
    SELECT r.table_name AS rel, r.kind,
           CASE WHEN r.session_nullable THEN r.tenant_column ELSE r.session_column END AS col,
           r.session_nullable AS by_tenant
      FROM shardstore.table_registry r)
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
  JOIN shardstore.table_registry r ON r.kind = 'session'
  JOIN pg_class t ON t.oid = r.table_name
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
-- user triggers on session tables or their partitions (Citus refuses to distribute them)
SELECT g.tgrelid::regclass::text, g.tgname::text
  FROM pg_trigger g
  JOIN shardstore.table_registry r ON r.kind = 'session'
 WHERE NOT g.tgisinternal
   AND (g.tgrelid = r.table_name
        OR g.tgrelid IN (SELECT relid FROM pg_partition_tree(r.table_name)))
 ORDER BY 1, 2;

-- name: dist_reference_candidates
-- the config-like tables every node reads: made reference tables
SELECT t::text FROM unnest(ARRAY['shardstore.config', 'shardstore.embedding_config',
                                 'shardstore.rls_role_tenants']::regclass[]) AS t;

-- name: dist_table_state
-- how Citus holds a table now: 'h' (hash-distributed), 'n' (reference), 'l' (a Citus local
-- table) or NULL (a plain local table), and its distribution column
SELECT p.partmethod::text, column_to_column_name(p.logicalrelid, p.partkey)
  FROM pg_dist_partition p WHERE p.logicalrelid = %s::regclass;

-- name: dist_is_coordinator
SELECT EXISTS (SELECT 1 FROM pg_dist_node WHERE groupid = 0 AND noderole = 'primary')
       OR NOT EXISTS (SELECT 1 FROM pg_dist_node),
       (SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' AND isactive);

-- name: dist_local_group
SELECT groupid FROM pg_dist_local_group;

-- name: dist_create_reference
SELECT create_reference_table(%s::regclass);

-- name: dist_create_sessions
SELECT create_distributed_table(%s::regclass, %s, colocate_with => 'none');

-- name: dist_create_colocated
SELECT create_distributed_table(%s::regclass, %s, colocate_with => %s);

-- name: dist_functions_pending
-- shardstore's functions and procedures Citus does not know yet (so the workers lack them)
SELECT p.oid::regprocedure::text
  FROM pg_proc p
 WHERE p.pronamespace = 'shardstore'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                    WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid)
 ORDER BY p.oid;

-- name: dist_create_function
SELECT create_distributed_function(%s);

-- name: dist_function_state
-- whether the function is delegated by an argument, and colocated with which group
SELECT o.distribution_argument_index, o.colocationid
  FROM pg_dist_object o
 WHERE o.classid = 'pg_proc'::regclass AND o.objid = %s::regprocedure;

-- name: dist_delegate_function
SELECT create_distributed_function(%s, %s, colocate_with => 'shardstore.sessions');

-- name: dist_propagate_set
-- SET LOCAL (search settings, a transaction's tenant) reaches the workers' shard queries
SELECT current_setting('citus.propagate_set_commands');

-- name: dist_database
SELECT current_database();
