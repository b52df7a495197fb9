-- The text search configuration, read without a lock: the configured one (NULL: text search
-- off), 'english' when text_search_config has no row. For readers (text_rank_v1,
-- text_unindexed_sessions_v1, the client's language query): a search during a change sees the
-- old windows until the change commits. Writers of windows call text_config_v1 instead.
CREATE OR REPLACE FUNCTION shardstore.text_config_read_v1()
 RETURNS regconfig
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM shardstore.text_search_config)
                THEN (SELECT c.config FROM shardstore.text_search_config c)
                ELSE 'english'::regconfig END
$function$;
