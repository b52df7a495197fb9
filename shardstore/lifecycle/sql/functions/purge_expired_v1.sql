-- Retention by time for one session: its turns written before p_before go, as
-- purge_range_data removes them, including the turns a fork shares with it (retention ages
-- every copy of a turn alike, so no fork gets its own copy first, unlike purge_range_v2).
-- p_skip_parts: partitions already emptied by this run's TRUNCATE, not read again.
CREATE OR REPLACE FUNCTION shardstore.purge_expired_v1(p_session_id uuid, p_before timestamp with time zone, p_dry_run boolean, p_skip_parts text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN shardstore.purge_range_data(p_session_id, NULL, p_before, p_dry_run, p_skip_parts,
                                       false);
END
$function$;
