-- agent-runtime long-term memory (app/memory): indexes for listing, chunks and re-embedding, a
-- fillfactor for cheap access-count updates, and the worker role's narrow view used to find the
-- tenants whose entries need re-embedding.
--
-- Note on RLS and GIN: under RLS, Postgres evaluates non-LEAKPROOF operators only after the policy
-- qual, so `content_tsv @@ query` (ts_match_vq) and `tags @> ...` (arraycontains) cannot be index
-- conditions: app queries reach a tenant's rows through the (tenant_id, ...) btrees and filter
-- them. The GIN index of 0001 serves owner/admin queries only. (Search cost: see bench/memory.)

-- Listing (newest first, keyset-paginated) and chunk lookup.
CREATE INDEX agent_memory_entries_tenant_created
  ON agent_memory_entries (tenant_id, created_at DESC, id DESC);
CREATE INDEX agent_memory_entries_document
  ON agent_memory_entries (document_id, chunk_index) WHERE document_id IS NOT NULL;
-- Re-embedding: entries whose (embedder, embedding_dim) differ from the active embedder's.
CREATE INDEX agent_memory_entries_embedder
  ON agent_memory_entries (tenant_id, embedder, embedding_dim);

-- The re-embed task runs as agent_runtime_worker to learn WHICH tenants have stale entries (it
-- then re-embeds each tenant's entries through Database.tenant(), under tenant_isolation). The
-- worker may read these three columns only: no content, no vectors.
GRANT SELECT (tenant_id, embedder, embedding_dim) ON agent_memory_entries TO agent_runtime_worker;
CREATE POLICY memory_reembed_discovery ON agent_memory_entries FOR SELECT
  TO agent_runtime_worker USING (true);

-- Every retrieval bumps access_count/last_accessed_at. With free space on the page that update is
-- HOT (no new index entries); on a full page it would insert into the HNSW, GIN and btree indexes.
ALTER TABLE agent_memory_entries SET (fillfactor = 80);
