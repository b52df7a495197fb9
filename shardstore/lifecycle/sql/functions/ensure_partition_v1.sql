-- Makes sure the partition of agent_history that holds chunk_start p_at exists and is
-- attached, and returns its name (agent_history_pYYYYMMDDtHHMMSS; bounds from config's
-- partition interval and origin; SS500 when the store is not initialised). A new one is
-- created LIKE agent_history with a CHECK of its bounds, then attached; a concurrent writer's
-- creation is tolerated, and a table it created but had not attached yet is attached here.
-- The ATTACH holds agent_history's SHARE UPDATE EXCLUSIVE lock to commit, so importers and
-- maintenance make partitions in transactions of their own beforehand
-- (docs/decisions/0019-imports-write-sealed-chunks-directly.md). A partition found attached is
-- opened before returning (plain PostgreSQL): one attached by another connection after this
-- transaction locked agent_history is not in this backend's partition descriptor until it
-- reads the invalidation, on its first lock of a relation, and the insert that follows would
-- fail with "no partition of relation agent_history found for row". On Citus the coordinator
-- premakes partitions before any statement needs them.
CREATE OR REPLACE FUNCTION shardstore.ensure_partition_v1(p_at timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    cfg        shardstore.config%ROWTYPE;
    v_lo       timestamptz;
    v_hi       timestamptz;
    v_name     text;
    v_attached boolean;
BEGIN
    SELECT * INTO cfg FROM shardstore.config;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SS500',
            MESSAGE = 'shardstore is not initialised: connect with shardstore.connect() or run "shardstore init"';
    END IF;
    v_lo := date_bin(cfg.partition_interval, p_at, cfg.partition_origin);
    v_hi := v_lo + cfg.partition_interval;
    v_name := 'agent_history_p' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached THEN
        -- Attached by another connection after this transaction took its lock on
        -- agent_history, it may not be in this backend's partition descriptor yet: an insert
        -- would find "no partition". Invalidations are read when a relation is first locked,
        -- so open the partition (pg_relation_size: no privilege needed; on Citus the
        -- coordinator premakes partitions before any statement needs them).
        IF current_setting('citus.version', true) IS NULL THEN
            PERFORM pg_relation_size(format('shardstore.%I', v_name)::regclass);
        END IF;
        RETURN v_name;
    END IF;
    BEGIN
        IF v_attached IS NULL THEN
            EXECUTE format('CREATE TABLE shardstore.%I (LIKE shardstore.agent_history INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)',
                           v_name);
            EXECUTE format('ALTER TABLE shardstore.%I ADD CONSTRAINT %I CHECK (chunk_start >= %L AND chunk_start < %L)',
                           v_name, v_name || '_bounds', v_lo, v_hi);
        END IF;
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN duplicate_table OR unique_violation OR duplicate_object THEN
        NULL;  -- a concurrent writer made it; checked below
    END;
    SELECT c.relispartition INTO v_attached
      FROM pg_class c WHERE c.oid = to_regclass(format('shardstore.%I', v_name));
    IF v_attached IS NOT TRUE THEN
        -- the racing writer created the table but had not attached it yet: attach it now
        EXECUTE format('ALTER TABLE shardstore.agent_history ATTACH PARTITION shardstore.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    END IF;
    RETURN v_name;
END
$function$;
