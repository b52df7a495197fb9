-- Rewind (shardstore/rewind.py); the work is done by rewind_turns (migration 0011), and
-- rewind_v3 (0033) marks the artifacts it released.

-- name: rewind
SELECT r_status AS status, r_removed AS removed, r_turns AS turns, r_first AS first
  FROM shardstore.rewind_v3(%s, %s);
