-- Every table holding rows of a registered partitioned session table under its own name:
-- its partitions (attached or being detached), and tables named <parent>_p... / _r... beside
-- it (detached partitions waiting for archive, retired ones). r_parent: the registered table.
CREATE OR REPLACE FUNCTION shardstore.rls_partition_tables()
 RETURNS TABLE(r_table regclass, r_parent regclass)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT x.rel, x.parent FROM (
        SELECT t.relid::regclass AS rel, r.table_name AS parent
          FROM shardstore.table_registry r
          JOIN pg_class p ON p.oid = r.table_name AND p.relkind = 'p',
               pg_partition_tree(r.table_name) t
          JOIN pg_class c ON c.oid = t.relid AND c.relkind = 'r'
         WHERE r.kind = 'session'
        UNION
        SELECT c.oid::regclass, r.table_name
          FROM shardstore.table_registry r
          JOIN pg_class p ON p.oid = r.table_name AND p.relkind = 'p'
          JOIN pg_class c ON c.relnamespace = p.relnamespace AND c.relkind = 'r'
                         AND left(c.relname, length(p.relname) + 1) = p.relname || '_'
                         AND substr(c.relname, length(p.relname) + 2) ~ '^[pr][0-9]'
         WHERE r.kind = 'session') x
     ORDER BY x.rel::text
$function$;
