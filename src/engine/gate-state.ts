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
  DEFAULT_POLICY_TEXT,
  PolicyEngine,
  defineTool,
  initialBreakerState,
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
  breakerFailures: 10,
  breakerPerMinute: 120,
  httpAllow: [] as string[],
  approvalTtlS: 3600,
});

/** Longest approval TTL, seconds (30 days). */
export const MAX_APPROVAL_TTL_S = 30 * 86_400;
const MAX_ALLOW_HOSTS = 256;

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

/** `host`, `host:port`, `*.domain` or `*.domain:port`; IPv6 literals in brackets. */
const HOST_RE = /^(\*\.)?([a-z0-9-]+(\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(:\d{1,5})?$/;

export function normalizeAllowList(list: unknown): string[] {
  if (!Array.isArray(list) || !list.every((h) => typeof h === 'string')) {
    throw new InvalidArgumentError('httpAllow: must be an array of host names', { details: { field: 'httpAllow' } });
  }
  if (list.length > MAX_ALLOW_HOSTS) throw new InvalidArgumentError(`httpAllow: at most ${MAX_ALLOW_HOSTS} hosts`, { details: { field: 'httpAllow' } });
  const out = new Set<string>();
  for (const raw of list as string[]) {
    const h = raw.trim().toLowerCase();
    const port = /:(\d+)$/.exec(h)?.[1];
    if (!HOST_RE.test(h) || (port !== undefined && (Number(port) < 1 || Number(port) > 65535))) {
      throw new InvalidArgumentError(`httpAllow: ${JSON.stringify(raw)} is not a host, host:port or *.domain`, { details: { field: 'httpAllow', value: raw } });
    }
    out.add(h);
  }
  return [...out];
}

export function checkSettings(s: GateSettings): GateSettings {
  resolveBreakerSettings({ maxIdenticalFailures: s.breakerFailures, maxCallsPerMinute: s.breakerPerMinute });
  if (!Number.isSafeInteger(s.approvalTtlS) || s.approvalTtlS < 0 || s.approvalTtlS > MAX_APPROVAL_TTL_S) {
    throw new InvalidArgumentError(`approvalTtlS: must be an integer from 0 (never expires) to ${MAX_APPROVAL_TTL_S}`, { details: { field: 'approvalTtlS' } });
  }
  return { ...s, httpAllow: normalizeAllowList(s.httpAllow) };
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
    return (
      (await this.o.store.gates.get(r.id)) ?? {
        sessionId: r.id,
        tenantId: r.tenantId,
        tools: null,
        settings: { ...DEFAULT_GATE_SETTINGS, httpAllow: [] },
        plan: null,
        planState: null,
        planSetAt: null,
        planSetBy: null,
        breaker: initialBreakerState() as unknown as Record<string, unknown>,
        pausedByBreaker: false,
        calls: 0,
        updatedAt: this.o.clock.now(),
      }
    );
  }

  async load(r: SessionRecord): Promise<LoadedGate> {
    const row = await this.row(r);
    const breakerSettings = resolveBreakerSettings({ maxIdenticalFailures: row.settings.breakerFailures, maxCallsPerMinute: row.settings.breakerPerMinute });
    return { row, breaker: row.breaker as unknown as BreakerState, breakerSettings, plan: this.plan(row) };
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
    return { plan: hit.plan, state: row.planState as unknown as PlanState };
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

