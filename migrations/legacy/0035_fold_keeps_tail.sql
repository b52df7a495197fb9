-- 0035: a fold after a seal leaves the session's newest turns in the write buffer
-- (issue 14 goal 2, tail near the floor).
--
-- Why. tail(n=20) of a session written one turn at a time read the open chunk's buffered
-- rows and, whenever they were fewer than 20, the newest folded chunk too: one whole-chunk
-- detoast (pglz, 20-40 kB; jsonb is never read in part) and a slice, where a row-per-message
-- table reads 20 small rows. That decompression was ~1x the floor's LIMIT 20 on its own
-- (docs/architecture.md, "Where tail(n=20) goes against its floor").
--
-- What. fold_sealed_v2(session, keep_turns) is fold_sealed_v1 except that it leaves in the
-- buffer the newest sealed chunks holding any of the session's newest keep_turns turns
-- (counting the open chunk's turns first): going down from the newest sealed chunk, a chunk
-- is kept while the turns newer than it number fewer than keep_turns; every older sealed
-- chunk is folded, oldest first. The client passes its default_tail_turns, so a default
-- tail() is served from buffer rows alone. Such a chunk is folded by the fold after a later
-- seal, by flush(), or by maintenance once its turns are older than flush_idle
-- (maint_fold_candidates_v1 already lists a session holding a sealed chunk buffered since
-- before then, and maint_fold_session_v1 folds with fold_sealed_v1, which keeps nothing). A
-- sealed chunk waiting in the buffer is a state every read, rewind, fork, purge and embed
-- pass already handles (a fold can always lag, e.g. when the process dies first).
--
-- Cost: an active session's buffer holds up to keep_turns more turns (uncompressed rows,
-- their text indexed on the fly by text search, as every buffered turn is) until the next
-- seal; the WAL and the fold's work are unchanged (the same chunks are folded, one seal
-- later). keep_turns 0 folds every sealed chunk, as fold_sealed_v1 does. Lock: the session
-- row FOR KEY SHARE, as in fold_sealed_v1 (0025) and for the same reason.
CREATE FUNCTION shardstore.fold_sealed_v2(p_session_id uuid, p_keep_turns integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_open   bigint;
    v_newer  bigint;
    v_upto   bigint;   -- sealed chunks below this chunk_seq are folded
    v_moved  integer := 0;
    v_start  timestamptz;
    c        record;
BEGIN
    SELECT open_chunk_seq, open_turns INTO v_open, v_newer FROM shardstore.sessions
     WHERE session_id = p_session_id
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_upto := v_open;
    IF coalesce(p_keep_turns, 0) > 0 THEN
        FOR c IN SELECT b.chunk_seq, count(*) AS turns
                   FROM shardstore.turn_buffer b
                  WHERE b.session_id = p_session_id AND b.chunk_seq < v_open
                  GROUP BY b.chunk_seq ORDER BY b.chunk_seq DESC LOOP
            EXIT WHEN v_newer >= p_keep_turns;
            v_upto := c.chunk_seq;
            v_newer := v_newer + c.turns;
        END LOOP;
    END IF;
    FOR c IN SELECT b.chunk_seq, min(b.created_at) AS first_at
               FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id AND b.chunk_seq < v_upto
              GROUP BY b.chunk_seq ORDER BY b.chunk_seq LOOP
        -- a chunk flushed while it was open already has its start (and partition) recorded
        SELECT m.chunk_start INTO v_start FROM shardstore.chunk_map m
         WHERE m.session_id = p_session_id AND m.chunk_seq = c.chunk_seq;
        v_moved := v_moved + shardstore.fold_v1(p_session_id, c.chunk_seq, coalesce(v_start, c.first_at));
    END LOOP;
    RETURN v_moved;
END
$$;

-- fold_sealed_v1 (maintenance's, and a caller's of the old name) is fold_sealed_v2 keeping
-- nothing: one body for the fold loop and its lock.
CREATE OR REPLACE FUNCTION shardstore.fold_sealed_v1(p_session_id uuid)
RETURNS integer
LANGUAGE sql
AS $$
    SELECT shardstore.fold_sealed_v2(p_session_id, 0);
$$;
