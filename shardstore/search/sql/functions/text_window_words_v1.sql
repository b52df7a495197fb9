-- The lexemes (as text) of each text window of one message, cut exactly as text_windows cuts
-- them: for the keyed windows of sealed turns, whose client opens the message, sends it here
-- as a statement parameter (never stored) and hashes the lexemes with a key of the turn's
-- scope before it writes them (shardstore/encryption/search.py). Windows without a lexeme
-- and p_config NULL (text search off) give no row.
CREATE OR REPLACE FUNCTION shardstore.text_window_words_v1(p_config regconfig, p_message jsonb)
 RETURNS TABLE(r_window integer, r_words text[])
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    WITH t AS (
        SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string')
    SELECT w.i, w.words
      FROM t, LATERAL (SELECT g.i, tsvector_to_array(
                                       to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000)))
                                   AS words
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i)
                       OFFSET 0) w
     WHERE p_config IS NOT NULL AND t.txt IS NOT NULL AND t.txt <> ''
       AND cardinality(w.words) > 0
$function$;
