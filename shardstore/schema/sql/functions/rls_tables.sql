-- Tables row security covers, in the order the switches visit them; `tenant`: holds tenant
-- rows (FORCE applies to these only: the owner keeps writing the global tables).
CREATE OR REPLACE FUNCTION shardstore.rls_tables()
 RETURNS TABLE(r_table regclass, r_tenant boolean)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT r.table_name, r.kind = 'session'
      FROM shardstore.table_registry r
     WHERE r.rls
     ORDER BY r.kind <> 'session', r.position, r.table_name::text
$function$;
