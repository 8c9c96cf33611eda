-- Tenants' HTTP tools (app/tools/http/): an admin-defined endpoint offered to the model as a tool.
-- One row per tenant and name (agent_id NULL: every agent of the tenant; else that agent only).
-- The headers (a JSON object) and the per-tool signing secret are AES-256-GCM encrypted
-- (app/tenants/crypto.py) with the tenant and the tool's id as associated data; only the header
-- names and their values' last 4 characters are kept in the clear.

CREATE TABLE tenant_http_tools (
  id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id         text NOT NULL,
  name              text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$' AND name NOT LIKE 'mcp\_\_%'),
  agent_id          uuid REFERENCES agents (id) ON DELETE CASCADE,
  description       text NOT NULL,
  parameters        jsonb NOT NULL,
  url               text NOT NULL,
  method            text NOT NULL CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
  timeout_seconds   double precision NOT NULL CHECK (timeout_seconds > 0),
  risk              text NOT NULL CHECK (risk IN ('low', 'medium', 'high')),
  header_hints      jsonb NOT NULL DEFAULT '{}',
  headers_key_id    text,
  headers_nonce     bytea CHECK (octet_length(headers_nonce) = 12),
  headers_sealed    bytea,
  secret_key_id     text NOT NULL,
  secret_nonce      bytea NOT NULL CHECK (octet_length(secret_nonce) = 12),
  secret_sealed     bytea NOT NULL,
  secret_rotated_at timestamptz NOT NULL DEFAULT now(),
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, name),
  CHECK ((headers_key_id IS NULL) = (headers_sealed IS NULL)
         AND (headers_nonce IS NULL) = (headers_sealed IS NULL))
);
-- A run loads its tenant's tools for its agent: (tenant_id, name) serves that query.

-- Admins manage them; runs read them as the tenant's service principal (also admin). Members
-- see nothing (the /tools page shows them what their runs get, read by the runtime).
ALTER TABLE tenant_http_tools ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_http_tools FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_http_tools TO agent_runtime_app;
CREATE POLICY tenant_admins ON tenant_http_tools FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND (SELECT public.agent_runtime_is_admin()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND (SELECT public.agent_runtime_is_admin()));
