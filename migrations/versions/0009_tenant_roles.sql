-- Roles inside a tenant, enforced by RLS (see docs/roles.md):
-- * agents and agent_tool_policies: every role reads them; only owner/admin (or the runtime,
--   role service) writes them;
-- * sessions are private to their user unless shared (`visibility = 'tenant'`); a member sees
--   their own sessions and the shared ones, and everything hanging off them; owner/admin/service
--   see the whole tenant. Each policy checks `(SELECT agent_runtime_is_admin())` first: an
--   init-plan evaluated once per statement, so admins and the worker pay nothing per row;
-- * tenant_members: the roles seen in tokens (written by the user's own requests, read by admins);
-- * tool_approvals remember who may decide them (approver_role, allow_self_approval).
-- The user is `auth.jwt() ->> 'sub'` (text), not auth.uid(): Supabase's returns a uuid.

-- ---------------------------------------------------------------- admin-only management
DO $mgmt$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['agents', 'agent_tool_policies']
  LOOP
    EXECUTE format('DROP POLICY tenant_isolation ON %I', t);
    EXECUTE format(
      'CREATE POLICY tenant_read ON %I FOR SELECT TO agent_runtime_app '
      'USING (tenant_id = (SELECT public.agent_runtime_tenant_id()))', t);
    EXECUTE format(
      'CREATE POLICY admin_insert ON %I FOR INSERT TO agent_runtime_app '
      'WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND (SELECT public.agent_runtime_is_admin()))', t);
    EXECUTE format(
      'CREATE POLICY admin_update ON %I FOR UPDATE TO agent_runtime_app '
      'USING (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND (SELECT public.agent_runtime_is_admin())) '
      'WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND (SELECT public.agent_runtime_is_admin()))', t);
    EXECUTE format(
      'CREATE POLICY admin_delete ON %I FOR DELETE TO agent_runtime_app '
      'USING (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND (SELECT public.agent_runtime_is_admin()))', t);
  END LOOP;
END
$mgmt$;

-- ---------------------------------------------------------------- session visibility
ALTER TABLE agent_sessions ADD COLUMN visibility text NOT NULL DEFAULT 'private'
  CHECK (visibility IN ('private', 'tenant'));
COMMENT ON COLUMN agent_sessions.visibility IS
  'private: its user (and the tenant''s owners/admins) only; tenant: every member may read it.';

-- Sessions: readable when own or shared; written (posted to, renamed, shared) only by their user.
DROP POLICY tenant_isolation ON agent_sessions;
CREATE POLICY session_read ON agent_sessions FOR SELECT TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND ((SELECT public.agent_runtime_is_admin())
              OR user_id = (SELECT auth.jwt() ->> 'sub') OR visibility = 'tenant'));
CREATE POLICY session_write ON agent_sessions FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND ((SELECT public.agent_runtime_is_admin()) OR user_id = (SELECT auth.jwt() ->> 'sub')))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND ((SELECT public.agent_runtime_is_admin()) OR user_id = (SELECT auth.jwt() ->> 'sub')));

-- Runs: readable with their session (or when the member's own); a member writes only their own
-- runs in their own sessions (a shared session is read-only to the others).
DROP POLICY tenant_isolation ON agent_run_queue;
CREATE POLICY run_read ON agent_run_queue FOR SELECT TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND ((SELECT public.agent_runtime_is_admin()) OR user_id = (SELECT auth.jwt() ->> 'sub')
              OR EXISTS (SELECT 1 FROM agent_sessions s WHERE s.id = agent_run_queue.session_id)));
CREATE POLICY run_write ON agent_run_queue FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND ((SELECT public.agent_runtime_is_admin()) OR user_id = (SELECT auth.jwt() ->> 'sub')))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND ((SELECT public.agent_runtime_is_admin())
                   OR (user_id = (SELECT auth.jwt() ->> 'sub')
                       AND EXISTS (SELECT 1 FROM agent_sessions s
                                   WHERE s.id = agent_run_queue.session_id
                                     AND s.user_id = (SELECT auth.jwt() ->> 'sub')))));

-- Rows of a session or a run: visible (and writable) with it. The EXISTS reads the parent under
-- its own policy above, so "the parent is visible" is exactly the parent's rule.
DO $children$
DECLARE
  spec text[];
BEGIN
  FOREACH spec SLICE 1 IN ARRAY ARRAY[
      ['session_messages', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = session_messages.session_id)'],
      ['tool_executions', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = tool_executions.session_id)'],
      ['tool_trust', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = tool_trust.session_id)'],
      ['agent_context_snapshots', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = agent_context_snapshots.session_id)'],
      ['workspace_files', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = workspace_files.session_id)'],
      ['subagent_spawns', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id = subagent_spawns.parent_session_id)'],
      ['agent_messages', 'EXISTS (SELECT 1 FROM agent_sessions p WHERE p.id IN (agent_messages.sender_session_id, agent_messages.target_session_id))'],
      ['run_events', 'EXISTS (SELECT 1 FROM agent_run_queue p WHERE p.id = run_events.run_id)'],
      ['run_inbox', 'EXISTS (SELECT 1 FROM agent_run_queue p WHERE p.id = run_inbox.run_id)'],
      -- approvals: a member sees (and decides, subject to the rule) those of their own runs only
      ['tool_approvals', 'EXISTS (SELECT 1 FROM agent_run_queue p WHERE p.id = tool_approvals.run_id AND p.user_id = (SELECT auth.jwt() ->> ''sub''))'],
      -- idempotency keys are per user already
      ['idempotency_keys', 'user_id = (SELECT auth.jwt() ->> ''sub'')']
  ]
  LOOP
    EXECUTE format('DROP POLICY tenant_isolation ON %I', spec[1]);
    EXECUTE format(
      'CREATE POLICY visible_with_parent ON %I FOR ALL TO agent_runtime_app '
      'USING (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND ((SELECT public.agent_runtime_is_admin()) OR %s)) '
      'WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()) '
      'AND ((SELECT public.agent_runtime_is_admin()) OR %s))', spec[1], spec[2], spec[2]);
  END LOOP;
END
$children$;

-- ---------------------------------------------------------------- approvals: who decides
ALTER TABLE tool_approvals
  ADD COLUMN approver_role text CHECK (approver_role IN ('admin', 'owner')),
  ADD COLUMN allow_self_approval boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN tool_approvals.approver_role IS
  'The role a decider needs (admin: owner or admin; owner: owner), from the rule that gated the '
  'call when it was parked; NULL: whoever may see the approval.';
COMMENT ON COLUMN tool_approvals.allow_self_approval IS
  'false: the run''s own user may not decide (from the gating rule, kept after policy changes).';

-- ---------------------------------------------------------------- members
CREATE TABLE tenant_members (
  tenant_id     text NOT NULL,
  user_id       text NOT NULL,
  role          text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, user_id)
);
COMMENT ON TABLE tenant_members IS
  'The users seen in a tenant''s tokens and the role their latest token gave them.';
ALTER TABLE tenant_members ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_members FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_members TO agent_runtime_app;
-- A member reads and refreshes their own row (their requests record it), with the role their
-- token gives them and no other; admins see them all.
CREATE POLICY member_rows ON tenant_members FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND ((SELECT public.agent_runtime_is_admin()) OR user_id = (SELECT auth.jwt() ->> 'sub')))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND ((SELECT public.agent_runtime_is_admin())
                   OR (user_id = (SELECT auth.jwt() ->> 'sub')
                       AND role = (SELECT public.agent_runtime_role()))));
