-- Tenant roles read shardstore.config (the partition interval and origin every store reads
-- when it connects) but no longer write it: it is every tenant's, and a tenant role that could
-- UPDATE it could change the partitioning of every tenant's history. Stores only write it on
-- first use or when asked to change the interval, which the owner does.
UPDATE shardstore.table_registry SET tenant_grants = 'SELECT'
 WHERE table_name = 'shardstore.config'::regclass;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee::regrole::text AS role_name
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = 'shardstore.config'::regclass
                AND a.privilege_type IN ('INSERT', 'UPDATE')
                AND a.grantee <> c.relowner AND a.grantee <> 0 LOOP
        EXECUTE format('REVOKE INSERT, UPDATE ON shardstore.config FROM %s', r.role_name);
    END LOOP;
END
$$;
