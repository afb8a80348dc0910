/**
 * Migration 2: the tool gate's tables. Like v1, each row keeps the columns it is looked up by plus a JSON
 * `data` column for the rest.
 */
export const V2_GATE = `
-- One Cedar policy per tenant; a tenant without a row gets the default policy.
CREATE TABLE tenant_policies (
  tenant_id TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  version INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  updated_by TEXT NOT NULL
) STRICT;

-- Operator-defined tools, per tenant.
CREATE TABLE tool_definitions (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, name)
) STRICT;

-- Per session: installed tools, gate settings, plan and its progress, breaker state.
CREATE TABLE session_gate (
  session_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  data TEXT NOT NULL
) STRICT;

CREATE TABLE approvals (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  tool TEXT NOT NULL,
  args_digest TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX approvals_by_tenant_status ON approvals (tenant_id, status, created_at);
CREATE INDEX approvals_by_session_call ON approvals (session_id, args_digest, created_at);
CREATE INDEX approvals_pending_expiry ON approvals (status, expires_at);
`;

/**
 * Migration 3: the gate configuration of each named snapshot (installed tools, settings, plan and its
 * progress), which fork branches inherit. The trigger removes it with its snapshot, whoever deletes that.
 */
export const V3_SNAPSHOT_GATE = `
CREATE TABLE snapshot_gate (
  snapshot_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  data TEXT NOT NULL
) STRICT;

CREATE TRIGGER snapshot_gate_follows_snapshot AFTER DELETE ON snapshots
BEGIN DELETE FROM snapshot_gate WHERE snapshot_id = OLD.id; END;
`;

/**
 * Migration 5: a gate setting has one name end to end. The breaker's settings were stored flat as
 * `settings.breakerFailures` / `settings.breakerPerMinute`; they are now `settings.breaker.failures` /
 * `settings.breaker.perMinute`, as on the wire and in src/policy. Rows of both gate tables are rewritten.
 */
export const V5_GATE_BREAKER_SETTINGS = ['session_gate', 'snapshot_gate']
  .map(
    (t) => `
UPDATE ${t} SET data = json_set(
  json_remove(data, '$.settings.breakerFailures', '$.settings.breakerPerMinute'),
  '$.settings.breaker',
  json_object('failures', json_extract(data, '$.settings.breakerFailures'), 'perMinute', json_extract(data, '$.settings.breakerPerMinute'))
) WHERE json_type(data, '$.settings.breakerFailures') IS NOT NULL;`,
  )
  .join('\n');
