-- 0036: a JSONL import writes the chunks a batch starts and seals straight into
-- agent_history, and no fold scans a session's buffer from its first entry (issue 14 goal 6).
--
-- Why. The 10^7-turn scale run imports its 10^6-turn session in one transaction (an import
-- is all or nothing per session), 500 turns per import_turns call, each followed by
-- fold_sealed_v2. Every turn went into turn_buffer and was deleted by the fold of the next
-- call, and rows deleted by the importing transaction itself stay in the buffer's primary
-- key (session_id, turn_seq) until it ends. fold_sealed_v2 and fold_chunk find a session's
-- buffered rows by session_id alone, so each fold walked every turn imported so far: a fold
-- of one batch took ~3 s after ~50,000 turns and grew with each batch (quadratic; seen at
-- 170 turns/s and falling). The same walk happens, more slowly, to any session whose dead
-- buffer rows a long transaction elsewhere keeps from being vacuumed.
--
-- What.
--   * import_turns_v2 is import_turns with append_v1's direct path (0022): the chunks the
--     batch both starts and seals go straight into agent_history, with what fold_chunk would
--     write for them (envelopes with each turn's own created_at, chunk_start = the first
--     turn's created_at as fold_sealed chooses, chunk_end, chunk_map, embed_queue and
--     summary_queue rows, turn_text windows); only the chunk open before the batch (when it
--     held turns) and the one left open go into turn_buffer. When the batch seals the chunk
--     open before it, v2 folds it (fold_chunk, at the start fold_sealed_v2 would choose), so the
--     caller folds nothing and r_sealed is false. On Citus it is import_turns (row by row,
--     the caller folds when r_sealed), as append_v1 keeps its row-wise path there.
--   * fold_chunk bounds its buffer scan below by the first turn of the newest chunk in
--     chunk_map before the one it folds (every turn of a chunk comes after every turn of an
--     earlier chunk), so the dead rows of earlier chunks are not walked. Same rows moved.
--   * ensure_partition_v1, finding the partition already attached, opens it before it
--     returns: a partition another connection attached after this transaction locked
--     agent_history is not in this backend's partition descriptor until it reads the
--     invalidation, which it does when it first locks a relation, and the insert that
--     followed failed with "no partition of relation agent_history found for row" (seen in
--     a 20,000-turn import: the importer premakes partitions on another connection).
-- The importer fills a session it created in the same transaction, so no sealed chunk other
-- than the one open before a batch is ever buffered when import_turns_v2 runs; were one
-- there, it would wait for the next fold_sealed (maintenance, a later append) as a lagging
-- fold does.
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
