-- The framework adapters (shardstore/integrations/_mapped.py).

-- name: adapter_lock_session
-- the session row locked until the transaction ends (appends, rewinds and purges wait);
-- SS404 / SS410 for an unknown / purged session
SELECT (shardstore.lock_session_v1(%s)).next_turn_seq AS turns;
