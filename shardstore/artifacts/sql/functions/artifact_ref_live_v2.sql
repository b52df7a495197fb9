-- Whether a reference keeps its artifact alive now, read from the ref row's own columns: a
-- checkpoint's required-for-resume ref always, any other ref until expires_at (never, when
-- NULL). It reads no table: statements over artifacts call it inside a correlated NOT EXISTS
-- into the colocated artifact_refs, where a function that queried a table would, on Citus,
-- run on a shard and query the cluster from there.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v2(p_owner_type text, p_required boolean, p_expires timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT (p_owner_type = 'checkpoint' AND p_required)
           OR p_expires IS NULL OR p_expires > statement_timestamp()
$function$;
