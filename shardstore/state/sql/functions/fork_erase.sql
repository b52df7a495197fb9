-- Removes from every fork the turns it copied from session p_origin (a purge of the origin
-- calls it), copy record by copy record in (session, chunk) order, each copying session's row
-- locked FOR UPDATE. The copied turns leave the chunk: the chunk and its chunk_map row go when
-- nothing else is left in it; otherwise it is rewritten without them (chunk_map's first turn
-- updated, the chunk queued for embedding and a summary again) and, when it is the fork's
-- open chunk, the session's open counters are recomputed. The chunk's vectors and its
-- embed_queue row are deleted, the copy record deleted and its turns un-indexed
-- (fork_copy_unindexed). Adds what it removed to the purge report p_acc and returns it.
CREATE OR REPLACE FUNCTION shardstore.fork_erase(p_origin uuid, p_acc jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    r       record;
    h       shardstore.sessions%ROWTYPE;
    v_acc   jsonb := p_acc;
    v_keep  bigint;
    v_gone  bigint;
    v_size  bigint;
    v_after bigint;
    v_vecs  bigint;
    v_turns bigint;
    v_tok   bigint;
    v_bytes bigint;
BEGIN
    FOR r IN SELECT f.* FROM shardstore.fork_copies f WHERE f.origin_session_id = p_origin
              ORDER BY f.session_id, f.chunk_seq LOOP
        SELECT * INTO h FROM shardstore.sessions x WHERE x.session_id = r.session_id FOR UPDATE;
        v_keep := NULL;
        v_gone := NULL;
        DELETE FROM shardstore.embed_queue q
         WHERE q.session_id = r.session_id AND q.chunk_seq = r.chunk_seq AND q.chunk_start = r.chunk_start;
        SELECT count(*) FILTER (WHERE (x.e->>'s')::bigint NOT BETWEEN r.first_turn_seq AND r.last_turn_seq),
               count(*) FILTER (WHERE (x.e->>'s')::bigint BETWEEN r.first_turn_seq AND r.last_turn_seq),
               pg_column_size(h2.conversation_chunk)
          INTO v_keep, v_gone, v_size
          FROM shardstore.agent_history h2, jsonb_array_elements(h2.conversation_chunk) AS x(e)
         WHERE h2.session_id = r.session_id AND h2.chunk_seq = r.chunk_seq AND h2.chunk_start = r.chunk_start
         GROUP BY h2.conversation_chunk;
        IF coalesce(v_gone, 0) > 0 THEN
            IF v_keep = 0 THEN
                DELETE FROM shardstore.agent_history x
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start;
                DELETE FROM shardstore.chunk_map m
                 WHERE m.session_id = r.session_id AND m.chunk_seq = r.chunk_seq;
                v_acc := shardstore.purge_acc(v_acc, 'shardstore.agent_history', 1, 0, v_size);
                v_acc := shardstore.purge_acc(v_acc, 'shardstore.chunk_map', 1, 0, 0);
            ELSE
                UPDATE shardstore.agent_history x
                   SET (conversation_chunk, first_turn_seq, turn_count, token_count, byte_count) =
                       (SELECT jsonb_agg(y.e ORDER BY y.ord), min((y.e->>'s')::bigint), count(*),
                               sum((y.e->>'t')::bigint),
                               sum(coalesce((y.e->>'b')::bigint, octet_length((y.e->'m')::text)))
                          FROM jsonb_array_elements(x.conversation_chunk) WITH ORDINALITY AS y(e, ord)
                         WHERE (y.e->>'s')::bigint NOT BETWEEN r.first_turn_seq AND r.last_turn_seq)
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start
                RETURNING x.first_turn_seq, pg_column_size(x.conversation_chunk) INTO v_after, v_tok;
                UPDATE shardstore.chunk_map m SET first_turn_seq = v_after
                 WHERE m.session_id = r.session_id AND m.chunk_seq = r.chunk_seq;
                INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                VALUES (r.session_id, r.chunk_seq, r.chunk_start, statement_timestamp(), h.tenant_id)
                ON CONFLICT DO NOTHING;
                INSERT INTO shardstore.summary_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
                VALUES (r.session_id, r.chunk_seq, r.chunk_start, statement_timestamp(), h.tenant_id)
                ON CONFLICT DO NOTHING;
                v_acc := shardstore.purge_acc(v_acc, 'shardstore.agent_history', 0, 1,
                                                 greatest(v_size - v_tok, 0));
            END IF;
            DELETE FROM shardstore.chunk_vectors v
             WHERE v.session_id = r.session_id AND v.chunk_seq = r.chunk_seq AND v.chunk_start = r.chunk_start;
            GET DIAGNOSTICS v_vecs = ROW_COUNT;
            v_acc := shardstore.purge_acc(v_acc, 'shardstore.chunk_vectors', v_vecs, 0, 0);
            IF h.open_chunk_seq = r.chunk_seq AND h.open_turns > 0 THEN
                SELECT count(*), coalesce(sum(b.tokens), 0), coalesce(sum(b.bytes), 0)
                  INTO v_turns, v_tok, v_bytes
                  FROM shardstore.turn_buffer b
                 WHERE b.session_id = r.session_id AND b.chunk_seq = r.chunk_seq;
                SELECT v_turns + coalesce(sum(x.turn_count), 0), v_tok + coalesce(sum(x.token_count), 0),
                       v_bytes + coalesce(sum(x.byte_count), 0)
                  INTO v_turns, v_tok, v_bytes
                  FROM shardstore.agent_history x
                 WHERE x.session_id = r.session_id AND x.chunk_seq = r.chunk_seq AND x.chunk_start = r.chunk_start;
                UPDATE shardstore.sessions x
                   SET open_turns = v_turns, open_tokens = v_tok, open_bytes = v_bytes
                 WHERE x.session_id = r.session_id;
            END IF;
        END IF;
        DELETE FROM shardstore.fork_copies f
         WHERE f.session_id = r.session_id AND f.chunk_seq = r.chunk_seq
           AND f.origin_session_id = r.origin_session_id;
        PERFORM shardstore.fork_copy_unindexed(r.session_id, r.chunk_seq, r.chunk_start,
                                                  r.first_turn_seq, r.last_turn_seq);
        v_acc := shardstore.purge_acc(v_acc, 'shardstore.fork_copies', 1, 0, 0);
    END LOOP;
    RETURN v_acc;
END
$function$;
