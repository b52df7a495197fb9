-- Bit i - 1 set: the window's lexeme hashes hold the query's i-th hash.
CREATE OR REPLACE FUNCTION shardstore.text_mask(p_lexemes integer[], p_query integer[])
 RETURNS bit varying
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT string_agg(CASE WHEN p_lexemes @> ARRAY[q.h] THEN '1' ELSE '0' END, ''
                      ORDER BY q.i)::varbit
      FROM unnest(p_query) WITH ORDINALITY AS q(h, i)
$function$;
