-- Rewind (shardstore/state/rewind.py): rewind_v3 removes the turns (rewind_turns), gives forks that
-- share them their own copies first (fork_cow) and marks the artifacts it released.

-- name: rewind
SELECT r_status AS status, r_removed AS removed, r_turns AS turns, r_first AS first
  FROM shardstore.rewind_v3(%s, %s);
