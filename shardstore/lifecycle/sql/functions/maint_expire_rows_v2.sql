CREATE OR REPLACE FUNCTION shardstore.maint_expire_rows_v2(p_before timestamp with time zone, p_batch integer)
 RETURNS TABLE(r_sessions bigint, r_turns bigint)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ids   uuid[] := '{}';
    v_sids  uuid[] := '{}';
    v_upto  bigint[] := '{}';
    v_seqs  bigint[];
    v_keys  text[];
    v_sid   uuid;
    c       record;
    k       record;
    t       record;
BEGIN
    -- candidates without locks, then each session locked on its own with SKIP LOCKED (a
    -- session being written to is skipped; its condition is checked again under the lock)
    FOR c IN SELECT x.session_id FROM shardstore.sessions x
              WHERE x.purged_at IS NULL AND coalesce(x.last_turn_at, x.created_at) < p_before
              LIMIT p_batch LOOP
        PERFORM 1 FROM shardstore.sessions s
          WHERE s.session_id = c.session_id AND s.purged_at IS NULL
            AND coalesce(s.last_turn_at, s.created_at) < p_before
            FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM shardstore.sessions s WHERE s.session_id = c.session_id;
        v_ids := v_ids || c.session_id;
    END LOOP;
    IF cardinality(v_ids) > 0 THEN
        DELETE FROM shardstore.turn_buffer WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.chunk_map WHERE session_id = ANY (v_ids);
        DELETE FROM shardstore.turn_keys WHERE session_id = ANY (v_ids);
        FOR t IN SELECT r.table_name, r.session_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin
                  ORDER BY r.position, r.table_name::text LOOP
            EXECUTE format('DELETE FROM %s WHERE %I = ANY ($1)', t.table_name, t.session_column)
              USING v_ids;
        END LOOP;
    END IF;
    r_sessions := cardinality(v_ids);
    r_turns := 0;
    -- old buffered turns: candidates without locks, then per session the rows no fold holds
    FOR c IN SELECT x.session_id, array_agg(x.turn_seq) AS seqs
               FROM (SELECT b.session_id, b.turn_seq FROM shardstore.turn_buffer b
                      WHERE b.created_at < p_before LIMIT p_batch) x
              GROUP BY x.session_id LOOP
        v_seqs := '{}';
        v_keys := '{}';
        FOR k IN SELECT b.turn_seq, b.idempotency_key FROM shardstore.turn_buffer b
                  WHERE b.session_id = c.session_id AND b.turn_seq = ANY (c.seqs)
                    AND b.created_at < p_before
                    FOR UPDATE SKIP LOCKED LOOP
            v_seqs := v_seqs || k.turn_seq;
            IF k.idempotency_key IS NOT NULL THEN
                v_keys := v_keys || k.idempotency_key;
            END IF;
        END LOOP;
        CONTINUE WHEN cardinality(v_seqs) = 0;
        DELETE FROM shardstore.turn_buffer b
         WHERE b.session_id = c.session_id AND b.turn_seq = ANY (v_seqs);
        IF cardinality(v_keys) > 0 THEN
            DELETE FROM shardstore.turn_keys x
             WHERE x.session_id = c.session_id AND x.idempotency_key = ANY (v_keys);
        END IF;
        r_turns := r_turns + cardinality(v_seqs);
        v_sids := v_sids || c.session_id;
        v_upto := v_upto || (SELECT max(s) FROM unnest(v_seqs) AS s);
    END LOOP;
    IF cardinality(v_sids) > 0 THEN
        -- turns of a session are written in order: every turn up to the newest expired one is older
        FOR t IN SELECT r.table_name, r.session_column, r.turn_column FROM shardstore.table_registry r
                  WHERE r.kind = 'session' AND r.purge_rows AND NOT r.builtin AND r.turn_column IS NOT NULL
                  ORDER BY r.position, r.table_name::text LOOP
            FOR i IN 1 .. cardinality(v_sids) LOOP
                EXECUTE format('DELETE FROM %s x WHERE x.%I = $1 AND x.%I <= $2',
                               t.table_name, t.session_column, t.turn_column)
                  USING v_sids[i], v_upto[i];
            END LOOP;
        END LOOP;
    END IF;
    RETURN NEXT;
END
$function$;
