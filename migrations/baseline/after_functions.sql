-- The part of the baseline (legacy migrations 1..48) that needs the functions and
-- views: policies and row security, and the rows of the registry (which names the views)
-- and of the configuration. Written by scripts/gen_schema.py.

ALTER TABLE shardstore.rls_role_tenants ENABLE ROW LEVEL SECURITY;

CREATE POLICY rls_role_tenants_own ON shardstore.rls_role_tenants FOR SELECT USING ((role_name = CURRENT_USER));

CREATE POLICY tenant_insert ON shardstore.config FOR INSERT WITH CHECK (true);

CREATE POLICY tenant_isolation ON shardstore.agent_history USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.artifact_chunks USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.artifact_erasures USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.artifact_links USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.artifact_refs USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.artifacts USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.checkpoints USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_map USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_summaries USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h00 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h01 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h02 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h03 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h04 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h05 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h06 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h07 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h08 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h09 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h10 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h11 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h12 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h13 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h14 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h15 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h16 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h17 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h18 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h19 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h20 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h21 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h22 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h23 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h24 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h25 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h26 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h27 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h28 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h29 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h30 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.chunk_vectors_h31 USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.embed_marks USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.embed_queue USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.facts USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.fork_copies USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.langgraph_checkpoints USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.langgraph_writes USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.runs USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.sessions USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.summary_queue USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.turn_buffer USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.turn_keys USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_isolation ON shardstore.turn_text USING ((tenant_id = shardstore.rls_tenant_v2())) WITH CHECK ((tenant_id = shardstore.rls_tenant_v2()));

CREATE POLICY tenant_lock ON shardstore.embedding_config FOR UPDATE USING (true) WITH CHECK (false);

CREATE POLICY tenant_read ON shardstore.config FOR SELECT USING (true);

CREATE POLICY tenant_read ON shardstore.embedding_config FOR SELECT USING (true);

CREATE POLICY tenant_read ON shardstore.table_registry FOR SELECT USING (true);

CREATE POLICY tenant_read ON shardstore.text_search_config FOR SELECT USING (true);

INSERT INTO shardstore.table_registry (table_name, kind, session_column, turn_column, chunk_column, chunk_start_column, tenant_column, "position", builtin, purge_rows, rewrite_reset, rls, tenant_grants, note, session_nullable) VALUES
    ('shardstore.agent_history', 'session', 'session_id', NULL, 'chunk_seq', 'chunk_start', 'tenant_id', '20', 'true', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'chunks, by exact partition key; the chunk holding a range cut is rewritten', 'false'),
    ('shardstore.artifact_chunks', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'artifact bytes (postgres backend), by tenant', 'false'),
    ('shardstore.artifact_erasures', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT, INSERT, DELETE', 'artifacts a purge has still to erase, by tenant', 'false'),
    ('shardstore.artifact_links', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'which sessions ever referenced an artifact', 'true'),
    ('shardstore.artifact_refs', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'who references an artifact', 'true'),
    ('shardstore.artifacts', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'artifact objects, by tenant', 'false'),
    ('shardstore.checkpoints', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'agent checkpoints: state + position, no messages', 'false'),
    ('shardstore.chunk_map', 'session', 'session_id', NULL, 'chunk_seq', NULL, 'tenant_id', '30', 'true', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'chunk locations', 'false'),
    ('shardstore.chunk_summaries', 'session', 'session_id', NULL, 'chunk_seq', NULL, 'tenant_id', '64', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'summaries of sealed chunks (0012)', 'false'),
    ('shardstore.chunk_vectors', 'session', 'session_id', 'first_turn_seq', NULL, NULL, 'tenant_id', '50', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'one embedding per window of a turn (embeddings can be inverted back to text)', 'false'),
    ('shardstore.config', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT, INSERT, UPDATE', 'partitioning settings', 'false'),
    ('shardstore.embed_marks', 'session', 'session_id', 'upto', NULL, NULL, 'tenant_id', '61', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'embedding watermark: buffered turns below upto were embedded (a hint, no text)', 'false'),
    ('shardstore.embed_queue', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '60', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'chunks waiting to be embedded (keys only)', 'false'),
    ('shardstore.embedding_config', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT, UPDATE', 'the embedding model', 'false'),
    ('shardstore.facts', 'session', 'source_session_id', 'source_turn_seq', NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'facts with provenance (0008); purge_subject clears the subject''s', 'true'),
    ('shardstore.fork_copies', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'fork: origin of turns copied into a fork by copy-on-write (GDPR erase of copies)', 'false'),
    ('shardstore.langgraph_checkpoints', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'LangGraph checkpoint ids and namespaces', 'false'),
    ('shardstore.langgraph_writes', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'LangGraph pending writes', 'false'),
    ('shardstore.maintenance_runs', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', NULL, 'maintenance run log', 'false'),
    ('shardstore.purge_targets', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'false', 'SELECT', 'view of the registry (0002 name)', 'false'),
    ('shardstore.rls_role_tenants', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'false', 'SELECT', 'role bindings; row security always on', 'false'),
    ('shardstore.runs', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '100', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'agent runs in flight (0007)', 'false'),
    ('shardstore.schema_migrations', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'false', 'SELECT', 'applied migrations', 'false'),
    ('shardstore.sessions', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '0', 'false', 'false', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'one row per session; purges leave a tombstone', 'false'),
    ('shardstore.summary_queue', 'session', 'session_id', NULL, NULL, NULL, 'tenant_id', '62', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'chunks waiting for a summary (keys only, 0012)', 'false'),
    ('shardstore.table_registry', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT', 'this registry', 'false'),
    ('shardstore.text_search_config', 'global', NULL, NULL, NULL, NULL, NULL, '100', 'false', 'false', '{}', 'true', 'SELECT', 'the text search language (0012)', 'false'),
    ('shardstore.turn_buffer', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '1', 'true', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'buffered turns; always cleared first', 'false'),
    ('shardstore.turn_keys', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '40', 'true', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'idempotency keys', 'false'),
    ('shardstore.turn_text', 'session', 'session_id', 'turn_seq', NULL, NULL, 'tenant_id', '66', 'false', 'true', '{}', 'true', 'SELECT, INSERT, UPDATE, DELETE', 'full-text index of every folded turn (0012)', 'false');

INSERT INTO shardstore.text_search_config (singleton, config) VALUES
    ('true', 'english');

