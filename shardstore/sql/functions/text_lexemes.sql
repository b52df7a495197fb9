-- 0042: turn_text keeps each window's lexemes as sorted 32-bit hashes (integer[]) instead of
-- a stripped tsvector (docs/architecture.md "Disk", issue 14 goal 3).
--
-- Why. A stripped tsvector stores a 4-byte WordEntry and the lexeme's text for each lexeme;
-- on this corpus a window holds ~117 lexemes of 4.5 characters, 980 bytes, so the vectors
-- alone were 0.64-0.75 per payload byte, more than the compressed chunks. The ranking
-- (text_rank_v1, 0019) reads only which query lexemes a window holds and how many lexemes it
-- has: a sorted array of hashtext(lexeme) answers both in 4 bytes a lexeme, and its GIN
-- index (array_ops) finds the windows holding a lexeme by `@>`. Measured on 100 sessions of
-- 100 agent turns: 0.72 per payload byte for the arrays and their indexes against 1.40.
--
-- What.
-- * text_lexemes(tsvector): the sorted, distinct hashes of its lexemes.
-- * text_windows keeps its name, arguments and output names (every writer of windows,
--   fold_chunk, append_v2, import_turns_v3, text_index_buffered_v1, fork_copy_indexed and
--   text_configure_v1's rebuild, inserts its r_tsv into turn_text.tsv unchanged); r_tsv is now
--   the window's lexeme hashes. The column keeps its name (tsv: the window's text search
--   vector, in this form) for the same reason.
-- * turn_text.tsv becomes integer[], converted in place (a rewrite of the table), and its GIN
--   index is built again (gin_pending_list_limit 256 kB on each partition, as 0022 set).
-- * text_rank_v1 keeps, per candidate window, its number of lexemes and a varbit mask of
--   which query lexemes it holds, computed by the statement that reads the window (an inline
--   expression for rows of turn_text, text_mask_sql formatted into the statement; the
--   function text_mask for buffered turns windowed on the fly), instead of the vector
--   itself; of the sample it keeps only the windows sharing a lexeme with the query (`&&`)
--   and counts the others in the sample's size. The sample's frequencies, the candidate
--   filter and BM25 read those. Same candidates, same frequencies, same scores, but for hash
--   collisions: two lexemes with one hash count as one (a window holding one matches a query
--   for the other), about 3e-8 per window and query lexeme on this corpus.
-- hashtext() backs hash indexes on text, which pg_upgrade carries over, so it stays the same
-- across server versions; were it to change, the windows would need rebuilding (switching
-- the language off and on again with text_configure_v1 does that).
CREATE OR REPLACE FUNCTION shardstore.text_lexemes(p_tsv tsvector)
 RETURNS integer[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT coalesce(array_agg(DISTINCT hashtext(l) ORDER BY hashtext(l)), '{}')
      FROM unnest(tsvector_to_array(p_tsv)) AS l
$function$;
