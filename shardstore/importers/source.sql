-- Statements the importers send to the SOURCE database (a user's table, LangGraph's
-- tables), by name: kept apart from shardstore/sql/, whose statements all run against the
-- shardstore schema (tests/schema/test_migrations.py prepares each of them there).

-- The single-row importer's reads of the SOURCE database. {placeholders} are quoted
-- identifiers (psycopg.sql.Identifier) or the fixed fragments the importer composes.

-- name: source_check
-- every named column exists and the history column can be read as jsonb (no rows read)
SELECT {id}, {history}::jsonb, {tenant}, {subject}, {created} FROM {table} LIMIT 0;

-- name: source_heads
-- the next page of rows, in id order (keyset: {after} is empty or "AND id > %(after)s")
SELECT {id} AS key, {id}::text AS label, {tenant} AS tenant, {subject} AS subject,
       {created} AS created
  FROM {table}
 WHERE {id} IS NOT NULL {after}
 ORDER BY {id}
 LIMIT %(limit)s;

-- name: source_null_ids
SELECT count(*) FROM {table} WHERE {id} IS NULL;

-- name: source_shape
-- what the row's history is: its jsonb type, the type under the messages key, the length
SELECT jsonb_typeof(h) AS kind,
       CASE WHEN jsonb_typeof(h) = 'object' THEN jsonb_typeof(h -> %(key)s) END AS inner_kind,
       CASE WHEN jsonb_typeof(h) = 'array' THEN jsonb_array_length(h)
            WHEN jsonb_typeof(h) = 'object' AND jsonb_typeof(h -> %(key)s) = 'array'
            THEN jsonb_array_length(h -> %(key)s) END AS length
  FROM (SELECT {history}::jsonb AS h FROM {table} WHERE {id} = %(id)s OFFSET 0) s;

-- name: source_elements
-- the row's elements from index %(skip)s on, as JSON text, streamed through a named cursor;
-- an element over %(cap)s bytes comes without its text (refused without being sent)
SELECT e.ord - 1 AS index,
       CASE WHEN octet_length(x.txt) <= %(cap)s THEN x.txt END AS text,
       octet_length(x.txt) AS size
  FROM (SELECT {history}::jsonb AS h FROM {table} WHERE {id} = %(id)s OFFSET 0) t
 CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(t.h) = 'array' THEN t.h ELSE t.h -> %(key)s END)
       WITH ORDINALITY AS e(v, ord)
 CROSS JOIN LATERAL (SELECT e.v::text AS txt) x
 WHERE e.ord > %(skip)s;

-- The LangGraph importer's thread listing in the SOURCE database (PostgresSaver's tables;
-- the checkpoints themselves are read with PostgresSaver.get_tuple).

-- name: langgraph_threads
SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id LIMIT %s;

-- name: langgraph_threads_after
SELECT DISTINCT thread_id FROM checkpoints
 WHERE checkpoint_ns = '' AND thread_id > %s ORDER BY thread_id LIMIT %s;
