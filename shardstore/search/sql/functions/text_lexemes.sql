-- The sorted, distinct 32-bit hashes (hashtext) of a tsvector's lexemes; '{}' for an empty
-- vector, NULL for NULL (STRICT). This is the form of a text window in turn_text.tsv
-- (integer[], GIN array_ops: `@>` finds the windows holding a lexeme): the ranking
-- (text_rank_v1) needs only which query lexemes a window holds and how many lexemes it has,
-- and a hash answers both in 4 bytes a lexeme instead of a stripped tsvector's entry and
-- text (0.72 against 1.40 per payload byte, docs/decisions/0012-text-windows-as-lexeme-hashes.md).
-- Two lexemes with one hash count as one (a window holding one matches a query for the other).
-- hashtext() backs hash indexes on text, which pg_upgrade carries over, so it is stable across
-- server versions; were it to change, the windows would need rebuilding (switching the
-- language off and on again with text_configure_v1 does that).
CREATE OR REPLACE FUNCTION shardstore.text_lexemes(p_tsv tsvector)
 RETURNS integer[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT coalesce(array_agg(DISTINCT hashtext(l) ORDER BY hashtext(l)), '{}')
      FROM unnest(tsvector_to_array(p_tsv)) AS l
$function$;
