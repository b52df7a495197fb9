-- 0025: fold_sealed_v1 holds the session row FOR KEY SHARE while it folds.
--
-- The race it closes (tests/test_rewind.py::test_concurrent_appends_folds_and_rewinds failed
-- about 1 run in 10 with "chunk_map row missing or has another start"). A background fold
-- read the session's open chunk, a sealed chunk's first turn time and its chunk_map start
-- without a lock, then called fold_v1, whose DELETE ran with a later snapshot. A rewind that
-- committed in between, followed by appends that refilled the same chunk_seq (rewind reuses
-- chunk numbers), let that DELETE move the NEW chunk's turns under the OLD chunk's start:
-- one chunk_seq, two agent_history rows with different chunk_start, and chunk_map naming one
-- of them. Widening the window with a 20 ms sleep made it fail 3+ runs of 6; with this lock,
-- 8 of 8 passed with the same sleep.
--
-- FOR KEY SHARE conflicts with the FOR UPDATE that rewind_v1, flush_v1, purges and batch
-- appends (append_v1) take first, so the fold reads and moves a state none of them is
-- changing; it does not conflict with the row update of a single-turn append that fits
-- (append_one_v1's UPDATE takes FOR NO KEY UPDATE), so appends to the open chunk do not
-- wait for a fold. Lock order stays session row, then buffer rows, as everywhere else.
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v1(p_session_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_open  bigint;
    v_moved integer := 0;
    v_start timestamptz;
    c       record;
BEGIN
    SELECT open_chunk_seq INTO v_open FROM shardstore.sessions
     WHERE session_id = p_session_id
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR c IN SELECT b.chunk_seq, min(b.created_at) AS first_at
               FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id AND b.chunk_seq < v_open
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        -- a chunk flushed while it was open already has its start (and partition) recorded
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = c.chunk_seq;
        v_moved := v_moved + shardstore.fold_v1(p_session_id, c.chunk_seq, coalesce(v_start, c.first_at));
    END LOOP;
    RETURN v_moved;
END
$$;
