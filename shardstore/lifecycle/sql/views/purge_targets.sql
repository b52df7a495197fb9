-- The session tables a purge removes rows from (the registry's session tables
-- whose rows are purged: the built-in ones and those registered with
-- register_session_table_v2); callers order them by position.
CREATE OR REPLACE VIEW shardstore.purge_targets AS
 SELECT table_name,
    session_column,
    turn_column,
    chunk_column,
    chunk_start_column,
    "position",
    builtin,
    rewrite_reset,
    note
   FROM shardstore.table_registry r
  WHERE ((kind = 'session'::text) AND purge_rows);
