-- Per-transaction settings of a tenant search through HNSW: iterative scan in strict
-- order (the scan goes on until LIMIT rows pass the tenant filter), hnsw.ef_search and
-- hnsw.max_scan_tuples (pgvector's default of 20000 ends the scan of a tenant owning a
-- small share of its leaf before it found enough rows). SET LOCAL: Citus sends it on.
CREATE OR REPLACE FUNCTION shardstore.vec_search_settings_v2(p_ef_search integer, p_max_scan_tuples integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    SET LOCAL hnsw.iterative_scan = strict_order;
    EXECUTE format('SET LOCAL hnsw.ef_search = %s', p_ef_search);
    EXECUTE format('SET LOCAL hnsw.max_scan_tuples = %s', p_max_scan_tuples);
END
$function$;
