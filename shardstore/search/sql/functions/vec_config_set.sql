CREATE OR REPLACE FUNCTION shardstore.vec_config_set(p_model text, p_dimension integer, p_window_tokens integer, p_reset boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    cfg   shardstore.embedding_config%ROWTYPE;
    v_now timestamptz := now();
BEGIN
    SELECT * INTO cfg FROM shardstore.embedding_config FOR UPDATE;
    IF FOUND AND NOT p_reset AND cfg.dimension = p_dimension
       AND lower(regexp_replace(cfg.model, '^.*/', '')) = lower(regexp_replace(p_model, '^.*/', '')) THEN
        IF cfg.window_tokens <> p_window_tokens OR cfg.model <> p_model THEN
            UPDATE shardstore.embedding_config SET window_tokens = p_window_tokens, model = p_model
             RETURNING * INTO cfg;
        END IF;
        RETURN to_jsonb(cfg);
    END IF;
    IF FOUND AND NOT p_reset THEN
        RAISE EXCEPTION USING ERRCODE = 'SS409',
            MESSAGE = format('the stored vectors come from %s (%s dimensions), not %s (%s dimensions); '
                             'vectors of two models cannot be mixed', cfg.model, cfg.dimension,
                             p_model, p_dimension),
            HINT = format('re-embed everything with the new model: shardstore reembed --model %s', p_model);
    END IF;
    -- table-level locks in a fixed order, so that a concurrent first configure waits here
    LOCK TABLE shardstore.chunk_vectors IN ACCESS EXCLUSIVE MODE;
    DROP INDEX IF EXISTS shardstore.chunk_vectors_hnsw;
    TRUNCATE shardstore.chunk_vectors;
    EXECUTE format('ALTER TABLE shardstore.chunk_vectors ALTER COLUMN embedding TYPE halfvec(%s)', p_dimension);
    CREATE INDEX chunk_vectors_hnsw ON shardstore.chunk_vectors USING hnsw (embedding halfvec_cosine_ops);
    IF cfg.singleton IS NOT NULL THEN
        INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start, queued_at, tenant_id)
        SELECT h.session_id, h.chunk_seq, h.chunk_start, v_now, h.tenant_id FROM shardstore.agent_history h
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO shardstore.embedding_config AS e (model, dimension, window_tokens, configured_at)
    VALUES (p_model, p_dimension, p_window_tokens, v_now)
    ON CONFLICT (singleton) DO UPDATE
       SET model = EXCLUDED.model, dimension = EXCLUDED.dimension,
           window_tokens = EXCLUDED.window_tokens, configured_at = v_now
    RETURNING * INTO cfg;
    RETURN to_jsonb(cfg);
END
$function$;
