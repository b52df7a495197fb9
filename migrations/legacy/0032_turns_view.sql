-- 0032: shardstore.turns, one row per stored turn, for reading with SQL (analytics, joins
-- with an application's tables, shardstore.integrations.sqlalchemy.metadata()). A view over
-- the two places a turn lives: the envelopes of agent_history's chunks and turn_buffer.
-- security_invoker: the caller's privileges and the tables' row-level security apply, so a
-- tenant role sees its tenant's turns only, as through the store. What it shows:
-- * every turn a session holds itself, folded or buffered, each once (a fold moves a turn
--   from the buffer into a chunk in one transaction); rewound and purged turns are gone
--   from both tables, a purged session has no rows;
-- * a fork's own turns only: the turns it inherits are rows of the session that holds them
--   (store.history(fork) reads the lineage);
-- * message as stored: ordinary JSON unchanged, but strings JSONB cannot hold (NUL, lone
--   surrogates) and floats it would alter carry shardstore's escapes (jsoncodec), as in
--   every other table; store.history() gives the original back.
-- Reading it costs a decode of every chunk it touches: filter by session_id (and tenant).

CREATE VIEW shardstore.turns WITH (security_invoker = true) AS
SELECT h.session_id, h.tenant_id, (e.v->>'s')::bigint AS turn_seq, h.chunk_seq,
       (e.v->>'at')::timestamptz AS created_at, (e.v->>'t')::integer AS tokens,
       e.v->>'k' AS idempotency_key, e.v->'m' AS message
  FROM shardstore.agent_history h
 CROSS JOIN LATERAL jsonb_array_elements(h.conversation_chunk) AS e(v)
UNION ALL
SELECT b.session_id, b.tenant_id, b.turn_seq, b.chunk_seq, b.created_at, b.tokens,
       b.idempotency_key, b.message
  FROM shardstore.turn_buffer b;

COMMENT ON VIEW shardstore.turns IS
    'one row per turn a session holds (folded or buffered); messages as stored (jsoncodec escapes)';

-- tenant roles read it (their rows only: security_invoker); the roles made before this
-- migration get the same grant as those made after it by grant_tenant_role_v2
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT g.grantee FROM information_schema.role_table_grants g
              WHERE g.table_schema = 'shardstore' AND g.table_name = 'sessions'
                AND g.privilege_type = 'SELECT'
                AND g.grantee <> (SELECT pg_get_userbyid(c.relowner) FROM pg_class c
                                   WHERE c.oid = 'shardstore.sessions'::regclass)
                AND g.grantee <> 'PUBLIC' LOOP
        EXECUTE format('GRANT SELECT ON shardstore.turns TO %I', r.grantee);
    END LOOP;
END
$$;

-- As in 0006, and SELECT on shardstore.turns.
CREATE OR REPLACE FUNCTION shardstore.grant_tenant_role_v2(p_role regrole, p_tenant text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA shardstore TO %s', p_role);
    FOR r IN SELECT x.table_name, x.tenant_grants FROM shardstore.table_registry x
              WHERE x.tenant_grants IS NOT NULL ORDER BY x.table_name::text LOOP
        EXECUTE format('GRANT %s ON %s TO %s', r.tenant_grants, r.table_name, p_role);
    END LOOP;
    EXECUTE format('GRANT SELECT ON shardstore.turns TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA shardstore TO %s', p_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION shardstore.enable_rls_v1(boolean),'
                   ' shardstore.disable_rls_v1(), shardstore.grant_tenant_role_v1(regrole, text),'
                   ' shardstore.enable_rls_v2(boolean), shardstore.disable_rls_v2(),'
                   ' shardstore.grant_tenant_role_v2(regrole, text),'
                   ' shardstore.rls_install_policy_v1(regclass, regclass),'
                   ' shardstore.rls_adopt_v1(regclass),'
                   ' shardstore.register_session_table_v1(regclass, name, name, name, name, name,'
                   ' integer, text, boolean, text),'
                   ' shardstore.register_global_table_v1(regclass, text, boolean, text)'
                   ' FROM %s', p_role);
    IF p_tenant IS NOT NULL THEN
        INSERT INTO shardstore.rls_role_tenants (role_name, tenant_id)
        VALUES (p_role::text, p_tenant)
        ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id;
    END IF;
END
$$;
