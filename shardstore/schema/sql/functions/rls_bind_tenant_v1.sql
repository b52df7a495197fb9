-- SET LOCAL shardstore.tenant_id for the rest of this transaction (a no-op outside one).
CREATE OR REPLACE FUNCTION shardstore.rls_bind_tenant_v1(p_tenant text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' THEN
        RAISE EXCEPTION 'a tenant binding needs a non-empty tenant' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('SET LOCAL shardstore.tenant_id = %L', p_tenant);
END
$function$;
