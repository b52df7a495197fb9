-- 0015: importers (docs/architecture.md "Moving in"): the append path of a JSONL import,
-- which keeps each turn's created_at and turn_seq so that an export imported into an empty
-- database gives back the same turn records. No new table.

-- Appends turns with the created_at they had where they came from. The chunk rules are
-- append_v1's, applied to the given times instead of the statement's: a chunk starts at its
-- first turn's created_at, the turn that would cross the token budget, the byte cap or a
-- partition boundary (date_bin of its own created_at against the chunk's start) seals the
-- open chunk, turn_seq and chunk_seq stay gap-free. On top of that:
--   * p_first_seq must be the session's next_turn_seq. An empty session (no turn, no chunk)
--     may start above 0: an export of a session whose first turns a range purge removed
--     starts at the first turn it kept.
--   * created_at never goes back: each turn's is >= the previous one's (and the session's
--     last_turn_at), and none lies more than 5 minutes after the server's clock (a later
--     append would otherwise inherit a future time: append_v1 takes greatest(now, last)).
--   * a key already used in the session is refused, not reported as a duplicate: an
--     import that repeats a key is not a retry.
-- A refusal is returned as r_status ('seq', 'time', 'future', 'key') with the 0-based
-- index of the turn in the batch; the caller raises and its transaction rolls back what
-- this call inserted. 'ok': all stored; r_sealed: a chunk was sealed (fold it).
CREATE FUNCTION shardstore.import_turns_v1(
    p_session_id    uuid,
    p_first_seq     bigint,
    p_messages      jsonb,
    p_tokens        integer[],
    p_bytes         integer[],
    p_keys          text[],
    p_at            timestamptz[],
    p_budget_tokens bigint,
    p_budget_bytes  bigint,
    p_interval      interval,
    p_origin        timestamptz)
RETURNS TABLE (r_status text, r_index integer, r_sealed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_n      integer := coalesce(array_length(p_tokens, 1), 0);
    v_at     timestamptz;
    v_prev   timestamptz;
    v_sealed boolean := false;
    v_limit  timestamptz := statement_timestamp() + interval '5 minutes';
BEGIN
    s := shardstore.lock_session_v1(p_session_id);
    IF s.next_turn_seq <> p_first_seq THEN
        IF s.next_turn_seq = 0 AND s.open_chunk_seq = 0 AND s.open_turns = 0 AND p_first_seq > 0 THEN
            s.next_turn_seq := p_first_seq;
        ELSE
            r_status := 'seq'; r_index := 0; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    v_prev := s.last_turn_at;
    FOR i IN 1 .. v_n LOOP
        v_at := p_at[i];
        IF v_prev IS NOT NULL AND v_at < v_prev THEN
            r_status := 'time'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_at > v_limit THEN
            r_status := 'future'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_keys[i] IS NOT NULL AND EXISTS (
               SELECT 1 FROM shardstore.turn_keys k
                WHERE k.session_id = p_session_id AND k.idempotency_key = p_keys[i]) THEN
            r_status := 'key'; r_index := i - 1; r_sealed := false;
            RETURN NEXT;
            RETURN;
        END IF;
        IF s.open_turns > 0 AND (
               s.open_tokens + p_tokens[i] > p_budget_tokens
            OR s.open_bytes + p_bytes[i] > p_budget_bytes
            OR date_bin(p_interval, s.open_chunk_start, p_origin) <> date_bin(p_interval, v_at, p_origin)) THEN
            v_sealed := true;
            s.open_chunk_seq := s.open_chunk_seq + 1;
            s.open_turns := 0; s.open_tokens := 0; s.open_bytes := 0;
        END IF;
        IF s.open_turns = 0 THEN
            s.open_chunk_start := v_at;
        END IF;
        INSERT INTO shardstore.turn_buffer
               (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message)
        VALUES (p_session_id, s.next_turn_seq, s.open_chunk_seq, v_at, p_tokens[i], p_bytes[i],
                p_keys[i], p_messages -> (i - 1));
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO shardstore.turn_keys
                   (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at)
            VALUES (p_session_id, p_keys[i], s.next_turn_seq, s.open_chunk_seq, p_tokens[i], v_at);
        END IF;
        s.next_turn_seq := s.next_turn_seq + 1;
        s.open_turns := s.open_turns + 1;
        s.open_tokens := s.open_tokens + p_tokens[i];
        s.open_bytes := s.open_bytes + p_bytes[i];
        v_prev := v_at;
    END LOOP;
    UPDATE shardstore.sessions
       SET next_turn_seq = s.next_turn_seq, open_chunk_seq = s.open_chunk_seq,
           open_chunk_start = s.open_chunk_start, open_turns = s.open_turns,
           open_tokens = s.open_tokens, open_bytes = s.open_bytes, last_turn_at = v_prev
     WHERE session_id = p_session_id;
    r_status := 'ok'; r_index := v_n; r_sealed := v_sealed;
    RETURN NEXT;
END
$$;
