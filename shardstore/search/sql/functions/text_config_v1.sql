-- For writers of windows (a fold, a text pass over the buffer, an import, a fork's copy): the
-- configuration (NULL when text search is off), read after taking a shared
-- transaction-level advisory lock that text_configure_v1 takes exclusively. So a change waits
-- for every writer transaction that read the old configuration and then deletes and rebuilds
-- their windows, and a writer starting meanwhile waits and reads the new one; without it a
-- writer could leave windows of the old language that nothing removes. Writers never wait for
-- each other (shared locks). VOLATILE: its read takes a fresh snapshot after the wait, so call
-- it once per statement's worth of work, into a variable. On Citus the lock is per node: a
-- fold delegated to a worker does not see the coordinator's lock (docs/scale-out.md).
CREATE OR REPLACE FUNCTION shardstore.text_config_v1()
 RETURNS regconfig
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('shardstore.text_config', 0));
    RETURN shardstore.text_config_read_v1();
END
$function$;
