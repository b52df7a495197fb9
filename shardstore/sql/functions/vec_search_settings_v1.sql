-- The settings of a tenant search, for the rest of the transaction: iterative scan keeps a
-- filtered HNSW scan going until enough rows pass the filter; strict order keeps each
-- partition's output sorted. SET LOCAL rather than set_config(): with
-- citus.propagate_set_commands = 'local' (`shardstore distribute`) Citus sends SET LOCAL on
-- to the shards, where the index scans run.
CREATE OR REPLACE FUNCTION shardstore.vec_search_settings_v1(p_ef_search integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    SET LOCAL hnsw.iterative_scan = strict_order;
    EXECUTE format('SET LOCAL hnsw.ef_search = %s', p_ef_search);
END
$function$;
