-- The shards holding one session's rows of sessions, turn_buffer and turn_keys, as qualified
-- table names, when this node is the Citus worker that holds them: a call that Citus delegated
-- here by its session argument. Nothing (NULLs) anywhere else: on the coordinator (group 0,
-- where a call inside a caller's transaction runs), on PostgreSQL without Citus, or before
-- the tables are distributed. The hot calls then read and write these shards as the plain
-- local tables they are: Citus plans every statement on a distributed table again inside
-- the delegated call and runs it through its local executor (deparsed, parsed and planned
-- for the shard), ~110-150 us a statement against ~10 us on the shard itself
-- (docs/decisions/0027-citus-append-and-tail.md). The shards carry the tables' policies and
-- grants (Citus copies them), so a tenant's call is filtered as before. Only active
-- placements count (a shard being moved away is read through Citus until the move is done).
CREATE OR REPLACE FUNCTION shardstore.citus_local_shards(p_session_id uuid, OUT r_sessions text, OUT r_buffer text, OUT r_keys text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NULL THEN
        RETURN;
    END IF;
    -- the OFFSET 0 fence: the shard lookups run only on a worker (no row on the
    -- coordinator), where delegation implies the tables are distributed
    SELECT shard_name('shardstore.sessions'::regclass, x.s),
           shard_name('shardstore.turn_buffer'::regclass, x.b),
           shard_name('shardstore.turn_keys'::regclass, x.k)
      INTO r_sessions, r_buffer, r_keys
      FROM (SELECT get_shard_id_for_distribution_column('shardstore.sessions', p_session_id) AS s,
                   get_shard_id_for_distribution_column('shardstore.turn_buffer', p_session_id) AS b,
                   get_shard_id_for_distribution_column('shardstore.turn_keys', p_session_id) AS k,
                   g.groupid
              FROM pg_dist_local_group g
             WHERE g.groupid <> 0 AND EXISTS (
                       SELECT 1 FROM pg_dist_partition d
                        WHERE d.logicalrelid = 'shardstore.turn_keys'::regclass)
            OFFSET 0) x
     WHERE EXISTS (SELECT 1 FROM pg_dist_placement p
                    WHERE p.shardid IN (x.s, x.b, x.k) AND p.groupid = x.groupid
                      AND p.shardstate = 1
                   HAVING count(*) = 3);
END
$function$;
