CREATE OR REPLACE FUNCTION shardstore.citus_tenant_tables_v1()
 RETURNS TABLE(r_table regclass, r_column text)
 LANGUAGE sql
 STABLE
AS $function$
    VALUES ('shardstore.artifacts'::regclass, 'tenant_id'),
           ('shardstore.artifact_chunks'::regclass, 'tenant_id'),
           ('shardstore.artifact_erasures'::regclass, 'tenant_id')
$function$;
