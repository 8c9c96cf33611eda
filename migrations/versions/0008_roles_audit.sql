-- Roles inside a tenant (agent_runtime_role()) and the append-only audit trail (audit_events).

-- The role of the current transaction in its tenant, from the claims the API/worker set (see
-- app/auth/principal.py, Principal.db_claims): owner | admin | member | service. Without a role
-- claim: owner when the tenant is the user's own sub, else member (the rule of app/auth/jwt.py).
CREATE OR REPLACE FUNCTION public.agent_runtime_role() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN auth.jwt() -> 'app_metadata' ->> 'role' IN ('owner', 'admin', 'member', 'service')
      THEN auth.jwt() -> 'app_metadata' ->> 'role'
    WHEN public.agent_runtime_tenant_id() = auth.jwt() ->> 'sub' THEN 'owner'
    ELSE 'member'
  END
$$;

-- Whether the current transaction may manage its tenant (and read tenant-wide rows).
CREATE OR REPLACE FUNCTION public.agent_runtime_is_admin() RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT public.agent_runtime_role() IN ('owner', 'admin', 'service')
$$;

CREATE TABLE audit_events (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id   text NOT NULL,
  actor_id    text NOT NULL,
  actor_role  text NOT NULL,
  action      text NOT NULL,
  target_type text NOT NULL,
  target_id   text,
  before      jsonb,
  after       jsonb,
  request_id  text,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_events_tenant_id ON audit_events (tenant_id, id DESC);
CREATE INDEX audit_events_tenant_action ON audit_events (tenant_id, action, id DESC);

-- Append-only: the app role may add rows and (as an admin) read them; no UPDATE, no DELETE.
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT ON audit_events TO agent_runtime_app;
CREATE POLICY audit_insert ON audit_events FOR INSERT TO agent_runtime_app
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()));
CREATE POLICY audit_read ON audit_events FOR SELECT TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND (SELECT public.agent_runtime_is_admin()));

-- Even a role with table privileges (the owner, a migration gone wrong) cannot rewrite history.
CREATE FUNCTION agent_runtime_audit_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION agent_runtime_audit_immutable();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION agent_runtime_audit_immutable();
