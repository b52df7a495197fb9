-- text_mask_sql for keyed query lexemes (text_rank_keyed_v1): bit i - 1 set when the window
-- in p_column holds lexeme i hashed with its own session's key, the key in slot p_slot (an
-- SQL expression): element (p_slot - 1) * p_lexemes + i of the hashes' parameter, written
-- $H here (the caller puts its parameter's number in). One `@>` of one hash per lexeme.
CREATE OR REPLACE FUNCTION shardstore.text_mask_slot_sql(p_column text, p_slot text, p_lexemes integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT '(' || string_agg(format('CASE WHEN %s @> ARRAY[$H[(%s - 1) * %s + %s]] THEN ''1'' ELSE ''0'' END',
                                    p_column, p_slot, p_lexemes, q.i),
                             ' || ' ORDER BY q.i) || ')::varbit'
      FROM generate_series(1, p_lexemes) AS q(i)
$function$;
