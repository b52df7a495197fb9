-- text_mask_sql for keyed query lexemes: the query's lexeme i is held by a window that holds
-- any of its p_width hashes (one per data key searched), p_hashes[(i - 1) * p_width + 1 ..
-- i * p_width]; bit i - 1 of the mask set then. One `&&` of a constant per query lexeme.
CREATE OR REPLACE FUNCTION shardstore.text_mask_any_sql(p_column text, p_hashes integer[], p_width integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT '(' || string_agg(format('CASE WHEN %s && ''{%s}''::integer[] THEN ''1'' ELSE ''0'' END',
                                    p_column,
                                    array_to_string(p_hashes[(q.i - 1) * p_width + 1 : q.i * p_width], ',')),
                             ' || ' ORDER BY q.i) || ')::varbit'
      FROM generate_series(1, cardinality(p_hashes) / greatest(p_width, 1)) AS q(i)
$function$;
