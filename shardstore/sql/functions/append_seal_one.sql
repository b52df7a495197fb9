-- 0044: a single turn that seals its chunk is one UPDATE and one INSERT, as a turn that fits
-- is (issue 14 goal 1).
--
-- Why. append_one_v2 tries the fast path (append_to_open_chunk: one UPDATE of the session head,
-- the buffer row inserted from its RETURNING); a turn that does not fit the open chunk falls
-- back to append_v1 -> append_v2, the batch function in PL/pgSQL (the head read and locked,
-- a loop, the keep-window checks, an INSERT ... SELECT FROM unnest, the head written back):
-- ~0.4 ms more than a turn that fits on this VM (bench_seal: a sealing call's p50 0.86 ms
-- against 0.47 for all calls, after 0043), paid by ~1 call in 20 at the defaults and by
-- every few calls with small chunks.
--
-- What. append_seal_one is the fast path's statement for the turn that does not fit: the
-- same session, purge and key conditions, the negation of the fit (over the token or byte
-- budget, or the open chunk's time bucket is over), and the head moved to a new open chunk
-- holding just this turn (chunk + 1, started now, one turn, its tokens and bytes), exactly
-- what append_v2 does for one turn with open turns (none of it goes straight to
-- agent_history: the chunk it seals had turns). append_one_v2 tries it when the fast path
-- finds no row and reports the seal; anything else (a new session's first turn, a
-- duplicate key, a purged or missing session, a head another call moved in between) still
-- goes to append_v1 as before. On Citus it returns no row (append_v1's row-wise path stays).
CREATE OR REPLACE FUNCTION shardstore.append_seal_one(p_session_id uuid, p_message jsonb, p_tokens integer, p_bytes integer, p_key text, p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := statement_timestamp();
BEGIN
    IF current_setting('citus.version', true) IS NOT NULL THEN
        RETURN;
    END IF;
    WITH head AS (
        UPDATE shardstore.sessions s
           SET next_turn_seq    = s.next_turn_seq + 1,
               open_chunk_seq   = s.open_chunk_seq + 1,
               open_chunk_start = greatest(v_now, s.last_turn_at),
               open_turns       = 1,
               open_tokens      = p_tokens,
               open_bytes       = p_bytes,
               last_turn_at     = greatest(v_now, s.last_turn_at)
         WHERE s.session_id = p_session_id
           AND s.purged_at IS NULL
           AND s.open_turns > 0
           AND (s.open_tokens + p_tokens > p_budget_tokens
                OR s.open_bytes + p_bytes > p_budget_bytes
                OR date_bin(p_interval, greatest(v_now, s.last_turn_at), p_origin)
                   <> date_bin(p_interval, s.open_chunk_start, p_origin))
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
