-- The first turn a session still holds: 0, unless purge_range removed the turns before it
-- (then the first turn kept). session() reports it beside the write head (next_turn_seq),
-- so that "turns" can say what is stored, and a range purge reports where the history
-- really starts. A session range-purged before the column existed gets its oldest turn
-- kept, folded or buffered (its head, when nothing is kept); a fork keeps 0 there.
ALTER TABLE shardstore.sessions ADD COLUMN first_turn_seq bigint NOT NULL DEFAULT 0;

UPDATE shardstore.sessions s
   SET first_turn_seq = coalesce(
           least((SELECT min(m.first_turn_seq) FROM shardstore.chunk_map m
                   WHERE m.session_id = s.session_id),
                 (SELECT min(b.turn_seq) FROM shardstore.turn_buffer b
                   WHERE b.session_id = s.session_id)),
           s.next_turn_seq)
 WHERE s.purged_at IS NULL AND s.fork_parent IS NULL AND s.next_turn_seq > 0
   AND NOT EXISTS (SELECT 1 FROM shardstore.chunk_map m
                    WHERE m.session_id = s.session_id AND m.first_turn_seq = 0)
   AND NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                    WHERE b.session_id = s.session_id AND b.turn_seq = 0);
