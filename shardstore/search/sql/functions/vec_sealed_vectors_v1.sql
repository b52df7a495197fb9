-- Whether sealed turns (encryption at rest) get vectors (shardstore.text_search_config.sealed_vectors;
-- true without a config row), read under the shared side of the lock that
-- vec_sealed_vectors_set_v1 takes exclusively: an embedding batch that read "on" holds it
-- until it commits, so a switch to "off" waits for it and then deletes what it stored.
CREATE OR REPLACE FUNCTION shardstore.vec_sealed_vectors_v1()
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('shardstore.sealed_vectors', 0));
    RETURN coalesce((SELECT c.sealed_vectors FROM shardstore.text_search_config c), true);
END
$function$;
