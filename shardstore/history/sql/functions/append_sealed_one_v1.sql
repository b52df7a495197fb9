-- An encrypted append of one turn in one statement: append_sealed_v1's checks with scalar
-- arguments, as append_one_v2 takes them. One turn is almost every encrypted append; arrays
-- and a JSON array to unpack cost it about a third of what encryption adds to the statement.
-- The client sealed the turn for p_seq (NULL: it knows the session has the turn's
-- idempotency key; the server stores nothing) in the rewind epoch p_epoch, from the head it
-- kept from its previous append. After append_one_v2, whose write of the head holds the
-- session row and which moves no turn out of the buffer: the turn must have got p_seq, the
-- turn before it must be sealed under the key id of p_message (a data-key rotation's final
-- check locks the session row and shreds the old versions only when no turn of the session
-- names one, so an append sealed under an old version that reaches the row after such a check
-- is refused here, and one that reached it before commits before the check, which finds it),
-- and the session's newest epoch must still be p_epoch; else SS412 and, the statement
-- failing, nothing of it is written (the client then appends through the locked head read).
CREATE OR REPLACE FUNCTION shardstore.append_sealed_one_v1(p_session_id uuid, p_epoch bigint, p_seq bigint, p_message jsonb, p_tokens integer, p_bytes integer, p_key text, p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_epochs bigint[];
BEGIN
    -- the row returned reaches the client only if the statement ends without an error
    SELECT x.r_turn_seq, x.r_chunk_seq, x.r_tokens, x.r_duplicate, x.r_sealed
      INTO r_turn_seq, r_chunk_seq, r_tokens, r_duplicate, r_sealed
      FROM shardstore.append_one_v2(p_session_id, p_message, p_tokens, p_bytes, p_key,
                                    p_budget_tokens, p_budget_bytes, p_interval, p_origin) x;
    IF NOT r_duplicate THEN
        IF r_turn_seq IS DISTINCT FROM p_seq THEN
            RAISE EXCEPTION USING ERRCODE = 'SS412',
                MESSAGE = format('session %s was appended to since the head was read',
                                 p_session_id);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                        WHERE b.session_id = p_session_id AND b.turn_seq = p_seq - 1
                          AND b.message->>'k' = p_message->>'k') THEN
            RAISE EXCEPTION USING ERRCODE = 'SS412',
                MESSAGE = format('the turn before the append to session %s is not sealed under '
                                 'the data key the append was sealed with', p_session_id);
        END IF;
    END IF;
    SELECT s.rewind_epochs INTO v_epochs FROM shardstore.sessions s
     WHERE s.session_id = p_session_id;
    IF coalesce(v_epochs[cardinality(v_epochs)], 0) <> p_epoch THEN
        RAISE EXCEPTION USING ERRCODE = 'SS412',
            MESSAGE = format('session %s was rewound since the head was read', p_session_id);
    END IF;
    RETURN NEXT;
END
$function$;
