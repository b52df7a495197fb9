-- The leaf holding a tenant's vectors, as the planner's statistics see it: the leaf's
-- estimated rows (pg_class.reltuples, -1 before its first VACUUM/ANALYZE) and the share of
-- them that are the tenant's (the most-common-values frequency of tenant_id in the leaf;
-- NULL when the tenant is not among them, the leaf was never analysed, or row security
-- hides the statistics from the caller). Catalogs only: no row is read. A tenant search
-- scales hnsw.ef_search by 1 / share (vector_ops.ann_settings).
CREATE OR REPLACE FUNCTION shardstore.vec_tenant_leaf_v1(p_tenant text)
 RETURNS TABLE(r_leaf_rows real, r_share real)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_mod integer;
BEGIN
    SELECT count(*) INTO v_mod FROM pg_inherits i WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass;
    RETURN QUERY
        SELECT c.reltuples,
               (SELECT s.most_common_freqs[array_position(s.most_common_vals::text::text[], p_tenant)]
                  FROM pg_stats s
                 WHERE s.schemaname = 'shardstore' AND s.tablename = c.relname AND s.attname = 'tenant_id')
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass
           AND satisfies_hash_partition('shardstore.chunk_vectors'::regclass, v_mod,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'remainder (\d+)'))[1]::integer,
                   p_tenant);
END
$function$;
