-- Closes the version of (p_tenant, p_subject, p_key) valid now, at now; returns it closed
-- (no row when none is valid). Versions that start later (a valid_from in the future) stay.
CREATE OR REPLACE FUNCTION shardstore.fact_forget_v1(p_tenant text, p_subject text, p_key text)
 RETURNS TABLE(r_fact_id uuid, r_value text, r_confidence double precision, r_source_session_id uuid, r_source_turn_seq bigint, r_valid_from timestamp with time zone, r_valid_to timestamp with time zone, r_recorded_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now  timestamptz;
    v_id   uuid;
    v_from timestamptz;
    v_to   timestamptz;
BEGIN
    PERFORM shardstore.fact_lock(p_tenant, p_subject, p_key);
    v_now := clock_timestamp();
    SELECT f.fact_id, f.valid_from INTO v_id, v_from
      FROM shardstore.facts f
     WHERE f.tenant_id = p_tenant AND f.subject = p_subject AND f.key = p_key
       AND f.valid_from <= v_now AND (f.valid_to IS NULL OR f.valid_to > v_now)
     ORDER BY f.valid_from DESC
     LIMIT 1;
    IF v_id IS NULL THEN
        RETURN;
    END IF;
    v_to := greatest(v_now, v_from + interval '1 microsecond');
    UPDATE shardstore.facts f SET valid_to = v_to
     WHERE f.tenant_id = p_tenant AND f.fact_id = v_id
    RETURNING f.fact_id, f.value::text, f.confidence, f.source_session_id, f.source_turn_seq,
              f.valid_from, f.valid_to, f.recorded_at
         INTO r_fact_id, r_value, r_confidence, r_source_session_id, r_source_turn_seq,
              r_valid_from, r_valid_to, r_recorded_at;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END
$function$;
