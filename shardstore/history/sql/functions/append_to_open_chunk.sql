-- The fast path of an append: one turn that fits the open chunk (within the token and byte
-- budgets, in the open chunk's time bucket) of a live session that has open turns, whose key
-- (if any) is new. It moves the session head (the UPDATE holds the session row to commit) and
-- inserts the key's row and the buffer row; returns the turn and chunk seq, or no row when a
-- condition fails (the caller goes on to append_seal_one or append_v2). A concurrent call with
-- the same key fails the turn_keys insert (unique violation), rolling the statement back; the
-- caller reruns it as a batch (append_v2), which reports the duplicate. PL/pgSQL because Citus
-- cannot plan a LANGUAGE sql function's parameters. Two forms of the same writes: on plain
-- PostgreSQL one statement (a CTE: as fast as a SQL function on PG 18, ~8x cheaper on PG 16,
-- which re-plans a SQL function at every call); where Citus is loaded, three single-shard
-- statements, since Citus runs the CTE's INSERT ... SELECT through the coordinator (~20 ms
-- against ~1-1.5 ms). Measurements: docs/scale-out.md, "Measured". A call Citus delegated to
-- the worker holding the session writes that worker's shards directly, the same three
-- statements (citus_local_shards: Citus re-plans each statement on a distributed table
-- there at ~10x a plain statement's cost; docs/decisions/0027-citus-append-and-tail.md).
CREATE OR REPLACE FUNCTION shardstore.append_to_open_chunk(p_session_id uuid, p_message jsonb, p_tokens integer, p_bytes integer, p_key text, p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now    timestamptz := statement_timestamp();
    v_at     timestamptz;
    v_tenant text;
    v_shard_sessions text;
    v_shard_buffer   text;
    v_shard_keys     text;
BEGIN
    -- citus.version exists where the Citus library is loaded (a GUC lookup, ~free)
    IF current_setting('citus.version', true) IS NOT NULL THEN
        SELECT x.r_sessions, x.r_buffer, x.r_keys
          INTO v_shard_sessions, v_shard_buffer, v_shard_keys
          FROM shardstore.citus_local_shards(p_session_id) x;
    END IF;
    IF v_shard_sessions IS NOT NULL THEN
        EXECUTE format(
           'UPDATE %1$s s
               SET next_turn_seq = s.next_turn_seq + 1,
                   open_turns    = s.open_turns + 1,
                   open_tokens   = s.open_tokens + $2,
                   open_bytes    = s.open_bytes + $3,
                   last_turn_at  = greatest($7, s.last_turn_at)
             WHERE s.session_id = $1
               AND s.purged_at IS NULL
               AND s.open_turns > 0
               AND s.open_tokens + $2 <= $4
               AND s.open_bytes + $3 <= $5
               AND date_bin($6, greatest($7, s.last_turn_at), $8)
                 = date_bin($6, s.open_chunk_start, $8)
               AND ($9::text IS NULL OR NOT EXISTS (
                       SELECT 1 FROM %2$s k
                        WHERE k.session_id = $1 AND k.idempotency_key = $9))
            RETURNING s.next_turn_seq - 1, s.open_chunk_seq, s.last_turn_at, s.tenant_id',
           v_shard_sessions, v_shard_keys)
          INTO r_turn_seq, r_chunk_seq, v_at, v_tenant
         USING p_session_id, p_tokens, p_bytes, p_budget_tokens, p_budget_bytes, p_interval,
               v_now, p_origin, p_key;
        IF r_turn_seq IS NULL THEN
            RETURN;
        END IF;
        IF p_key IS NOT NULL THEN
            EXECUTE format(
               'INSERT INTO %s (session_id, idempotency_key, turn_seq, chunk_seq, tokens,
                                created_at, tenant_id)
                VALUES ($1, $2, $3, $4, $5, $6, $7)', v_shard_keys)
              USING p_session_id, p_key, r_turn_seq, r_chunk_seq, p_tokens, v_at, v_tenant;
        END IF;
        EXECUTE format(
           'INSERT INTO %s (session_id, turn_seq, chunk_seq, created_at, tokens, bytes,
                            idempotency_key, message, tenant_id)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)', v_shard_buffer)
          USING p_session_id, r_turn_seq, r_chunk_seq, v_at, p_tokens, p_bytes, p_key,
                p_message, v_tenant;
        RETURN NEXT;
        RETURN;
    END IF;
    IF current_setting('citus.version', true) IS NOT NULL THEN
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1,
               open_turns    = s.open_turns + 1,
               open_tokens   = s.open_tokens + p_tokens,
               open_bytes    = s.open_bytes + p_bytes,
               last_turn_at  = greatest(v_now, s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND s.open_tokens + p_tokens <= p_budget_tokens
           AND s.open_bytes + p_bytes <= p_budget_bytes
           AND date_bin(p_interval, greatest(v_now, s.last_turn_at), p_origin)
             = date_bin(p_interval, s.open_chunk_start, p_origin)
           AND (p_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = p_session_id AND k.idempotency_key = p_key))
        RETURNING s.next_turn_seq - 1, s.open_chunk_seq, s.last_turn_at, s.tenant_id
             INTO r_turn_seq, r_chunk_seq, v_at, v_tenant;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF p_key IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
            VALUES (p_session_id, p_key, r_turn_seq, r_chunk_seq, p_tokens, v_at, v_tenant);
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key,
                message, tenant_id)
        VALUES (p_session_id, r_turn_seq, r_chunk_seq, v_at, p_tokens, p_bytes, p_key, p_message,
                v_tenant);
        RETURN NEXT;
        RETURN;
    END IF;
    WITH head AS (
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1,
               open_turns    = s.open_turns + 1,
               open_tokens   = s.open_tokens + p_tokens,
               open_bytes    = s.open_bytes + p_bytes,
               last_turn_at  = greatest(v_now, s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND s.open_tokens + p_tokens <= p_budget_tokens
           AND s.open_bytes + p_bytes <= p_budget_bytes
           AND date_bin(p_interval, greatest(v_now, s.last_turn_at), p_origin)
             = date_bin(p_interval, s.open_chunk_start, p_origin)
           AND (p_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = p_session_id AND k.idempotency_key = p_key))
        RETURNING s.next_turn_seq - 1 AS turn_seq, s.open_chunk_seq AS chunk_seq,
                  s.last_turn_at AS at, s.tenant_id
    ), keyed AS (
        INSERT INTO shardstore.turn_keys
               (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
        SELECT p_session_id, p_key, head.turn_seq, head.chunk_seq, p_tokens, head.at, head.tenant_id
          FROM head WHERE p_key IS NOT NULL
    )
    INSERT INTO shardstore.turn_buffer AS b
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
            tenant_id)
    SELECT p_session_id, head.turn_seq, head.chunk_seq, head.at, p_tokens, p_bytes, p_key,
           p_message, head.tenant_id
      FROM head
    RETURNING b.turn_seq, b.chunk_seq INTO r_turn_seq, r_chunk_seq;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END
$function$;
