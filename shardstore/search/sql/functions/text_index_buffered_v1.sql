-- A text pass over one session's buffer: writes the windows of its buffered turns that have
-- none, as fold_chunk writes them. Holds the session row FOR KEY SHARE (it excludes rewinds,
-- purges and flushes, never appends) and the buffer rows it indexes FOR KEY SHARE SKIP LOCKED
-- (a turn a fold is moving is skipped; the fold indexes it). Returns the number of turns
-- indexed (0: none left, text search off, or the session is gone or purged).
CREATE OR REPLACE FUNCTION shardstore.text_index_buffered_v1(p_session_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    -- read here, not in the statement: on Citus a shard query may not read the reference table
    v_config regconfig := shardstore.text_config_v1();
    s        shardstore.sessions%ROWTYPE;
    v_seqs   bigint[] := '{}';
    v_n      integer;
    k        record;
BEGIN
    IF v_config IS NULL THEN
        RETURN 0;  -- text indexing is off
    END IF;
    SELECT * INTO s FROM shardstore.sessions x WHERE x.session_id = p_session_id FOR KEY SHARE;
    IF NOT FOUND OR s.purged_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    -- the turns to index, locked (a plain router query per session, as retention's)
    FOR k IN SELECT b.turn_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id
                AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t
                                 WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq)
                FOR KEY SHARE SKIP LOCKED LOOP
        v_seqs := v_seqs || k.turn_seq;
    END LOOP;
    IF cardinality(v_seqs) = 0 THEN
        RETURN 0;
    END IF;
    WITH texted AS (
        INSERT INTO shardstore.turn_text
               (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
        SELECT b.session_id, b.turn_seq, w.r_window, b.chunk_seq, s.tenant_id, s.agent_id,
               b.created_at, w.r_tsv
          FROM shardstore.turn_buffer b,
               LATERAL shardstore.text_windows(v_config, b.message) w
         WHERE b.session_id = p_session_id AND b.turn_seq = ANY (v_seqs)
        ON CONFLICT DO NOTHING
        RETURNING turn_seq
    )
    SELECT count(DISTINCT x.turn_seq) INTO v_n FROM texted x;
    RETURN v_n;
END
$function$;
