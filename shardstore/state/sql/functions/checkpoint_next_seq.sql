-- The next checkpoint seq. SECURITY DEFINER: tenant roles (grant_tenant_role_v2 grants
-- functions and tables, not sequences) write checkpoints too.
CREATE OR REPLACE FUNCTION shardstore.checkpoint_next_seq()
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT nextval('shardstore.checkpoint_seq') $function$;
