CREATE OR REPLACE FUNCTION shardstore.purge_truncate_partition_v1(p_partition text, p_before timestamp with time zone, p_tenant text, p_dry_run boolean, p_lock_timeout interval)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_rel     regclass := to_regclass(format('shardstore.%I', p_partition));
    v_rows    bigint;
    v_bytes   bigint;
    v_old     boolean;
    v_tenant  boolean;
BEGIN
    IF v_rel IS NULL OR NOT EXISTS (
            SELECT 1 FROM pg_inherits i
             WHERE i.inhrelid = v_rel AND i.inhparent = 'shardstore.agent_history'::regclass
               AND NOT i.inhdetachpending) THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'not an attached partition');
    END IF;
    IF NOT p_dry_run THEN
        PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text || 'ms', true);
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_rel);
        EXCEPTION WHEN lock_not_available THEN
            RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'lock timeout');
        END;
    END IF;
    EXECUTE format(
        'SELECT count(*), coalesce(bool_and(h.chunk_end < $1), true),
                coalesce(bool_and($2::text IS NULL OR s.tenant_id = $2), true)
           FROM %s h LEFT JOIN shardstore.sessions s ON s.session_id = h.session_id', v_rel)
       INTO v_rows, v_old, v_tenant USING p_before, p_tenant;
    IF v_rows = 0 THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'empty');
    END IF;
    IF NOT v_old THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'holds newer turns');
    END IF;
    IF NOT v_tenant THEN
        RETURN jsonb_build_object('truncated', false, 'rows', 0, 'bytes', 0, 'reason', 'holds other tenants');
    END IF;
    v_bytes := shardstore.relation_size_v1(v_rel);
    IF NOT p_dry_run THEN
        EXECUTE format('TRUNCATE %s', v_rel);
    END IF;
    RETURN jsonb_build_object('truncated', true, 'rows', v_rows, 'bytes', v_bytes, 'reason', NULL);
END
$function$;
