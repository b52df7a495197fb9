-- Records a new version of (p_tenant, p_subject, p_key). p_valid_from NULL: the server's
-- clock now (moved past the newest version's start if the clock has not advanced since).
-- The newest version, if open, is closed at the new valid_from; a new valid_from before
-- the newest version's start (or, if it is closed, before its end) is 'too_early'.
CREATE OR REPLACE FUNCTION shardstore.fact_remember_v1(p_fact_id uuid, p_tenant text, p_subject text, p_key text, p_value jsonb, p_confidence double precision, p_session_id uuid, p_turn_seq bigint, p_valid_from timestamp with time zone)
 RETURNS TABLE(r_status text, r_detail text, r_fact_id uuid, r_valid_from timestamp with time zone, r_valid_to timestamp with time zone, r_recorded_at timestamp with time zone, r_closed_id uuid, r_value text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_tenant   text;
    v_purged   timestamptz;
    v_next     bigint;
    v_first    bigint;
    v_now      timestamptz;
    v_from     timestamptz;
    v_last_id  uuid;
    v_last_from timestamptz;
    v_last_to  timestamptz;
    v_closed   uuid;
BEGIN
    IF p_session_id IS NOT NULL THEN
        SELECT s.tenant_id, s.purged_at, s.next_turn_seq INTO v_tenant, v_purged, v_next
          FROM shardstore.sessions s WHERE s.session_id = p_session_id FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant THEN
            r_status := 'no_session';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_purged IS NOT NULL THEN
            r_status := 'purged';
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_turn_seq >= v_next THEN
            r_status := 'no_turn';
            r_detail := v_next::text;
            RETURN NEXT;
            RETURN;
        END IF;
        -- the oldest turn still stored: range purges and retention remove a prefix
        v_first := least(
            (SELECT m.first_turn_seq FROM shardstore.chunk_map m
              WHERE m.session_id = p_session_id ORDER BY m.chunk_seq LIMIT 1),
            (SELECT b.turn_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id ORDER BY b.turn_seq LIMIT 1));
        IF v_first IS NULL OR p_turn_seq < v_first THEN
            r_status := 'turn_purged';
            r_detail := v_first::text;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    PERFORM shardstore.fact_lock(p_tenant, p_subject, p_key);
    v_now := clock_timestamp();
    v_from := coalesce(p_valid_from, v_now);
    SELECT f.fact_id, f.valid_from, f.valid_to INTO v_last_id, v_last_from, v_last_to
      FROM shardstore.facts f
     WHERE f.tenant_id = p_tenant AND f.subject = p_subject AND f.key = p_key
     ORDER BY f.valid_from DESC
     LIMIT 1;
    IF v_last_id IS NOT NULL THEN
        IF v_last_to IS NULL AND v_from <= v_last_from THEN
            IF p_valid_from IS NOT NULL THEN
                r_status := 'too_early';
                r_detail := v_last_from::text;
                RETURN NEXT;
                RETURN;
            END IF;
            v_from := v_last_from + interval '1 microsecond';
        ELSIF v_last_to IS NOT NULL AND v_from < v_last_to THEN
            IF p_valid_from IS NOT NULL THEN
                r_status := 'too_early';
                r_detail := v_last_to::text;
                RETURN NEXT;
                RETURN;
            END IF;
            v_from := v_last_to;
        END IF;
        IF v_last_to IS NULL THEN
            UPDATE shardstore.facts f SET valid_to = v_from
             WHERE f.tenant_id = p_tenant AND f.fact_id = v_last_id AND f.valid_to IS NULL;
            IF FOUND THEN
                v_closed := v_last_id;
            END IF;
        END IF;
    END IF;
    INSERT INTO shardstore.facts (tenant_id, fact_id, subject, key, value, confidence,
                                  source_session_id, source_turn_seq, valid_from, valid_to,
                                  recorded_at)
    VALUES (p_tenant, p_fact_id, p_subject, p_key, p_value, p_confidence, p_session_id,
            p_turn_seq, v_from, NULL, v_now);
    r_status := 'ok';
    r_fact_id := p_fact_id;
    r_valid_from := v_from;
    r_recorded_at := v_now;
    r_closed_id := v_closed;
    r_value := p_value::text;
    RETURN NEXT;
END
$function$;
