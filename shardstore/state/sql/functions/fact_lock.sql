-- The locks every fact writer takes, in this order: the subject's lock shared (a
-- purge_subject takes it exclusively, so no fact of the subject commits behind its delete),
-- then the key's lock exclusively (writers of one key serialise). Advisory, transaction
-- scoped; a hash collision only serialises two keys more than needed.
CREATE OR REPLACE FUNCTION shardstore.fact_lock(p_tenant text, p_subject text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(
        hashtextextended(jsonb_build_array('fact-subject', p_tenant, p_subject)::text, 8));
    IF p_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(
            hashtextextended(jsonb_build_array('fact-key', p_tenant, p_subject, p_key)::text, 8));
    END IF;
END
$function$;
