-- Whether a reference keeps its artifact alive now, from its columns (0033's rule): a
-- checkpoint's required-for-resume ref always, every ref until it expires.
CREATE OR REPLACE FUNCTION shardstore.artifact_ref_live_v2(p_owner_type text, p_required boolean, p_expires timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT (p_owner_type = 'checkpoint' AND p_required)
           OR p_expires IS NULL OR p_expires > statement_timestamp()
$function$;
