-- 0026: full-text indexing can be switched off (issue 14, goal 3: disk per payload byte).
--
-- shardstore.turn_text (one stripped tsvector per turn window and its GIN index) is most of
-- the disk a stored turn costs: 1.0-1.8 bytes per payload byte against 0.5-0.8 for
-- everything else (benchmarks/results/disk.md). A database that never searches by text
-- can now say so: text_configure_v1(NULL) stores config = NULL, deletes every window, and
-- from then on text_config_v1() is NULL, so every writer (fold_v1, append_v1,
-- text_configure_v1's rebuild, the on-the-fly windows of buffered turns) gets no windows
-- from text_windows_v1 (to_tsvector of a NULL configuration is NULL, filtered out) and
-- writes none. text_configure_v1('english') turns it on again and rebuilds from the folded
-- turns, as a language switch always did. Nothing else changes: the writers read the
-- configuration already.
ALTER TABLE shardstore.text_search_config ALTER COLUMN config DROP NOT NULL;

-- NULL when text indexing is off; 'english' where the row is missing, as before
CREATE OR REPLACE FUNCTION shardstore.text_config_v1()
RETURNS regconfig
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM shardstore.text_search_config)
                THEN (SELECT c.config FROM shardstore.text_search_config c)
                ELSE 'english'::regconfig END
$$;
