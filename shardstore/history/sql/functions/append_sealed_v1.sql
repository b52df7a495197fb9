-- An encrypted append of a batch in one statement (shardstore/encryption/turns.py; one turn
-- is append_sealed_one_v1): the client sealed each turn for the seq it expects it to get
-- (p_seqs; NULL for a turn whose key it knows the session has) in the rewind epoch p_epoch,
-- from a head it kept from its previous append. The turns go in as append_v2 writes them;
-- then every stored turn must have got its expected seq and the session's newest epoch must
-- still be p_epoch, else SS412 and, the statement failing, nothing of it is written (the
-- client then appends through the locked head read). The epoch is read after the append,
-- which holds the session row from its write of the head on: no rewind commits in between,
-- and one that committed before is seen.
-- The data key: the client read it before this statement, so a data-key rotation may have made
-- a new version current since. With the session row locked, the turn before the first new one
-- must be sealed under the key id of p_messages: a rotation's final check locks that row FOR
-- UPDATE and shreds the old versions only when no turn of the session names one, so an append
-- that reaches the row after such a check with an old version is refused here (SS412; the
-- client then reads the key under the locked head), and one that reached it before commits
-- before the check, which finds it. append_v2 may fold the chunk holding that turn, so the
-- row is locked and the turn checked first.
CREATE OR REPLACE FUNCTION shardstore.append_sealed_v1(p_session_id uuid, p_epoch bigint, p_seqs bigint[], p_messages jsonb, p_tokens integer[], p_bytes integer[], p_keys text[], p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamp with time zone, p_keep_turns integer)
 RETURNS TABLE(r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean, r_sealed boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_epochs bigint[];
    v_i      integer := 0;
    v_first  bigint;
    t        record;
BEGIN
    -- rows returned here reach the client only if the statement ends without an error
    SELECT min(q) INTO v_first FROM unnest(p_seqs) AS q;
    IF v_first IS NOT NULL THEN
        PERFORM 1 FROM shardstore.sessions s WHERE s.session_id = p_session_id
            FOR NO KEY UPDATE;
        IF NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                        WHERE b.session_id = p_session_id AND b.turn_seq = v_first - 1
                          AND b.message->>'k' = p_messages->0->>'k') THEN
            RAISE EXCEPTION USING ERRCODE = 'SS412',
                MESSAGE = format('the turn before the append to session %s is not sealed '
                                 'under the data key the append was sealed with',
                                 p_session_id);
        END IF;
    END IF;
    FOR t IN SELECT x.* FROM shardstore.append_v2(p_session_id, p_messages, p_tokens,
                                                  p_bytes, p_keys, p_budget_tokens,
                                                  p_budget_bytes, p_interval, p_origin,
                                                  p_keep_turns) x LOOP
        v_i := v_i + 1;
        IF NOT t.r_duplicate AND t.r_turn_seq IS DISTINCT FROM p_seqs[v_i] THEN
            RAISE EXCEPTION USING ERRCODE = 'SS412',
                MESSAGE = format('session %s was appended to since the head was read',
                                 p_session_id);
        END IF;
        r_turn_seq := t.r_turn_seq; r_chunk_seq := t.r_chunk_seq; r_tokens := t.r_tokens;
        r_duplicate := t.r_duplicate; r_sealed := t.r_sealed;
        RETURN NEXT;
    END LOOP;
    SELECT s.rewind_epochs INTO v_epochs FROM shardstore.sessions s
     WHERE s.session_id = p_session_id;
    IF coalesce(v_epochs[cardinality(v_epochs)], 0) <> p_epoch THEN
        RAISE EXCEPTION USING ERRCODE = 'SS412',
            MESSAGE = format('session %s was rewound since the head was read', p_session_id);
    END IF;
END
$function$;
