-- Every chunk has its vector leaf now: nothing to create or drop. The worker no longer
-- calls this; a client of the version before does (before every batch) and gets one range
-- that holds every chunk_start a Python datetime can hold, in any session time zone.
CREATE OR REPLACE FUNCTION shardstore.vec_sync_partitions_v1(p_lock_timeout interval DEFAULT '00:00:01'::interval)
 RETURNS TABLE(r_lo timestamp with time zone, r_hi timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN QUERY SELECT '0001-01-02 00:00:00+00'::timestamptz, '9999-12-30 00:00:00+00'::timestamptz;
END
$function$;
