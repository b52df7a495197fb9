-- Purges a session's oldest turns, atomically: those before turn p_before_seq, or (when it is
-- NULL) those written before p_before. Deleted: buffered turns, chunks wholly before the cut
-- (with their chunk_map rows), idempotency keys, and registered rows tied to those turns or
-- chunks; the chunk holding the cut is rewritten without the purged turns. The session stays
-- live; its open chunk's counters are recomputed. A purged session returns "purged": true
-- and is left alone; an unknown one raises SS404 when p_strict, else returns "missing": true.
-- Locks the session row FOR UPDATE. A dry run does it all and rolls it back (SS299, caught)
-- to return the report. Returns {"tables": {...}, "cut": first turn kept}; the session's
-- first_turn_seq becomes the cut when the cut is past it.
CREATE OR REPLACE FUNCTION shardstore.purge_range_data(p_session_id uuid, p_before_seq bigint, p_before timestamp with time zone, p_dry_run boolean, p_skip_parts text[], p_strict boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s        shardstore.sessions%ROWTYPE;
    v_acc    jsonb;
    v_cut    bigint;
    v_first  bigint;
    v_start  timestamptz;
    v_turns  bigint;
    v_tokens bigint;
    v_bytes  bigint;
    v_ft     bigint;
    v_fk     bigint;
    v_fb     bigint;
BEGIN
    BEGIN
        SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR UPDATE;
        IF NOT FOUND THEN
            IF p_strict THEN
                RAISE EXCEPTION USING ERRCODE = 'SS404', MESSAGE = format('session %s does not exist', p_session_id);
            END IF;
            RETURN jsonb_build_object('tables', '{}'::jsonb, 'missing', true);
        END IF;
        IF s.purged_at IS NOT NULL THEN
            RETURN jsonb_build_object('tables', '{}'::jsonb, 'purged', true);
        END IF;
        v_cut := least(coalesce(p_before_seq, shardstore.purge_cut(p_session_id, p_before)),
                       s.next_turn_seq);
        v_acc := shardstore.purge_rows(p_session_id, v_cut, p_skip_parts);
        UPDATE shardstore.sessions x SET first_turn_seq = v_cut
         WHERE x.session_id = p_session_id AND x.first_turn_seq < v_cut;
        v_first := s.next_turn_seq - s.open_turns;  -- first turn of the open chunk
        IF s.open_turns > 0 AND v_cut > v_first THEN
            SELECT count(*), coalesce(sum(b.tokens), 0), coalesce(sum(b.bytes), 0)
              INTO v_turns, v_tokens, v_bytes
              FROM shardstore.turn_buffer b
             WHERE b.session_id = p_session_id AND b.chunk_seq = s.open_chunk_seq;
            SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
             WHERE m.session_id = p_session_id AND m.chunk_seq = s.open_chunk_seq;
            IF FOUND THEN
                EXECUTE 'SELECT h.turn_count, h.token_count, h.byte_count FROM shardstore.agent_history h
                          WHERE h.session_id = $1 AND h.chunk_seq = $2 AND h.chunk_start = $3'
                   INTO v_ft, v_fk, v_fb USING p_session_id, s.open_chunk_seq, v_start;
                v_turns := v_turns + coalesce(v_ft, 0);
                v_tokens := v_tokens + coalesce(v_fk, 0);
                v_bytes := v_bytes + coalesce(v_fb, 0);
            END IF;
            UPDATE shardstore.sessions x
               SET open_turns = v_turns, open_tokens = v_tokens, open_bytes = v_bytes
             WHERE x.session_id = p_session_id;
        END IF;
        -- the first turn kept: never before what an earlier range purge kept (rows written
        -- since and tied to turns before it, a checkpoint, are only removed when asked)
        v_acc := jsonb_build_object('tables', v_acc, 'cut', greatest(v_cut, s.first_turn_seq));
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;
    END;
    RETURN v_acc;
END
$function$;
