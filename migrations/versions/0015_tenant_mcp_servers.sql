-- MCP servers a tenant attaches as tool sources (app/tools/mcp/store.py): one row per tenant and
-- server name, for the whole tenant (agent_id NULL) or one agent. Header and environment values
-- are AES-256-GCM encrypted together (app/tenants/crypto.py) with the tenant and name as
-- associated data; `config` holds only what may be shown (their names, never their values).

CREATE TABLE tenant_mcp_servers (
  tenant_id  text NOT NULL,
  name       text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$' AND name NOT LIKE '%\_\_%'),
  agent_id   uuid REFERENCES agents (id) ON DELETE CASCADE,
  transport  text NOT NULL CHECK (transport IN ('http', 'stdio')),
  enabled    boolean NOT NULL DEFAULT true,
  config     jsonb NOT NULL DEFAULT '{}',
  key_id     text,
  nonce      bytea CHECK (octet_length(nonce) = 12),
  ciphertext bytea,
  version    integer NOT NULL DEFAULT 1,
  updated_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, name),
  CHECK ((key_id IS NULL) = (ciphertext IS NULL) AND (nonce IS NULL) = (ciphertext IS NULL))
);
CREATE INDEX tenant_mcp_servers_agent ON tenant_mcp_servers (agent_id) WHERE agent_id IS NOT NULL;

-- Admins manage them; runs read them as the tenant's service principal (also admin). Members
-- see nothing (they see the tools through /tools).
ALTER TABLE tenant_mcp_servers ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_mcp_servers FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_mcp_servers TO agent_runtime_app;
CREATE POLICY tenant_admins ON tenant_mcp_servers FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND (SELECT public.agent_runtime_is_admin()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND (SELECT public.agent_runtime_is_admin()));
