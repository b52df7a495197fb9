-- SET LOCAL (the search settings, a transaction's tenant) reaches the shards' queries in
-- every new connection to this database.
CREATE OR REPLACE FUNCTION shardstore.citus_propagate_set_local_v1()
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_db_role_setting s
                WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND s.setrole = 0
                  AND 'citus.propagate_set_commands=local' = ANY (s.setconfig)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER DATABASE %I SET citus.propagate_set_commands = local', current_database());
    PERFORM set_config('citus.propagate_set_commands', 'local', false);
    RETURN true;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.citus_propagate_set_local_v1() FROM PUBLIC;
