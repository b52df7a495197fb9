-- restore_window_v2 returns the session's rewind epochs beside the window, so that an
-- encrypted store's restore checks its sealed turns without a statement of its own; the
-- function file creates it, and no client of a release calls the version it replaces.
DROP FUNCTION IF EXISTS shardstore.restore_window_v1(uuid, uuid, integer, bigint);
