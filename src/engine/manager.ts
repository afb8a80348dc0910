import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newId, sha256Hex } from '../core/index.js';
import {
  AppError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  SandboxError,
  UnavailableError,
  assertTransition,
  throwIfAborted,
  verifyChainAsync,
  type AuditEntry,
  type AuditLog,
  type BackendName,
  type CallOptions,
  type Clock,
  type ExecEvent,
  type ExecHandle,
  type ExecRequest,
  type FileEntry,
  type FileStat,
  type Principal,
  type SandboxDriver,
  type SandboxIdentity,
  type SandboxSpec,
  type SandboxStats,
  type SessionRecord,
  type SessionState,
  type SnapshotRecord,
  type SnapshotStore,
  type Store,
  type TenantRecord,
  type VerifyResult,
} from '../core/index.js';
import type { CreateSessionInput, Engine, SessionInfo, SessionListFilter, TenantInfo } from './api.js';
import { ToolGate, type ToolGateOptions } from './gate.js';
import { EGRESS_PORT, egressEnv } from './egress.js';
import { normalizeEgressAllow, normalizeEgressCidrs } from '../policy/index.js';
import { fileService, type FileService } from './files.js';
import { processService, type ProcessService, type ProcessSteps } from './processes.js';
import { terminalService, type TerminalService } from './terminals.js';
import { watchLinkService, type WatchLinkService } from './watch-links.js';
import { boundToSession, forbiddenForWatcher } from './gate-context.js';
import { sandboxAccess } from './sandbox-access.js';
import { authenticate, newAgentToken, newSecret } from './auth.js';
import { KeyedMutex, mapLimit } from './lock.js';
import { PendingMeter, countBytes, enterState, foldStats, liveMetering, meteredExec, type PendingCounts } from './metering.js';
import { newSessionRecord, sandboxIdFor } from './records.js';
import { DEFAULT_SESSION, LIMITS, resolveForkConcurrency, resolveSettings, validateDefaults, type SessionDefaults } from './options.js';
import { portService, type PortService } from './ports.js';
import { portLinkService, type PortLinkService } from './port-links.js';
import { tapExec, templateService, type TemplateService } from './templates.js';

import { DEFAULT_TENANT_ID } from './tenants.js';
import type { AuditProofs } from './audit-proofs.js';
import { Idempotency } from './idempotency.js';
import { RequestAudit } from './request-audit.js';
import { DEFAULT_QUOTAS, checkQuota, checkQuotaInput, effectiveQuotas, tenantUsage, validateQuotaDefaults, type QuotaAsk, type TenantUsage } from './quotas.js';
import type { TenantQuotas } from '../core/index.js';

export { DEFAULT_TENANT_ID };

export interface SessionManagerOptions {
  store: Store;
  audit: AuditLog;
  /** Verifies the audit chain (with whatever anchor the store keeps). Default: verifyChain over scan(). */
  verifyAudit?: () => Promise<VerifyResult>;
  snapshots: SnapshotStore;
  /** Backends available on this machine; a session naming a missing one is refused. */
  drivers: Partial<Record<BackendName, SandboxDriver>>;
  /** SHA-256 (hex) of the root operator token. */
  rootKeyHash: string;
  clock: Clock;
  defaults?: Partial<SessionDefaults>;
  /** Fork branches restored at once. Default 4. */
  forkConcurrency?: number;
  /** Why a configured backend is unavailable (shown by health()). */
  unavailable?: Partial<Record<BackendName, string>>;
  log?: (line: string) => void;
  /** Executor limits of the tool gate (see engine/gate.ts). */
  gateLimits?: ToolGateOptions['limits'];
  /** Checkpoints and proofs over the audit tree; undefined when the server has no audit key. */
  auditProofs?: AuditProofs;
  /** Requests a second let through for a principal whose gated calls meet an open breaker. Default 10. */
  refusalsPerSecond?: number;
  /** Quotas of tenants root has not set (per field). Default DEFAULT_QUOTAS (engine/quotas.ts). */
  quotaDefaults?: TenantQuotas;
  /** Where terminal recordings go. Default: a berth-terminals folder in the OS temp dir. */
  terminalRecordDir?: string;
}


const SYSTEM: Principal = { kind: 'system', id: 'system', tenantId: null };

/** Who asked for a lifecycle step; its final transition records it (see lifecycle()). */
interface Actor {
  principal: Principal;
  action: string;
  audited: boolean;
}
/** Metering and activity are flushed at most this often; state changes are written at once. */
const FLUSH_INTERVAL_MS = 1000;

/**
 * The engine: every operation follows lock → check state → audit → driver → transition → persist.
 * It knows sandboxes only through the SandboxDriver port and records only through the Store port.
 */
export class SessionManager implements Engine {
  private readonly mutex = new KeyedMutex();
  private readonly execs = new Map<string, { sessionId: string; handle: ExecHandle }>();
  /** Sessions with at least one exec streaming: not idle. */
  private readonly activeExecs = new Map<string, number>();
  private readonly meter = new PendingMeter();
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly defaults: SessionDefaults;
  private readonly forkConcurrency: number;
  private readonly quotaDefaults: TenantQuotas;
  private closed = false;
  /** The tool gate: authorizes and runs every agent tool call (engine/gate.ts). */
  readonly gate: ToolGate;
  /** Background processes (engine/processes.ts), over this manager's live/audit/meter steps. */
  readonly processes: ProcessService;
  /** move, tar push/pull, watch (engine/files.ts). */
  readonly files: FileService;
  /** Every request with its principal; its log is the one the engine and the gate append to. */
  readonly requests: RequestAudit;
  /** Templates: build, list, remove, and create sessions from them (engine/templates.ts). */
  readonly templates: TemplateService;
  /** Idempotency-Key records (engine/idempotency.ts); the engine notes what it creates on the key in scope. */
  readonly idempotency: Idempotency;
  /** Observers of a session's command output (a template build's live log). */
  private readonly taps = new Map<string, (ev: ExecEvent) => void>();
  /** TCP connections to servers inside a session (engine/ports.ts). */
  readonly ports: PortService;
  /** Signed, expiring links to a port (engine/port-links.ts). */
  readonly portLinks: PortLinkService;
  /** Terminals (engine/terminals.ts): PTYs kept in the sandbox, headless screen models and clients here. */
  readonly terminals: TerminalService;
  /** Watch-only links to one session's console view (engine/watch-links.ts). */
  readonly watchLinks: WatchLinkService;

  get auditProofs(): AuditProofs | undefined {
    return this.o.auditProofs;
  }

  constructor(private readonly o: SessionManagerOptions) {
    this.defaults = validateDefaults({ ...DEFAULT_SESSION, ...o.defaults });
    this.forkConcurrency = resolveForkConcurrency(o.forkConcurrency);
    this.quotaDefaults = validateQuotaDefaults(o.quotaDefaults ?? DEFAULT_QUOTAS);
    this.idempotency = new Idempotency({ store: o.store, clock: o.clock, ...(o.log ? { log: o.log } : {}) });
    this.requests = new RequestAudit({ audit: o.audit, clock: o.clock, ...(o.refusalsPerSecond !== undefined ? { refusalsPerSecond: o.refusalsPerSecond } : {}), ...(o.log ? { log: o.log } : {}) });
    // The gate reaches machines only through these (engine/sandbox-access.ts); they audit nothing themselves.
    const sandboxes = sandboxAccess({
      live: (id, opts) => this.live(SYSTEM, id, opts),
      spawn: (id, l, req, opts) => this.spawn(id, newId('exec'), l.d, l.sandboxId, req, opts),
      meter: (id, f) => this.bump(id, f),
      state: async (id) => (await this.o.store.sessions.get(id))?.state,
      pause: (id) => this.pause(SYSTEM, id),
      resume: (p, id) => this.resume(p, id),
    });
    const steps: ProcessSteps = {
      live: async (p, id, opts) => {
        const { r, d, sandboxId } = await this.live(p, id, opts);
        return { tenantId: r.tenantId, d, sandboxId };
      },
      audit: (p, tenantId, id, action, data) => this.audit(p, tenantId, id, action, 'ok', data),
      meter: (id, f) => this.bump(id, f),
    };
    this.processes = processService(steps);
    this.files = fileService(steps);
    this.gate = new ToolGate({ store: o.store, audit: this.requests.log, clock: o.clock, sandboxes, log: o.log, limits: o.gateLimits, meter: (id, f) => this.bump(id, f), egressQuota: (id) => this.checkEgressQuota(id) });
    for (const d of Object.values(o.drivers)) d?.onExit((sandboxId, reason, last) => void this.onSandboxExit(sandboxId, reason, last));
    this.templates = templateService({
      store: o.store,
      gate: this.gate,
      tenantFor: (p, t) => this.tenantFor(p, t),
      createSession: (p, input, opts) => this.createSession(p, input, opts),
      startFrom: (p, snap, input, opts) => this.startFrom(p, snap, input, opts),
      capture: (id, fields, opts) => this.capture(id, fields, opts),
      terminate: (id) => this.terminateSession(SYSTEM, id),
      tap: (id, fn) => {
        this.taps.set(id, fn);
        return () => {
          if (this.taps.get(id) === fn) this.taps.delete(id);
        };
      },
      removeSnapshot: (snap) => this.removeSnapshot(snap),
      audit: (p, tenantId, sessionId, action, outcome, data) => this.audit(p, tenantId, sessionId, action, outcome, data),
    });
    this.ports = portService(steps);
    const session = async (p: Principal, id: string) => {
      this.requireOperator(p, id);
      return this.record(p, id);
    };
    this.portLinks = portLinkService({ store: o.store, clock: o.clock, ports: this.ports, session, audit: steps.audit });
    this.terminals = terminalService({
      ...steps,
      recordDir: o.terminalRecordDir ?? join(tmpdir(), 'berth-terminals'),
      now: () => o.clock.now(),
      check: async (p, id) => {
        this.requireOperator(p, id);
        await this.record(p, id);
      },
      watchLive: async (p, id, opts) => {
        await this.record(p, id); // the watcher's own session, in its tenant: else not found
        const { r, d, sandboxId } = await this.live(SYSTEM, id, opts);
        return { tenantId: r.tenantId, d, sandboxId };
      },
      leaseHolder: async (id) => (await this.gate.control.current(id))?.holder ?? null,
    });
    this.watchLinks = watchLinkService({
      store: o.store,
      clock: o.clock,
      operatorSession: async (p, id) => {
        this.requireOperator(p, id);
        return { tenantId: (await this.record(p, id)).tenantId };
      },
      audit: async (p, tenantId, id, action, data) => void (await this.audit(p, tenantId, id, action, 'ok', data)),
      revoked: (l) => this.terminals.closeWatchers(l.sessionId),
    });
    this.gate.control.onChange((id, holder) => this.terminals.leaseChanged(id, holder));
  }

  /** Call once, before anything else: creates the default tenant on a new store and starts the gate. */
  async start(): Promise<void> {
    if (!(await this.o.store.tenants.get(DEFAULT_TENANT_ID))) {
      await this.o.store.tenants.insert({ id: DEFAULT_TENANT_ID, name: 'default', apiKeyHash: sha256Hex(newSecret('btk')), createdAt: this.o.clock.now() });
    }
    await this.gate.start();
  }

  // ---- principals ---------------------------------------------------------------------------------

  authenticate(token: string): Promise<Principal> {
    return authenticate(this.o.store, this.o.rootKeyHash, token);
  }

  /**
   * Operator routes refuse agent tokens. With a session id, visibility comes first: an agent naming another
   * session gets not_found (as for any id it cannot see), its own session forbidden.
   */
  private requireOperator(p: Principal, sessionId?: string): void {
    if (p.kind !== 'agent' && p.kind !== 'watcher') return;
    if (sessionId !== undefined && sessionId !== p.id) throw new NotFoundError('session', sessionId);
    if (p.kind === 'watcher') throw forbiddenForWatcher();
    throw new AppError('forbidden', 'an agent token may only list and call its own session\'s tools');
  }

  private visible(p: Principal, tenantId: string): boolean {
    return p.kind === 'root' || p.kind === 'system' || p.tenantId === tenantId;
  }

  async createTenant(p: Principal, name: string): Promise<{ tenant: TenantRecord; apiKey: string }> {
    if (p.kind !== 'root') throw new AppError('forbidden', 'only the root token may create tenants');
    if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/.test(name)) {
      throw new InvalidArgumentError('name: 1-63 characters of letters, digits, ".", "_" or "-"', { details: { field: 'name' } });
    }
    if ((await this.o.store.tenants.list()).some((t) => t.name === name)) throw new AppError('conflict', `tenant ${name} already exists`, { details: { field: 'name' } });
    const apiKey = newSecret('btk');
    const tenant: TenantRecord = { id: newId('tenant'), name, apiKeyHash: sha256Hex(apiKey), createdAt: this.o.clock.now() };
    await this.o.store.tenants.insert(tenant);
    await this.audit(p, tenant.id, null, 'tenant.create', 'ok', { name });
    return { tenant, apiKey };
  }

  async listTenants(p: Principal): Promise<TenantRecord[]> {
    this.requireOperator(p);
    return (await this.o.store.tenants.list()).filter((t) => this.visible(p, t.id));
  }

  // ---- quotas (issue 12 §3) ------------------------------------------------------------------------

  private async usage(tenantId: string): Promise<{ quotas: TenantQuotas; usage: TenantUsage }> {
    const t = await this.o.store.tenants.get(tenantId);
    const [sessions, snapshots] = await Promise.all([this.o.store.sessions.list({ tenantId }), this.o.store.snapshots.list({ tenantId })]);
    return { quotas: effectiveQuotas(t?.quotas, this.quotaDefaults), usage: tenantUsage(sessions, snapshots) };
  }

  /** Throws 429 quota_exceeded when the ask would pass one of the tenant's limits. */
  private async checkQuota(tenantId: string, ask: QuotaAsk): Promise<void> {
    const { quotas, usage } = await this.usage(tenantId);
    checkQuota(quotas, usage, ask);
  }

  /** Root sees every tenant, an operator its own; agents are refused. */
  async getTenant(p: Principal, tenantId: string): Promise<TenantInfo> {
    this.requireOperator(p);
    const tenant = await this.o.store.tenants.get(tenantId);
    if (!tenant || !this.visible(p, tenant.id)) throw new NotFoundError('tenant', tenantId);
    return { tenant, ...(await this.usage(tenant.id)) };
  }

  /** Root only: sets the given limits (the rest keep theirs); a limit below the current use is allowed and stops new use. */
  async setTenantQuotas(p: Principal, tenantId: string, input: Partial<Record<keyof TenantQuotas, unknown>>): Promise<TenantInfo> {
    if (p.kind !== 'root') {
      if (p.kind === 'operator' && p.tenantId !== tenantId) throw new NotFoundError('tenant', tenantId);
      throw new AppError('forbidden', 'only the root token may set quotas');
    }
    const change = checkQuotaInput(input);
    const tenant = await this.o.store.tenants.get(tenantId);
    if (!tenant) throw new NotFoundError('tenant', tenantId);
    const next: TenantRecord = { ...tenant, quotas: { ...tenant.quotas, ...change } };
    await this.o.store.transaction(async () => {
      await this.o.store.tenants.put(next);
      await this.audit(p, tenantId, null, 'tenant.quotas', 'ok', { set: change, quotas: effectiveQuotas(next.quotas, this.quotaDefaults) });
    });
    return { tenant: next, ...(await this.usage(tenantId)) };
  }

  /**
   * The egress quota's hook for the egress proxy: throws 429 quota_exceeded when the session's tenant has
   * used its maxEgressGb (bytes each way, metering.egressBytesOut and egressBytesIn).
   */
  async checkEgressQuota(sessionId: string): Promise<void> {
    const r = await this.o.store.sessions.get(sessionId);
    if (!r) throw new NotFoundError('session', sessionId);
    await this.checkQuota(r.tenantId, { egress: true });
  }

  // ---- records ------------------------------------------------------------------------------------

  /** The session as this principal may see it; another tenant's session is simply not found. */
  private async record(p: Principal, id: string): Promise<SessionRecord> {
    const r = await this.o.store.sessions.get(id);
    if (!r || !this.visible(p, r.tenantId) || (boundToSession(p) && p.id !== id)) throw new NotFoundError('session', id);
    return r;
  }

  private async save(r: SessionRecord): Promise<void> {
    await this.o.store.sessions.put(r);
  }

  private bump(id: string, f: Partial<PendingCounts>): void {
    this.meter.add(id, f, this.o.clock.now());
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = undefined;
      void this.flush().catch((e: unknown) => this.o.log?.(`metering flush failed: ${(e as Error).message}`));
    }, FLUSH_INTERVAL_MS).unref();
  }

  async flush(): Promise<void> {
    for (const id of this.meter.ids()) {
      const r = await this.o.store.sessions.get(id);
      if (r) await this.o.store.sessions.put(this.meter.apply(r));
    }
  }

  /**
   * Moves a record to a new state and writes it with its audit entry in one transaction (one commit,
   * one fsync). `by` names who asked for it; without it the entry is the system's.
   */
  private async transition(r: SessionRecord, to: SessionState, patch: Partial<SessionRecord> = {}, by?: Actor): Promise<void> {
    assertTransition(r.state, to);
    const from = r.state;
    this.meter.apply(r);
    enterState(r, to, this.o.clock.now());
    Object.assign(r, patch);
    // The environment's values are secrets: an ended session keeps their names only.
    if (to === 'terminated') r.settings = { ...r.settings, env: Object.fromEntries(Object.keys(r.settings.env).map((k) => [k, ''])) };
    const data = { from, to, ...(patch.failureReason ? { reason: patch.failureReason } : {}) };
    await this.o.store.transaction(async () => {
      await this.save(r);
      if (by) {
        await this.audit(by.principal, r.tenantId, r.id, by.action, 'ok', data);
        by.audited = true;
      } else {
        await this.audit(SYSTEM, r.tenantId, r.id, 'session.state', 'ok', data);
      }
    });
    if (to === 'running') await this.listenEgress(r);
  }

  /**
   * Asks the agent to listen for the session's proxy (engine/egress.ts) and hands each connection to the
   * egress gate. Every incarnation needs it (create, wake, fork, resume, a restart's adoption): the driver's
   * handler is per sandbox and per server process. A failure is logged, not fatal: the session runs
   * without egress, which is what it would have without the proxy.
   */
  private async listenEgress(r: SessionRecord): Promise<void> {
    const sandboxId = r.sandboxId;
    const d = this.o.drivers[r.backend];
    if (!sandboxId || !d) return;
    const id = r.id;
    try {
      await d.listenTcp(sandboxId, EGRESS_PORT, (sock) => void this.gate.egress.serve(id, sock));
    } catch (e) {
      this.o.log?.(`egress: the proxy listener of ${id} could not start: ${(e as Error).message}`);
    }
  }

  private audit(p: Principal, tenantId: string | null, sessionId: string | null, action: string, outcome: string, data: Record<string, unknown>): Promise<AuditEntry> {
    return this.requests.log.append({ tenantId, sessionId, principal: p, action, outcome, data });
  }

  private driver(backend: BackendName): SandboxDriver {
    const d = this.o.drivers[backend];
    if (!d) throw new UnavailableError(`the ${backend} backend is not available on this server${this.o.unavailable?.[backend] ? `: ${this.o.unavailable[backend]}` : ''}`);
    return d;
  }

  private spec(r: SessionRecord, sandboxId: string, identity: SandboxIdentity): SandboxSpec {
    // No network device: the proxy variables point at the agent's loopback listener (engine/egress.ts).
    return { sandboxId, limits: { memoryMb: r.settings.memoryMb, cpus: r.settings.cpus }, env: { ...egressEnv(), ...r.settings.env }, identity, network: 'none' };
  }

  private async info(r: SessionRecord): Promise<SessionInfo> {
    const live = r.sandboxId && (r.state === 'running' || r.state === 'paused')
      ? await this.driver(r.backend).stats(r.sandboxId).catch(() => undefined)
      : undefined;
    return liveMetering(this.meter.peek(r), live);
  }

  // ---- create / list / terminate --------------------------------------------------------------------

  async createSession(p: Principal, input: CreateSessionInput, opts: CallOptions = {}): Promise<{ session: SessionInfo; agentToken: string }> {
    this.requireOperator(p);
    if (input.template !== undefined) return this.templates.createSession(p, input, opts);
    const { settings, backend } = resolveSettings(input, this.defaults);
    const tenantId = await this.tenantFor(p, input.tenantId);
    if (input.objective !== undefined && (typeof input.objective !== 'string' || input.objective.length > 4096)) {
      throw new InvalidArgumentError('objective: a string of at most 4096 characters', { details: { field: 'objective' } });
    }
    // Checked before anything exists, so a bad entry leaves nothing behind.
    const egressAllow = input.egressAllow === undefined ? undefined : normalizeEgressAllow(input.egressAllow, 'egressAllow');
    const egressAllowCidr = input.egressAllowCidr === undefined ? undefined : normalizeEgressCidrs(input.egressAllowCidr, 'egressAllowCidr');
    const driver = this.driver(backend);
    const id = newId('session');
    await this.idempotency.note(id); // before the record exists: a retry after a crash finds it (engine/idempotency.ts)
    const agentToken = newAgentToken(id);
    const now = this.o.clock.now();
    const r = newSessionRecord({ id, tenantId, backend, settings, objective: input.objective ?? null, metadata: input.metadata ?? {}, agentToken, reason: 'create', parentSnapshotId: null, now });
    // Check and insert under the tenant's lock, so two creates cannot both pass the last free place.
    await this.mutex.run(`tenant:${tenantId}`, async () => {
      await this.checkQuota(tenantId, { sessions: 1, memoryMb: settings.memoryMb });
      await this.o.store.sessions.insert(r);
    });
    await this.audit(p, tenantId, id, 'session.create', 'ok', { backend, settings: { ...settings, env: Object.keys(settings.env) }, objective: r.objective });
    if (egressAllow || egressAllowCidr) {
      await this.gate.setGate(p, id, { ...(egressAllow ? { egressAllow } : {}), ...(egressAllowCidr ? { egressAllowCidr } : {}) });
    }
    await this.mutex.run(id, async () => {
      try {
        await driver.create(this.spec(r, r.sandboxId as string, r.identity), opts);
        await this.transition(r, 'running');
      } catch (e) {
        await driver.destroy(r.sandboxId as string).catch(() => undefined);
        await this.transition(r, 'failed', { failureReason: `create failed: ${(e as Error).message}`, sandboxId: null });
        throw e;
      }
    });
    return { session: await this.info(r), agentToken };
  }

  private async tenantFor(p: Principal, requested: string | undefined): Promise<string> {
    if (p.kind === 'root' || p.kind === 'system') {
      if (requested === undefined) return DEFAULT_TENANT_ID;
      if (!(await this.o.store.tenants.get(requested))) throw new NotFoundError('tenant', requested);
      return requested;
    }
    if (requested !== undefined && requested !== p.tenantId) throw new NotFoundError('tenant', requested);
    return p.tenantId as string;
  }

  async listSessions(p: Principal, filter: SessionListFilter = {}): Promise<SessionInfo[]> {
    this.requireOperator(p);
    const states = (filter.states?.length ? filter.states : ['creating', 'running', 'paused', 'hibernating', 'hibernated', 'waking', 'failed']) as SessionState[];
    const rows = await this.o.store.sessions.list({ states, ...(p.kind === 'operator' ? { tenantId: p.tenantId as string } : {}) });
    return Promise.all(rows.map((r) => this.info(r)));
  }

  async getSession(p: Principal, id: string): Promise<SessionInfo> {
    if (p.kind !== 'watcher') this.requireOperator(p, id); // a watcher reads its session (record() scopes it)
    return this.info(await this.record(p, id));
  }

  async terminateSession(p: Principal, id: string, opts: CallOptions = {}): Promise<void> {
    this.requireOperator(p, id);
    await this.record(p, id);
    await this.mutex.run(id, async () => {
      const r = await this.record(p, id);
      if (r.state === 'terminated') return;
      await this.audit(p, r.tenantId, id, 'session.terminate', 'ok', {});
      for (const [execId, e] of this.execs) if (e.sessionId === id) this.execs.delete(execId);
      const d = this.driver(r.backend);
      if (r.sandboxId) foldStats(r, await d.stats(r.sandboxId).catch(() => undefined));
      // Also the last incarnation when hibernated: its removal may still be finishing in the background.
      await d.destroy(r.sandboxId ?? sandboxIdFor(r.id, r.identity.generation), opts);
      // The session's own snapshots go with it, named or not, except named ones (kept for forking).
      for (const s of await this.o.store.snapshots.list({ sessionId: id })) {
        if (s.kind === 'hibernation' || (s.kind === 'named' && s.name === null)) await this.removeSnapshot(s);
      }
      // Its pending approvals close with it (cancelled), so none is left to approve.
      await this.o.store.transaction(async () => {
        await this.gate.cancelPendingApprovals(id);
        this.gate.control.drop(id);
        await this.transition(r, 'terminated', { sandboxId: null, hibernationSnapshotId: null });
      });
      await this.terminals.forget(id); // screens and recordings go with the session
    });
  }

  private async removeSnapshot(s: SnapshotRecord): Promise<void> {
    await this.o.snapshots.delete(s.id);
    await this.o.store.snapshots.delete(s.id);
  }

  // ---- making sure a machine is there ----------------------------------------------------------------

  /** The live sandbox of a session for a command or file call; wakes a hibernated session first. */
  private async live(p: Principal, id: string, opts: CallOptions): Promise<{ r: SessionRecord; d: SandboxDriver; sandboxId: string }> {
    this.requireOperator(p, id);
    let r = await this.record(p, id);
    if (r.state === 'hibernated' || r.state === 'hibernating' || r.state === 'waking') {
      await this.wake(p, id, opts);
      r = await this.record(p, id);
    }
    if (r.state === 'paused') throw new InvalidStateError(`session ${id} is paused; resume it first`, { details: { state: r.state } });
    if (r.state !== 'running' || !r.sandboxId) {
      throw new InvalidStateError(`session ${id} is ${r.state}${r.failureReason ? ` (${r.failureReason})` : ''}`, { details: { state: r.state } });
    }
    this.bump(id, {});
    return { r, d: this.driver(r.backend), sandboxId: r.sandboxId };
  }

  // ---- commands --------------------------------------------------------------------------------------

  async exec(p: Principal, id: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ execId: string; handle: ExecHandle }> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    const execId = newId('exec');
    await this.audit(p, r.tenantId, id, 'session.exec', 'ok', { execId, argv: req.argv, cwd: req.cwd ?? null, timeoutMs: req.timeoutMs ?? null });
    return { execId, handle: await this.spawn(id, execId, d, sandboxId, req, opts) };
  }

  /** Starts a command in a live sandbox, metered, and registers it under execId. */
  private async spawn(id: string, execId: string, d: SandboxDriver, sandboxId: string, req: ExecRequest, opts: CallOptions): Promise<ExecHandle> {
    const tap = this.taps.get(id);
    const raw = tap ? tapExec(await d.exec(sandboxId, req, opts), tap) : await d.exec(sandboxId, req, opts);
    this.activeExecs.set(id, (this.activeExecs.get(id) ?? 0) + 1);
    const handle = meteredExec(raw, {
      in: (n) => this.bump(id, { bytesIn: n }),
      out: (n) => this.bump(id, { bytesOut: n }),
      end: () => {
        this.execs.delete(execId);
        const left = (this.activeExecs.get(id) ?? 1) - 1;
        if (left > 0) this.activeExecs.set(id, left);
        else this.activeExecs.delete(id);
        this.bump(id, {});
      },
    });
    this.bump(id, { execCount: 1 });
    this.execs.set(execId, { sessionId: id, handle });
    return handle;
  }

  async getExec(p: Principal, sessionId: string, execId: string): Promise<ExecHandle> {
    this.requireOperator(p, sessionId);
    await this.record(p, sessionId);
    const e = this.execs.get(execId);
    if (!e || e.sessionId !== sessionId) throw new NotFoundError('exec', execId);
    return e.handle;
  }

  // ---- files -----------------------------------------------------------------------------------------

  async readFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    const { d, sandboxId } = await this.live(p, id, opts);
    const src = await d.readFile(sandboxId, checkPath(path), opts);
    return countBytes(src, (n) => this.bump(id, { bytesOut: n }));
  }

  async writeFile(p: Principal, id: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number; parents?: boolean } = {}): Promise<number> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    // Missing parent directories are made first (as E2B's write does), unless the caller asks for the strict form.
    if (opts.parents !== false && checkPath(path).lastIndexOf('/') > 0) await d.mkdir(sandboxId, path.slice(0, path.lastIndexOf('/')), { ...opts, parents: true });
    const n = await d.writeFile(sandboxId, checkPath(path), countBytes(data, (k) => this.bump(id, { bytesIn: k })), opts);
    await this.audit(p, r.tenantId, id, 'session.files.write', 'ok', { path, bytes: n });
    return n;
  }

  async listFiles(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    const { d, sandboxId } = await this.live(p, id, opts);
    return d.listFiles(sandboxId, checkPath(path), opts);
  }

  async statFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileStat> {
    const { d, sandboxId } = await this.live(p, id, opts);
    return d.stat(sandboxId, checkPath(path), opts);
  }

  async mkdir(p: Principal, id: string, path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    await d.mkdir(sandboxId, checkPath(path), opts);
    await this.audit(p, r.tenantId, id, 'session.files.mkdir', 'ok', { path });
  }

  async removeFile(p: Principal, id: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    await d.remove(sandboxId, checkPath(path), opts);
    await this.audit(p, r.tenantId, id, 'session.files.remove', 'ok', { path, recursive: !!opts.recursive });
  }

  // ---- pause / resume / hibernate / wake -------------------------------------------------------------

  async pause(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.lifecycle(p, id, 'session.pause', async (r, by) => {
      assertTransition(r.state, 'paused');
      await this.driver(r.backend).pause(r.sandboxId as string, opts);
      await this.transition(r, 'paused', {}, by);
    });
  }

  async resume(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.lifecycle(p, id, 'session.resume', async (r, by) => {
      if (r.state !== 'paused') throw new InvalidStateError(`session ${id} is ${r.state}, not paused`, { details: { state: r.state } });
      await this.driver(r.backend).resume(r.sandboxId as string, opts);
      await this.transition(r, 'running', {}, by);
    });
  }

  async hibernate(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.lifecycle(p, id, 'session.hibernate', (r, by) => this.hibernateLocked(r, opts, by));
  }

  private async hibernateLocked(r: SessionRecord, opts: CallOptions, by?: Actor): Promise<void> {
    assertTransition(r.state, 'hibernating');
    const d = this.driver(r.backend);
    const sandboxId = r.sandboxId as string;
    const snapshotId = newId('snapshot');
    const dir = await this.o.snapshots.create(snapshotId);
    const stats = await d.stats(sandboxId).catch(() => undefined);
    await this.transition(r, 'hibernating', { hibernationSnapshotId: snapshotId });
    try {
      await d.checkpoint(sandboxId, dir, opts);
    } catch (e) {
      await this.o.snapshots.delete(snapshotId);
      const alive = await d.adopt(this.spec(r, sandboxId, r.identity)).catch(() => false);
      if (alive) await this.transition(r, 'running', { hibernationSnapshotId: null });
      else await this.transition(r, 'failed', { failureReason: `hibernate failed: ${(e as Error).message}`, sandboxId: null });
      throw e;
    }
    foldStats(r, stats);
    await this.o.store.snapshots.insert({
      id: snapshotId,
      tenantId: r.tenantId,
      sessionId: r.id,
      kind: 'hibernation',
      name: null,
      backend: r.backend,
      settings: r.settings,
      sizeBytes: await this.o.snapshots.sizeBytes(snapshotId),
      createdAt: this.o.clock.now(),
    });
    await this.transition(r, 'hibernated', { sandboxId: null }, by);
  }

  async wake(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.lifecycle(p, id, 'session.wake', async (r, by) => {
      if (r.state === 'running') return; // a transparent wake raced with another: nothing to do
      await this.wakeLocked(r, opts, by);
    });
  }

  private async wakeLocked(r: SessionRecord, opts: CallOptions, by?: Actor): Promise<void> {
    if (r.state !== 'hibernated' || !r.hibernationSnapshotId) {
      throw new InvalidStateError(`session ${r.id} is ${r.state}, not hibernated`, { details: { state: r.state } });
    }
    // A hibernated session holds no memory; waking takes its memory back, within the tenant's quota.
    await this.checkQuota(r.tenantId, { memoryMb: r.settings.memoryMb });
    const d = this.driver(r.backend);
    const snap = r.hibernationSnapshotId;
    const sandboxId = sandboxIdFor(r.id, r.identity.generation + 1);
    const identity: SandboxIdentity = { ...r.identity, generation: r.identity.generation + 1, reason: 'wake' };
    await this.transition(r, 'waking', { sandboxId });
    try {
      await d.restore(this.spec(r, sandboxId, identity), this.o.snapshots.dir(snap), opts);
    } catch (e) {
      await d.destroy(sandboxId).catch(() => undefined);
      await this.transition(r, 'hibernated', { sandboxId: null });
      throw e;
    }
    await this.transition(r, 'running', { identity, hibernationSnapshotId: null, lastActivityAt: this.o.clock.now() }, by);
    const rec = await this.o.store.snapshots.get(snap);
    if (rec) await this.removeSnapshot(rec);
  }

  /**
   * Runs a lifecycle step under the session lock and returns the fresh view. The step passes `by` to its
   * final transition, which then carries the caller's audit entry; a step without one is audited here.
   */
  private async lifecycle(p: Principal, id: string, action: string, fn: (r: SessionRecord, by: Actor) => Promise<void>): Promise<SessionInfo> {
    this.requireOperator(p, id);
    await this.record(p, id);
    return this.mutex.run(id, async () => {
      const r = await this.record(p, id);
      const by: Actor = { principal: p, action, audited: false };
      try {
        await fn(r, by);
        if (!by.audited) await this.audit(p, r.tenantId, id, action, 'ok', {});
      } catch (e) {
        await this.audit(p, r.tenantId, id, action, 'error', { code: (e as AppError).code ?? 'internal', message: (e as Error).message });
        throw e;
      }
      return this.info(r);
    });
  }

  // ---- snapshots and fork ---------------------------------------------------------------------------

  async snapshot(p: Principal, id: string, opts: CallOptions & { name?: string } = {}): Promise<SnapshotRecord> {
    this.requireOperator(p, id);
    if (opts.name !== undefined && !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/.test(opts.name)) {
      throw new InvalidArgumentError('name: 1-128 characters of letters, digits, ".", "_" or "-"', { details: { field: 'name' } });
    }
    let out!: SnapshotRecord;
    await this.lifecycle(p, id, 'session.snapshot', async (r) => {
      if (r.state === 'hibernated') await this.wakeLocked(r, opts);
      if (r.state !== 'running' && r.state !== 'paused') throw new InvalidStateError(`session ${id} is ${r.state}`, { details: { state: r.state } });
      const d = this.driver(r.backend);
      // The size is known only once taken: refuse when the quota is already used up, and drop a snapshot
      // that took the tenant past it.
      await this.checkQuota(r.tenantId, { snapshotBytes: 1 });
      const snapshotId = newId('snapshot');
      await this.idempotency.note(snapshotId);
      const dir = await this.o.snapshots.create(snapshotId);
      try {
        await d.checkpoint(r.sandboxId as string, dir, { ...opts, leaveRunning: true });
        if (r.state === 'paused') await d.pause(r.sandboxId as string);
        await this.checkQuota(r.tenantId, { snapshotBytes: await this.o.snapshots.sizeBytes(snapshotId) });
      } catch (e) {
        await this.o.snapshots.delete(snapshotId);
        throw e;
      }
      out = {
        id: snapshotId,
        tenantId: r.tenantId,
        sessionId: r.id,
        kind: 'named',
        name: opts.name ?? null,
        backend: r.backend,
        settings: r.settings,
        sizeBytes: await this.o.snapshots.sizeBytes(snapshotId),
        createdAt: this.o.clock.now(),
      };
      // With the gate configuration as it stands now: fork branches inherit it (ToolGate.inheritSnapshot).
      await this.o.store.transaction(async () => {
        await this.o.store.snapshots.insert(out);
        await this.gate.keepForSnapshot(r, snapshotId);
      });
    });
    return out;
  }

  private async snapshotRecord(p: Principal, snapshotId: string): Promise<SnapshotRecord> {
    const s = await this.o.store.snapshots.get(snapshotId);
    if (!s || s.kind !== 'named' || !this.visible(p, s.tenantId) || (p.kind === 'agent' && p.id !== s.sessionId)) throw new NotFoundError('snapshot', snapshotId);
    return s;
  }

  async listSnapshots(p: Principal, filter: { sessionId?: string } = {}): Promise<SnapshotRecord[]> {
    // Another tenant's session (or one that never existed), or another session's under an agent token, is
    // not found, as on every other route; then agents are refused.
    if (filter.sessionId) await this.record(p, filter.sessionId);
    this.requireOperator(p, filter.sessionId);
    return (await this.o.store.snapshots
      .list({ ...(p.kind === 'operator' ? { tenantId: p.tenantId as string } : {}), ...(filter.sessionId ? { sessionId: filter.sessionId } : {}) })
      ).filter((s) => s.kind === 'named');
  }

  async getSnapshot(p: Principal, snapshotId: string): Promise<SnapshotRecord> {
    const s = await this.snapshotRecord(p, snapshotId);
    this.requireOperator(p);
    return s;
  }

  async deleteSnapshot(p: Principal, snapshotId: string): Promise<void> {
    const s = await this.snapshotRecord(p, snapshotId);
    this.requireOperator(p);
    await this.removeSnapshot(s);
    await this.audit(p, s.tenantId, s.sessionId, 'snapshot.delete', 'ok', { snapshotId });
  }

  async fork(p: Principal, snapshotId: string, count: number, opts: CallOptions = {}): Promise<Array<{ session: SessionInfo; agentToken: string }>> {
    if (p.kind === 'agent') await this.snapshotRecord(p, snapshotId);
    this.requireOperator(p);
    if (!Number.isInteger(count) || count < LIMITS.forkCount.min || count > LIMITS.forkCount.max) {
      throw new InvalidArgumentError(`count: must be an integer between ${LIMITS.forkCount.min} and ${LIMITS.forkCount.max}`, { details: { field: 'count' } });
    }
    const snap = await this.snapshotRecord(p, snapshotId);
    const d = this.driver(snap.backend);
    if (!d.capabilities.fork) throw new UnavailableError(`the ${snap.backend} backend cannot fork`);
    const dir = this.o.snapshots.dir(snap.id);
    const now = this.o.clock.now();
    const objective = (await this.o.store.sessions.get(snap.sessionId))?.objective ?? null;
    const branches: Array<{ r: SessionRecord; agentToken: string }> = [];
    await this.mutex.run(`tenant:${snap.tenantId}`, async () => {
      await this.checkQuota(snap.tenantId, { sessions: count, memoryMb: count * snap.settings.memoryMb });
      for (let i = 0; i < count; i++) {
        const id = newId('session');
        await this.idempotency.note(id);
        const agentToken = newAgentToken(id);
        const r = newSessionRecord({
          id, tenantId: snap.tenantId, backend: snap.backend, settings: snap.settings, objective,
          metadata: {}, agentToken, reason: 'fork', parentSnapshotId: snap.id, now,
        });
        await this.o.store.sessions.insert(r);
        branches.push({ r, agentToken });
      }
    });
    await this.audit(p, snap.tenantId, snap.sessionId, 'snapshot.fork', 'ok', { snapshotId, sessions: branches.map((b) => b.r.id) });
    await this.gate.inheritSnapshot(p, snap, branches.map((b) => b.r));
    const results = await mapLimit(branches, this.forkConcurrency, async ({ r }) => {
      throwIfAborted(opts.signal);
      await d.restore(this.spec(r, r.sandboxId as string, r.identity), dir, opts);
      await this.transition(r, 'running');
    });
    const failed = results.findIndex((x) => x.status === 'rejected');
    if (failed >= 0) {
      // All or nothing: a half-made fork would leave the caller with branches it did not ask for.
      for (const { r } of branches) {
        if (r.sandboxId) await d.destroy(r.sandboxId).catch(() => undefined);
        if (r.state === 'creating') await this.transition(r, 'failed', { failureReason: 'fork failed', sandboxId: null });
        await this.transition(r, 'terminated', { sandboxId: null });
      }
      throw (results[failed] as PromiseRejectedResult).reason;
    }
    return Promise.all(branches.map(async ({ r, agentToken }) => ({ session: await this.info(r), agentToken })));
  }

  /**
   * One new session restored from an image with a fresh identity, as a fork branch is (engine/templates.ts
   * starts sessions from templates with it). On failure the session ends failed and the error is thrown.
   */
  private async startFrom(p: Principal, snap: SnapshotRecord, input: { objective: string | null; metadata: Record<string, string>; idleTimeoutS?: number }, opts: CallOptions): Promise<{ session: SessionInfo; agentToken: string }> {
    const d = this.driver(snap.backend);
    if (!d.capabilities.fork) throw new UnavailableError(`the ${snap.backend} backend cannot start sessions from an image`);
    const settings = input.idleTimeoutS === undefined ? snap.settings : { ...snap.settings, idleTimeoutS: resolveSettings({ idleTimeoutS: input.idleTimeoutS, backend: snap.backend }, this.defaults).settings.idleTimeoutS };
    const id = newId('session');
    await this.idempotency.note(id);
    const agentToken = newAgentToken(id);
    const r = newSessionRecord({
      id, tenantId: snap.tenantId, backend: snap.backend, settings, objective: input.objective,
      metadata: input.metadata, agentToken, reason: 'fork', parentSnapshotId: snap.id, now: this.o.clock.now(),
    });
    await this.mutex.run(`tenant:${snap.tenantId}`, async () => {
      await this.checkQuota(snap.tenantId, { sessions: 1, memoryMb: settings.memoryMb });
      await this.o.store.sessions.insert(r);
    });
    await this.audit(p, snap.tenantId, id, 'session.create', 'ok', { backend: snap.backend, fromSnapshot: snap.id, ...(snap.kind === 'template' ? { template: snap.name } : {}), objective: r.objective });
    await this.mutex.run(id, async () => {
      try {
        await d.restore(this.spec(r, r.sandboxId as string, r.identity), this.o.snapshots.dir(snap.id), opts);
        await this.transition(r, 'running');
      } catch (e) {
        await d.destroy(r.sandboxId as string).catch(() => undefined);
        await this.transition(r, 'failed', { failureReason: `create failed: ${(e as Error).message}`, sandboxId: null });
        throw e;
      }
    });
    return { session: await this.info(r), agentToken };
  }

  /** Checkpoints a running session into a new image recorded with `fields`; its machine stops (the session is ended next). */
  private async capture(id: string, fields: Pick<SnapshotRecord, 'name' | 'template'>, opts: CallOptions): Promise<SnapshotRecord> {
    return this.mutex.run(id, async () => {
      const r = await this.o.store.sessions.get(id);
      if (!r || r.state !== 'running' || !r.sandboxId) throw new InvalidStateError(`session ${id} is ${r?.state ?? 'gone'}; it cannot be captured`, { details: { state: r?.state } });
      const d = this.driver(r.backend);
      const snapshotId = newId('snapshot');
      await this.idempotency.note(snapshotId);
      const dir = await this.o.snapshots.create(snapshotId);
      try {
        await d.checkpoint(r.sandboxId, dir, opts);
        const rec: SnapshotRecord = {
          id: snapshotId, tenantId: r.tenantId, sessionId: r.id, kind: 'template', name: fields.name, backend: r.backend,
          settings: r.settings, sizeBytes: await this.o.snapshots.sizeBytes(snapshotId), createdAt: this.o.clock.now(),
          ...(fields.template ? { template: fields.template } : {}),
        };
        await this.o.store.snapshots.insert(rec);
        return rec;
      } catch (e) {
        await this.o.snapshots.delete(snapshotId);
        throw e;
      }
    });
  }

  // ---- audit and health -----------------------------------------------------------------------------

  async auditQuery(p: Principal, q: { sessionId?: string; afterSeq?: number; limit?: number }): Promise<AuditEntry[]> {
    // A watcher reads its session's entries (the timeline), and only those.
    if (p.kind === 'watcher') q = { ...q, sessionId: q.sessionId ?? p.id };
    else this.requireOperator(p, q.sessionId);
    if (q.sessionId) await this.record(p, q.sessionId);
    return this.o.audit.query({ ...q, ...(p.kind === 'operator' || p.kind === 'watcher' ? { tenantId: p.tenantId as string } : {}) });
  }

  async recordConsoleAction(p: Principal, e: { action: string; outcome: string; data: Record<string, unknown> }): Promise<void> {
    if (!e.action.startsWith('console.')) throw new AppError('internal', `console audit actions start with "console.", got ${e.action}`);
    await this.audit(p, p.tenantId, null, e.action, e.outcome, e.data);
  }

  async auditVerify(p: Principal): Promise<VerifyResult> {
    if (p.kind !== 'root') throw new AppError('forbidden', 'only the root token may verify the whole audit chain');
    return this.o.verifyAudit ? this.o.verifyAudit() : verifyChainAsync(this.o.audit.scan());
  }

  health(): { ok: boolean; backends: Record<string, { available: boolean; reason?: string }> } {
    const backends: Record<string, { available: boolean; reason?: string }> = {};
    for (const b of ['gvisor', 'qemu'] as const) {
      backends[b] = this.o.drivers[b] ? { available: true } : { available: false, reason: this.o.unavailable?.[b] ?? 'not configured' };
    }
    return { ok: !this.closed, backends };
  }

  // ---- background duties ------------------------------------------------------------------------------

  /** Hibernates sessions idle past their idleTimeoutS. Called by a timer; tests call it with a fake clock. */
  async sweepIdle(): Promise<string[]> {
    // The same timer expires pending approvals past their time (the gate also checks lazily on every read).
    try {
      await this.gate.sweepExpired();
      await this.gate.control.sweep(); // a lapsed lease ends now, and terminals hear of it
    } catch (e) {
      this.o.log?.(`approval expiry sweep failed: ${(e as Error).message}`);
    }
    const now = this.o.clock.now();
    const done: string[] = [];
    for (const r0 of await this.o.store.sessions.list({ states: ['running'] })) {
      const r = this.meter.peek(r0);
      if (r.settings.idleTimeoutS <= 0 || this.activeExecs.has(r.id)) continue;
      if (now - r.lastActivityAt < r.settings.idleTimeoutS * 1000) continue;
      try {
        await this.lifecycle(SYSTEM, r.id, 'session.idle_hibernate', async (cur) => {
          if (cur.state === 'running') await this.hibernateLocked(cur, {});
        });
        done.push(r.id);
      } catch (e) {
        this.o.log?.(`idle hibernate of ${r.id} failed: ${(e as Error).message}`);
      }
    }
    return done;
  }

  private async onSandboxExit(sandboxId: string, reason: string, last?: SandboxStats): Promise<void> {
    const r = (await this.o.store.sessions.list({ states: ['running', 'paused'] })).find((s) => s.sandboxId === sandboxId);
    if (!r) return;
    await this.mutex.run(r.id, async () => {
      const cur = await this.o.store.sessions.get(r.id);
      if (!cur || cur.sandboxId !== sandboxId || (cur.state !== 'running' && cur.state !== 'paused')) return;
      await this.driver(cur.backend).destroy(sandboxId).catch(() => undefined);
      // The dead incarnation's figures (peak memory above all, for an OOM) stay in the metering.
      foldStats(cur, last);
      await this.transition(cur, 'failed', { failureReason: reason, sandboxId: null });
    });
  }

  /** The principal used by recovery and timers. */
  get systemPrincipal(): Principal {
    return SYSTEM;
  }

  /** For recovery (engine/recovery.ts): a lock-held step on one record. */
  async withRecord(id: string, fn: (r: SessionRecord, tools: { transition: (to: SessionState, patch?: Partial<SessionRecord>) => Promise<void>; spec: (sandboxId: string) => SandboxSpec; driver: SandboxDriver | undefined; listenEgress: () => Promise<void> }) => Promise<void>): Promise<void> {
    await this.mutex.run(id, async () => {
      const r = await this.o.store.sessions.get(id);
      if (!r) return;
      await fn(r, {
        transition: (to, patch) => this.transition(r, to, patch),
        spec: (sandboxId) => this.spec(r, sandboxId, r.identity),
        driver: this.o.drivers[r.backend],
        listenEgress: () => this.listenEgress(r),
      });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.terminals.close();
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    await this.flush();
    await this.requests.close().catch((e: unknown) => this.o.log?.(`refusal audit flush failed: ${(e as Error).message}`));
    for (const d of Object.values(this.o.drivers)) await d?.close();
  }
}

function checkPath(path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0') || path.length > 4096) {
    throw new InvalidArgumentError('path: must be an absolute path', { details: { field: 'path' } });
  }
  return path;
}

export { SandboxError };
