-- Tenants' own model provider keys (app/tenants/provider_keys.py): one row per tenant and
-- provider, the key AES-256-GCM encrypted (app/tenants/crypto.py) with the tenant and provider as
-- associated data; only its last 4 characters are kept in the clear.

CREATE TABLE tenant_provider_keys (
  tenant_id  text NOT NULL,
  provider   text NOT NULL CHECK (provider IN ('gemini', 'openai')),
  key_id     text NOT NULL,
  nonce      bytea NOT NULL CHECK (octet_length(nonce) = 12),
  ciphertext bytea NOT NULL,
  last4      text NOT NULL,
  base_url   text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, provider)
);

-- Admins manage them; runs read them as the tenant's service principal (also admin). Members
-- see nothing, not even the ciphertext.
ALTER TABLE tenant_provider_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_provider_keys FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_provider_keys TO agent_runtime_app;
CREATE POLICY tenant_admins ON tenant_provider_keys FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND (SELECT public.agent_runtime_is_admin()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND (SELECT public.agent_runtime_is_admin()));
