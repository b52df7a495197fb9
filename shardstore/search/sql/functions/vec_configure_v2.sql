-- Sets the embedding configuration (model, dimension, window tokens) through vec_config_set,
-- which refuses another model's vectors (SS409) unless p_reset. A reset (reembed, or the
-- first model) drops every vector: the watermarks (embed_marks) go first, so that a worker
-- holding a session's rows is waited for before chunk_vectors is locked, the order the worker
-- takes them in; then vec_config_set does the rest.
CREATE OR REPLACE FUNCTION shardstore.vec_configure_v2(p_model text, p_dimension integer, p_window_tokens integer, p_reset boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_reset OR NOT EXISTS (SELECT 1 FROM shardstore.embedding_config) THEN
        DELETE FROM shardstore.embed_marks;
    END IF;
    RETURN shardstore.vec_config_set(p_model, p_dimension, p_window_tokens, p_reset);
END
$function$;
