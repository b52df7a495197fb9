-- Adds one table's counts to a purge result: {"table": [rows deleted, rows rewritten, bytes]}.
CREATE OR REPLACE FUNCTION shardstore.purge_acc(p_acc jsonb, p_table text, p_rows bigint, p_rewritten bigint, p_bytes bigint)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE
        WHEN coalesce(p_rows, 0) = 0 AND coalesce(p_rewritten, 0) = 0 AND coalesce(p_bytes, 0) = 0
            THEN p_acc
        ELSE p_acc || jsonb_build_object(p_table, jsonb_build_array(
            coalesce((p_acc -> p_table ->> 0)::bigint, 0) + coalesce(p_rows, 0),
            coalesce((p_acc -> p_table ->> 1)::bigint, 0) + coalesce(p_rewritten, 0),
            coalesce((p_acc -> p_table ->> 2)::bigint, 0) + coalesce(p_bytes, 0)))
    END
$function$;
