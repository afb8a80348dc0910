/**
 * The gate's operator acts: a tenant's policy and tools, a session's installed tools, gate settings, plan
 * and breaker reset, and the gate configuration a snapshot keeps for its fork branches. Each is audited. Session-scoped changes run under the session's gate lock, so they
 * never interleave with a call's read-modify-write.
 */
import {
  InvalidArgumentError,
  type GateSettings,
  type Plan,
  type Principal,
  type SessionGateRecord,
  type SessionRecord,
  type SnapshotGateRecord,
  type SnapshotRecord,
  type TenantPolicyRecord,
} from '../core/index.js';
import {
  DEFAULT_POLICY_TEXT,
  PolicyEngine,
  builtinTool,
  defineTool,
  initialPlanState,
  normalizeEgressCidrs,
  resetBreaker,
  validatePlan,
  type ToolDefinition,
} from '../policy/index.js';
import type { GateInfo, GateSettingsInput, PlanInfo, PolicyValidation, TenantPolicyInfo, TenantScope, ToolDefinitionInfo } from './api.js';
import { operatorSession, tenantScope, who, type GateContext } from './gate-context.js';
import { checkSettings, normalizeAllowList } from './gate-state.js';

const MAX_INSTALLED = 1000;

async function audit(c: GateContext, p: Principal, tenantId: string, sessionId: string | null, action: string, outcome: string, data: Record<string, unknown>): Promise<void> {
  await c.audit.append({ tenantId, sessionId, principal: p, action, outcome, data });
}

// ---- policy -------------------------------------------------------------------------------------------

function policyInfo(tenantId: string, record: TenantPolicyRecord | null, engine: PolicyEngine): TenantPolicyInfo {
  return {
    tenantId,
    text: record?.text ?? DEFAULT_POLICY_TEXT,
    version: record?.version ?? 0,
    isDefault: record === null,
    updatedAt: record?.updatedAt ?? null,
    updatedBy: record?.updatedBy ?? null,
    digest: engine.digest,
    warnings: [...engine.warnings],
  };
}

export async function getPolicy(c: GateContext, p: Principal, scope: TenantScope = {}): Promise<TenantPolicyInfo> {
  const tenantId = await tenantScope(c, p, scope.tenantId);
  const compiled = await c.state.policy(tenantId);
  return policyInfo(tenantId, compiled.record, compiled.engine);
}

/** Compiles against the tenant's whole tool set first: a policy that does not validate changes nothing. */
export async function setPolicy(c: GateContext, p: Principal, text: string, scope: TenantScope = {}): Promise<TenantPolicyInfo> {
  const tenantId = await tenantScope(c, p, scope.tenantId);
  if (typeof text !== 'string' || text.trim() === '') throw new InvalidArgumentError('policy: must be the Cedar text of the policy', { details: { field: 'policy' } });
  const tools = [...(await c.state.tenantTools(tenantId)).values()];
  let engine: PolicyEngine;
  try {
    engine = PolicyEngine.compile(text, { tools });
  } catch (e) {
    const errors = (e as InvalidArgumentError).details?.errors;
    await audit(c, p, tenantId, null, 'gate.policy', 'error', { message: (e as Error).message, ...(Array.isArray(errors) ? { errors } : {}) });
    throw e;
  }
  const prev = (await c.store.policies.get(tenantId)) ?? null;
  const record: TenantPolicyRecord = { tenantId, text, version: (prev?.version ?? 0) + 1, updatedAt: c.clock.now(), updatedBy: who(p) };
  await c.store.transaction(async () => {
    await c.store.policies.put(record);
    await audit(c, p, tenantId, null, 'gate.policy', 'ok', {
      version: record.version,
      previousVersion: prev?.version ?? 0,
      digest: engine.digest,
      policyIds: engine.policies.map((x) => x.id),
    });
  });
  c.state.setPolicy(tenantId, { engine, record, compileError: null });
  return policyInfo(tenantId, record, engine);
}

/** setPolicy's check without the save (the console's inline validation): nothing stored, nothing audited. */
export async function validatePolicy(c: GateContext, p: Principal, text: string, scope: TenantScope = {}): Promise<PolicyValidation> {
  const tenantId = await tenantScope(c, p, scope.tenantId);
  if (typeof text !== 'string' || text.trim() === '') return { ok: false, errors: ['policy: must be the Cedar text of the policy'], warnings: [] };
  const tools = [...(await c.state.tenantTools(tenantId)).values()];
  try {
    const engine = PolicyEngine.compile(text, { tools });
    return { ok: true, errors: [], warnings: [...engine.warnings] };
  } catch (e) {
    const errors = (e as InvalidArgumentError).details?.errors;
    return { ok: false, errors: Array.isArray(errors) && errors.length ? errors.map(String) : [(e as Error).message], warnings: [] };
  }
}

// ---- tools --------------------------------------------------------------------------------------------

async function toolInfo(c: GateContext, tenantId: string, t: ToolDefinition): Promise<ToolDefinitionInfo> {
  const rec = builtinTool(t.name) === t ? undefined : await c.store.tools.get(tenantId, t.name);
  return {
    definition: JSON.parse(JSON.stringify(t)) as Record<string, unknown>,
    builtin: rec === undefined,
    updatedAt: rec?.updatedAt ?? null,
    updatedBy: rec?.updatedBy ?? null,
  };
}

export async function listToolDefinitions(c: GateContext, p: Principal, scope: TenantScope = {}): Promise<ToolDefinitionInfo[]> {
  const tenantId = await tenantScope(c, p, scope.tenantId);
  const out: ToolDefinitionInfo[] = [];
  for (const t of (await c.state.tenantTools(tenantId)).values()) out.push(await toolInfo(c, tenantId, t));
  return out;
}

/**
 * Adds or replaces an operator tool: a command run inside the sandbox with the arguments as JSON on stdin.
 * The tenant's policy is compiled again with the new tool set; if it no longer validates the tool is refused.
 */
export async function defineTenantTool(c: GateContext, p: Principal, definition: unknown, scope: TenantScope = {}): Promise<ToolDefinitionInfo> {
  const tenantId = await tenantScope(c, p, scope.tenantId);
  const tool = defineTool(definition);
  if (builtinTool(tool.name)) throw new InvalidArgumentError(`tool ${JSON.stringify(tool.name)}: name is taken by a built-in tool`, { details: { tool: tool.name, field: 'name' } });
  if (tool.executor.kind !== 'command') {
    throw new InvalidArgumentError(`tool ${JSON.stringify(tool.name)}: executor must be {"kind":"command","argv":[…]}; built-in executors belong to the built-in tools`, {
      details: { tool: tool.name, field: 'executor' },
    });
  }
  const next = new Map(await c.state.tenantTools(tenantId));
  const replaced = next.has(tool.name);
  next.set(tool.name, tool);
  const current = await c.state.policy(tenantId);
  let engine: PolicyEngine;
  try {
    engine = PolicyEngine.compile(current.record?.text ?? DEFAULT_POLICY_TEXT, { tools: [...next.values()] });
  } catch (e) {
    throw new InvalidArgumentError(`tool ${JSON.stringify(tool.name)} cannot be added: the tenant's policy does not validate with it (${(e as Error).message})`, {
      details: { tool: tool.name, field: 'definition', errors: (e as InvalidArgumentError).details?.errors ?? [] },
    });
  }
  const now = c.clock.now();
  const prev = await c.store.tools.get(tenantId, tool.name);
  const json = JSON.parse(JSON.stringify(tool)) as Record<string, unknown>;
  await c.store.transaction(async () => {
    await c.store.tools.put({ tenantId, name: tool.name, definition: json, createdAt: prev?.createdAt ?? now, updatedAt: now, updatedBy: who(p) });
    await audit(c, p, tenantId, null, 'gate.tool', replaced ? 'replaced' : 'defined', { name: tool.name, risk: tool.risk, executor: json.executor });
  });
  c.state.replaceTools(tenantId, next, { engine, record: current.record, compileError: null });
  return toolInfo(c, tenantId, tool);
}

// ---- per session --------------------------------------------------------------------------------------

export async function gateInfo(c: GateContext, r: SessionRecord, row?: SessionGateRecord): Promise<GateInfo> {
  row ??= await c.state.row(r);
  const b = row.breaker;
  return {
    sessionId: r.id,
    tenantId: r.tenantId,
    tools: [...(await c.state.installed(row)).keys()],
    settings: { ...row.settings, breaker: { ...row.settings.breaker }, httpAllow: [...row.settings.httpAllow], egressAllowCidr: [...(row.settings.egressAllowCidr ?? [])] },
    breaker: { open: b.open, trip: b.trip, reason: b.reason, openedAt: b.openedAt, streakFailures: b.streakFailures },
    pausedByBreaker: row.pausedByBreaker,
    calls: row.calls,
  };
}

/** Runs a read-modify-write of a session's gate row under its lock. */
async function withRow<T>(c: GateContext, p: Principal, sessionId: string, fn: (r: SessionRecord, row: SessionGateRecord) => Promise<T> | T): Promise<T> {
  await operatorSession(c, p, sessionId);
  return c.lock.run(sessionId, async () => {
    const r = (await c.store.sessions.get(sessionId)) as SessionRecord;
    return fn(r, await c.state.row(r));
  });
}

export function setGate(c: GateContext, p: Principal, sessionId: string, input: GateSettingsInput): Promise<GateInfo> {
  if (typeof input !== 'object' || input === null) throw new InvalidArgumentError('gate settings must be an object');
  return withRow(c, p, sessionId, async (r, row) => {
    const s: GateSettings = { ...row.settings };
    s.breaker = { ...s.breaker, ...(input.breaker?.failures !== undefined ? { failures: input.breaker.failures } : {}), ...(input.breaker?.perMinute !== undefined ? { perMinute: input.breaker.perMinute } : {}) };
    if (input.egressAllow !== undefined && input.httpAllow !== undefined) {
      throw new InvalidArgumentError('egressAllow: give egressAllow or its older name httpAllow, not both', { details: { field: 'egressAllow' } });
    }
    if (input.httpAllow !== undefined) s.httpAllow = normalizeAllowList(input.httpAllow, 'httpAllow');
    if (input.egressAllow !== undefined) s.httpAllow = normalizeAllowList(input.egressAllow, 'egressAllow');
    if (input.egressAllowCidr !== undefined) s.egressAllowCidr = normalizeEgressCidrs(input.egressAllowCidr);
    if (input.approvalTtlS !== undefined) s.approvalTtlS = input.approvalTtlS;
    row.settings = checkSettings(s);
    await c.store.transaction(async () => {
      await c.state.save(row);
      await audit(c, p, r.tenantId, r.id, 'gate.settings', 'ok', { settings: { ...row.settings } });
    });
    return gateInfo(c, r, row);
  });
}

export function installTools(c: GateContext, p: Principal, sessionId: string, tools: string[]): Promise<GateInfo> {
  if (!Array.isArray(tools) || !tools.every((t) => typeof t === 'string') || tools.length > MAX_INSTALLED) {
    throw new InvalidArgumentError(`tools: must be an array of at most ${MAX_INSTALLED} tool names`, { details: { field: 'tools' } });
  }
  return withRow(c, p, sessionId, async (r, row) => {
    const known = await c.state.tenantTools(r.tenantId);
    for (const t of tools) {
      if (!known.has(t)) throw new InvalidArgumentError(`tools: ${JSON.stringify(t)} is not a tool of this tenant (define it first)`, { details: { field: 'tools', tool: t } });
    }
    row.tools = [...new Set(tools)];
    await c.store.transaction(async () => {
      await c.state.save(row);
      await audit(c, p, r.tenantId, r.id, 'gate.tools', 'ok', { tools: row.tools });
    });
    return gateInfo(c, r, row);
  });
}

/** Closes the breaker; a session the breaker paused is resumed. */
export function resetSessionBreaker(c: GateContext, p: Principal, sessionId: string): Promise<GateInfo> {
  return withRow(c, p, sessionId, async (r, row) => {
    const was = row.breaker;
    const resume = row.pausedByBreaker;
    row.breaker = resetBreaker();
    row.pausedByBreaker = false;
    await c.store.transaction(async () => {
      await c.state.save(row);
      await audit(c, p, r.tenantId, r.id, 'gate.breaker', 'reset', { wasOpen: was.open, trip: was.trip, reason: was.reason, resume });
    });
    const cur = await c.store.sessions.get(sessionId);
    if (resume && cur?.state === 'paused') await c.sandboxes.resume(p, sessionId);
    return gateInfo(c, r, row);
  });
}

export async function planInfo(c: GateContext, r: SessionRecord, row?: SessionGateRecord): Promise<PlanInfo> {
  row ??= await c.state.row(r);
  return { sessionId: r.id, plan: row.plan, state: row.planState, setAt: row.planSetAt, setBy: row.planSetBy };
}

/** Sets (or with null clears) the plan. Replacing a plan that is under way is recorded as such. */
export function setPlan(c: GateContext, p: Principal, sessionId: string, plan: unknown): Promise<PlanInfo> {
  return withRow(c, p, sessionId, async (r, row) => {
    const previous = row.plan ? { objective: row.plan.objective ?? null, cursor: row.planState?.cursor ?? 0 } : null;
    if (plan === null) {
      row.plan = null;
      row.planState = null;
      row.planSetAt = null;
      row.planSetBy = null;
    } else {
      const checked = validatePlan(plan, { knownTools: (await c.state.installed(row)).keys() });
      row.plan = JSON.parse(JSON.stringify(checked)) as Plan;
      row.planState = initialPlanState();
      // A strictly increasing stamp: the gate's plan cache is keyed by it.
      row.planSetAt = Math.max(c.clock.now(), (row.planSetAt ?? 0) + 1);
      row.planSetBy = who(p);
    }
    const outcome = plan === null ? 'cleared' : previous ? 'replaced' : 'set';
    await c.store.transaction(async () => {
      await c.state.save(row);
      await audit(c, p, r.tenantId, r.id, 'gate.plan', outcome, {
        previous,
        ...(row.plan ? { objective: row.plan.objective, steps: row.plan.steps.length } : {}),
      });
    });
    return planInfo(c, r, row);
  });
}

// ---- snapshots and fork -------------------------------------------------------------------------------

/** The session's gate configuration as it stands now, kept with a snapshot being taken of it. */
export async function snapshotGate(c: GateContext, r: SessionRecord, snapshotId: string): Promise<SnapshotGateRecord> {
  const { tools, settings, plan, planState, planSetAt, planSetBy } = await c.state.row(r);
  return { snapshotId, tenantId: r.tenantId, sessionId: r.id, tools, settings, plan, planState, planSetAt, planSetBy, createdAt: c.clock.now() };
}

/**
 * Gives new fork branches the gate configuration kept with their snapshot: tools, settings, and the plan
 * with its progress. The breaker starts closed, calls at 0, and no approval carries over (an approval binds
 * one session's call). A snapshot taken before its gate copy was kept leaves the branches at the defaults.
 * One audit entry, on the snapshot's session, names the branches.
 */
export async function inheritGate(c: GateContext, p: Principal, snap: SnapshotRecord, branches: readonly SessionRecord[]): Promise<void> {
  const copy = await c.store.snapshotGates.get(snap.id);
  const sessions = branches.map((b) => b.id);
  await c.store.transaction(async () => {
    if (copy) {
      for (const b of branches) {
        const { tools, settings, plan, planState, planSetAt, planSetBy } = copy;
        await c.state.save({ ...(await c.state.row(b)), tools, settings: { ...settings, breaker: { ...settings.breaker }, httpAllow: [...settings.httpAllow], egressAllowCidr: [...(settings.egressAllowCidr ?? [])] }, plan, planState, planSetAt, planSetBy });
      }
    }
    await audit(c, p, snap.tenantId, snap.sessionId, 'gate.inherit', copy ? 'ok' : 'default', {
      snapshotId: snap.id,
      sessions,
      ...(copy
        ? {
            tools: copy.tools,
            settings: { ...copy.settings },
            plan: copy.plan ? { objective: copy.plan.objective ?? null, steps: copy.plan.steps.length, cursor: copy.planState?.cursor ?? 0 } : null,
          }
        : {}),
    });
  });
}
