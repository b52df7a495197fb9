-- One row per turn a session holds, folded (an element of a chunk's array) or buffered,
-- for reading history with plain SQL. security_invoker: the reader's row security applies,
-- so a tenant role sees its own tenant's turns only.
CREATE OR REPLACE VIEW shardstore.turns WITH (security_invoker='true') AS
 SELECT h.session_id,
    h.tenant_id,
    ((e.v ->> 's'::text))::bigint AS turn_seq,
    h.chunk_seq,
    ((e.v ->> 'at'::text))::timestamp with time zone AS created_at,
    ((e.v ->> 't'::text))::integer AS tokens,
    (e.v ->> 'k'::text) AS idempotency_key,
    (e.v -> 'm'::text) AS message
   FROM (shardstore.agent_history h
     CROSS JOIN LATERAL jsonb_array_elements(h.conversation_chunk) e(v))
UNION ALL
 SELECT b.session_id,
    b.tenant_id,
    b.turn_seq,
    b.chunk_seq,
    b.created_at,
    b.tokens,
    b.idempotency_key,
    b.message
   FROM shardstore.turn_buffer b;

COMMENT ON VIEW shardstore.turns IS 'one row per turn a session holds (folded or buffered); messages as stored (jsoncodec escapes)';
