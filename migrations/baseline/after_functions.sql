-- The part of the baseline (legacy migrations 1..48) that needs the
-- functions: policies and row security. Written by scripts/gen_schema.py.

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
