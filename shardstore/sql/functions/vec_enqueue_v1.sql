-- Every chunk write (fold, flush, purge rewrite) queues the chunk for (re-)embedding.
CREATE OR REPLACE FUNCTION shardstore.vec_enqueue_v1()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO shardstore.embed_queue (session_id, chunk_seq, chunk_start)
    VALUES (NEW.session_id, NEW.chunk_seq, NEW.chunk_start)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$function$;
