-- text_rank_v2 and text_rank_keyed_v2 return each turn's share of the query's weight beside
-- its score, which hybrid search weighs its text hits by; their function files create them,
-- and no client of a release calls the versions they replace.
DROP FUNCTION IF EXISTS shardstore.text_rank_v1(uuid, text, text, timestamp with time zone, timestamp with time zone, text, integer, integer, integer);
DROP FUNCTION IF EXISTS shardstore.text_rank_keyed_v1(uuid, text, text, timestamp with time zone, timestamp with time zone, integer[], integer, uuid[], integer[], integer, integer, integer);
