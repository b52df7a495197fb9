-- For writers of windows: the configuration, read after a shared lock that a change of it
-- holds exclusively (NULL when text indexing is off).
CREATE OR REPLACE FUNCTION shardstore.text_config_v1()
 RETURNS regconfig
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('shardstore.text_config', 0));
    RETURN shardstore.text_config_read_v1();
END
$function$;
