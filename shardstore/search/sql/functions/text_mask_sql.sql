-- text_mask as an SQL expression over the column p_column, for statements text_rank_v1
-- builds: no function call per window (an SQL function with a FROM is not inlined: ~4 us a
-- call, 4 ms for a 1,000-window sample), one `@>` of a constant per query lexeme.
CREATE OR REPLACE FUNCTION shardstore.text_mask_sql(p_column text, p_query integer[])
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT '(' || string_agg(format('CASE WHEN %s @> ''{%s}''::integer[] THEN ''1'' ELSE ''0'' END',
                                    p_column, q.h), ' || ' ORDER BY q.i) || ')::varbit'
      FROM unnest(p_query) WITH ORDINALITY AS q(h, i)
$function$;
