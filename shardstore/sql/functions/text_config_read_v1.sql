-- 0039: a change of the text search configuration and the writers of text windows
-- serialise, so no window of the old configuration outlives the change.
--
-- Why. text_configure_v1 (0026) updates the configuration, deletes every window and rebuilds
-- them from the folded turns, in one transaction. A writer (a fold, a text pass over the
-- buffer, an import, a fork's copy) reads the configuration when it starts; one that read it
-- before the change committed and wrote its windows after the rebuild's statements took their
-- snapshots kept windows of the old language (or windows at all, after a switch to off) that
-- nothing removed: the turn's windows no longer matched its search query's parsing.
--
-- What. text_config_v1(), which every writer of windows calls (and only writers, from this
-- migration on), takes a shared transaction-level advisory lock before it reads the
-- configuration; text_configure_v1 takes the same lock exclusively before anything else.
-- So a change waits for every writer transaction that read the old configuration to commit
-- (its rebuild then sees their chunks and deletes their windows), and a writer that starts
-- meanwhile waits at its read until the change commits, then reads the new configuration
-- (text_config_v1 is VOLATILE: its read takes a fresh snapshot after the wait). Shared locks
-- do not conflict with each other: writers never wait for writers. Readers (text_rank_v1,
-- text_unindexed_sessions_v1, the client's language query) read text_config_read_v1(), the
-- old body, without the lock: a search during a change sees the old windows until it
-- commits, as before. A writer waiting behind a change that waits for another writer which
-- waits for the first one's row lock is a soft deadlock; PostgreSQL's detector reorders the
-- lock queue (after deadlock_timeout) rather than aborting anyone.
--
-- On Citus the lock is per node: a fold delegated to a worker does not see the coordinator's
-- lock, so the race stays open there (docs/scale-out.md).
CREATE OR REPLACE FUNCTION shardstore.text_config_read_v1()
 RETURNS regconfig
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM shardstore.text_search_config)
                THEN (SELECT c.config FROM shardstore.text_search_config c)
                ELSE 'english'::regconfig END
$function$;
