-- The text windows of one message: its string values (at any depth, in document order) joined
-- by spaces, cut into windows of 100,000 characters, each window's lexemes as text_lexemes
-- hashes; windows without a lexeme are left out, and a message without text, or p_config NULL
-- (text search off), gives no row. A sealed message (encryption at rest: {"ss_enc": 1, "k",
-- "c", "o"?, "e"?} and nothing else) gives no row either: its strings are a key id and
-- base64 ciphertext, and the client writes its keyed windows itself (shardstore/encryption/search.py). Every writer of turn_text (fold_chunk, append_v2,
-- import_turns_v3, text_index_buffered_v1, fork_copy_indexed, text_configure_v1's rebuild)
-- inserts r_tsv into turn_text.tsv unchanged.
CREATE OR REPLACE FUNCTION shardstore.text_windows(p_config regconfig, p_message jsonb)
 RETURNS TABLE(r_window integer, r_tsv integer[])
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    WITH t AS (
        SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string'
           AND NOT (jsonb_typeof(p_message) = 'object' AND p_message -> 'ss_enc' = '1'
                    AND p_message ? 'k' AND p_message ? 'c'
                    AND p_message - ARRAY['ss_enc', 'k', 'c', 'o', 'e'] = '{}'::jsonb))
    SELECT w.i, w.lexemes
      FROM t, LATERAL (SELECT g.i, shardstore.text_lexemes(
                                       to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000)))
                                   AS lexemes
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i)
                       OFFSET 0) w
     WHERE t.txt IS NOT NULL AND t.txt <> '' AND cardinality(w.lexemes) > 0
$function$;
