/**
 * What the gate keeps between calls, read and written through the Store port: each session's gate row
 * (installed tools, settings, plan, breaker), each tenant's tool set and its compiled policy. Compiled
 * policies and checked tool definitions are cached per tenant (Cedar compiles once, not per call) and
 * replaced when the tenant's policy or tools change.
 */
import {
  InvalidArgumentError,
  type Clock,
  type GateSettings,
  type SessionGateRecord,
  type SessionRecord,
  type Store,
  type TenantPolicyRecord,
} from '../core/index.js';
import {
  BUILTIN_TOOLS,
  DEFAULT_BREAKER_SETTINGS,
  DEFAULT_POLICY_TEXT,
  PolicyEngine,
  defineTool,
  initialBreakerState,
  normalizeBreakerState,
  normalizeEgressAllow,
  normalizeEgressCidrs,
  resolveBreakerSettings,
  validatePlan,
  type BreakerSettings,
  type BreakerState,
  type Plan,
  type PlanState,
  type ToolDefinition,
} from '../policy/index.js';

/** The agent's working directory: relative paths in tool arguments are resolved against it. */
export const HOME = '/root';

export const DEFAULT_GATE_SETTINGS: Readonly<GateSettings> = Object.freeze({
  breaker: DEFAULT_BREAKER_SETTINGS,
  httpAllow: [] as string[],
  egressAllowCidr: [] as string[],
  approvalTtlS: 3600,
});

/** Longest approval TTL, seconds (30 days). */
export const MAX_APPROVAL_TTL_S = 30 * 86_400;

/**
 * Used when a stored policy no longer compiles (e.g. after an upgrade changed the built-in tools): every
 * call is refused, with a reason that says what to do.
 */
const UNAVAILABLE_POLICY = `@id("policy-unavailable")
@reason("the tenant's policy could not be loaded, so every call is refused; the operator must set the policy again")
forbid (principal, action, resource);
`;

export interface LoadedGate {
  row: SessionGateRecord;
  breaker: BreakerState;
  breakerSettings: Readonly<BreakerSettings>;
  plan: { plan: Plan; state: PlanState } | null;
}

export interface CompiledPolicy {
  engine: PolicyEngine;
  record: TenantPolicyRecord | null;
  /** Set when the stored text failed to compile and the refuse-all stand-in is in use. */
  compileError: string | null;
}

export const BUILTIN_NAMES: readonly string[] = Object.freeze(BUILTIN_TOOLS.map((t) => t.name));

/** The egress allow-list, checked and normalized (policy/egress.ts); `field` names it in errors. */
export function normalizeAllowList(list: unknown, field = 'egressAllow'): string[] {
  return normalizeEgressAllow(list, field);
}

export function checkSettings(s: GateSettings): GateSettings {
  resolveBreakerSettings(s.breaker);
  if (!Number.isSafeInteger(s.approvalTtlS) || s.approvalTtlS < 0 || s.approvalTtlS > MAX_APPROVAL_TTL_S) {
    throw new InvalidArgumentError(`approvalTtlS: must be an integer from 0 (never expires) to ${MAX_APPROVAL_TTL_S}`, { details: { field: 'approvalTtlS' } });
  }
  return { ...s, breaker: { ...s.breaker }, httpAllow: normalizeAllowList(s.httpAllow), egressAllowCidr: normalizeEgressCidrs(s.egressAllowCidr ?? []) };
}

export class GateState {
  private readonly tools = new Map<string, ReadonlyMap<string, ToolDefinition>>();
  private readonly policies = new Map<string, CompiledPolicy>();
  /** Checked plans by session, keyed by when they were set (a plan never changes in place). */
  private readonly plans = new Map<string, { setAt: number; plan: Plan }>();

  constructor(private readonly o: { store: Store; clock: Clock; log?: (line: string) => void }) {}

  // ---- session rows -------------------------------------------------------------------------------------

  /** The session's row, or the default one (not yet stored). */
  async row(r: SessionRecord): Promise<SessionGateRecord> {
    const stored = await this.o.store.gates.get(r.id);
    if (stored) return { ...stored, breaker: normalizeBreakerState(stored.breaker), settings: { ...stored.settings, egressAllowCidr: stored.settings.egressAllowCidr ?? [] } };
    return (
      stored ?? {
        sessionId: r.id,
        tenantId: r.tenantId,
        tools: null,
        settings: { ...DEFAULT_GATE_SETTINGS, breaker: { ...DEFAULT_GATE_SETTINGS.breaker }, httpAllow: [], egressAllowCidr: [] },
        plan: null,
        planState: null,
        planSetAt: null,
        planSetBy: null,
        breaker: initialBreakerState(),
        pausedByBreaker: false,
        calls: 0,
        updatedAt: this.o.clock.now(),
      }
    );
  }

  async load(r: SessionRecord): Promise<LoadedGate> {
    const row = await this.row(r);
    const breakerSettings = resolveBreakerSettings(row.settings.breaker);
    return { row, breaker: row.breaker, breakerSettings, plan: this.plan(row) };
  }

  private plan(row: SessionGateRecord): { plan: Plan; state: PlanState } | null {
    if (!row.plan || !row.planState) {
      this.plans.delete(row.sessionId);
      return null;
    }
    const setAt = row.planSetAt ?? 0;
    let hit = this.plans.get(row.sessionId);
    if (!hit || hit.setAt !== setAt) {
      hit = { setAt, plan: validatePlan(row.plan) };
      this.plans.set(row.sessionId, hit);
    }
    return { plan: hit.plan, state: row.planState };
  }

  async save(row: SessionGateRecord): Promise<void> {
    row.updatedAt = this.o.clock.now();
    await this.o.store.gates.put(row);
  }

  // ---- tools --------------------------------------------------------------------------------------------

  /** Every tool of a tenant, built-ins first. */
  async tenantTools(tenantId: string): Promise<ReadonlyMap<string, ToolDefinition>> {
    let m = this.tools.get(tenantId);
    if (!m) {
      const all = new Map<string, ToolDefinition>(BUILTIN_TOOLS.map((t) => [t.name, t]));
      for (const rec of await this.o.store.tools.list(tenantId)) {
        try {
          all.set(rec.name, defineTool(rec.definition));
        } catch (e) {
          this.o.log?.(`tool ${rec.name} of tenant ${tenantId} is no longer valid and is ignored: ${(e as Error).message}`);
        }
      }
      m = all;
      this.tools.set(tenantId, m);
    }
    return m;
  }

  /** The tools a session has, in the tenant's order. */
  async installed(row: SessionGateRecord): Promise<Map<string, ToolDefinition>> {
    const all = await this.tenantTools(row.tenantId);
    const names = row.tools ?? BUILTIN_NAMES;
    const out = new Map<string, ToolDefinition>();
    for (const [name, def] of all) if (names.includes(name)) out.set(name, def);
    return out;
  }

  /** Replaces a tenant's cached tool set and compiled policy together (after a tool definition was accepted). */
  replaceTools(tenantId: string, tools: ReadonlyMap<string, ToolDefinition>, policy: CompiledPolicy): void {
    this.tools.set(tenantId, tools);
    this.policies.set(tenantId, policy);
  }

  // ---- policy -------------------------------------------------------------------------------------------

  async policy(tenantId: string): Promise<CompiledPolicy> {
    let c = this.policies.get(tenantId);
    if (!c) {
      const record = (await this.o.store.policies.get(tenantId)) ?? null;
      const tools = [...(await this.tenantTools(tenantId)).values()];
      try {
        c = { engine: PolicyEngine.compile(record?.text ?? DEFAULT_POLICY_TEXT, { tools }), record, compileError: null };
      } catch (e) {
        this.o.log?.(`the policy of tenant ${tenantId} does not compile; refusing every call until it is set again: ${(e as Error).message}`);
        c = { engine: PolicyEngine.compile(UNAVAILABLE_POLICY, { tools }), record, compileError: (e as Error).message };
      }
      this.policies.set(tenantId, c);
    }
    return c;
  }

  setPolicy(tenantId: string, c: CompiledPolicy): void {
    this.policies.set(tenantId, c);
  }
}

