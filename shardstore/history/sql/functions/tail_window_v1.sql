-- tail_v1's rows as one JSON text: an array of [turn_seq, chunk_seq, tokens, created_at as
-- microseconds since 1970 (exact: numeric), idempotency key, message] items, newest first
-- (tail_v1's order); NULL for no rows. One text value to parse instead of a row and a JSON
-- value per turn, built by concatenation, because json_build_object/json_build_array look up
-- every argument's type output at every row and a timestamp's JSON form costs as much again:
-- on 20 buffered ~700-token turns this takes 68 us in the server against 92 us for
-- json_build_array and 133 us for json_build_object + ordered json_agg (the floor's 20 rows:
-- 65 us; docs/decisions/0020-batches-keep-the-tail-and-the-window-by-concatenation.md). The
-- aggregate reads the function scan's rows in the order tail_v1 returns them (one scan, no
-- join, no sort). A function of its own, called as `SELECT tail_window_v1(...)`, so that
-- Citus delegates the call by its session argument the cheap way (the coordinator forwards
-- the call; a query over tail_v1 it plans and deparses first, ~20% of a tail there;
-- docs/decisions/0027-citus-append-and-tail.md).
CREATE OR REPLACE FUNCTION shardstore.tail_window_v1(p_session_id uuid, p_n integer, p_max_tokens bigint)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_window text;
BEGIN
    SELECT '[' || string_agg('[' || t.r_turn_seq || ',' || t.r_chunk_seq || ',' || t.r_tokens
                             || ',' || (extract(epoch FROM t.r_created_at) * 1000000)::bigint
                             || ',' || CASE WHEN t.r_key IS NULL THEN 'null'
                                            ELSE to_json(t.r_key)::text END
                             || ',' || t.r_message::text || ']', ',') || ']'
      INTO v_window
      FROM shardstore.tail_v1(p_session_id, p_n, p_max_tokens) AS t;
    RETURN v_window;
END
$function$;
