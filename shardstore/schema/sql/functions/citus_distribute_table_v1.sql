-- Makes p_rel a reference table (p_column NULL) or distributes it by p_column, colocated
-- with p_colocate ('none': a new colocation group).
CREATE OR REPLACE FUNCTION shardstore.citus_distribute_table_v1(p_rel regclass, p_column text, p_colocate text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_column IS NULL THEN
        EXECUTE 'SELECT create_reference_table($1)' USING p_rel;
    ELSE
        EXECUTE 'SELECT create_distributed_table($1, $2, colocate_with => $3)'
          USING p_rel, p_column, p_colocate;
    END IF;
END
$function$;
REVOKE ALL ON ROUTINE shardstore.citus_distribute_table_v1(regclass,text,text) FROM PUBLIC;
