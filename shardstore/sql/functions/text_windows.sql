-- As in 0022, each window's lexemes as hashes; none with the configuration off (NULL).
CREATE OR REPLACE FUNCTION shardstore.text_windows(p_config regconfig, p_message jsonb)
 RETURNS TABLE(r_window integer, r_tsv integer[])
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    WITH t AS (
        SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string')
    SELECT w.i, w.lexemes
      FROM t, LATERAL (SELECT g.i, shardstore.text_lexemes(
                                       to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000)))
                                   AS lexemes
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i)
                       OFFSET 0) w
     WHERE t.txt IS NOT NULL AND t.txt <> '' AND cardinality(w.lexemes) > 0
$function$;
