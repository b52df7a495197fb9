-- A single turn that does not fit the open chunk (over the token or byte budget, or past the
-- open chunk's time bucket), for a live session with open turns and a key (if any) not seen:
-- seals the open chunk and starts the next one holding just this turn (chunk + 1, one turn,
-- its tokens and bytes), in one UPDATE of the session head (which holds the session row to
-- commit) and one INSERT into the buffer: what append_v2 writes for that turn. The sealed
-- chunk stays buffered for a fold; nothing goes to agent_history here. No row otherwise (a
-- new session's first turn, a duplicate key, a purged or missing session, a head another call
-- moved meanwhile): the caller goes on to append_v2. Where Citus is loaded it returns no row
-- at once (append_v2's row-wise path). Why one statement: the batch function cost a sealing
-- call ~0.4 ms more (docs/decisions/0013-seal-lock-and-statement.md).
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
